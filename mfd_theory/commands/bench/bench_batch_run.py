"""The torch half of ``mfd bench batch`` (:mod:`mfd_theory.commands.bench.bench_batch`), in stages: load
the e2e target and drafters (trained when the cache lacks them); predict every cell from the
calibration prompts and write the predictions file; time every cell on the evaluated prompts;
merge the passes into one row per cell."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from tqdm.auto import tqdm

import mfd_theory.commands.experiments.e2e_run as E
from mfd_theory.llm.decoding.batch import speculative_generate_batch
from mfd_theory.llm.measure.batch_predict import (
    make_batch_plan, measure_batch_profile, predict_batch_acceptance, steady_rounds,
)
from mfd_theory.llm.measure.predict import check_disjoint, prompt_digest
from mfd_theory.llm.models.target import TargetModel
from mfd_theory.results import atomic_write_text, provenance, to_jsonable
from mfd_theory.speedup import batch_rows_profile, default_profile

__all__ = ["measure"]


def measure(cfg, ecfg, progress: bool = True) -> dict:
    """Predictions first (written to ``bench_batch_predictions*.json``), then the measurement, for
    ``cfg`` (a :class:`~mfd_theory.commands.bench.bench_batch.BenchBatchConfig`) on the target and
    drafters of the e2e config ``ecfg``. The Result's data, but for the targets' checks."""
    t0 = time.perf_counter()
    corpus, target_hf, tdir, drafters = _load(cfg, ecfg, progress)
    torch.set_num_threads(cfg.threads)
    target = TargetModel(target_hf)
    prompts, evald, calib, cald = _prompt_sets(cfg, ecfg, corpus)
    block = int(drafters["ddtree"].block_size)

    t1 = time.perf_counter()
    pred = _predict(cfg, target, drafters, calib, block, f"e2e target {tdir.name}", progress)
    t_predict = time.perf_counter() - t1
    pred_rows = [{"batch_size": b, **c, "predicted_tokens_per_s": pred.tokens_per_s(b, c)}
                 for b in cfg.batch_sizes for c in _cells(cfg, b, block)]
    gpu, gpu_rows = _gpu_rows(cfg, pred)
    predictions = {
        "written_unix": time.time(), "eval_prompts": evald, "calibration_prompts": cald,
        "profiles": {m: p.to_dict() for m, p in pred.profiles.items()}, "chain_profile": pred.chain_profile.to_dict(),
        "accepted": {m: [{"batch_size": k[0], "policy": k[1], "nodes": k[2], "accepted": v}
                         for k, v in a.items() if isinstance(k, tuple)] for m, a in pred.accepted.items()},
        "chain_accepted": pred.chain_acc,
        "global_gain": {m: [{"batch_size": k[0], "nodes": k[1], "gain": v} for k, v in a["global_gain"].items()]
                        for m, a in pred.accepted.items()},
        "plans": {m: {str(b): rows for b, rows in p.table.items()} for m, p in pred.plans.items()},
        "predicted_crossover": {m: p.crossover() for m, p in pred.plans.items()},
        "cells": pred_rows, "gpu_predicted": gpu_rows, "gpu_profile": gpu.name,
    }
    pred_path = Path(cfg.out) / ("bench_batch_predictions.json" if cfg.target_arch == "qwen3"
                                 else f"bench_batch_predictions_{cfg.target_arch}.json")
    atomic_write_text(pred_path, json.dumps(to_jsonable({"predictions": predictions, "provenance": provenance()}),
                                            indent=1, allow_nan=False) + "\n")

    t2 = time.perf_counter()
    meas = _time_cells(cfg, target, drafters, prompts, pred.plans, block, progress)
    t_measure = time.perf_counter() - t2
    return {"rows": _rows(cfg, pred_rows, meas, block), "predictions_file": pred_path.name,
            "predicted_crossover": predictions["predicted_crossover"], "gpu_predicted": gpu_rows,
            "gpu_profile": gpu.name, "model": f"e2e target {tdir.name} ({cfg.target_arch})",
            "times_s": {"predict": t_predict, "measure": t_measure, "total": time.perf_counter() - t0},
            "calibration_prompts": len(calib), "eval_prompts": len(prompts), "block_size": block}


def _load(cfg, ecfg, progress: bool):
    """(corpus, target model, its cache directory, {"ddtree": K=1 drafter, "mfd": K drafter})."""
    cache = Path(cfg.cache_dir) if cfg.cache_dir else Path(cfg.out) / "cache"
    corpus = E.cached_corpus(ecfg, cache)
    target_hf, tdir, _ = E.cached_target(ecfg, corpus, cache, progress)
    data, dpath = E.cached_distill_data(ecfg, corpus, target_hf, tdir, cache, progress)
    drafters = {"ddtree": E.cached_drafter(ecfg, 1, target_hf, corpus, data, dpath, cache, progress)[0],
                "mfd": E.cached_drafter(ecfg, cfg.mfd_modes, target_hf, corpus, data, dpath, cache, progress)[0]}
    return corpus, target_hf, tdir, drafters


def _prompt_sets(cfg, ecfg, corpus):
    """(evaluated prompts, their records, calibration prompts (held out, never evaluated), theirs):
    disjoint by token hash."""
    prompts = [p.tolist() for p in corpus.prompts(max(cfg.batch_sizes), ecfg.prompt_len, "heldout",
                                                  seed=ecfg.seed + 2)]
    evald = [{"index": i, "sha256": prompt_digest(p), "dataset": "heldout"} for i, p in enumerate(prompts)]
    calib_cfg = dataclasses.replace(ecfg, calibration_prompts=cfg.calibration_prompts, profile_prompts=0,
                                    budget_choice=False, replicates=1)
    calib = [p.tolist() for p in E.calibration_prompts(corpus, calib_cfg, {d["sha256"] for d in evald})]
    cald = [{"index": i, "sha256": prompt_digest(p), "dataset": "heldout"} for i, p in enumerate(calib)]
    check_disjoint(cald, evald)
    return prompts, evald, calib, cald


def _cells(cfg, b: int, block: int) -> list[dict]:
    """Every measured configuration at batch size b."""
    cells = [{"method": "ar", "policy": "off", "nodes": 0},
             {"method": "chain", "policy": "per_request", "nodes": block - 1}]
    for m in ("ddtree", "mfd"):
        cells += [{"method": m, "policy": "per_request", "nodes": n} for n in cfg.budgets]
        cells += [{"method": m, "policy": "global", "nodes": n * b} for n in cfg.budgets]
        cells.append({"method": m, "policy": "auto", "nodes": 0})
    return cells


def _predict(cfg, target, drafters: dict, calib: list, block: int, model: str, progress: bool) -> SimpleNamespace:
    """Per method, on the calibration prompts only: the batched round's cost per (B, policy,
    nodes), the acceptance of every cell and the ``auto`` plan; the chain's too. ``tokens_per_s(b,
    cell)`` is the predicted throughput of a cell."""
    plans, profiles, accepted = {}, {}, {}
    for m, d in drafters.items():
        profiles[m] = measure_batch_profile(target, d, m, calib, cfg.batch_sizes, cfg.budgets, cfg.max_new_tokens,
                                            seed=cfg.seed, repeats=cfg.profile_repeats, name=f"batch_profile_{m}",
                                            device=str(target.device), model=model, progress=progress)
        accepted[m] = predict_batch_acceptance(target, d, m, calib, cfg.batch_sizes, cfg.budgets, cfg.max_new_tokens,
                                               seed=cfg.seed, progress=progress)
        plans[m] = make_batch_plan(profiles[m], accepted[m])
    chain_profile = measure_batch_profile(target, drafters["ddtree"], "chain", calib, cfg.batch_sizes, [block - 1],
                                          cfg.max_new_tokens, policies=("per_request",), seed=cfg.seed)
    chain_acc = predict_batch_acceptance(target, drafters["ddtree"], "chain", calib, [1], [block - 1],
                                         cfg.max_new_tokens, seed=cfg.seed, draws=1)["single"][block - 1]

    def tokens_per_s(b, c):
        m, pol, n = c["method"], c["policy"], c["nodes"]
        if pol == "off":
            return profiles["ddtree"].tokens_per_s(b, "off", 0, 0.0)
        if m == "chain":
            return chain_profile.tokens_per_s(b, "per_request", n, chain_acc)
        if pol == "auto":
            return plans[m].best(b)["tokens_per_s"]
        return profiles[m].tokens_per_s(b, pol, n, accepted[m][(b, pol, n)])

    return SimpleNamespace(plans=plans, profiles=profiles, accepted=accepted, chain_profile=chain_profile,
                           chain_acc=chain_acc, tokens_per_s=tokens_per_s)


def _gpu_rows(cfg, pred: SimpleNamespace):
    """(the packaged H100 profile, per method and B its predicted best cell): the same curves for
    a GPU, an assumption (a forward's cost taken as a function of its total rows)."""
    gpu = default_profile("h100_qwen3-8b")
    rows = []
    for m in pred.profiles:
        # the global policy's padded rows per request are the allocation's, read off this method's profile
        rows_g = {(c.batch_size, c.nodes // c.batch_size): c.query_rows for c in pred.profiles[m].cells
                  if c.policy == "global"}
        gpu_profile = batch_rows_profile(gpu, cfg.batch_sizes, cfg.budgets, global_rows=rows_g)
        gplan = make_batch_plan(gpu_profile, pred.accepted[m])
        for b in cfg.batch_sizes:
            best = gplan.best(b)
            by = {pol: max((r["tokens_per_s"] for r in gplan.table[b] if r["policy"] == pol), default=None)
                  for pol in ("per_request", "global")}
            rows.append({"method": m, "batch_size": b, "policy": best["policy"], "nodes": best["nodes"],
                         "tokens_per_s": best["tokens_per_s"], "best_per_request_tokens_per_s": by["per_request"],
                         "best_global_tokens_per_s": by["global"],
                         "ar_tokens_per_s": gpu_profile.tokens_per_s(b, "off", 0, 0.0)})
    return gpu, rows


def _time_cells(cfg, target, drafters: dict, prompts: list, plans: dict, block: int, progress: bool) -> dict:
    """{(B, cell index): one measurement per pass}: every cell, B prompts at a time, in a shuffled
    order within each pass and batch size, after one warm-up decode per method and size."""
    for b in cfg.batch_sizes:  # warm-up: every method once at this size
        for m in ("ddtree", "mfd"):
            speculative_generate_batch(target, drafters[m], prompts[:b], 4, m, budget=8, eos_token_id=[])
    rng = np.random.default_rng(cfg.seed)
    order = []
    for p in range(cfg.passes):
        for b in cfg.batch_sizes:
            idx = list(range(len(_cells(cfg, b, block))))
            rng.shuffle(idx)
            order += [(p, b, i) for i in idx]
    meas: dict = {}
    for p, b, i in tqdm(order, desc="batch cells", disable=not progress):
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
    return meas


def _measure(res, b: int) -> dict:
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


def _rows(cfg, pred_rows: list[dict], meas: dict, block: int) -> list[dict]:
    """One row per predicted cell: its passes merged (rates and times the median pass, counts the
    mean) beside its prediction."""
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
    return rows
