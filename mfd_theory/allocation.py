"""One verify budget shared by a batch of requests.

:func:`allocate_global` takes the global top-N over all requests' prefixes, a merge of their
best-first orders, so each request keeps a first slice of its tree (ties to the lower request);
:func:`allocate_proportional` merges the nodes' gains in log expected tokens per round instead;
:func:`split_evenly` is the per-request policy at the same total. Design: docs/design.md ("One
budget over a batch"); why the whole decode weighs tokens by 1 / tau: docs/benchmarks.md.
"""

from __future__ import annotations

import numpy as np

from mfd_theory.validation import check_int

__all__ = ["allocate_global", "allocate_proportional", "proportional_gains", "split_evenly"]


def allocate_global(scores, n_total: int, cap: int | None = None) -> np.ndarray:
    """Node counts per request for the global top-``n_total`` prefixes.

    ``scores``: one 1-D array per request, the log-scores of its tree's nodes in the builder's
    best-first order (``DraftTree.log_score``); each must be non-increasing. Returns int64
    ``counts`` [B] with ``counts[b] <= len(scores[b])`` and ``sum(counts) == min(n_total, total
    nodes)``: request b keeps its first ``counts[b]`` nodes. ``cap``: at most this many nodes per
    request (the global top-N among the first ``cap`` nodes of every request: still exact, since
    each request's list is best first; a batched forward pads every request to the largest tree,
    so a cap bounds that padding)."""
    n_total = check_int("n_total", n_total, 0)
    if cap is not None:
        cap = check_int("cap", cap, 1)
    rows = []
    for b, s in enumerate(scores):
        a = np.asarray(s, dtype=np.float64)
        if a.ndim != 1:
            raise ValueError(f"scores[{b}]: expected a 1-D array of node log-scores, got shape {a.shape}")
        if np.isnan(a).any():
            raise ValueError(f"scores[{b}]: contains NaN")
        if a.size > 1 and (np.diff(a) > 0).any():
            raise ValueError(f"scores[{b}]: not in best-first order (a score rises at node "
                             f"{int(np.flatnonzero(np.diff(a) > 0)[0]) + 1}); pass a builder's log_score")
        rows.append(a if cap is None else a[: int(cap)])
    counts = np.zeros(len(rows), dtype=np.int64)
    if not rows or n_total == 0:
        return counts
    score = np.concatenate(rows)
    req = np.concatenate([np.full(a.size, b, dtype=np.int64) for b, a in enumerate(rows)])
    pos = np.concatenate([np.arange(a.size, dtype=np.int64) for a in rows])
    order = np.lexsort((pos, req, -score))[:n_total]  # last key primary: score down, request, node
    np.add.at(counts, req[order], 1)
    return counts


def proportional_gains(scores) -> np.ndarray:
    """Each node's gain in log expected tokens per round, best first: node j of a tree whose first
    j nodes the drafter expects to give ``tau_j = 1 + sum_{i<j} exp(score_i)`` tokens adds
    ``log(1 + exp(score_j) / tau_j)``; returned as the log of that gain (``-inf`` for a node of
    probability 0), non-increasing, so a merge of them stays a first slice of each tree."""
    a = np.asarray(scores, dtype=np.float64)
    c = np.exp(a)  # [n] the nodes' prefix probabilities under the drafter
    tau = 1.0 + np.concatenate([[0.0], np.cumsum(c)[:-1]])
    with np.errstate(divide="ignore"):
        g = np.log(np.log1p(c / tau))
    return np.minimum.accumulate(g) if g.size else g


def allocate_proportional(scores, n_total: int, cap: int | None = None) -> np.ndarray:
    """Node counts per request maximising ``sum_b log tau_b`` (tau_b the drafter's expected tokens
    per round of request b's kept nodes) instead of ``sum_b tau_b``: the global top-``n_total``
    of :func:`proportional_gains`. Over a whole decode a request's rounds are its tokens over its
    tau, so a token gained where tau is large saves fewer rounds; to first order the whole
    decode's change in rounds is the rounds-weighted mean of the relative gains, which this
    ranking maximises per round. Arguments as :func:`allocate_global`."""
    n_total = check_int("n_total", n_total, 0)
    scores = list(scores)
    allocate_global(scores, 0, cap=cap)  # the same checks, and the same messages, as the global top-N
    return allocate_global([proportional_gains(s) for s in scores], n_total, cap=cap)


def split_evenly(n_total: int, sizes) -> np.ndarray:
    """``n_total`` nodes over requests whose trees hold ``sizes`` nodes, as evenly as the sizes allow
    (the per-request policy at the same total: each request gets its share, the lower request
    indices the remainder; a request whose tree is smaller gives its unused share to the others)."""
    n_total = check_int("n_total", n_total, 0)
    sizes = np.asarray(sizes, dtype=np.int64)
    counts = np.zeros(sizes.size, dtype=np.int64)
    left = min(n_total, int(sizes.sum()))
    while left > 0:
        open_ = np.flatnonzero(counts < sizes)
        share = np.full(open_.size, left // open_.size, dtype=np.int64)
        share[: left % open_.size] += 1
        add = np.minimum(share, sizes[open_] - counts[open_])
        counts[open_] += add
        left -= int(add.sum())
    return counts
