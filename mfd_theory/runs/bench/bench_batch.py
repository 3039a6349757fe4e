"""The torch half of ``mfd bench batch`` (:mod:`mfd_theory.commands.bench.bench_batch`), in stages: load
the e2e target and ``replicates`` drafter sets (trained when the cache lacks them); predict every
cell from the calibration prompts (their traces replayed under every policy, and the round's
measured cost) and write the predictions file; time every cell on the evaluated prompts, every
drafter set; merge the passes into one row per cell, with each replicate's per-request values."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from tqdm.auto import tqdm

import mfd_theory.runs.experiments.e2e as E
from mfd_theory.configs.options import keeps_torch_threads
from mfd_theory.llm.decoding.batch import speculative_generate_batch
from mfd_theory.llm.measure.batch_predict import (
    make_batch_plan, measure_batch_profile, predict_batch_acceptance, replayed_acceptance, steady_rounds,
)
from mfd_theory.batch_sim import replay, rescore
from mfd_theory.llm.measure.batch_trace import decode_traces
from mfd_theory.llm.measure.predict import check_disjoint, prompt_digest
from mfd_theory.llm.models.target import TargetModel
from mfd_theory.results import atomic_write_text, provenance, to_jsonable
from mfd_theory.speedup import batch_rows_profile, default_profile
from mfd_theory.stats import MARGIN, compare

__all__ = ["SHARED", "TREE_POLICIES", "cells", "measure", "requests_at", "whole_decode_analysis"]

TREE_POLICIES = ("per_request", "global", "proportional")
SHARED = ("global", "proportional")


@keeps_torch_threads
def measure(cfg, ecfg, progress: bool = True) -> dict:
    """Predictions first (written to ``bench_batch_predictions*.json``), then the measurement, for
    ``cfg`` (a :class:`~mfd_theory.commands.bench.bench_batch.BenchBatchConfig`) on the target and
    drafters of the e2e config ``ecfg``. The Result's data, but for the targets' checks."""
    t0 = time.perf_counter()
    load0 = _load_average()
    corpus, target_hf, tdir, drafters, seeds = _load(cfg, ecfg, progress)
    torch.set_num_threads(cfg.threads)
    target = TargetModel(target_hf)
    prompts_all, evald, calib, cald = _prompt_sets(cfg, ecfg, corpus)
    prompts = prompts_all[: max(requests_at(cfg, b) for b in cfg.batch_sizes)]  # the timed ones
    block = int(drafters["ddtree"][0].block_size)

    t1 = time.perf_counter()
    pred = _predict(cfg, target, drafters, calib, block, f"e2e target {tdir.name}", progress)
    t_predict = time.perf_counter() - t1
    pred_rows = [{"batch_size": b, **c, "predicted_tokens_per_s": pred.tokens_per_s(b, c)}
                 for b in cfg.batch_sizes for c in cells(cfg, b, block)]
    gpu, gpu_rows = _gpu_rows(cfg, pred)
    predictions = {
        "written_unix": time.time(), "eval_prompts": evald, "calibration_prompts": cald, "drafter_seeds": seeds,
        "profiles": {m: p.to_dict() for m, p in pred.profiles.items()}, "chain_profile": pred.chain_profile.to_dict(),
        "accepted": {m: [[{"batch_size": k[0], "policy": k[1], "nodes": k[2], "accepted": v, "steady": a_st[k]}
                          for k, v in a.items()] for a, a_st in zip(pred.accepted[m], pred.steady[m])]
                     for m in pred.accepted},
        "chain_accepted": pred.chain_acc,
        "plans": {m: [{str(b): rows for b, rows in p.table.items()} for p in plans] for m, plans in pred.plans.items()},
        "predicted_crossover": {m: plans[0].crossover() for m, plans in pred.plans.items()},
        "cells": pred_rows, "gpu_predicted": gpu_rows, "gpu_profile": gpu.name,
    }
    pred_path = Path(cfg.out) / ("bench_batch_predictions.json" if cfg.target_arch == "qwen3"
                                 else f"bench_batch_predictions_{cfg.target_arch}.json")
    atomic_write_text(pred_path, json.dumps(to_jsonable({"predictions": predictions, "provenance": provenance()}),
                                            indent=1, allow_nan=False) + "\n")

    t2 = time.perf_counter()
    meas = _time_cells(cfg, target, drafters, prompts, pred.plans, block, progress)
    t_measure = time.perf_counter() - t2
    t3 = time.perf_counter()
    analysis = whole_decode_analysis(cfg, target, drafters, prompts_all, progress) if cfg.analysis_prompts else None
    t_analysis = time.perf_counter() - t3
    rows = _rows(cfg, pred_rows, meas, block)
    if analysis is not None:
        analysis["replay_matches_measured"] = _replay_check(cfg, analysis.pop("_traces"), rows)
    return {"rows": rows, "predictions_file": pred_path.name, "whole_decode": analysis,
            "predicted_crossover": predictions["predicted_crossover"], "gpu_predicted": gpu_rows,
            "gpu_profile": gpu.name, "model": f"e2e target {tdir.name} ({cfg.target_arch})",
            "drafter_seeds": seeds, "times_s": {"predict": t_predict, "measure": t_measure, "analysis": t_analysis,
                                                "total": time.perf_counter() - t0},
            # the machine's 1-minute load average at the start and the end (a shared machine's timings move with it)
            "load_average": {"start": load0, "end": _load_average(), "cpus": os.cpu_count()},
            "calibration_prompts": len(calib), "eval_prompts": len(prompts), "block_size": block}


def _load(cfg, ecfg, progress: bool):
    """(corpus, target model, its cache directory, {"ddtree": K=1 drafters, "mfd": K drafters} (one
    per replicate), the drafter seeds)."""
    cache = Path(cfg.cache_dir) if cfg.cache_dir else Path(cfg.out) / "cache"
    corpus = E.cached_corpus(ecfg, cache)
    target_hf, tdir, _ = E.cached_target(ecfg, corpus, cache, progress)
    data, dpath = E.cached_distill_data(ecfg, corpus, target_hf, tdir, cache, progress)
    seeds = [ecfg.seed + r for r in range(cfg.replicates)]
    drafters = {"ddtree": [], "mfd": []}
    for s in seeds:
        drafters["ddtree"].append(E.cached_drafter(ecfg, 1, target_hf, corpus, data, dpath, cache, progress, seed=s)[0])
        drafters["mfd"].append(E.cached_drafter(ecfg, cfg.mfd_modes, target_hf, corpus, data, dpath, cache, progress,
                                                seed=s)[0])
    return corpus, target_hf, tdir, drafters, seeds


def requests_at(cfg, b: int) -> int:
    """Evaluated requests at batch size b: at least ``min_requests``, whole batches of b."""
    return b * -(-cfg.min_requests // b)


def _prompt_sets(cfg, ecfg, corpus):
    """(evaluated prompts, their records, calibration prompts (held out, never evaluated), theirs):
    disjoint by token hash."""
    n = max(max(requests_at(cfg, b) for b in cfg.batch_sizes), cfg.analysis_prompts)
    prompts = [p.tolist() for p in corpus.prompts(n, ecfg.prompt_len, "heldout", seed=ecfg.seed + 2)]
    evald = [{"index": i, "sha256": prompt_digest(p), "dataset": "heldout"} for i, p in enumerate(prompts)]
    calib_cfg = dataclasses.replace(ecfg, calibration_prompts=cfg.calibration_prompts, profile_prompts=0,
                                    budget_choice=False, replicates=1)
    calib = [p.tolist() for p in E.calibration_prompts(corpus, calib_cfg, {d["sha256"] for d in evald})]
    cald = [{"index": i, "sha256": prompt_digest(p), "dataset": "heldout"} for i, p in enumerate(calib)]
    check_disjoint(cald, evald)
    return prompts, evald, calib, cald


def cells(cfg, b: int, block: int) -> list[dict]:
    """Every measured configuration at batch size b."""
    out = [{"method": "ar", "policy": "off", "nodes": 0},
           {"method": "chain", "policy": "per_request", "nodes": block - 1}]
    for m in ("ddtree", "mfd"):
        for pol in TREE_POLICIES:
            out += [{"method": m, "policy": pol, "nodes": n * (b if pol in SHARED else 1)} for n in cfg.budgets]
        out.append({"method": m, "policy": "auto", "nodes": 0})
    return out


def _predict(cfg, target, drafters: dict, calib: list, block: int, model: str, progress: bool) -> SimpleNamespace:
    """On the calibration prompts only. Per method: the batched round's measured cost per (B,
    policy, nodes) (the first drafter set's); per drafter set, the calibration prompts' traces
    replayed under every policy and budget (:func:`mfd_theory.batch_sim.replay`, static batches of
    B as the evaluation runs them), giving each cell's accepted tokens per request-round over the
    whole decode and over its steady rounds; the ``auto`` plan from the whole-decode numbers, with
    a shared policy only where it is predicted ahead by more than the 3 % margin. The chain's
    cost and acceptance too. ``tokens_per_s(b, cell)`` is a cell's predicted steady throughput."""
    plans, profiles, accepted, steady = {}, {}, {}, {}
    for m, ds in drafters.items():
        profiles[m] = measure_batch_profile(target, ds[0], m, calib, cfg.batch_sizes, cfg.budgets, cfg.max_new_tokens,
                                            policies=TREE_POLICIES, seed=cfg.seed, repeats=cfg.profile_repeats,
                                            name=f"batch_profile_{m}", device=str(target.device), model=model,
                                            progress=progress)
        accepted[m], steady[m], plans[m] = [], [], []
        for d in ds:
            full, st, _ = replayed_acceptance(target, d, m, calib, cfg.batch_sizes, cfg.budgets, cfg.max_new_tokens,
                                              policies=TREE_POLICIES, progress=progress)
            accepted[m].append(full)
            steady[m].append(st)
            plans[m].append(make_batch_plan(profiles[m], full, margin=MARGIN))
    chain_profile = measure_batch_profile(target, drafters["ddtree"][0], "chain", calib, cfg.batch_sizes, [block - 1],
                                          cfg.max_new_tokens, policies=("per_request",), seed=cfg.seed)
    chain_acc = predict_batch_acceptance(target, drafters["ddtree"][0], "chain", calib, [1], [block - 1],
                                         cfg.max_new_tokens, seed=cfg.seed, draws=1)["single"][block - 1]

    def tokens_per_s(b, c):
        m, pol, n = c["method"], c["policy"], c["nodes"]
        if pol == "off":
            return profiles["ddtree"].tokens_per_s(b, "off", 0, 0.0)
        if m == "chain":
            return chain_profile.tokens_per_s(b, "per_request", n, chain_acc)
        if pol == "auto":
            return float(np.mean([p.best(b)["tokens_per_s"] for p in plans[m]]))
        return float(np.mean([profiles[m].tokens_per_s(b, pol, n, max(st[(b, pol, n)], 0.0)) for st in steady[m]]))

    return SimpleNamespace(plans=plans, profiles=profiles, accepted=accepted, steady=steady,
                           chain_profile=chain_profile, chain_acc=chain_acc, tokens_per_s=tokens_per_s)


def _gpu_rows(cfg, pred: SimpleNamespace):
    """(the packaged H100 profile, per method and B its predicted best cell): the same curves for
    a GPU, an assumption (a forward's cost taken as a function of its total rows), from the first
    drafter set's predicted acceptance."""
    gpu = default_profile("h100_qwen3-8b")
    rows = []
    for m in pred.profiles:
        # the shared policies' rows per request are the allocation's, read off this method's profile
        rows_g = {(c.batch_size, c.nodes // c.batch_size): c.query_rows for c in pred.profiles[m].cells
                  if c.policy == "global"}
        gpu_profile = batch_rows_profile(gpu, cfg.batch_sizes, cfg.budgets, global_rows=rows_g)
        gplan = make_batch_plan(gpu_profile, pred.accepted[m][0], margin=MARGIN)
        for b in cfg.batch_sizes:
            best = gplan.best(b)
            by = {pol: max((r["tokens_per_s"] for r in gplan.table[b] if r["policy"] == pol), default=None)
                  for pol in ("per_request", "global")}
            rows.append({"method": m, "batch_size": b, "policy": best["policy"], "nodes": best["nodes"],
                         "tokens_per_s": best["tokens_per_s"], "best_per_request_tokens_per_s": by["per_request"],
                         "best_global_tokens_per_s": by["global"],
                         "ar_tokens_per_s": gpu_profile.tokens_per_s(b, "off", 0, 0.0)})
    return gpu, rows


def _decode(cfg, target, drafters, plans, prompts, b, c, r):
    """Cell ``c`` on replicate ``r``'s drafters over ``prompts``, static batches of b: the results."""
    m, pol = c["method"], c["policy"]
    kw = dict(eos_token_id=[], metrics=False, seed=cfg.seed)
    out = []
    for s in range(0, len(prompts), b):
        batch = prompts[s: s + b]
        if pol == "off":
            res = speculative_generate_batch(target, None, batch, cfg.max_new_tokens, "ar", **kw)
        elif m == "chain":
            res = speculative_generate_batch(target, drafters["ddtree"][r], batch, cfg.max_new_tokens, "chain",
                                             budget=c["nodes"], **kw)
        elif pol == "auto":
            res = speculative_generate_batch(target, drafters[m][r], batch, cfg.max_new_tokens, m, policy="auto",
                                             plan=plans[m][r], **kw)
        elif pol in SHARED:
            res = speculative_generate_batch(target, drafters[m][r], batch, cfg.max_new_tokens, m, policy=pol,
                                             total_budget=c["nodes"], **kw)
        else:
            res = speculative_generate_batch(target, drafters[m][r], batch, cfg.max_new_tokens, m,
                                             budget=c["nodes"], **kw)
        out.append(res)
    return out


def _time_cells(cfg, target, drafters: dict, prompts: list, plans: dict, block: int, progress: bool) -> dict:
    """{(B, cell index, replicate): one measurement per pass}: every cell on every drafter set (AR,
    which drafts nothing, once), its requests in static batches of B, in a shuffled order within
    each pass and batch size, after one warm-up decode per method and size."""
    for b in cfg.batch_sizes:  # warm-up: every method once at this size
        for m in ("ddtree", "mfd"):
            speculative_generate_batch(target, drafters[m][0], prompts[:b], 4, m, budget=8, eos_token_id=[])
    rng = np.random.default_rng(cfg.seed)
    order = []
    for p in range(cfg.passes):
        for b in cfg.batch_sizes:
            todo = [(i, r) for i, c in enumerate(cells(cfg, b, block))
                    for r in (range(1) if c["policy"] == "off" else range(cfg.replicates))]
            rng.shuffle(todo)
            order += [(p, b, i, r) for i, r in todo]
    meas: dict = {}
    for p, b, i, r in tqdm(order, desc="batch cells", disable=not progress):
        c = cells(cfg, b, block)[i]
        res = _decode(cfg, target, drafters, plans, prompts[: requests_at(cfg, b)], b, c, r)
        meas.setdefault((b, i, r), []).append(_measure(res, b))
    return meas


def _measure(results: list, b: int) -> dict:
    """One pass of a cell: its static batches' rounds, the steady ones (holding all b requests) and
    all of them (the whole decode), and every request's own numbers."""
    steady = [r for res in results for r in steady_rounds(res, b)]
    every = [r for res in results for r in res.rounds]
    t = sum(r.t_step for r in steady)
    emitted = sum(sum(r.emitted) for r in steady)
    t_all = sum(r.t_step for r in every)
    acc = [a for r in steady for a in r.accepted]
    spec = [r for r in steady if sum(r.nodes)]
    per_req = [np.mean([r.accepted for r in steady_rounds(res, b)], axis=0) for res in results
               if steady_rounds(res, b)]  # [batches][b]: each request's mean over its batch's steady rounds
    per_req = np.concatenate(per_req) if per_req else np.empty(0)
    new = sum(res.new_tokens for res in results)
    return {
        "steady_tokens_per_s": emitted / t if t > 0 else float("nan"),
        # the whole decode: every token the rounds emitted over the time in rounds (tails included)
        "full_tokens_per_s": sum(sum(r.emitted) for r in every) / t_all if t_all > 0 else float("nan"),
        "wall_tokens_per_s": new / sum(res.t_total for res in results),
        "latency_s": float(np.mean([x for res in results for x in res.latency])),
        "accepted": float(np.mean(acc)) if acc else float("nan"),
        "request_tokens_per_round": [x for res in results for x in res.request_tokens_per_round],
        "request_tokens_per_s": [x for res in results for x in res.request_tokens_per_s],
        "nodes_per_round": float(np.mean([sum(r.nodes) for r in steady])) if steady else float("nan"),
        "query_rows": float(np.mean([sum(r.nodes) / len(r.nodes) + 1 for r in steady])) if steady else float("nan"),
        "overhead_share": (sum(r.t_overhead for r in steady) / t) if t > 0 else float("nan"),
        # per request N for per_request rounds, the round's total for shared ones
        "auto_choices": sorted({f"{r.policy}:{max(r.nodes) if r.policy == 'per_request' else sum(r.nodes)}"
                                for r in spec}) if spec else ["off"],
        # clustered by request (a request's rounds share its text): the spread of the per-request
        # means over the steady rounds
        "accepted_se": float(np.std(per_req, ddof=1) / np.sqrt(per_req.size)) if per_req.size > 1 else float("nan"),
        "steady_rounds": len(steady),
        "round_ms": 1000.0 * t / len(steady) if steady else float("nan"),
    }


def _rows(cfg, pred_rows: list[dict], meas: dict, block: int) -> list[dict]:
    """One row per predicted cell. Per replicate its passes are merged (rates and times the median
    pass, counts the mean; per-request rates the median pass of each request); the row holds the
    mean over replicates, and each replicate's per-request values for the paired comparisons."""
    rows = []
    for pr in pred_rows:
        b = pr["batch_size"]
        i = next(j for j, c in enumerate(cells(cfg, b, block))
                 if (c["method"], c["policy"], c["nodes"]) == (pr["method"], pr["policy"], pr["nodes"]))
        reps = [meas[(b, i, r)] for r in range(cfg.replicates) if (b, i, r) in meas]
        merged = [_merge_passes(runs) for runs in reps]
        row = dict(pr)
        for key in merged[0]:
            if key in ("request_tokens_per_round", "request_tokens_per_s"):
                row[key] = [m[key] for m in merged]  # [replicates][requests]
            elif key == "auto_choices":
                row[key] = sorted({x for m in merged for x in m[key]})
            else:
                vals = [m[key] for m in merged if np.isfinite(m[key])]
                row[key] = float(np.mean(vals)) if vals else float("nan")
        row["full_tokens_per_round"] = float(np.mean(row["request_tokens_per_round"]))
        row["replicates"] = len(merged)
        # pass to pass: the relative range of the whole-decode rate over the passes, mean over replicates
        row["pass_spread"] = float(np.mean([max(x["full_tokens_per_s"] for x in runs) /
                                            min(x["full_tokens_per_s"] for x in runs) - 1.0 for runs in reps]))
        row["steady_tokens_per_s_passes"] = [[x["steady_tokens_per_s"] for x in runs] for runs in reps]
        row["prediction_error"] = row["predicted_tokens_per_s"] / row["steady_tokens_per_s"] - 1.0
        rows.append(row)
    return rows


def _merge_passes(runs: list[dict]) -> dict:
    out = {}
    for key in runs[0]:
        if key == "auto_choices":
            out[key] = sorted({x for r in runs for x in r[key]})
        elif key == "request_tokens_per_s":  # each request's median pass
            out[key] = np.median(np.array([r[key] for r in runs]), axis=0).tolist()
        elif key == "request_tokens_per_round":  # greedy passes decode the same rounds
            out[key] = runs[0][key]
        elif key == "accepted_se":  # greedy passes decode the same tokens: one pass's error, not / passes
            se2 = [r[key] ** 2 for r in runs if np.isfinite(r[key])]
            out[key] = float(np.sqrt(np.mean(se2))) if se2 else float("nan")
        elif key == "accepted":
            out[key] = float(np.mean([r[key] for r in runs]))
        else:  # times and rates: the median pass (slow spells of a shared machine hit whole passes)
            out[key] = float(np.median([r[key] for r in runs]))
    return out


def whole_decode_analysis(cfg, target, drafters: dict, prompts: list, progress: bool = False) -> dict:
    """Why a shared budget pays less over the whole decode than its rounds say, on the first
    ``analysis_prompts`` evaluated prompts (held out) and every drafter set: their greedy traces
    replayed under each policy (static batches of B, as timed), per (method, B, N) with B >= 2:

    * ``full``: each policy's tokens per request-round over the whole decode against per_request,
      paired by request over the drafter sets (``oracle``: counts chosen knowing what the target
      accepts, a ceiling no decoder reaches);
    * ``same_rounds``: on per_request's own rounds (the same requests at the same positions), the
      accepted tokens each policy's counts would give, over per_request's;
    * ``shift``: per_request's own counts on each policy's rounds, over on its own: how much harder
      the positions that policy's rounds start from are."""
    from tqdm.auto import tqdm

    P = min(cfg.analysis_prompts, len(prompts))
    cap = 2 * max(cfg.budgets)
    traces = {m: [decode_traces(target, d, m, prompts[:P], cfg.max_new_tokens, cap)[0]
                  for d in tqdm(ds, desc=f"traces {m}", disable=not progress)] for m, ds in drafters.items()}
    pols = ("global", "proportional", "oracle")
    out = []
    for m, trs in traces.items():
        for b in (x for x in cfg.batch_sizes if x >= 2):
            for n in cfg.budgets:
                base = [replay(tr, "per_request", int(n), b) for tr in trs]
                row = {"method": m, "batch_size": b, "nodes": int(n)}
                for pol in pols:
                    reps = [replay(tr, pol, int(n), b) for tr in trs]
                    a = np.array([r.request_tokens_per_round for r in reps])  # [R, P]
                    z = np.array([r.request_tokens_per_round for r in base])
                    row[pol] = {
                        "full": compare(a, z).to_dict() if a.shape[1] >= 2 else None,
                        "same_rounds": _ratio([rescore(tr, r0, pol)[1].sum() for tr, r0 in zip(trs, base)],
                                              [r0.accepted.sum() for r0 in base]),
                        "shift": _ratio([rescore(tr, r1, "per_request")[1].mean() for tr, r1 in zip(trs, reps)],
                                        [r0.accepted.mean() for r0 in base]),
                        "steady": float(np.mean([r1.steady_accepted() - r0.steady_accepted()
                                                 for r0, r1 in zip(base, reps)])),
                    }
                out.append(row)
    return {"prompts": P, "cap": cap, "rows": out, "_traces": traces}


def _replay_check(cfg, traces: dict, rows: list) -> dict:
    """How often the replay of the evaluated prompts' traces gives the measured rounds per request
    (per_request and global cells, every drafter set): the simulator against the decoder."""
    same = total = 0
    for r in rows:
        if r["method"] not in traces or r["policy"] not in ("per_request", "global"):
            continue
        b = r["batch_size"]
        n = r["nodes"] // (b if r["policy"] == "global" else 1)
        P = len(r["request_tokens_per_round"][0])
        for tr, meas in zip(traces[r["method"]], r["request_tokens_per_round"]):
            if tr.n_requests < P:
                continue
            sub = type(tr)(tr.scores[:P], tr.paths[:P], tr.lengths[:P])
            got = replay(sub, r["policy"], n, b).request_tokens_per_round
            same += int(np.sum(np.isclose(got, meas)))
            total += P
    return {"requests": total, "equal": same, "share": same / total if total else float("nan")}


def _ratio(a, b) -> float:
    """sum(a) / sum(b) - 1 over the drafter sets (NaN when nothing is accepted)."""
    return float(np.sum(a) / np.sum(b) - 1.0) if np.sum(b) > 0 else float("nan")


def _load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None
