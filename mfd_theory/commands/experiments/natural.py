"""Real text: a target trained on Python's standard library, its own ceiling, and the pipeline on it.

``mfd natural --out DIR`` (default ``results/natural``) answers, on natural text every machine has,
whether a mixture drafter helps over a product one. What it writes under ``DIR``:

* ``corpus/``: the standard library split by module (:mod:`mfd_theory.llm.training.natural_corpus`), a
  byte-level BPE trained on the training split, the token stream, held-out text per domain
  (code, prose), and ``provenance.json`` (Python version, every unit and its split, text hash);
* ``target/``: a Qwen3ForCausalLM trained on the training split, saved with ``save_pretrained``
  with its tokenizer (an ordinary Hugging Face directory), and ``target_eval.json`` beside it
  (held-out perplexity per domain, training time);
* ``prompts/``: ``train.jsonl`` (training units; what ``mfd distill`` answers), ``code.jsonl``
  (a held-out function's signature and docstring) and ``prose.jsonl`` (the opening sentences of
  a held-out documentation paragraph);
* ``data/``, ``drafter-k<K>/``, ``drafter-dartree/``, ``eval/``: ``mfd distill``,
  ``mfd train-drafter`` (K = 1 DFlash, K > 1 MFD, and ``--kind dartree``) and ``mfd eval`` on both
  prompt files, through their library entry points with the command lines of :func:`commands`;
* ``ceiling/``: the target-only ceiling (:func:`mfd_theory.llm.measure.ceiling.measure_ceiling`,
  what ``mfd ceiling`` runs), one file per prompt and temperature (resumable), pooled into
  ``ceiling.json``;
* ``natural.json``: everything the report block in docs/results.md shows, as a Result;
* ``steps.json``: per step its command, whether it finished, and its wall time. A rerun skips
  finished steps; a step whose options or inputs changed is redone with everything after it.

The config lives here (no torch import); the work is in :mod:`mfd_theory.runs.experiments.natural`.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from mfd_theory.validation import check_device
from mfd_theory.configs.options import budgets_opt, Checked, Command, load_preset, opt, seed_opt, switch, numerics_opt
from mfd_theory.configs.pipeline.eval import METHODS

__all__ = ["NaturalConfig", "command_lines", "commands", "preset_config", "run", "main"]


@dataclasses.dataclass(frozen=True)
class NaturalConfig(Checked):
    """Defaults (``--preset default``): sized to train and evaluate in about eight minutes on 2 CPU cores."""

    seed: int = seed_opt("random seed of the target, the data, training and sampling")
    device: str = opt("cpu", "torch device of every step (cpu, cuda, cuda:N)")
    threads: int = opt(2, "torch threads for training, distilling and the ceiling", ge=1)
    numerics: str | None = numerics_opt()
    eval_threads: int = opt(1, "torch threads for mfd eval (timing)", ge=1)
    # the corpus
    heldout_fraction: float = opt(0.15, "share of modules (and documentation topics) held out", gt=0, lt=1)
    max_units: int = opt(0, "use only this many units, picked by hash (0: the whole standard library)", ge=0)
    vocab_size: int = opt(4096, "byte-level BPE vocabulary size", ge=300)
    tokenizer_chars: int = opt(3_000_000, "training characters the tokenizer is trained on (a hash-ordered subset)",
                               ge=1000)
    prose_weight: int = opt(3, "copies of each training documentation topic in the target's training stream "
                               "(prose is about a sixteenth of the raw text)", ge=1)
    # the target
    layers: int = opt(4, "target layers", ge=1)
    hidden: int = opt(128, "target hidden size", ge=16)
    heads: int = opt(4, "target attention heads", ge=1)
    kv_heads: int = opt(2, "target key/value heads", ge=1)
    intermediate: int = opt(384, "target MLP width", ge=16)
    seq_len: int = opt(128, "target training window (tokens)", ge=16)
    target_batch: int = opt(16, "target training windows per step", ge=1)
    target_steps: int = opt(500, "target training steps", ge=1)
    target_lr: float = opt(3e-3, "target peak learning rate", gt=0)
    ppl_windows: int = opt(48, "held-out windows of seq_len tokens per domain for the perplexity", ge=1)
    # prompts
    train_prompts: int = opt(64, "training prompts per domain (code, prose) that mfd distill answers", ge=1)
    heldout_prompts: int = opt(24, "held-out prompts per domain written to code.jsonl / prose.jsonl", ge=1)
    code_chars: int = opt(320, "longest code prompt (signature + docstring), characters", ge=40)
    prose_chars: int = opt(260, "longest prose prompt, characters", ge=40)
    # mfd distill
    distill_new_tokens: int = opt(48, "mfd distill --max-new-tokens", ge=1)
    distill_temperature: float = opt(1.0, "mfd distill --temperature", ge=0)
    # mfd train-drafter
    modes: tuple[int, ...] = opt((1, 2, 4, 8), "mfd train-drafter --modes: one block drafter per K (1 = DFlash; 8 "
                                               "as the released MFD drafters)", ge=1)
    dartree: bool = opt(True, "also train a Domino drafter (mfd train-drafter --kind dartree)")
    dartree_rank: int = opt(16, "mfd train-drafter --rank of the Domino drafter", ge=1)
    block_size: int = opt(16, "mfd train-drafter --block-size (L = block size - 1)", ge=2)
    drafter_steps: int = opt(150, "mfd train-drafter --steps", ge=1)
    drafter_batch: int = opt(8, "mfd train-drafter --batch-size", ge=1)
    drafter_lr: float = opt(3e-3, "mfd train-drafter --lr", gt=0)
    ckpt_every: int = opt(50, "mfd train-drafter --ckpt-every", ge=1)
    # mfd eval
    methods: str = opt("ar,ddtree,mfd,dartree", "mfd eval --methods")
    scorers: tuple[str, ...] = opt(("mixture", "best_mode"), "mfd eval --scorers: how mfd ranks its trees (each a "
                                   "cell of its own)", choices=("mixture", "best_mode"))
    ddtree_on_mfd: bool = opt(False, "mfd eval --ddtree-on-mfd: also ddtree on each K > 1 drafter's marginals (the "
                                     "ablation that splits an MFD gain into training and tree; off by default, "
                                     "see docs/results.md, real text)")
    budgets: tuple[int, ...] = budgets_opt((16, 64), "mfd eval --budgets")
    temperatures: tuple[float, ...] = opt((0.0, 1.0), "mfd eval --temperatures (0 = greedy)", ge=0)
    eval_new_tokens: int = opt(32, "mfd eval --max-new-tokens", ge=1)
    eval_prompts: int = opt(6, "mfd eval --max-prompts (per domain)", ge=1)
    passes: int = opt(2, "mfd eval --passes (timing passes)", ge=1)
    calibration_prompts: int = opt(8, "mfd eval --calibration-count: held-out prompts per domain held back (never "
                                      "evaluated) to predict every row before the evaluation", ge=1)
    # the ceiling (mfd ceiling's measurement, on the target alone)
    ceiling_prompts: int = opt(12, "held-out prompts per domain for the target-only ceiling", ge=1)
    ceiling_samples: int = opt(512, "paths sampled per prompt and temperature to fit on (as many again check "
                                     "coverage by Monte Carlo and score the fits)", ge=2)
    ceiling_budgets: tuple[int, ...] = opt((1, 4, 16, 64), "tree sizes N of the ceiling table", ge=1)
    ceiling_temperatures: tuple[float, ...] = opt((1.0, 0.7), "temperatures T of the ceiling, each > 0", gt=0)
    ceiling_modes: tuple[int, ...] = opt((1, 2, 4), "K of the mixtures fitted to the target's exact conditionals "
                                                    "along sampled paths (1: the product tree)", ge=1)
    dead_eps: float = opt(1e-3, "a node is dead when its target prefix probability is <= this", gt=0, lt=1)
    dead_at: int = opt(64, "tree size at which the dead share is measured", ge=1)

    def validate(self) -> None:
        check_device("--device", self.device)
        if len(set(self.modes)) != len(self.modes):
            raise ValueError(f"--modes: each K once, got {self.modes}")
        if 1 not in self.modes:
            raise ValueError(f"--modes: must include 1 (the product drafter every comparison is against), "
                             f"got {self.modes}")
        if self.heads % self.kv_heads:
            raise ValueError(f"--kv-heads: must divide --heads ({self.heads}), got {self.kv_heads}")
        if self.hidden % self.heads:
            raise ValueError(f"--heads: must divide --hidden ({self.hidden}), got {self.heads}")
        bad = [m for m in self.methods.split(",") if m.strip() and m.strip() not in _METHODS]
        if bad or not self.methods.strip():
            raise ValueError(f"--methods: unknown {bad}; choose from {','.join(_METHODS)}")
        if self.eval_prompts + self.calibration_prompts > self.heldout_prompts:
            raise ValueError(f"--eval-prompts: at most --heldout-prompts ({self.heldout_prompts}) minus "
                             f"--calibration-prompts ({self.calibration_prompts}), got {self.eval_prompts}")
        if self.ceiling_prompts > self.heldout_prompts:
            raise ValueError(f"--ceiling-prompts: at most --heldout-prompts ({self.heldout_prompts}), "
                             f"got {self.ceiling_prompts}")
        if 1 not in self.ceiling_modes:
            raise ValueError(f"--ceiling-modes: must include 1 (the product tree every gain is against), got "
                             f"{self.ceiling_modes}")


# the methods mfd eval knows (its config's list, which needs no torch import)
_METHODS = METHODS


def preset_config(name: str = "default", **overrides) -> NaturalConfig:
    """The config of preset ``name`` (the file ``experiments/natural/<name>.toml``) with
    ``overrides`` applied."""
    return load_preset(NaturalConfig, "natural", name, **overrides)


def _num_text(v: float) -> str:
    return f"{v:g}"


def drafter_names(config: NaturalConfig) -> list[str]:
    return [f"drafter-k{K}" for K in config.modes] + (["drafter-dartree"] if config.dartree else [])


def commands(config: NaturalConfig, root: str | Path = ".") -> list[tuple[str, str, list[str]]]:
    """``(step, command, argv)`` of the pipeline steps, in order, with every path under ``root``."""
    root = Path(root)
    target = str(root / "target")
    common = ["--seed", str(config.seed), "--device", config.device]
    out = [("distill", "distill",
            ["--target", target, "--prompts", str(root / "prompts" / "train.jsonl"), "--out", str(root / "data"),
             "--max-new-tokens", str(config.distill_new_tokens), "--temperature", _num_text(config.distill_temperature),
             *common])]
    train = ["--block-size", str(config.block_size), "--steps", str(config.drafter_steps),
             "--batch-size", str(config.drafter_batch), "--lr", _num_text(config.drafter_lr),
             "--ckpt-every", str(config.ckpt_every), *common]
    for K in config.modes:
        out.append((f"drafter-k{K}", "train-drafter",
                    ["--target", target, "--data", str(root / "data"), "--out", str(root / f"drafter-k{K}"),
                     "--modes", str(K), *train]))
    if config.dartree:
        out.append(("drafter-dartree", "train-drafter",
                    ["--target", target, "--data", str(root / "data"), "--out", str(root / "drafter-dartree"),
                     "--kind", "dartree", "--rank", str(config.dartree_rank), *train]))
    drafters = [x for name in drafter_names(config) for x in ("--drafter", str(root / name))]
    out.append(("eval", "eval",
                ["--target", target, *drafters,
                 "--prompts", str(root / "prompts" / "code.jsonl"), str(root / "prompts" / "prose.jsonl"),
                 "--out", str(root / "eval"), "--methods", config.methods, "--scorers", ",".join(config.scorers),
                 "--ddtree-on-mfd", "true" if config.ddtree_on_mfd else "false",
                 "--budgets", ",".join(map(str, config.budgets)),
                 "--temperatures", ",".join(map(_num_text, config.temperatures)),
                 "--max-new-tokens", str(config.eval_new_tokens), "--max-prompts", str(config.eval_prompts),
                 "--passes", str(config.passes), "--calibration-count", str(config.calibration_prompts), *common]))
    return out


def command_lines(config: NaturalConfig, root: str | Path = ".") -> list[str]:
    """The pipeline steps as shell command lines (paths relative to ``root``)."""
    return [shlex.join(["mfd", cmd, *argv]) for _, cmd, argv in commands(config, root)]


def run(config: NaturalConfig, out_dir: str | Path = "results/natural", progress: bool = True,
        prepare_only: bool = False) -> dict | None:
    """Run (or resume) every step under ``out_dir``; returns ``natural.json``'s data.
    ``prepare_only``: every step before the evaluation, then stop (returns None)."""
    from mfd_theory.runs.experiments.natural import run_natural
    from mfd_theory.report import natural_block

    out = Path(out_dir)
    steps = [(name, cmd, argv, rel, line) for (name, cmd, argv), (_, _, rel), line
             in zip(commands(config, out), commands(config), command_lines(config))]
    res = run_natural(config, out, steps, progress=progress, prepare_only=prepare_only)
    if res is None:
        print(f"prepared: every step before the evaluation is done under {out}/ (nothing evaluated)")
        return None
    print("\n" + natural_block(res))
    return res.data


CLI = Command("natural", __name__, NaturalConfig, __doc__, out="results/natural", models=True, extras=(switch(
    "prepare_only", "run every step before the evaluation (corpus, target, ceiling, distill, drafters), then "
                    "stop; a later run with the same options only evaluates"),))


def main(argv: list[str] | None = None) -> dict | None:
    return CLI.main(argv, lambda config, opts: run(config, opts.out, progress=not opts.quiet,
                                                   prepare_only=opts.prepare_only))


if __name__ == "__main__":
    main()
