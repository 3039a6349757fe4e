"""Predicted speedup and the choice of tree size.

:func:`speedup` and :func:`cell_speedup` (with :func:`length_factor`) price a round against
autoregressive decoding; the budget is chosen fixed (:func:`best_fixed_budget`), per step or per
round as CaDDTree does (:func:`per_step_budget`, :class:`PerRoundBudget`), or as Sequoia does
(:func:`sequoia_choice`); :func:`path_speedup` prices a path-dependent drafter. Model: docs/cost-model.md.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mfd_theory.speedup.profile import LatencyProfile, _check_profile
from mfd_theory.validation import check_int, check_real

__all__ = ["BudgetChoice", "PerRoundBudget", "SequoiaChoice", "best_fixed_budget", "cell_speedup", "length_factor",
           "path_speedup", "per_step_budget", "per_step_speedup", "sequoia_choice", "speedup"]


def speedup(coverage, budget, profile: LatencyProfile, draft_passes=1):
    """Predicted speedup over autoregressive decoding: (1 + C) t_target / (t_draft + t_verify(N)).

    ``coverage`` and ``budget`` broadcast (scalars or arrays); ``draft_passes`` multiplies
    t_draft (1 for a block drafter; the depth for an autoregressive drafter like Sequoia's).
    """
    profile = _check_profile(profile)
    c = np.asarray(coverage, dtype=np.float64)
    if np.any(~np.isfinite(c)) or np.any(c < 0):
        raise ValueError("coverage: must be finite and >= 0 (expected accepted tokens)")
    n = np.asarray(budget, dtype=np.float64)
    out = (1.0 + c) * profile.t_target_ms / profile.step_ms(n, draft_passes)
    return float(out) if np.ndim(out) == 0 else out



def length_factor(accepted: float, accepted_var: float, new_tokens: int) -> float:
    """The share of the long-run rate a finite generation keeps: M / (M + E[excess]).

    A prompt decodes ``new_tokens`` = M tokens after the first, in rounds of X = 1 + accepted
    tokens; the last round is cut where the M-th token is reached (the loop shortens its tree),
    so the rounds are those of the uncut process up to the first partial sum >= M, and by Wald's
    identity E[rounds] = (M + E[excess]) / E[X]. For integer X the excess over M has, for M
    large, P(excess = k) = P(X > k) / E[X], hence E[excess] = (E[X^2] - E[X]) / (2 E[X]), with
    E[X^2] = Var[X] + E[X]^2. Autoregressive decoding (X = 1) has no excess.
    """
    check_real("accepted", accepted, 0)
    check_real("accepted_var", accepted_var, 0)
    check_int("new_tokens", new_tokens, 1)
    mu = 1.0 + accepted
    excess = (accepted_var + mu * mu - mu) / (2.0 * mu)
    return new_tokens / (new_tokens + excess)


def cell_speedup(accepted: float, method: str, K: int, budget, profile: LatencyProfile, temperature: float = 0.0,
                 accepted_var: float | None = None, new_tokens: int | None = None, build_budget=None) -> float:
    """Predicted speedup of one decoding cell over autoregressive decoding on the same machine:

        (1 + E[accepted]) * t_ar(T) / t_round(method, K, N, T)   [* length_factor]

    with the round's terms from ``profile`` (:meth:`LatencyProfile.round_ms`). ``accepted`` is the
    expected accepted length per round (the trees' predicted covered mass, or a measured mean);
    with ``new_tokens`` (tokens decoded per prompt after the first) and ``accepted_var`` the
    finite-length correction :func:`length_factor` is applied. ``build_budget``: see
    :meth:`LatencyProfile.round_ms` (``build_n``), for trees cut each round by a budget rule.
    """
    profile = _check_profile(profile)
    if method == "ar":
        return 1.0
    check_real("accepted", accepted, 0)
    parts = profile.round_ms(method, K, budget, temperature, accepted, build_budget)
    s = (1.0 + accepted) * profile.t_ar(temperature) / sum(parts.values())
    if new_tokens is not None:
        s *= length_factor(accepted, 0.0 if accepted_var is None else accepted_var, new_tokens)
    return float(s)


class BudgetChoice(NamedTuple):
    budget: int
    speedup: float
    speedups: np.ndarray  # [len(budgets)]: speedup at every candidate budget
    budgets: np.ndarray  # [len(budgets)]


def _coverage_curves(curves) -> np.ndarray:
    c = np.asarray(curves, dtype=np.float64)
    if c.ndim == 1:
        c = c[None]
    if c.ndim != 2 or c.shape[1] < 2:
        raise ValueError(
            f"coverage_curves: expected [n_steps, max_budget + 1] (entry N = coverage of the N-node "
            f"tree, entry 0 = 0), got shape {np.shape(curves)}"
        )
    if np.any(~np.isfinite(c)) or np.any(c < 0):
        raise ValueError("coverage_curves: must be finite and >= 0")
    return c


def _round_time(profile: LatencyProfile, n, method: str | None, K: int, temperature: float, accepted=None):
    """ms per round at tree size(s) ``n``: ``step_ms`` (draft + verify) without ``method``, the
    whole measured round (:meth:`LatencyProfile.round_ms`) with it."""
    if method is None:
        return profile.step_ms(n)
    n = np.asarray(n, dtype=np.float64)
    acc = np.zeros(n.shape) if accepted is None else np.asarray(accepted, dtype=np.float64)
    table = profile.overhead_for(method, K)
    parts = table.at(n, temperature > 0) if table is not None else {}  # the terms of round_ms, vectorised
    draft = parts.pop("draft", profile.t_draft(K))
    draw = profile.draw_ms if temperature > 0 else 0.0
    out = np.asarray(draft + sum(parts.values()) + profile.t_verify(n) + (1.0 + acc) * draw, dtype=np.float64)
    return float(out) if out.ndim == 0 else out


def best_fixed_budget(coverage_curves, profile: LatencyProfile, budgets=None, *, method: str | None = None,
                      K: int = 1, temperature: float = 0.0) -> BudgetChoice:
    """The single budget with the highest throughput over a set of steps.

    ``coverage_curves`` [S, M + 1]: entry [s, N] is C(T_N) at step s (one step: a 1-D curve).
    Every step pays the same time at a fixed N, so throughput is the mean of (1 + C) over steps
    divided by that time. ``budgets`` restricts the candidates (default 1..M). With ``method``
    (and the drafter's ``K``, the ``temperature``) the time is the measured round's
    (:meth:`LatencyProfile.round_ms`: drafting, tree, verify, walk, commit) and the baseline the
    measured AR round, as :func:`cell_speedup` has them; without, draft + verify over t_target.
    """
    profile = _check_profile(profile)
    c = _coverage_curves(coverage_curves)  # [S, M + 1]
    M = c.shape[1] - 1
    cand = np.arange(1, M + 1) if budgets is None else np.asarray(budgets, dtype=np.int64).reshape(-1)
    if cand.size == 0 or np.any(cand < 1) or np.any(cand > M):
        raise ValueError(f"budgets: must be non-empty integers in [1, {M}]")
    cov = c[:, cand].mean(axis=0)  # [len(cand)]
    if method is None:
        s = speedup(cov, cand, profile)
    else:
        s = (1.0 + cov) * profile.t_ar(temperature) / _round_time(profile, cand, method, K, temperature, cov)
    i = int(np.argmax(s))
    return BudgetChoice(int(cand[i]), float(s[i]), np.asarray(s), cand)


def per_step_budget(node_gains, profile: LatencyProfile, max_budget: int | None = None, *,
                    method: str | None = None, K: int = 1, temperature: float = 0.0) -> int:
    """CaDDTree's per-step choice: grow the tree best-first while predicted throughput rises.

    ``node_gains`` [M]: the predicted probability mass each successive node adds (in the order
    the builder emits them; for a drafter, its own Q of each node's prefix). Starting from one
    node, node n + 1 is added while
    ``(1 + G(n + 1)) / step_ms(n + 1) > (1 + G(n)) / step_ms(n)``, G the running sum of gains.
    With ``method`` (``K``, ``temperature``) the round time is the measured round's, as in
    :func:`best_fixed_budget`.
    """
    profile = _check_profile(profile)
    g = np.asarray(node_gains, dtype=np.float64).reshape(-1)
    if g.size == 0:
        raise ValueError("node_gains: is empty")
    if np.any(~np.isfinite(g)) or np.any(g < 0):
        raise ValueError("node_gains: must be finite and >= 0")
    M = g.size if max_budget is None else min(g.size, check_int("max_budget", max_budget, 1, integral_floats=True))
    n = np.arange(1, M + 1)
    gain = np.cumsum(g[:M])  # [M]
    thr = (1.0 + gain) / _round_time(profile, n, method, K, temperature, gain)  # [M]
    falls = np.flatnonzero(np.diff(thr) <= 0)
    return int(falls[0] + 1) if falls.size else M


class PerRoundBudget:
    """A per-round tree size for the decoding loop, as CaDDTree chooses it: given the node gains
    of this round's tree (the drafter's probability of each node's prefix, best first), the
    number of nodes n that maximises the round's predicted throughput
    ``(1 + G(n)) / t_round(n)`` over n = 1..``max_budget`` (the measured round, G the running sum
    of gains). Unlike :func:`per_step_budget`, which stops at the first n where throughput falls,
    this takes the maximum over all n: a measured latency table has flat stretches and steps, so
    throughput can fall and rise again. The round times are computed once; a round pays a
    cumulative sum and an argmax."""

    def __init__(self, profile: LatencyProfile, method: str, K: int, temperature: float, max_budget: int):
        profile = _check_profile(profile)
        check_int("max_budget", max_budget, 1)
        n = np.arange(1, int(max_budget) + 1)
        self.base = np.asarray(_round_time(profile, n, method, K, temperature), dtype=np.float64)  # [M], 0 accepted
        self.draw = profile.draw_ms if temperature > 0 else 0.0
        self.max_budget = int(max_budget)

    def __call__(self, node_gains) -> int:
        g = np.asarray(node_gains, dtype=np.float64).reshape(-1)[: self.max_budget]
        if g.size == 0:
            raise ValueError("node_gains: is empty")
        gain = np.cumsum(g)  # [M]
        thr = (1.0 + gain) / (self.base[: g.size] + gain * self.draw)  # [M]
        return int(np.argmax(thr)) + 1  # the smallest best n on ties


def per_step_speedup(predicted_gains, coverage_curves, profile: LatencyProfile, max_budget=None):
    """Speedup when every step picks its own budget by :func:`per_step_budget`.

    ``predicted_gains`` [S, M]: per step, each successive node's predicted mass (the drafter's
    view); ``coverage_curves`` [S, M + 1]: the true C(T_N) under the target. Returns
    (speedup, budgets [S]) with speedup = t_target * sum_s (1 + C_s(N_s)) / sum_s step_ms(N_s).
    """
    profile = _check_profile(profile)
    c = _coverage_curves(coverage_curves)
    g = np.asarray(predicted_gains, dtype=np.float64)
    if g.ndim == 1:
        g = g[None]
    if g.shape[0] != c.shape[0] or g.shape[1] > c.shape[1] - 1:
        raise ValueError(
            f"predicted_gains: shape {g.shape} does not match coverage_curves {c.shape} "
            "(need the same steps and at most max_budget nodes)"
        )
    chosen = np.array([per_step_budget(g[s], profile, max_budget) for s in range(g.shape[0])])
    tokens = 1.0 + c[np.arange(c.shape[0]), chosen]  # [S]
    total = tokens.sum() * profile.t_target_ms / np.sum(profile.step_ms(chosen))
    return float(total), chosen


class SequoiaChoice(NamedTuple):
    budget: int
    max_depth: int
    expected_accepted: float
    speedup: float
    speedups: np.ndarray  # [max_depth + 1, max_budget + 1] (nan where no tree fits)


def sequoia_choice(acceptance, profile: LatencyProfile, max_budget: int, max_depth: int,
                   draft: str = "block") -> SequoiaChoice:
    """Sequoia's hardware-aware choice of tree size and depth.

    For every N <= ``max_budget`` and D <= ``max_depth`` the best tree's expected accepted length
    A(N, D) comes from Sequoia's program (:func:`mfd_theory.sequoia.sequoia_values`); the choice
    maximises (1 + A) t_target / (passes * t_draft + t_verify(N)), with passes = 1 for a block
    drafter (``draft="block"``) or D for an autoregressive drafter (``draft="autoregressive"``,
    Sequoia's own setting: one draft forward per level).
    """
    from mfd_theory.sequoia import sequoia_values

    profile = _check_profile(profile)
    if draft not in ("block", "autoregressive"):
        raise ValueError(f"draft: must be 'block' or 'autoregressive', got {draft!r}")
    values = sequoia_values(acceptance, max_budget, max_depth)  # [D + 1, N + 1]
    D = np.arange(values.shape[0])[:, None]
    N = np.arange(values.shape[1])[None, :]
    passes = np.ones_like(D) if draft == "block" else D
    with np.errstate(invalid="ignore"):
        s = (1.0 + values) * profile.t_target_ms / (passes * profile.t_draft_ms + profile.t_verify(np.maximum(N, 1)))
    s = np.where(np.isfinite(values) & (N >= 1) & (D >= 1), s, np.nan)  # [D + 1, N + 1]
    d, n = np.unravel_index(int(np.nanargmax(s)), s.shape)
    return SequoiaChoice(int(n), int(d), float(values[d, n]), float(s[d, n]), s)


def path_speedup(coverage, budget, depth, profile: LatencyProfile, step_cost=1.0):
    """Predicted speedup of a path-dependent drafter's tree (DARTree-style), whose drafting is
    sequential in depth: a parent's children exist only once the parent is drafted.

    The block pass drafts depth 1; each further depth costs ``step_cost`` block passes (1: a full
    drafter forward per depth, as an autoregressive drafter pays; below 1: a light correction
    head over a backbone run once, as DARTree's Domino drafter does), so
    ``draft_passes = 1 + step_cost * (depth - 1)`` in :func:`speedup`. ``depth`` is the tree's
    depth (broadcasts with ``coverage`` and ``budget``).
    """
    d = np.asarray(depth, dtype=np.float64)
    if np.any(~np.isfinite(d)) or np.any(d < 1):
        raise ValueError("depth: tree depths must be finite and >= 1")
    c = np.asarray(step_cost, dtype=np.float64)
    if np.any(~np.isfinite(c)) or np.any(c < 0):
        raise ValueError(f"step_cost: must be finite and >= 0 (block passes per extra depth), got {step_cost!r}")
    return speedup(coverage, budget, profile, draft_passes=1.0 + c * (d - 1.0))

