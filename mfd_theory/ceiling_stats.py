"""The target's ceiling from numbers alone: the block's total correlation from exact conditionals
along sampled paths, the tree builders a fitted mixture can use (``SCORERS``), the per-prompt
records pooled into per-domain tables with paired intervals (:func:`pool_ceiling`), and how much of
the ceiling trained drafters reach (:func:`ceiling_reach`). What the numbers bound: docs/ceiling.md.
"""

from __future__ import annotations

import math

import numpy as np

from mfd_theory.stats import compare
from mfd_theory.trees import best_mode_tree, mixture_tree

__all__ = ["SCORERS", "ceiling_reach", "mean_and_se", "pool_ceiling", "total_correlation", "tree_builder"]

#: How a fitted K-mode mixture becomes a draft tree: name -> ``builder(mixture, budget)``.
#: "mixture" is the exact top-N prefixes by the mixture's own probability (MFD's tree);
#: "best_mode" the top-N by the best mode's product probability (the released MFD drafters' tree).
SCORERS = {"mixture": mixture_tree, "best_mode": best_mode_tree}


def tree_builder(name: str):
    """The builder of scorer ``name`` (ValueError naming the known ones)."""
    if name not in SCORERS:
        raise ValueError(f"scorers: unknown {name!r}; choose from {', '.join(SCORERS)}")
    return SCORERS[name]


def _entropy(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log(p), 0.0).sum(axis=-1)


def total_correlation(marginal, entropies) -> dict:
    """The block's total correlation, sum_i H(X_i) - H(X_1..L), from sampled paths.

    ``marginal`` [L, V]: the per-position marginals (the mean of the exact conditional rows along
    the paths); ``entropies`` [n, L]: the entropy of each path's conditional at each position, whose
    path sums average to the block entropy (the chain rule, Rao-Blackwellised: no log P(x) noise).
    The plug-in sum_i H(marginal_i) is biased low by a little (concavity), the block entropy is
    unbiased. Returns ``{"tc", "h_positions", "h_block", "h_block_se"}`` in nats per block.
    """
    m = np.asarray(marginal, dtype=np.float64)
    e = np.asarray(entropies, dtype=np.float64)
    if m.ndim != 2 or e.ndim != 2 or e.shape[1] != m.shape[0] or e.shape[0] < 1:
        raise ValueError(f"entropies: expected [n, L] with L = {m.shape[0] if m.ndim == 2 else '?'} "
                         f"(the marginal's [L, V]), got {e.shape} and {m.shape}")
    if not (np.isfinite(m).all() and (m >= 0).all()):
        raise ValueError("marginal: must hold finite probabilities >= 0")
    if (np.abs(m.sum(axis=1) - 1) > 1e-6).any():
        raise ValueError("marginal: every position must sum to 1")
    h_pos = float(_entropy(m).sum())
    blocks = e.sum(axis=1)  # [n]
    h_block = float(blocks.mean())
    se = float(blocks.std(ddof=1) / math.sqrt(blocks.size)) if blocks.size > 1 else 0.0
    return {"tc": h_pos - h_block, "h_positions": h_pos, "h_block": h_block, "h_block_se": se}


def mean_and_se(v) -> list:
    """[mean, standard error] of the values of ``v`` that are not None; the error is None for one
    value (unknown, not zero) and both are None for none."""
    v = np.asarray([x for x in v if x is not None], dtype=float)
    if not v.size:
        return [None, None]
    return [float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else None]


def _tkey(t: float) -> str:
    return f"{float(t):g}"


def _groups(records) -> dict:
    out: dict = {}
    for r in records:
        out.setdefault(r["dataset"], {}).setdefault(_tkey(r["temperature"]), []).append(r)
    return out


