"""Batched decoding: throughput and latency against batch size, by budget policy, predicted first.

On the end-to-end target and drafters (``mfd e2e``'s cached checkpoints; trained when missing),
for every batch size B in ``batch_sizes``, side by side in one run (never a timed test):

1. **before any evaluated prompt**, on ``calibration_prompts`` held-out prompts that are never evaluated
   (disjoint from the evaluated ones by token hash): the batched round's cost per (B, policy,
   nodes) (:func:`mfd_theory.llm.measure.batch_predict.measure_batch_profile`), the acceptance of every
   cell (:func:`~mfd_theory.llm.measure.batch_predict.predict_batch_acceptance`) and from them, per
   method, the predicted throughput of every cell and the ``auto`` plan
   (:class:`mfd_theory.speedup.BatchPlan`), written to ``<out>/bench_batch_predictions.json``;
2. then the evaluated prompts (held out), B at a time: AR, chain, DDTree per request (each N in
   ``budgets``) and global (B N nodes per round), MFD per request and global, and ``auto`` for
   both methods, interleaved per pass. Measured: steady-state tokens/s (rounds that held all B
   requests: emitted tokens over round time, the quantity the cost model predicts), wall tokens/s
   (prefills and the batch's tail included), mean per-request latency, accepted tokens per request
   per round, and the share of a round outside the two forwards; rates and times are the median
   over ``passes`` (a shared machine's slow spells hit whole passes), counts the mean.

Printed: the table, predicted vs measured throughput, the crossover batch size from which AR is
fastest (measured and predicted), and the three targets of the batching work. A third column set predicts the
same curves for a GPU from the packaged H100 verify table (:func:`mfd_theory.speedup.batch_rows_profile`,
an assumption: a forward's cost taken as a function of its total rows). Writes
``<out>/bench_batch.json`` (``bench_batch_qwen3_5.json`` for the hybrid target). The config lives
here (no torch import); the work is in :mod:`mfd_theory.commands.bench.bench_batch_run`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mfd_theory.commands._cli import Checked, Command, figure_option, opt, save_result
from mfd_theory.results import Result

__all__ = ["BenchBatchConfig", "checks", "main", "measured_crossover", "report", "results_name", "run"]

POLICY_LABELS = ("off", "per_request", "global", "auto")


@dataclass(frozen=True)
class BenchBatchConfig(Checked):
    preset: str = opt("default", "the mfd e2e preset whose target and drafters are decoded", choices=("default", "micro"))
    target_arch: str = opt("qwen3", "the e2e target: qwen3 (attention) or qwen3_5 (hybrid GDN + attention)",
                           choices=("qwen3", "qwen3_5"))
    cache_dir: str = opt("", "the e2e checkpoint cache (default: <out>/cache, where mfd e2e --out <out> keeps it)")
    batch_sizes: tuple[int, ...] = opt((1, 2, 4, 8, 16, 32), "batch sizes B", ge=1)
    budgets: tuple[int, ...] = opt((8, 16, 32), "tree nodes per request N (global: B N per round)", ge=1)
    mfd_modes: int = opt(2, "modes K of the MFD drafter (one of the e2e preset's modes)", ge=2)
    max_new_tokens: int = opt(64, "new tokens per request", ge=2)
    calibration_prompts: int = opt(8, "held-out prompts, never evaluated, for the profile and the acceptance "
                                      "prediction", ge=1)
    passes: int = opt(5, "timed passes over every cell (interleaved); the median is reported", ge=1)
    profile_repeats: int = opt(3, "batched decodes of every (B, policy, N) cell in the calibration profile "
                                  "(the median decode is kept)", ge=1)
    threads: int = opt(1, "torch CPU threads while decoding", ge=1)
    seed: int = opt(0, "random seed", ge=0)
    out: str = opt("results", "output directory (the --out option)")

    def validate(self) -> None:
        if len(set(self.batch_sizes)) != len(self.batch_sizes) or list(self.batch_sizes) != sorted(self.batch_sizes):
            raise ValueError(f"--batch-sizes: must be strictly increasing, got {list(self.batch_sizes)}")
        if len(set(self.budgets)) != len(self.budgets):
            raise ValueError(f"--budgets: listed twice in {list(self.budgets)}")


def results_name(target_arch: str) -> str:
    return "bench_batch.json" if target_arch == "qwen3" else f"bench_batch_{target_arch}.json"


def run(cfg: BenchBatchConfig, progress: bool = True) -> Result:
    """Predict, then measure (the torch half), then judge the targets; writes the Result."""
    from mfd_theory.commands.experiments.e2e import preset_config

    ecfg = preset_config(cfg.preset, target_arch=cfg.target_arch, seed=cfg.seed)
    if cfg.mfd_modes not in ecfg.modes:
        raise ValueError(f"--mfd-modes: the {cfg.preset} preset trains K in {list(ecfg.modes)}, got {cfg.mfd_modes}")
    from mfd_theory.commands.bench.bench_batch_run import measure

    m = measure(cfg, ecfg, progress)
    data = {"rows": m["rows"], "checks": checks(m["rows"], cfg), **{k: v for k, v in m.items() if k != "rows"}}
    data["measured_crossover"] = measured_crossover(data["rows"], cfg.batch_sizes)
    result = Result("bench_batch", dataclasses.asdict(cfg), data, seed=cfg.seed)
    save_result(result, Path(cfg.out) / results_name(cfg.target_arch))
    return result


def _best(rows, b, keep=lambda r: True):
    cand = [r for r in rows if r["batch_size"] == b and keep(r)]
    return max(cand, key=lambda r: r["steady_tokens_per_s"]) if cand else None


def measured_crossover(rows, batch_sizes) -> int | None:
    """The smallest B from which AR is the fastest measured fixed configuration (``auto`` aside) at
    every larger B (None when some speculative configuration wins at the largest B)."""
    ar_best = [_best(rows, b, lambda r: r["policy"] != "auto")["policy"] == "off" for b in batch_sizes]
    if not ar_best[-1]:
        return None
    i = len(ar_best) - 1
    while i > 0 and ar_best[i - 1]:
        i -= 1
    return list(batch_sizes)[i]


def checks(rows, cfg: BenchBatchConfig) -> dict:
    """The issue's targets, each a measured comparison that can fail."""
    out: dict = {"global_accepts_at_least_per_request": [], "global_gain_over_best_per_request": [],
                 "auto_within_3pct": [], "overhead_at_16": []}
    for b in cfg.batch_sizes:
        for m in ("ddtree", "mfd"):
            for n in cfg.budgets:
                per = next(r for r in rows if (r["batch_size"], r["method"], r["policy"], r["nodes"]) == (b, m, "per_request", n))
                glo = next(r for r in rows if (r["batch_size"], r["method"], r["policy"], r["nodes"]) == (b, m, "global", n * b))
                # noise: two standard errors of the difference of the two means (clustered by request)
                se = float(np.hypot(per.get("accepted_se", 0.0), glo.get("accepted_se", 0.0)))
                se = 0.0 if not np.isfinite(se) else se
                out["global_accepts_at_least_per_request"].append(
                    {"batch_size": b, "method": m, "nodes": n, "per_request": per["accepted"], "global": glo["accepted"],
                     "two_se": 2 * se, "ok": glo["accepted"] >= per["accepted"] - 2 * se})
            bp = _best(rows, b, lambda r, m=m: r["method"] == m and r["policy"] == "per_request")
            bg = _best(rows, b, lambda r, m=m: r["method"] == m and r["policy"] == "global")
            out["global_gain_over_best_per_request"].append(
                {"batch_size": b, "method": m, "gain": bg["steady_tokens_per_s"] / bp["steady_tokens_per_s"] - 1.0})
            auto = next(r for r in rows if (r["batch_size"], r["method"], r["policy"]) == (b, m, "auto"))
            best = _best(rows, b, lambda r, m=m: r["method"] in (m, "ar") and r["policy"] != "auto")
            out["auto_within_3pct"].append(
                {"batch_size": b, "method": m, "auto": auto["steady_tokens_per_s"], "best": best["steady_tokens_per_s"],
                 "best_cell": f"{best['method']} {best['policy']} {best['nodes']}",
                 "gap": auto["steady_tokens_per_s"] / best["steady_tokens_per_s"] - 1.0,
                 "ok": auto["steady_tokens_per_s"] >= 0.97 * best["steady_tokens_per_s"]})
        if b == 16:
            for r in rows:
                if r["batch_size"] == 16 and r["policy"] != "off":
                    out["overhead_at_16"].append({"method": r["method"], "policy": r["policy"], "nodes": r["nodes"],
                                                  "share": r["overhead_share"], "ok": r["overhead_share"] <= 0.10})
    gains = [g for g in out["global_gain_over_best_per_request"] if g["batch_size"] >= 4]
    out["summary"] = {
        "global_accepts_at_least_per_request": all(c["ok"] for c in out["global_accepts_at_least_per_request"]),
        "global_5pct_somewhere_b4": any(g["gain"] >= 0.05 for g in gains),
        "best_global_gain_b4": max((g["gain"] for g in gains), default=float("nan")),
        "auto_within_3pct_everywhere": all(c["ok"] for c in out["auto_within_3pct"]),
        "worst_auto_gap": min((c["gap"] for c in out["auto_within_3pct"]), default=float("nan")),
        "overhead_at_16_max": max((c["share"] for c in out["overhead_at_16"]), default=float("nan")),
    }
    return out


