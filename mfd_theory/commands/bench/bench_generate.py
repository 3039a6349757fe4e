"""Batched plain generation, before and after issue 53: tokens/s of the old ``generate_batch`` and of
the new one side by side in one run, on the same target, prompts and sampling settings.

"before" is the algorithm as it was (kept in :mod:`mfd_theory.runs.bench.bench_generate`): one HF
``DynamicCache`` grown by concatenation every step, the cut distribution built by sorting the
whole vocabulary, one ``torch.multinomial`` per row with its own ``torch.Generator``. "after" is
:func:`~mfd_theory.llm.decoding.generate_batch.generate_batch`: key/value slots allocated once and
written in place, a prompts' common prefix run once, top-k before top-p, every row's keyed draw in
one vectorised call. Each path answers every prompt ``repeats`` times, the paths interleaved (so
a change in the machine's load hits both); printed: each one's tokens, seconds and tokens/s, its
model forwards and the seconds spent inside them (the cache's writes included), the ratio
of the fastest runs, whether greedy rows agree (temperature 0), and the host (CPU model,
vector ISA flags, the capability torch's kernels run with, threads, load average).

By default the target is the shipped Qwen2.5-Coder-0.5B-Instruct in float32 on CPU (materialised
once, a minute or two the first time), 32 chat prompts, 32 rows per forward, sampled as its
generation config says (T = 0.7, top-k 20, top-p 0.8). ``--target tiny`` runs a random tiny
Qwen3 instead (seconds; ``--preset tiny``). Writes ``<out>/bench_generate.json``
(``bench_generate_tiny.json`` for the tiny target). The config lives here (no torch import); the
work is in :mod:`mfd_theory.runs.bench.bench_generate`. Never a timed test.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from mfd_theory.configs.options import Checked, Command, opt, save_result, seed_opt
from mfd_theory.results import Result

__all__ = ["BenchGenerateConfig", "main", "report", "results_name", "run"]


@dataclass(frozen=True)
class BenchGenerateConfig(Checked):
    preset: str = opt("default", "the preset file (experiments/bench_generate/NAME.toml) these values started from, "
                      "set by --preset NAME")
    target: str = opt("qwen2.5-coder-0.5b-instruct", "a shipped target's name, a local HF model directory, or tiny "
                      "(a random tiny Qwen3)")
    dtype: str = opt("float32", "the target's dtype on CPU", choices=("float32", "bfloat16"))
    prompts: int = opt(32, "prompts to answer (chat instructions, cycled; random ids for tiny)", ge=1)
    max_new_tokens: int = opt(32, "new tokens per prompt at most", ge=1)
    batch: int = opt(32, "rows per forward", ge=1)
    temperature: float = opt(0.7, "sampling temperature (0: greedy, where both paths must give the same tokens)",
                             ge=0)
    top_k: int = opt(20, "sample from the k likeliest tokens only (0: all)", ge=0)
    top_p: float = opt(0.8, "sample from the smallest set of likeliest tokens holding this mass (1: all)", gt=0, le=1)
    repeats: int = opt(1, "runs of each path, interleaved; the fastest of each is compared", ge=1)
    threads: int = opt(2, "torch CPU threads (0: leave torch's default)", ge=0)
    seed: int = seed_opt("seed of the prompts' sampling (prompt i draws with seed * 1000003 + i)")
    out: str = opt("results", "output directory (the --out option)")

    def validate(self) -> None:
        if 0 < self.temperature < 1e-6:
            raise ValueError(f"--temperature: must be 0 or at least 1e-6, got {self.temperature!r}")


def results_name(target: str) -> str:
    """``bench_generate.json``, or ``bench_generate_tiny.json`` for the tiny target (a quick run never
    overwrites a real one)."""
    return "bench_generate_tiny.json" if target == "tiny" else "bench_generate.json"


def run(cfg: BenchGenerateConfig, progress: bool = True) -> Result:
    """Measure both paths (the torch half), then write the Result."""
    from mfd_theory.runs.bench.bench_generate import measure

    data = measure(cfg, progress)
    result = Result("bench_generate", dataclasses.asdict(cfg), data, seed=cfg.seed)
    save_result(result, Path(cfg.out) / results_name(cfg.target))
    return result


def report(result: Result) -> str:
    """The terminal summary: the setting, each path's runs, the ratio, greedy agreement, the host."""
    d, c = result.data, result.config
    host = d.get("host") or {}
    plens = d.get("prompt_tokens") or [0]
    sampling = ("greedy" if not c["temperature"] else
                f"T = {c['temperature']:g}, top-k {c['top_k'] or 'off'}, top-p {c['top_p']:g}")
    lines = [f"target: {d.get('target')} ({c['dtype']}), {d.get('prompts')} prompts of {min(plens)}-{max(plens)} "
             f"tokens, up to {c['max_new_tokens']} new tokens each, batch {c['batch']}, {sampling}"]
    labels = {"before": "before (DynamicCache, sort, multinomial)", "after": "after (slots, top-k first, keyed draws)"}
    for name in ("before", "after"):
        for i, r in enumerate(d["runs"][name]):
            inside = (f"; {r['forwards']} forwards, {r['forward_seconds']:.2f} s inside them "
                      f"({100 * r['forward_seconds'] / r['seconds']:.0f}%)" if "forwards" in r else "")
            lines.append(f"  {labels[name]:<42} run {i + 1}: {r['tokens']:6d} tokens in {r['seconds']:8.2f} s "
                         f"= {r['tokens_per_s']:8.2f} tokens/s{inside}")
    lines.append(f"  ratio (fastest after / fastest before): {d['ratio']:.2f}x")
    if d.get("greedy"):
        differ = d.get("rows_that_differ") or []
        lines.append("  greedy rows identical: " + ("yes" if not differ else f"no (rows {differ})"))
    flags = " ".join(host.get("cpu_flags") or []) or "unknown"
    lines.append(f"host: {host.get('cpu') or 'unknown CPU'}, {host.get('cores')} cores; ISA flags: {flags}; torch "
                 f"kernels {host.get('torch_cpu_capability')}, {host.get('torch_threads')} threads; load average "
                 f"{_num(d.get('load_before'))} before, {_num(d.get('load_after'))} after")
    return "\n".join(lines)


def _num(x) -> str:
    return "?" if x is None else f"{x:.1f}"


CLI = Command("bench generate", __name__, BenchGenerateConfig, __doc__)


def main(argv=None) -> Result:
    return CLI.main(argv, _run)


def _run(cfg: BenchGenerateConfig, opts) -> Result:
    result = run(cfg, progress=not opts.quiet)
    print(report(result))
    return result


if __name__ == "__main__":
    main()