def pool_ceiling(records, level: float = 0.95) -> dict:
    """Per-prompt records of :func:`mfd_theory.llm.measure.ceiling.prompt_ceiling` (each with its
    ``dataset`` and ``id``) pooled per data set and temperature: ``{dataset: {"T": table}}``.

    A table holds, per budget N, each tree's coverage (mean, s.e. over prompts), its Monte-Carlo
    check, the per-prompt values, and each tree's ``gain`` over the product tree: a
    :class:`mfd_theory.stats.Comparison` of the coverages paired over prompts (prompts-only
    interval, Bonferroni over every gain of the whole result); and, per block, the total
    correlation, each K's held-out log-likelihood gain over K = 1, the share of the total
    correlation it captures (mean gain over mean total correlation), and the product tree's dead
    nodes. Fewer than two prompts give no comparison (None)."""
    groups = _groups(records)
    family = 0
    for by_t in groups.values():
        for recs in by_t.values():
            if len(recs) >= 2:
                names = [n for n in recs[0]["coverage"] if n != "product"]
                family += len(names) * len(recs[0]["budgets"])
    out: dict = {}
    for ds, by_t in groups.items():
        out[ds] = {}
        for tk, recs in sorted(by_t.items(), key=lambda kv: -float(kv[0])):
            names = list(recs[0]["coverage"])
            order = ["product"] + sorted(n for n in names if n not in ("product", "oracle")) + ["oracle"]
            by_n = {}
            for n in map(str, recs[0]["budgets"]):
                per = {name: [r["coverage"][name][n] for r in recs] for name in order}
                gain = {}
                for name in order[1:]:
                    ok = len(recs) >= 2 and all(v > 0 for v in per["product"])
                    gain[name] = compare(per[name], per["product"], level=level, family=max(family, 1)).to_dict() \
                        if ok else None
                by_n[n] = {"coverage": {name: mean_and_se(v) for name, v in per.items()},
                           "mc": {name: mean_and_se([r["mc"][name][n][0] for r in recs]) for name in order},
                           "per_prompt": per, "gain": gain}
            tc = [r["tc"]["tc"] for r in recs]
            ks = sorted((k for k in recs[0]["heldout"] if k.isdigit() and k != "1"), key=int)
            held = {k: mean_and_se([r["heldout"][k]["gain"][0] for r in recs]) for k in ks}
            mean_tc = float(np.mean(tc))
            share = {k: (held[k][0] / mean_tc if mean_tc > 0 else None) for k in ks}
            dead = {key: mean_and_se([r["dead"].get(key) for r in recs])
                    for key in ("dead_share", "dead_splice_share", "dead_mass_lost", "count_dead_share")}
            out[ds][tk] = {
                "n_prompts": len(recs), "prompt_ids": [r["id"] for r in recs], "L": recs[0]["L"],
                "samples": recs[0]["samples"], "trees": order, "by_budget": by_n,
                "tc": mean_and_se(tc), "h_positions": mean_and_se([r["tc"]["h_positions"] for r in recs]),
                "h_block": mean_and_se([r["tc"]["h_block"] for r in recs]), "heldout_gain": held, "tc_share": share,
                "dead": dead, "dead_at": recs[0]["dead"]["nodes"],
                "forwards": int(sum(r["forwards"] for r in recs)),
                "prompt_tokens": mean_and_se([r.get("prompt_tokens") for r in recs]),
                "wall_s": float(sum(r.get("wall_s", 0.0) for r in recs)),
            }
    return out


def ceiling_reach(pooled: dict, measured, level: float = 0.95) -> list[dict]:
    """How much of the ceiling trained drafters reach: one row per entry of ``measured``.

    ``pooled``: :func:`pool_ceiling`'s output (``ceiling.json``'s ``pooled``, or natural's
    ``ceiling``). ``measured``: dicts with ``dataset`` (None: the only one ``pooled`` holds),
    ``temperature``, ``budget``, ``K`` (the MFD drafter's modes; None for a path-dependent
    drafter, compared with the oracle), ``drafter`` (a label) and the measured relative tau gain
    of that drafter over the trained product drafter, ``gain``, ``lo``, ``hi`` (a
    :class:`mfd_theory.stats.Comparison`'s fields; any more keys are kept). ``scorer`` (default
    "mixture") picks the K-mode tree; ``base_budget`` (default ``budget``) is the product tree's N
    when the measured comparison holds the two drafters at budgets of their own.

    The predicted tau gain is the ceiling tree's over the product tree, tau = 1 + coverage,
    paired over the ceiling's prompts (:func:`mfd_theory.stats.compare`, Bonferroni over the
    rows); ``reach`` = measured gain / predicted gain (None when the prediction is not above 0),
    ``reach_lo`` / ``reach_hi`` the measured interval over the predicted point (the prediction's
    own interval is beside it, not folded in). Rows whose cell the ceiling did not measure carry
    ``predicted`` None and a ``why``."""
    rows = list(measured)
    out = []
    for m in rows:
        for key in ("temperature", "budget", "gain", "lo", "hi"):
            if key not in m:
                raise ValueError(f"measured: an entry lacks {key!r} (needs temperature, budget, K, gain, lo, hi)")
        ds = m.get("dataset")
        if ds is None and len(pooled) == 1:
            ds = next(iter(pooled))
        K = m.get("K")
        name = "oracle" if K is None else ("product" if int(K) == 1 else f"{m.get('scorer', 'mixture')} K={int(K)}")
        row = {**m, "dataset": ds, "ceiling": name, "predicted": None, "reach": None, "reach_lo": None,
               "reach_hi": None}
        by_n = (pooled.get(ds) or {}).get(_tkey(m["temperature"]), {}).get("by_budget", {})
        nb = m.get("base_budget", m["budget"])
        per = ((by_n.get(str(m["budget"])) or {}).get("per_prompt", {}))
        base = ((by_n.get(str(nb)) or {}).get("per_prompt", {}))
        if name not in per or len(base.get("product", [])) < 2:
            at = f"N = {m['budget']}" + (f" (product N = {nb})" if nb != m["budget"] else "")
            row["why"] = f"the ceiling has no {name!r} tree at T = {_tkey(m['temperature'])}, {at}" \
                         f" for data set {ds!r} over two prompts or more"
            out.append(row)
            continue
        pred = compare(1 + np.asarray(per[name]), 1 + np.asarray(base["product"]), level=level,
                       family=len(rows)).to_dict()
        row["predicted"] = pred
        if pred["gain"] > 0:
            row.update(reach=m["gain"] / pred["gain"], reach_lo=m["lo"] / pred["gain"],
                       reach_hi=m["hi"] / pred["gain"])
        else:
            row["why"] = "the ceiling predicts no gain over the product tree"
        out.append(row)
    return out