def report(result: Result) -> str:
    d, c = result.data, result.config
    lines = [f"{d['model']}; {d['eval_prompts']} held-out prompts, {c['max_new_tokens']} new tokens each, "
             f"{c['passes']} passes, {c['threads']} thread(s); predictions from {d['calibration_prompts']} "
             f"held-out prompts (never evaluated), written before the evaluation ({d['predictions_file']})",
             "B    method  policy       nodes  tok/s steady (pred, err)   tok/s wall  latency s  acc/req  rows/req  outside"]
    for r in d["rows"]:
        nodes = "auto" if r["policy"] == "auto" else str(r["nodes"])
        lines.append(f"{r['batch_size']:<4d} {r['method']:7s} {r['policy']:11s} {nodes:>6s} "
                     f"{r['steady_tokens_per_s']:8.0f} ({r['predicted_tokens_per_s']:7.0f}, {100 * r['prediction_error']:+5.1f}%) "
                     f"{r['wall_tokens_per_s']:10.0f} {r['latency_s']:10.3f} {r['accepted']:8.2f} {r['query_rows']:8.1f} "
                     f"{100 * r['overhead_share']:6.1f}%"
                     + (f"  chose {','.join(r['auto_choices'])}" if r["policy"] == "auto" else ""))
    s = d["checks"]["summary"]
    errs = [abs(r["prediction_error"]) for r in d["rows"]]
    lines += [
        f"prediction error of steady tokens/s: median {100 * float(np.median(errs)):.1f}%, worst {100 * max(errs):.1f}%",
        f"crossover (AR fastest from this B on): measured {d['measured_crossover']}, predicted {d['predicted_crossover']}",
        f"global accepts >= per-request at the same total (every B, N): {s['global_accepts_at_least_per_request']}",
        f"global >= 5% over the best per-request N at some B >= 4: {s['global_5pct_somewhere_b4']} "
        f"(best gain {100 * s['best_global_gain_b4']:+.1f}%)",
        f"auto within 3% of the best measured at every B: {s['auto_within_3pct_everywhere']} "
        f"(worst gap {100 * s['worst_auto_gap']:+.1f}%)",
        f"largest share outside the forwards at B = 16: {100 * s['overhead_at_16_max']:.1f}% (target <= 10%)",
        f"GPU, PREDICTED from the packaged {d['gpu_profile']} table (an assumption; cost = f(total rows)):",
    ]
    for r in d["gpu_predicted"]:
        lines.append(f"  {r['method']:7s} B={r['batch_size']:<3d} best {r['policy']:11s} {r['nodes']:5d}: "
                     f"{r['tokens_per_s']:8.0f} tok/s vs AR {r['ar_tokens_per_s']:8.0f} (best per-request "
                     f"{r['best_per_request_tokens_per_s']:.0f}, best global {r['best_global_tokens_per_s']:.0f})")
    return "\n".join(lines)


CLI = Command("bench batch", __name__, BenchBatchConfig, __doc__, extras=(figure_option(
    "also draw throughput against batch size into this file, a .png, .pdf or .svg"),))


def main(argv=None) -> Result:
    return CLI.main(argv, _run)


def _run(cfg: BenchBatchConfig, opts) -> Result:
    result = run(cfg, progress=not opts.quiet)
    print(report(result))
    if opts.figure:
        from mfd_theory.figures import save_figure
        from mfd_theory.figures.batch import batch_throughput
        from mfd_theory.results import wrote

        existed = Path(opts.figure).exists()
        wrote(save_figure(batch_throughput(result), opts.figure), existed)
    return result


if __name__ == "__main__":
    main()
