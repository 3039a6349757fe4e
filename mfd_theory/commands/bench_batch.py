"""Batched decoding: throughput and latency against batch size, by budget policy, predicted first.

On the end-to-end target and drafters (``mfd e2e``'s cached checkpoints; trained when missing),
for every batch size B in ``batch_sizes``, side by side in one run (never a timed test):

1. **before any evaluated prompt**, on ``calibration_prompts`` prompts of the training split
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
``<out>/bench_batch.json`` (``bench_batch_qwen3_5.json`` for the hybrid target).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mfd_theory.results import Result, atomic_write_text, provenance, to_jsonable

from mfd_theory.commands._cli import Checked, add_common, add_dataclass_args, finish, make_parser, opt, save_result

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
    calibration_prompts: int = opt(8, "training-split prompts for the profile and the acceptance prediction", ge=1)
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


def _load(cfg: BenchBatchConfig, progress: bool):
    """(e2e config, corpus, target model, {"ddtree": K=1 drafter, "mfd": K drafter}, cache dir)."""
    import mfd_theory.commands.e2e_run as E

    from mfd_theory.commands.e2e import preset_config

    ecfg = preset_config(cfg.preset, target_arch=cfg.target_arch, seed=cfg.seed)
    if cfg.mfd_modes not in ecfg.modes:
        raise ValueError(f"--mfd-modes: the {cfg.preset} preset trains K in {list(ecfg.modes)}, got {cfg.mfd_modes}")
    cache = Path(cfg.cache_dir) if cfg.cache_dir else Path(cfg.out) / "cache"
    corpus = E.cached_corpus(ecfg, cache)
    target_hf, tdir, _ = E.cached_target(ecfg, corpus, cache, progress)
    data, dpath = E._distill(ecfg, corpus, target_hf, tdir, cache, progress)
    drafters = {"ddtree": E._drafter(ecfg, 1, target_hf, corpus, data, dpath, cache, progress)[0],
                "mfd": E._drafter(ecfg, cfg.mfd_modes, target_hf, corpus, data, dpath, cache, progress)[0]}
    return ecfg, corpus, target_hf, tdir, drafters


def _cells(cfg: BenchBatchConfig, b: int, block: int) -> list[dict]:
    """Every measured configuration at batch size b."""
    cells = [{"method": "ar", "policy": "off", "nodes": 0},
             {"method": "chain", "policy": "per_request", "nodes": block - 1}]
    for m in ("ddtree", "mfd"):
        cells += [{"method": m, "policy": "per_request", "nodes": n} for n in cfg.budgets]
        cells += [{"method": m, "policy": "global", "nodes": n * b} for n in cfg.budgets]
        cells.append({"method": m, "policy": "auto", "nodes": 0})
    return cells


def _measure(res, b: int) -> dict:
    from mfd_theory.llm.measure.batch_predict import steady_rounds

    steady = steady_rounds(res, b)
    t = sum(r.t_step for r in steady)
    emitted = sum(sum(r.emitted) for r in steady)
    acc = [a for r in steady for a in r.accepted]
    spec = [r for r in steady if sum(r.nodes)]
    return {
        "steady_tokens_per_s": emitted / t if t > 0 else float("nan"),
        "wall_tokens_per_s": res.tokens_per_s,
        "latency_s": float(np.mean(res.latency)),
        "accepted": float(np.mean(acc)) if acc else float("nan"),
        "nodes_per_round": float(np.mean([sum(r.nodes) for r in steady])) if steady else float("nan"),
        "query_rows": float(np.mean([max(r.nodes) + 1 for r in steady])) if steady else float("nan"),
        "overhead_share": (sum(r.t_overhead for r in steady) / t) if t > 0 else float("nan"),
        # per request N for per_request rounds, the round's total for global ones
        "auto_choices": sorted({f"{r.policy}:{max(r.nodes) if r.policy == 'per_request' else sum(r.nodes)}"
                                for r in spec}) if spec else ["off"],
        # clustered by request (a request's rounds share its text): the spread of the per-request
        # means over the B requests, each mean over the steady rounds, which keep the batch order
        "accepted_se": (float(np.std(np.mean([r.accepted for r in steady], axis=0), ddof=1) / np.sqrt(b))
                        if steady and b > 1 else float("nan")),
        "steady_rounds": len(steady),
        "round_ms": 1000.0 * t / len(steady) if steady else float("nan"),
    }


def run(cfg: BenchBatchConfig, progress: bool = True) -> Result:
    import torch

    from mfd_theory.llm.decoding.batch import speculative_generate_batch
    from mfd_theory.llm.measure.batch_predict import make_batch_plan, measure_batch_profile, predict_batch_acceptance
    from mfd_theory.commands.e2e_run import calibration_prompts
    from mfd_theory.llm.measure.predict import check_disjoint, prompt_digest
    from mfd_theory.llm.models.target import TargetModel
    from mfd_theory.speedup import batch_rows_profile, default_profile

    out = Path(cfg.out)
    t0 = time.perf_counter()
    ecfg, corpus, target_hf, tdir, drafters = _load(cfg, progress)
    torch.set_num_threads(cfg.threads)
    target = TargetModel(target_hf)
    bmax = max(cfg.batch_sizes)
    prompts = [p.tolist() for p in corpus.prompts(bmax, ecfg.prompt_len, "heldout", seed=ecfg.seed + 2)]
    evald = [{"index": i, "sha256": prompt_digest(p), "dataset": "heldout"} for i, p in enumerate(prompts)]
    calib_cfg = dataclasses.replace(ecfg, calibration_prompts=cfg.calibration_prompts, profile_prompts=0,
                                    budget_choice=False)
    calib = [p.tolist() for p in calibration_prompts(corpus, calib_cfg, {d["sha256"] for d in evald})]
    cald = [{"index": i, "sha256": prompt_digest(p), "dataset": "train"} for i, p in enumerate(calib)]
    check_disjoint(cald, evald)
    block = int(drafters["ddtree"].block_size)

    # ---- 1. predictions, before any evaluated prompt
    t1 = time.perf_counter()
    plans, profiles, accepted = {}, {}, {}
    for m, d in drafters.items():
        profiles[m] = measure_batch_profile(target, d, m, calib, cfg.batch_sizes, cfg.budgets, cfg.max_new_tokens,
                                            seed=cfg.seed, repeats=cfg.profile_repeats, name=f"batch_profile_{m}", device=str(target.device),
                                            model=f"e2e target {tdir.name}", progress=progress)
        accepted[m] = predict_batch_acceptance(target, d, m, calib, cfg.batch_sizes, cfg.budgets, cfg.max_new_tokens,
                                               seed=cfg.seed, progress=progress)
        plans[m] = make_batch_plan(profiles[m], accepted[m])
    chain_profile = measure_batch_profile(target, drafters["ddtree"], "chain", calib, cfg.batch_sizes, [block - 1],
                                          cfg.max_new_tokens, policies=("per_request",), seed=cfg.seed)
    chain_acc = predict_batch_acceptance(target, drafters["ddtree"], "chain", calib, [1], [block - 1],
                                         cfg.max_new_tokens, seed=cfg.seed, draws=1)["single"][block - 1]
    t_predict = time.perf_counter() - t1

    def predicted(b, c):
        m, pol, n = c["method"], c["policy"], c["nodes"]
        if pol == "off":
            return profiles["ddtree"].tokens_per_s(b, "off", 0, 0.0)
        if m == "chain":
            return chain_profile.tokens_per_s(b, "per_request", n, chain_acc)
        if pol == "auto":
            return plans[m].best(b)["tokens_per_s"]
        return profiles[m].tokens_per_s(b, pol, n, accepted[m][(b, pol, n)])

    pred_rows = [{"batch_size": b, **c, "predicted_tokens_per_s": predicted(b, c)}
                 for b in cfg.batch_sizes for c in _cells(cfg, b, block)]
    gpu = default_profile("h100_qwen3-8b")
    gpu_rows = []
    for m in drafters:
        # the global policy's padded rows per request are the allocation's, read off this method's profile
        rows_g = {(c.batch_size, c.nodes // c.batch_size): c.query_rows for c in profiles[m].cells if c.policy == "global"}
        gpu_profile = batch_rows_profile(gpu, cfg.batch_sizes, cfg.budgets, global_rows=rows_g)
        gplan = make_batch_plan(gpu_profile, accepted[m])
        for b in cfg.batch_sizes:
            best = gplan.best(b)
            by = {pol: max((r["tokens_per_s"] for r in gplan.table[b] if r["policy"] == pol), default=None)
                  for pol in ("per_request", "global")}
            gpu_rows.append({"method": m, "batch_size": b, "policy": best["policy"], "nodes": best["nodes"],
                             "tokens_per_s": best["tokens_per_s"], "best_per_request_tokens_per_s": by["per_request"],
                             "best_global_tokens_per_s": by["global"],
                             "ar_tokens_per_s": gpu_profile.tokens_per_s(b, "off", 0, 0.0)})
    predictions = {
        "written_unix": time.time(), "eval_prompts": evald, "calibration_prompts": cald,
        "profiles": {m: p.to_dict() for m, p in profiles.items()}, "chain_profile": chain_profile.to_dict(),
        "accepted": {m: [{"batch_size": k[0], "policy": k[1], "nodes": k[2], "accepted": v}
                         for k, v in a.items() if isinstance(k, tuple)] for m, a in accepted.items()},
        "chain_accepted": chain_acc,
        "global_gain": {m: [{"batch_size": k[0], "nodes": k[1], "gain": v} for k, v in a["global_gain"].items()]
                        for m, a in accepted.items()},
        "plans": {m: {str(b): rows for b, rows in p.table.items()} for m, p in plans.items()},
        "predicted_crossover": {m: p.crossover() for m, p in plans.items()},
        "cells": pred_rows, "gpu_predicted": gpu_rows, "gpu_profile": gpu.name,
    }
    pred_path = out / ("bench_batch_predictions.json" if cfg.target_arch == "qwen3"
                       else f"bench_batch_predictions_{cfg.target_arch}.json")
    import json

    atomic_write_text(pred_path, json.dumps(to_jsonable({"predictions": predictions, "provenance": provenance()}),
                                            indent=1, allow_nan=False) + "\n")

    # ---- 2. measurement on the evaluated prompts
    from tqdm.auto import tqdm

    t2 = time.perf_counter()
    meas: dict = {}
    todo = [(p, b, i) for p in range(cfg.passes) for b in cfg.batch_sizes for i in range(len(_cells(cfg, b, block)))]
    rng = np.random.default_rng(cfg.seed)
    for b in cfg.batch_sizes:  # warm-up: every method once at this size
        for m in ("ddtree", "mfd"):
            speculative_generate_batch(target, drafters[m], prompts[:b], 4, m, budget=8, eos_token_id=[])
    order = []
    for p in range(cfg.passes):
        for b in cfg.batch_sizes:
            idx = list(range(len(_cells(cfg, b, block))))
            rng.shuffle(idx)
            order += [(p, b, i) for i in idx]
    for p, b, i in tqdm(order if order else todo, desc="batch cells", disable=not progress):
        c = _cells(cfg, b, block)[i]
        m, pol = c["method"], c["policy"]
        kw = dict(eos_token_id=[], metrics=False, seed=cfg.seed)
        if pol == "off":
            res = speculative_generate_batch(target, None, prompts[:b], cfg.max_new_tokens, "ar", **kw)
        elif m == "chain":
            res = speculative_generate_batch(target, drafters["ddtree"], prompts[:b], cfg.max_new_tokens, "chain",
                                             budget=c["nodes"], **kw)
        elif pol == "auto":
            res = speculative_generate_batch(target, drafters[m], prompts[:b], cfg.max_new_tokens, m, policy="auto",
                                             plan=plans[m], **kw)
        elif pol == "global":
            res = speculative_generate_batch(target, drafters[m], prompts[:b], cfg.max_new_tokens, m, policy="global",
                                             total_budget=c["nodes"], **kw)
        else:
            res = speculative_generate_batch(target, drafters[m], prompts[:b], cfg.max_new_tokens, m,
                                             budget=c["nodes"], **kw)
        meas.setdefault((b, i), []).append(_measure(res, b))
    t_measure = time.perf_counter() - t2

    rows = []
    for pr in pred_rows:
        b = pr["batch_size"]
        i = next(j for j, c in enumerate(_cells(cfg, b, block))
                 if (c["method"], c["policy"], c["nodes"]) == (pr["method"], pr["policy"], pr["nodes"]))
        runs = meas[(b, i)]
        row = dict(pr)
        for key in runs[0]:
            if key == "auto_choices":
                row[key] = sorted({x for r in runs for x in r[key]})
            elif key == "accepted_se":  # greedy passes decode the same tokens: one pass's error, not / passes
                se2 = [r[key] ** 2 for r in runs if np.isfinite(r[key])]
                row[key] = float(np.sqrt(np.mean(se2))) if se2 else float("nan")  # nan: one request (B = 1)
            elif key == "accepted":  # a count: the mean over passes
                row[key] = float(np.mean([r[key] for r in runs]))
            else:  # times and rates: the median pass (slow spells of a shared machine hit whole passes)
                row[key] = float(np.median([r[key] for r in runs]))
        row["steady_tokens_per_s_passes"] = [r["steady_tokens_per_s"] for r in runs]
        row["prediction_error"] = row["predicted_tokens_per_s"] / row["steady_tokens_per_s"] - 1.0
        rows.append(row)
    data = {"rows": rows, "checks": checks(rows, cfg), "predictions_file": pred_path.name,
            "predicted_crossover": predictions["predicted_crossover"], "gpu_predicted": gpu_rows,
            "gpu_profile": gpu.name, "model": f"e2e target {tdir.name} ({cfg.target_arch})",
            "times_s": {"predict": t_predict, "measure": t_measure, "total": time.perf_counter() - t0},
            "calibration_prompts": len(calib), "eval_prompts": len(prompts), "block_size": block}
    data["measured_crossover"] = measured_crossover(rows, cfg.batch_sizes)
    result = Result("bench_batch", dataclasses.asdict(cfg), data, seed=cfg.seed)
    save_result(result, out / results_name(cfg.target_arch))
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
             f"training-split prompts, written before the evaluation ({d['predictions_file']})",
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


def main(argv=None) -> Result:
    parser = make_parser("mfd bench batch", __doc__.split("\n\n")[0])
    add_dataclass_args(parser, BenchBatchConfig, skip=("out",))
    add_common(parser)
    parser.add_argument("--figure", default="", metavar="PATH",
                        help="also draw throughput against batch size into this file, a .png, .pdf or .svg (default: no figure)")
    args = parser.parse_args(argv)
    result = run(finish(parser, BenchBatchConfig, args, out=args.out), progress=not args.quiet)
    print(report(result))
    if args.figure:
        from mfd_theory.figures.batch import batch_throughput
        from mfd_theory.results import wrote

        fig = batch_throughput(result.to_dict())
        fig.savefig(args.figure, dpi=120)
        wrote(args.figure)
    return result


if __name__ == "__main__":
    main()
