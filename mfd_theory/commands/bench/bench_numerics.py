"""The real Qwen target's forward costs under each CPU numerics, side by side in one run on one host.

For ``pin-float32`` (``--numerics reproducible``), ``native-float32`` and ``native-bfloat16`` (what
``--numerics fast`` can run), each in a fresh interpreter: the teacher-forced forward of
``tf_tokens`` tokens (tokens/s, the body without the LM head: what labelling a corpus and drafter
features cost), 1 / 16 / 64 new tokens after a ``context``-token cache (ms: a plain decoding step and
the verification of a tree of 16 and 64 nodes) and one decode step of ``batch`` rows (tokens/s).
Printed: every figure and its ratio to the pinned float32 column, with the host's CPU, ISA flags and
the dtype ``--numerics fast`` picks here. bfloat16 is skipped on a host without bfloat16 instructions
(torch emulates it there, many times slower; the probe's ratio is recorded instead) unless
``--run-emulated``. Writes ``<out>/bench_numerics.json``. The config lives here (no torch import);
the work is in :mod:`mfd_theory.runs.bench.bench_numerics`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from mfd_theory.configs.options import Checked, Command, opt
from mfd_theory.results import Result

__all__ = ["BenchNumericsConfig", "main", "report", "run"]

SETTING_NAMES = ("pin-float32", "native-float32", "native-bfloat16")
FIGURES = (("teacher_forced_tokens_per_s", "teacher-forced forward, tokens/s", True),
           ("new_1_ms", "one new token, ms", False), ("new_16_ms", "16 new tokens (a tree of 16), ms", False),
           ("new_64_ms", "64 new tokens, ms", False), ("batch_step_tokens_per_s", "decode step of the batch, tokens/s", True))


@dataclass(frozen=True)
class BenchNumericsConfig(Checked):
    target: str = opt("qwen2.5-coder-0.5b-instruct", "target directory or shipped name (mfd target list)")
    settings: tuple[str, ...] = opt(SETTING_NAMES, "settings to measure, each in a fresh interpreter",
                                    choices=SETTING_NAMES)
    reps: int = opt(3, "runs of each figure; the fastest is kept", ge=1)
    context: int = opt(256, "cached tokens before the new ones", ge=1)
    tf_tokens: int = opt(512, "tokens of the teacher-forced forward", ge=1)
    batch: int = opt(32, "rows of the batched decode step", ge=1)
    threads: int = opt(2, "torch CPU threads in each setting", ge=1)
    run_emulated: bool = opt(False, "also run bfloat16 where the host has no bfloat16 instructions (slow)")
    out: str = opt("results", "output directory (the --out option)")


def run(config: BenchNumericsConfig = BenchNumericsConfig(), out_dir: str | None = None,
        progress: bool = True) -> Result:
    from mfd_theory.llm.models.dtype import cpu_dtype_choice
    from mfd_theory.runs.bench.bench_numerics import host, run_settings

    got = run_settings(config.target, config.settings, config.reps, config.context, config.tf_tokens, config.batch,
                       config.threads, config.run_emulated, progress)
    base = got.get("pin-float32", {})
    ratios = {name: {k: (v[k] / base[k] if up else base[k] / v[k]) for k, _, up in FIGURES if k in v and k in base}
              for name, v in got.items() if "skipped" not in v}
    data = {"settings": got, "speed_over_pin": ratios, "host": host(),
            "fast_choice_here": cpu_dtype_choice("fast")}
    result = Result("bench_numerics", dataclasses.asdict(config), data)
    result.save(Path(out_dir or config.out) / "bench_numerics.json")
    return result


def report(result: Result) -> str:
    d = result.data
    names = list(d["settings"])
    h = d["host"]
    lines = [f"host: {h.get('cpu')} ({', '.join(h.get('isa_flags') or [])}), {h.get('cores')} cores; "
             f"--numerics fast picks {d['fast_choice_here']['dtype']} here: {d['fast_choice_here']['reason']}",
             f"{'':40s}" + "".join(f"{n:>22s}" for n in names)]
    for k, label, _ in FIGURES:
        cells = []
        for n in names:
            v = d["settings"][n]
            if "skipped" in v:
                cells.append(f"{'skipped':>22s}")
            else:
                r = d["speed_over_pin"].get(n, {}).get(k)
                cells.append(f"{v[k]:>13.1f}" + (f" ({r:4.2f}x)" if r is not None else "       "))
        lines.append(f"{label:40s}" + "".join(cells))
    lines.append("(x: speed over pin-float32, higher is faster; fastest of each figure's runs)")
    for n in names:
        if "skipped" in d["settings"][n]:
            p = d["settings"][n]["probe"]
            lines.append(f"{n}: skipped, {d['settings'][n]['skipped']} (probe linear {p['shape']}: "
                         f"bfloat16 {p['bf16_speedup']:.2f}x float32)")
    return "\n".join(lines)


CLI = Command("bench numerics", __name__, BenchNumericsConfig, __doc__, models=True)


def main(argv=None) -> Result:
    return CLI.main(argv, _run)


def _run(cfg: BenchNumericsConfig, opts) -> Result:
    result = run(cfg, progress=not opts.quiet)
    print(report(result))
    return result


if __name__ == "__main__":
    main()
