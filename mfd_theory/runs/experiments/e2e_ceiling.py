"""The e2e run's ceiling: what a perfect K-mode drafter could add on this target, and how much of
it the trained drafters reach.

The target-only ceiling (:func:`mfd_theory.llm.measure.ceiling.measure_ceiling`, what ``mfd
ceiling`` runs) is measured at T = 1 on the first ``ceiling_prompts`` calibration prompts (held
out, never evaluated), before any drafter is evaluated; it reads the target alone. The reach
table sets its predicted tau gain (the K-mode tree's over the product tree, tau = 1 + coverage)
beside the measured tau gain of each trained drafter over the trained product drafter
(:func:`mfd_theory.ceiling_stats.ceiling_reach`): on the grid of the main run (one run, drafter
seed ``seed``: a prompts-only interval) and, where the replicated comparison's product cell is a
ddtree, over the replicates (each drafter at the budget the theory chose for it)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from mfd_theory.ceiling_stats import ceiling_reach, pool_ceiling
from mfd_theory.llm.measure.ceiling import CeilingOptions, measure_ceiling
from mfd_theory.llm.measure.evaluate import scorer_of
from mfd_theory.llm.measure.predict import prompt_digest
from mfd_theory.llm.training.train import config_hash
from mfd_theory.results import atomic_write_text
from mfd_theory.stats import compare_rows

__all__ = ["CEILING_T", "cached_ceiling", "ceiling_options", "reach_rows"]

CEILING_T = 1.0  # the temperature of the distillation data and of the rows the theorem holds on exactly
DATASET = "heldout"


def ceiling_options(cfg) -> CeilingOptions:
    """The per-prompt options: the run's block, budgets, modes and scorers."""
    return CeilingOptions(L=cfg.block_size - 1, budgets=tuple(sorted(set(cfg.budgets))),
                          modes=(1, *sorted(set(cfg.modes))), scorers=tuple(cfg.scorers),
                          samples=cfg.ceiling_samples, dead_at=max(cfg.budgets), batch=256, top_k=128,
                          fit_iters=40).check()


def cached_ceiling(cfg, target_hf, tdir: Path, prompts, cache: Path, progress: bool) -> dict | None:
    """``{"pooled", "prompts", "wall_s"}`` of the ceiling on ``prompts`` (cached under
    ``cache/ceiling-<h>/``, one file per prompt so an interrupted run resumes); None when
    ``cfg.ceiling_prompts`` is 0 or T = 1 is not among the run's temperatures."""
    if cfg.ceiling_prompts == 0 or CEILING_T not in [float(t) for t in cfg.temperatures]:
        return None
    opts = ceiling_options(cfg)
    digests = [prompt_digest(p) for p in prompts]
    key = config_hash(opts, CEILING_T, cfg.seed, tdir.name, digests)
    cdir = cache / f"ceiling-{key}"
    done = cdir / "ceiling.json"
    if done.is_file():
        return json.loads(done.read_text())
    t0 = time.perf_counter()
    contexts = [(DATASET, f"calibration-{i}", [int(x) for x in p]) for i, p in enumerate(prompts)]
    records = measure_ceiling(target_hf, contexts, (CEILING_T,), opts, seed=cfg.seed, out_dir=cdir / "prompts",
                              key=key, progress=progress)
    out = {"pooled": pool_ceiling(records), "options": dataclasses.asdict(opts),
           "prompts": [{"index": i, "id": f"calibration-{i}", "sha256": d, "dataset": DATASET}
                       for i, d in enumerate(digests)],
           "wall_s": round(time.perf_counter() - t0, 2)}
    cdir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(done, json.dumps(out) + "\n")
    return out


def _modes(r: dict) -> int | None:
    """K of a row's drafter (its "K", else read off an MFD label "mfd-k4", "mfd-k4-wta"); None for
    a path-dependent (Domino) drafter, which the oracle bounds."""
    if r["method"] == "dartree" or r["drafter"] == "dartree":
        return None
    if r.get("K") is not None:
        return int(r["K"])
    if r["drafter"] == "product":
        return 1
    if r["drafter"].startswith("mfd-k"):
        return int(r["drafter"].split("-")[1][1:])
    raise ValueError(f"rows: drafter {r['drafter']!r} has no K and its label does not say it")


def reach_rows(ceiling: dict | None, rows: list[dict], replicated: dict | None) -> list[dict]:
    """The reach table's rows (:func:`mfd_theory.ceiling_stats.ceiling_reach`): every MFD drafter
    (each scorer) and the Domino drafter against ddtree on the product (K = 1) drafter at T = 1,
    at each grid budget of the main run, per data set ("runs": 1); then each replicated comparison
    against a ddtree product cell ("runs": R, the product at its own chosen budget). Empty without
    a ceiling. Rows without a "dataset" are the e2e run's held-out prompts."""
    if not ceiling:
        return []
    at = [r for r in rows if float(r["temperature"]) == CEILING_T and "/per-round" not in r["drafter"]]
    base = {(r.get("dataset", DATASET), int(r["budget"])): r for r in at
            if r["method"] == "ddtree" and _modes(r) == 1}
    measured = []
    pairs = [(r, base[(r.get("dataset", DATASET), int(r["budget"]))]) for r in at
             if r["method"] in ("mfd", "dartree") and (r.get("dataset", DATASET), int(r["budget"])) in base]
    for r, b in pairs:
        cmp = compare_rows(r, b, family=len(pairs))["tau_cmp"]
        if cmp is None:
            continue
        measured.append({"dataset": r.get("dataset", DATASET), "temperature": CEILING_T, "budget": int(r["budget"]),
                         "K": _modes(r), "scorer": scorer_of(r) or "mixture", "drafter": r["drafter"],
                         "method": r["method"], "runs": 1, "gain": cmp["gain"], "lo": cmp["lo"], "hi": cmp["hi"]})
    for c in (replicated or {}).get("comparisons", []):
        a, b, cmp = c["a"], c["b"], c.get("tau_cmp")
        if (c.get("question") != "against_product" or float(c["temperature"]) != CEILING_T or cmp is None
                or (b["method"], b["drafter"]) != ("ddtree", "product")):
            continue
        measured.append({"dataset": DATASET, "temperature": CEILING_T, "budget": int(a["budget"]),
                         "base_budget": int(b["budget"]), "K": _modes(a), "scorer": scorer_of(a) or "mixture",
                         "drafter": a["drafter"], "method": a["method"], "runs": int(cmp["n_runs"]),
                         "gain": cmp["gain"], "lo": cmp["lo"], "hi": cmp["hi"]})
    return ceiling_reach(ceiling["pooled"], measured)
