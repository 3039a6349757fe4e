"""Numba kernel for Sequoia's tree dynamic program (see mfd_theory.sequoia). Private."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _sequoia_dp(p, max_budget, max_depth):
    """Best expected accepted length of rank trees, for every budget and depth limit.

    p [k]: p[i] = chance that the i-th ranked child is the accepted one.
    A rank tree's value is the sum over its nodes of the product of p along the node's path.

    g[n, r]: best value of a subtree of n nodes (its root counted, with value 1) of height <= r.
    forest[r, m]: best value of a set of sibling subtrees (children of one node, at distinct ranks)
    holding m nodes in all, each of height <= r, the i-th ranked child's subtree weighted p[i].
    Siblings are chosen rank by rank (last to first): rank i either is skipped or gets a subtree
    of a >= 1 nodes; choice[r, i, m] records a (0 = skipped) for the ranks i.. holding m nodes.

    Returns (forest [max_depth + 1, max_budget + 1], choice [max_depth + 1, k, max_budget + 1]);
    forest[r, m] = -inf where m nodes cannot fit under k ranks and r levels. The best tree of
    N nodes and depth <= D has value forest[D, N].
    """
    k = p.shape[0]
    Nn = max_budget + 1
    neg = -np.inf
    forest = np.full((max_depth + 1, Nn), neg)
    forest[0, 0] = 0.0
    g = np.full(Nn, neg)  # g[n] at the current height r
    choice = np.zeros((max_depth + 1, k, Nn), np.int32)
    t_next = np.empty(Nn)
    t_cur = np.empty(Nn)
    for r in range(1, max_depth + 1):
        # a subtree of height <= r: its root plus a forest of height <= r - 1
        g[0] = neg
        for n in range(1, Nn):
            f = forest[r - 1, n - 1]
            g[n] = 1.0 + f if f > neg else neg
        # forest of height <= r over ranks k-1 .. 0
        t_next[:] = neg
        t_next[0] = 0.0
        for i in range(k - 1, -1, -1):
            pi = p[i]
            for m in range(Nn):
                best = t_next[m]
                arg = 0
                for a in range(1, m + 1):
                    ga = g[a]
                    rest = t_next[m - a]
                    if ga == neg or rest == neg:
                        continue
                    v = pi * ga + rest
                    if v > best:
                        best = v
                        arg = a
                t_cur[m] = best
                choice[r, i, m] = arg
            t_next[:] = t_cur
        forest[r, :] = t_next
    return forest, choice
