"""C1 reported as what it is, and a C1 that can fail.

* :func:`walk_check`: each round's accepted draft tokens against the exact E[accepted] of that
  round's own tree under the same verify logits (its covered mass under the decoding rule), in
  units of the exact per-round variance. This is an identity for any drafter, a random one
  included: it tests the decoder's walk (that it accepts what the lossless walk would), not the
  drafter. A walk that stops a node early or draws from the wrong row fails it.
* :func:`coupled_chi_square`: the sum of the cells' walk z^2. Cells that decode the same sampled
  text are coupled: at T > 0 every token is drawn by inverse CDF from a uniform keyed by the
  request's seed and the token's position, so with one sampling seed every method, budget and
  drafter emits the same text for a prompt, and its cells share that text's luck. Each cell's z is
  standard normal; their sum of squares is then no chi-square with one degree per cell (its mean
  is the number of cells, its spread far wider), and its p-value is only given for independent cells.
* :func:`calibration_gap`: the drafter-side C1. Per round, the mass the drafter's own
  distribution puts on its tree (sum over its nodes of Q(s)) against the measured acceptance (or
  the tree's exact covered mass, its expectation), the relative gap with a standard error
  clustered by prompt. A drafter that is over- or under-confident fails it.

Torch-free: the inputs are the numbers the decode records hold (docs/real-targets.md, C1).
"""

from __future__ import annotations

import math

import numpy as np
from mfd_theory.stats import coupled_chi_square

__all__ = ["WALK_Z", "calibration_gap", "calibration_gaps", "coupled_chi_square", "walk_check"]

#: |z| beyond which a cell's walk check fails (a walk error moves z by ~sqrt(rounds); chance alone
#: reaches 4 once in ~16,000 cells)
WALK_Z = 4.0


def _floats(name: str, x) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    return a


def walk_check(accepted, predicted, predicted_var, z_max: float = WALK_Z) -> dict:
    """The walk check of one cell's rounds: ``accepted`` [rounds] draft tokens accepted,
    ``predicted`` [rounds] the exact E[accepted] of each round's tree under its own verify logits
    and ``predicted_var`` [rounds] its exact variance (rounds with NaN are skipped).

    Given the history, round t's accepted - predicted has mean 0 and variance predicted_var_t, so
    z = sum(accepted - predicted) / sqrt(sum predicted_var) is standard normal for a correct walk
    (a martingale), whatever the drafter. ``passes``: |z| <= ``z_max``."""
    acc, pred, var = _floats("accepted", accepted), _floats("predicted", predicted), _floats("predicted_var",
                                                                                          predicted_var)
    if not acc.shape == pred.shape == var.shape:
        raise ValueError(f"predicted, predicted_var: shapes {pred.shape}, {var.shape} differ from accepted's "
                         f"{acc.shape} (one entry per round)")
    ok = ~(np.isnan(acc) | np.isnan(pred) | np.isnan(var))
    if (var[ok] < 0).any():
        raise ValueError("predicted_var: variances must be >= 0")
    n = int(ok.sum())
    total = float(var[ok].sum())
    gap = float((acc[ok] - pred[ok]).sum())
    if n == 0 or total <= 0:
        z = 0.0 if gap == 0 else math.copysign(math.inf, gap)
    else:
        z = gap / math.sqrt(total)
    return {"rounds": n, "accepted_mean": float(acc[ok].mean()) if n else None,
            "predicted_mean": float(pred[ok].mean()) if n else None, "z": z, "passes": bool(abs(z) <= z_max)}


def calibration_gap(self_mass, measured, prompt=None) -> dict:
    """The drafter-side C1 of one cell: ``self_mass`` [rounds] the mass the drafter's own
    distribution puts on each round's tree (sum over its nodes of the drafter's prefix
    probability), ``measured`` [rounds] the accepted draft tokens (or the tree's exact covered mass
    under the target, their expectation), ``prompt`` [rounds] the prompt of each round (rounds of
    a prompt share its text: the standard error is clustered by prompt; None: each round its own).

    Returns the means, ``gap`` = mean self mass / mean measured - 1 (> 0: the drafter believes its
    tree covers more than the target accepts), and its standard error and z from the per-prompt
    sums of self - measured (a ratio estimator's delta method). ``calibrated``: |z| <= 2, or None
    with fewer than 2 prompts."""
    s, m = _floats("self_mass", self_mass), _floats("measured", measured)
    if s.shape != m.shape:
        raise ValueError(f"measured: shape {m.shape} differs from self_mass's {s.shape} (one entry per round)")
    if s.size == 0:
        raise ValueError("self_mass: no rounds")
    if not (np.isfinite(s).all() and np.isfinite(m).all()) or (s < 0).any() or (m < 0).any():
        raise ValueError("self_mass, measured: every entry must be a finite number >= 0")
    p = np.arange(s.size) if prompt is None else np.asarray(prompt).reshape(-1)
    if p.shape != s.shape:
        raise ValueError(f"prompt: shape {p.shape} differs from self_mass's {s.shape} (one entry per round)")
    ms, mm = float(s.mean()), float(m.mean())
    out = {"rounds": int(s.size), "self_mass_mean": ms, "measured_mean": mm,
           "gap": ms / mm - 1 if mm > 0 else None, "gap_se": None, "z": None, "calibrated": None}
    _, idx = np.unique(p, return_inverse=True)
    G = int(idx.max()) + 1
    if G < 2 or mm <= 0:
        return out
    # ratio estimator R = sum s / sum m; its residual per prompt: sum over the prompt's rounds of s - R m
    r = ms / mm
    e = np.bincount(idx, weights=s - r * m, minlength=G)  # [G]
    se_ratio = math.sqrt(G / (G - 1) * float((e ** 2).sum())) / float(m.sum())
    out["gap_se"] = se_ratio
    out["z"] = (r - 1) / se_ratio if se_ratio > 0 else (0.0 if r == 1 else math.copysign(math.inf, r - 1))
    out["calibrated"] = bool(abs(out["z"]) <= 2)
    return out


def calibration_gaps(entries) -> list[dict]:
    """The drafter-side C1 per calibration cell from a prediction file's calibration summaries
    (``predictions.json``: ``calibration.entries``, each with ``mean_self_mass`` and
    ``mean_target_mass``): the relative gap of the drafter's own mass on its trees over their
    covered mass under the target, per drafter, method, scorer and temperature; cells without a
    self estimate (the chain) are left out. No standard error: the summaries keep means only
    (:func:`calibration_gap` takes the rounds)."""
    out = []
    for e in entries or []:
        s, t = e.get("mean_self_mass"), e.get("mean_target_mass")
        if s is None or t is None or t <= 0:
            continue
        out.append({k: e.get(k) for k in ("drafter", "K", "method", "scorer", "temperature", "budget", "rounds",
                                          "per_round", "calibration_set")}
                   | {"self_mass_mean": float(s), "target_mass_mean": float(t), "gap": float(s) / float(t) - 1})
    return out
