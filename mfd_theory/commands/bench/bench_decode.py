"""Decoding benchmark: per-component time split and tokens/s of every method, and the target's
verify-latency-vs-tree-size profile that the speedup cost model reads.

Side by side in one run (never a timed test):

1. every method ("ar", "chain", "ddtree", "mfd") decodes the same prompts with the same target and
   drafter; printed: tokens/s, speedup over "ar", tau, predicted vs measured acceptance, and the
   time split (draft, tree build + mask, verify, walk, commit). The share of a round spent outside
   the two forwards (tree build, mask, walk, compaction) is printed for the N = ``budget`` trees;
2. the round cost model (:func:`mfd_theory.llm.measure.profile.measure_round_profile`, the function the
   end-to-end runs call before decoding): every tree method decodes ``profile_tokens`` tokens of
   the first prompt at every size N in ``profile_sizes`` (chain at its block), and the loop's own
   per-round times give verify latency vs N, drafting vs K, the overhead (tree build + mask,
   walk, commit) per method vs N, the sampling draw, and a context-length probe; written to
   ``results/verify_latency_<device>.json`` in the format :mod:`mfd_theory.speedup` reads
   (``{name, device, model, assumption, t_target_ms, t_draft_ms, tree_sizes, verify_ms}`` plus the
   optional round fields ``draw_ms, draft_modes, draft_ms, overhead, context_probe``).

By default the target and drafter are random (no downloads): the time split and the latency
profile are meaningful, acceptance is not (a random drafter is rarely right). Pass
``--target-dir`` / ``--drafter-dir`` for real local checkpoints. ``--preset qwen3-8b`` builds a
random target with Qwen3-8B's shape (for GPU profiles; one preset file per shape in
``experiments/bench_decode/``). Results go to ``<out>/bench_decode.json``
(``--arch qwen3``) or ``<out>/bench_decode_qwen3_5.json`` (the hybrid, which has no latency file but
its own GDN profile): the two runs never overwrite each other. The config lives here (no torch
import); the work is in :mod:`mfd_theory.runs.bench.bench_decode`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from mfd_theory.validation import check_device
from mfd_theory.configs.options import Checked, Command, opt, seed_opt, wrote, numerics_opt
from mfd_theory.runs.bench.shapes import SHAPES
from mfd_theory.results import Result, atomic_write_text, provenance
from mfd_theory.report.console import bench_decode_text as report

__all__ = ["BenchDecodeConfig", "disturbed_timing", "hybrid_profile", "main", "report", "results_name",
           "run"]

#: the checks of :func:`disturbed_timing`: AR's seconds per token may vary this much between
#: prompts of one length, a method's speedup may exceed its tau by this factor, and AR's step in the
#: decoding and in the profile measured after it may differ by this factor
AR_SPREAD, OVER_TAU, PROFILE_RATIO = 1.25, 1.1, 1.5


@dataclass(frozen=True)
class BenchDecodeConfig(Checked):
    preset: str = opt("small", "the preset file (experiments/bench_decode/NAME.toml) these values started from, set by "
                      "--preset NAME")
    shape: str = opt("small", "random target shape, ignored with --target-dir", choices=tuple(SHAPES))
    target_dir: str = opt("", "a local HF Qwen3 directory (optional)")
    drafter_dir: str = opt("", "a local DFlash/MFD drafter directory (optional)")
    device: str = opt("auto", "auto, cpu or cuda")
    dtype: str = opt("auto", "auto (float32 on CPU, bfloat16 on CUDA), float32, bfloat16 or float16",
                     choices=("auto", "float32", "bfloat16", "float16"))
    attn: str = opt("sdpa", "attention implementation of the target", choices=("sdpa", "eager"))
    block_size: int = opt(16, "drafter block size", ge=2)
    draft_layers: int = opt(1, "drafter decoder layers", ge=1)
    num_modes: int = opt(4, "modes K of the random MFD drafter", ge=1)
    budget: int = opt(64, "tree budget N", ge=1)
    prompt_len: int = opt(64, "prompt length in tokens", ge=1)
    max_new_tokens: int = opt(48, "new tokens per prompt", ge=1)
    prompts: int = opt(3, "prompts per method", ge=1)
    temperature: float = opt(0.0, "sampling temperature (0 = greedy)", ge=0)
    profile_sizes: str = opt("1,2,4,8,16,32,64,128,256,512,1024", "tree sizes of the verify-latency profile")
    profile_repeats: int = opt(5, "repeats per tree size (hybrid profile) / decodes per cell (round profile)", ge=1)
    profile_tokens: int = opt(8, "tokens each cell decodes per repeat for the round profile", ge=2)
    threads: int = opt(0, "torch CPU threads (0: leave torch's default)", ge=0)
    numerics: str | None = numerics_opt()
    seed: int = seed_opt("random seed")
    out: str = opt("results", "output directory (the --out option)")
    arch: str = opt("qwen3", "target architecture: qwen3, or qwen3_5 (the hybrid; adds the GDN tree-verification profile)",
                    choices=("qwen3", "qwen3_5"))
    hybrid_sizes: str = opt("1,16,32,64,128,256", "tree sizes of the hybrid profile (with --arch qwen3_5)")

    def validate(self) -> None:
        check_device("--device", self.device, auto=True)
        try:
            sizes = [int(x) for x in self.profile_sizes.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"--profile-sizes: expected comma-separated integers, got {self.profile_sizes!r}")
        if not sizes or min(sizes) < 1:
            raise ValueError(f"--profile-sizes: need positive sizes, got {self.profile_sizes!r}")


def run(config: BenchDecodeConfig = BenchDecodeConfig(), out_dir: str | None = None, progress: bool = True) -> Result:
    """Measure (the torch half), then write ``verify_latency_<device>.json`` (attention target) and
    the Result, each announced."""
    for flag, d in (("--target-dir", config.target_dir), ("--drafter-dir", config.drafter_dir)):
        if d and not (Path(d) / "config.json").is_file():
            raise ValueError(f"{flag}: {d} is not a local checkpoint directory (no config.json there)")
    from mfd_theory.runs.bench.bench_decode import measure

    data = measure(config, progress)
    data["timing_warnings"] = disturbed_timing(data)
    out_dir = Path(out_dir or config.out)
    if "verify_profile" in data:
        latency = {**data["verify_profile"], "provenance": provenance()}
        lat_path = out_dir / f"verify_latency_{data['device']}.json"
        existed = lat_path.exists()
        atomic_write_text(lat_path, json.dumps(latency, indent=1) + "\n")
        wrote(lat_path, existed)
    result = Result("bench_decode", dataclasses.asdict(config), data, seed=config.seed)
    path = out_dir / results_name(config.arch)
    existed = path.exists()
    wrote(result.save(path), existed)
    return result


def hybrid_profile(cfg: BenchDecodeConfig, torch, dev, dtype, progress: bool = True) -> dict:
    """The hybrid target's verify and Gated DeltaNet profile
    (:func:`mfd_theory.runs.bench.bench_decode.hybrid_profile`)."""
    from mfd_theory.runs.bench.bench_decode import hybrid_profile as measure_hybrid

    return measure_hybrid(cfg, torch, dev, dtype, progress)


def disturbed_timing(data: dict) -> list[str]:
    """Why the timings of a ``bench decode`` run cannot be trusted, one sentence each (empty: no
    sign of it). A quiet machine decodes every prompt of the same length at the same AR speed; a
    round yields tau tokens and costs at least one AR step, so no speedup exceeds its tau; the
    profile's AR step, measured after the decoding, repeats the decoding's; and other processes'
    load leaves a core free per thread of this run."""
    out = []
    m = data.get("machine") or {}
    ar = [t for t in m.get("ar_s_per_token") or [] if t and t > 0]
    if len(ar) >= 2 and max(ar) / min(ar) > AR_SPREAD:
        out.append(f"AR's time per token varied {max(ar) / min(ar):.2f}-fold between its {len(ar)} prompts "
                   f"(the same length and model; a quiet machine stays within {AR_SPREAD:g}x)")
    for name, r in (data.get("methods") or {}).items():
        tau, sp = r.get("tau"), r.get("speedup_vs_ar")
        if name != "ar" and tau and sp and sp > OVER_TAU * tau:
            out.append(f"{name}: speedup {sp:.2f}x at tau {tau:.2f} is impossible (a round yields tau tokens and "
                       "costs at least one AR step): AR was slowed while it ran")
    prof = data.get("verify_profile") or {}
    if ar and prof.get("t_target_ms"):
        step_ms, prof_ms = 1000 * sorted(ar)[len(ar) // 2], prof["t_target_ms"]
        if max(step_ms, prof_ms) / min(step_ms, prof_ms) > PROFILE_RATIO:
            out.append(f"AR took {step_ms:.2f} ms per token while decoding and {prof_ms:.2f} ms per step in the "
                       f"profile measured after it (more than {PROFILE_RATIO:g}x apart)")
    loads = [x for x in (m.get("load_before"), m.get("load_after")) if x is not None]
    cores, threads = m.get("cores"), m.get("threads")
    if m.get("device_type", "cpu") == "cpu" and cores and threads and loads:
        # before: other processes only; after: this run's threads are in the average too
        busy = max(m["load_before"] if m.get("load_before") is not None else 0.0,
                   (m["load_after"] - threads) if m.get("load_after") is not None else 0.0)
        if busy > cores - threads + 0.5:
            out.append(f"other processes kept about {busy:.1f} of the {cores} cores busy (load average) while this "
                       f"run used {threads} torch thread{'s' * (threads != 1)}")
    return out


def results_name(arch: str) -> str:
    """``bench_decode.json`` for the attention target, ``bench_decode_<arch>.json`` otherwise, so a
    hybrid run never overwrites the attention run's results."""
    return "bench_decode.json" if arch == "qwen3" else f"bench_decode_{arch}.json"


CLI = Command("bench decode", __name__, BenchDecodeConfig, __doc__)


def main(argv=None) -> Result:
    return CLI.main(argv, _run)


def _run(cfg: BenchDecodeConfig, opts) -> Result:
    result = run(cfg, progress=not opts.quiet)
    print(report(result))
    return result


if __name__ == "__main__":
    main()
