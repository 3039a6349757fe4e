"""Kernels for mfd_theory.coverage."""

import numpy as np
from numba import njit


@njit(cache=True)
def _cumulative_log(parent, node_log_cond):
    """[N] log P(path) = sum of log conditionals along each node's path; parents precede children."""
    N = parent.shape[0]
    out = np.empty(N)
    for n in range(N):
        p = parent[n]
        out[n] = node_log_cond[n] if p < 0 else out[p] + node_log_cond[n]
    return out


@njit(cache=True)
def _splice_mask(parent, token, depth, allowed):
    """[N] True when every token of the node's prefix is allowed at its position (allowed [L, V])."""
    N = parent.shape[0]
    V = allowed.shape[1]
    out = np.empty(N, dtype=np.bool_)
    for n in range(N):
        t = token[n]
        ok = t < V and allowed[depth[n] - 1, t]
        p = parent[n]
        out[n] = ok and (p < 0 or out[p])
    return out


@njit(cache=True)
def _simulate_acceptance(child_start, child_tok, child_idx, log_pi_cdf, cdf, n, seed):
    """Monte Carlo of the lossless walk: sample the target's block lazily, follow it down the tree.

    child_start [N+2] (CSR over slots 0 = root, 1..N = nodes), child_tok / child_idx sorted by token
    within each slot; log_pi_cdf [K] cumulative mode weights; cdf [K, L, V] cumulative
    per-position probabilities. Tokens are drawn only while the walk is still on the tree, which
    is exact because positions are independent given the mode.
    """
    np.random.seed(seed)
    K, L, V = cdf.shape
    out = np.empty(n, dtype=np.int64)
    for w in range(n):
        u = np.random.random() * log_pi_cdf[K - 1]
        k = 0
        while k < K - 1 and log_pi_cdf[k] <= u:
            k += 1
        slot = 0
        d = 0
        while d < L:
            a = child_start[slot]
            b = child_start[slot + 1]
            if a == b:
                break
            row = cdf[k, d]
            r = np.random.random() * row[V - 1]
            x = np.searchsorted(row, r, side="right")
            if x >= V:
                x = V - 1
            j = np.searchsorted(child_tok[a:b], x)
            if j < b - a and child_tok[a + j] == x:
                slot = child_idx[a + j] + 1
                d += 1
            else:
                break
        out[w] = d
    return out
