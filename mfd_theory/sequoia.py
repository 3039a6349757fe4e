"""Sequoia's optimal tree under a positional acceptance vector (arXiv 2402.12374).

:func:`sequoia_tree` runs the dynamic program for one node budget and depth limit;
:func:`sequoia_values` returns its whole table over both, which the hardware-aware choice of
:mod:`mfd_theory.speedup` reads. The model, and why its optimum is the best-first tree:
docs/cost-model.md ("Sequoia's positional model").
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mfd_theory._kernels.sequoia import _sequoia_dp
from mfd_theory.trees import DraftTree
from mfd_theory.validation import check_int

__all__ = ["SequoiaTree", "check_acceptance", "sequoia_tree", "sequoia_values"]

SUM_TOL = 1e-9  # acceptance vectors estimated from counts may round a total of 1 up by ~1e-15


class SequoiaTree(NamedTuple):
    """The tree (``token`` = child rank, 0-based) and its expected accepted length."""

    tree: DraftTree
    expected_accepted: float


def check_acceptance(acceptance) -> np.ndarray:
    """Validate a positional acceptance vector -> float64 [k]."""
    a = np.asarray(acceptance)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"acceptance: expected a numeric vector, got dtype {a.dtype}")
    a = a.astype(np.float64)
    if a.ndim != 1 or a.shape[0] == 0:
        raise ValueError(f"acceptance: expected a non-empty 1-D vector, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError("acceptance: contains NaN or infinity")
    if np.any(a < 0):
        raise ValueError(f"acceptance: has negative entries (min {a.min():.3g})")
    if a.sum() > 1.0 + SUM_TOL:
        raise ValueError(f"acceptance: entries sum to {a.sum():.6g} > 1 (they are probabilities of disjoint events)")
    return np.ascontiguousarray(a)


def _capacity(k: int, depth: int) -> int:
    """Nodes in the full k-ary tree of the given depth (k + k^2 + ... + k^depth)."""
    total, level = 0, 1
    for _ in range(depth):
        level *= k
        total += level
    return total


def sequoia_values(acceptance, max_budget: int, max_depth: int) -> np.ndarray:
    """Best expected accepted length for every budget and depth limit.

    Returns float64 [max_depth + 1, max_budget + 1]: entry [D, N] is the value of the best tree
    of exactly N nodes and depth <= D (``-inf`` where N nodes do not fit; row 0 and column 0 are
    the empty tree).
    """
    p = check_acceptance(acceptance)
    max_budget = check_int("max_budget", max_budget, 1)
    max_depth = check_int("max_depth", max_depth, 1)
    forest, _ = _sequoia_dp(p, max_budget, max_depth)
    return forest


def sequoia_tree(acceptance, budget: int, max_depth: int) -> SequoiaTree:
    """Sequoia's best tree of ``budget`` nodes and depth <= ``max_depth``.

    Parameters
    ----------
    acceptance : float [k]
        ``acceptance[i]``: chance that the i-th ranked child (0-based) is accepted; entries >= 0,
        summing to at most 1. Its length bounds how many children a node may have.
    budget : int
        N, the number of nodes (root excluded).
    max_depth : int
        D, the deepest level allowed. The program costs O(D * k * N^2).

    Returns
    -------
    SequoiaTree(tree, expected_accepted): a :class:`~mfd_theory.trees.DraftTree` whose ``token``
    is each node's child rank and whose ``log_score`` is the log of its path value, nodes in
    decreasing value (parents first), and the tree's expected accepted length (bonus excluded).
    """
    p = check_acceptance(acceptance)
    budget = check_int("budget", budget, 1)
    max_depth = check_int("max_depth", max_depth, 1)
    cap = _capacity(p.shape[0], min(max_depth, budget))
    if budget > cap:
        raise ValueError(
            f"budget: {budget} nodes do not fit in a tree with {p.shape[0]} ranked children per node "
            f"and depth <= {max_depth} (at most {cap})"
        )
    forest, choice = _sequoia_dp(p, budget, max_depth)
    value = float(forest[max_depth, budget])

    # Walk the choices back: a forest of m nodes and height <= r takes, rank by rank, a subtree
    # of choice[r, i, m] nodes (0 = rank skipped); each subtree is a node plus a forest below it.
    parent: list[int] = []
    rank: list[int] = []
    depth: list[int] = []
    score: list[float] = []
    stack = [(-1, budget, max_depth, 1.0, 0)]  # (parent node, nodes, height, parent value, parent depth)
    while stack:
        par, m, r, pv, pd = stack.pop()
        for i in range(p.shape[0]):
            if m == 0:
                break
            a = int(choice[r, i, m])
            if a == 0:
                continue
            node = len(parent)
            parent.append(par)
            rank.append(i)
            depth.append(pd + 1)
            score.append(pv * p[i])
            stack.append((node, a - 1, r - 1, pv * p[i], pd + 1))
            m -= a
    N = len(parent)
    par_arr = np.asarray(parent, dtype=np.int64)
    dep_arr = np.asarray(depth, dtype=np.int64)
    val = np.asarray(score)
    # best-first order; ties go shallower first so a parent (value >= child's) precedes its children
    order = np.lexsort((dep_arr, -val))  # [N]
    new_index = np.empty(N, dtype=np.int64)
    new_index[order] = np.arange(N)
    par_new = np.where(par_arr[order] >= 0, new_index[np.maximum(par_arr[order], 0)], -1)
    with np.errstate(divide="ignore"):
        log_val = np.log(val[order])
    tree = DraftTree(par_new, np.asarray(rank, dtype=np.int64)[order], dep_arr[order], log_val)
    return SequoiaTree(tree, value)
