"""Numba kernels behind :mod:`mfd_theory.chimeras` (private; called only by its wrappers)."""

from __future__ import annotations

import numpy as np
from numba import njit

OVERFLOW = -1


@njit(cache=True)
def _prefixes_above(vals, ids, thr, cap, parent, token, depth, score):
    """Depth-first enumeration of every prefix whose product score is >= thr.

    vals/ids [L, V]: each position's log-probabilities sorted in decreasing order and their token
    ids, so a position's loop stops at the first token that falls below the threshold (scores only
    decrease along a path). Writes at most ``cap`` nodes into the output arrays and returns the
    count, or OVERFLOW when there are more.
    """
    L, V = vals.shape
    node = np.empty(L + 1, dtype=np.int64)  # node index at each depth of the current path
    acc = np.empty(L + 1, dtype=np.float64)  # score of the current path at each depth
    rank = np.zeros(L + 1, dtype=np.int64)  # next candidate rank to try below each depth
    node[0] = -1
    acc[0] = 0.0
    n = 0
    d = 0
    while d >= 0:
        if d == L:
            d -= 1
            continue
        r = rank[d]
        if r < V and acc[d] + vals[d, r] >= thr:
            rank[d] = r + 1
            if n >= cap:
                return OVERFLOW
            parent[n] = node[d]
            token[n] = ids[d, r]
            depth[n] = d + 1
            score[n] = acc[d] + vals[d, r]
            node[d + 1] = n
            acc[d + 1] = score[n]
            rank[d + 1] = 0
            d += 1
            n += 1
        else:
            d -= 1
    return n


@njit(cache=True)
def _subset_sums(d, out):
    """out[k] = sum of d[j] over the bits j set in k (k in [0, 2^m)), by the lowest set bit."""
    out[0] = 0.0
    for k in range(1, out.shape[0]):
        low = k & (-k)
        j = 0
        while (1 << j) != low:
            j += 1
        out[k] = out[k ^ low] + d[j]


@njit(cache=True)
def _count_two_future_splices(d, rel_tol, sums):
    """Full-length splices of two futures a, b in the smallest product tree holding both.

    d [m]: log q_i(a_i) - log q_i(b_i) at the disagreement positions. Splice k (bit j set: take
    a's token at position j) scores score(b) * exp(sums[k]); the tree holds every prefix scoring
    at least t = min(score a, score b), i.e. sums[k] >= min(0, D). Returns (strictly above t,
    tied with t within the tolerance, both excluding a and b themselves; whether the futures
    themselves tie, |D| <= 2 tol: only then can a complementary pair have both splices at t,
    since the better splice of a pair lies |D| / 2 above t).
    """
    m = d.shape[0]
    _subset_sums(d, sums)
    full = (1 << m) - 1
    D = sums[full]
    thr = min(0.0, D)
    scale = 1.0
    for j in range(m):
        scale += abs(d[j])
    tol = rel_tol * scale
    above = 0
    tied = 0
    for k in range(1, full):
        x = sums[k] - thr
        if x > tol:
            above += 1
        elif x >= -tol:
            tied += 1
    return above, tied, abs(D) <= 2.0 * tol


@njit(cache=True)
def _verify_kernel(n, m_lo, m_hi, L_max, V_max, alpha, near_tie_frac, grid, rel_tol, seed,
                   out_m, out_above, out_tied, out_kind, out_ftie):
    """Draw n random instances and count the full-length splice chimeras of each.

    Instance i: m uniform in [m_lo, m_hi], L uniform in [m, max(m, L_max)], V uniform in
    [2, V_max]; per-position drafter marginals from Dirichlet(alpha) (``grid`` > 0: from a coarse
    grid of weights 1..grid, so exact ties are common); futures a, b differing at m random
    positions. A fraction ``near_tie_frac`` of instances re-weight one disagreement position so
    that a and b score almost the same (the regime where the bound is tight).
    """
    np.random.seed(seed)
    sums = np.empty(1 << m_hi, dtype=np.float64)
    for i in range(n):
        m = m_lo + np.random.randint(0, m_hi - m_lo + 1)
        L = m + np.random.randint(0, max(m, L_max) - m + 1)
        V = 2 + np.random.randint(0, V_max - 1)
        q = np.empty((L, V), dtype=np.float64)
        for p in range(L):
            tot = 0.0
            for v in range(V):
                if grid > 0:
                    q[p, v] = 1.0 + np.random.randint(0, grid)
                else:
                    # floored at the smallest normal double: a small alpha can draw 0, and the
                    # theorem needs every future to have positive probability
                    q[p, v] = max(np.random.gamma(alpha, 1.0), 2.2250738585072014e-308)
                tot += q[p, v]
            for v in range(V):
                q[p, v] /= tot
        pos = np.random.permutation(L)[:m]
        d = np.empty(m, dtype=np.float64)
        ka = 0
        kb = 0
        for j in range(m):
            ta = np.random.randint(0, V)
            tb = (ta + 1 + np.random.randint(0, V - 1)) % V
            p = pos[j]
            d[j] = np.log(q[p, ta]) - np.log(q[p, tb])
            if j == 0:
                ka = ta
                kb = tb
        kind = 0
        if grid == 0 and np.random.random() < near_tie_frac:
            # Re-weight position pos[0] so that score(a) / score(b) = exp(eps), |eps| small but
            # far above the tie tolerance, keeping q(a) + q(b) at that position unchanged.
            kind = 1
            rest = 0.0
            for j in range(1, m):
                rest += d[j]
            eps = (np.random.random() * 2.0 - 1.0) * 1e-3
            if abs(eps) < 1e-6:
                eps = 1e-6
            target = eps - rest
            p = pos[0]
            s = q[p, ka] + q[p, kb]
            r = np.exp(target)
            qa = s * r / (1.0 + r)
            qb = s / (1.0 + r)
            if qa > 0.0 and qb > 0.0:
                d[0] = np.log(qa) - np.log(qb)
        above, tied, ftie = _count_two_future_splices(d, rel_tol, sums[: 1 << m])
        out_m[i] = m
        out_above[i] = above
        out_tied[i] = tied
        out_ftie[i] = ftie
        out_kind[i] = kind
