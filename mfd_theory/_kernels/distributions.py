"""Kernels for mfd_theory.distributions."""

import numpy as np
from numba import njit


@njit(cache=True)
def _node_mode_log_weights(parent, token, depth, log_pi, log_q):
    """[N, K] per-mode log weight of each node's prefix; parents precede children."""
    N = parent.shape[0]
    K = log_pi.shape[0]
    out = np.empty((N, K))
    for n in range(N):
        p = parent[n]
        d = depth[n] - 1
        t = token[n]
        for k in range(K):
            base = log_pi[k] if p < 0 else out[p, k]
            out[n, k] = base + log_q[k, d, t]
    return out
