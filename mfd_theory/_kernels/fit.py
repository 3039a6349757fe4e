"""Numba kernels for fitting mixture-of-products drafters by EM (see mfd_theory.fit).

Private: called only by :mod:`mfd_theory.fit`, which validates and allocates. Kernels read no
globals and draw no random numbers (initialisation happens in the wrapper, from a seed).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _row_log_joint(x, u, log_pi, log_q, use_pi, out):
    """out[k] = [log pi_k] + sum_i log q_k,i(x_u,i) for one (unique) sample row u."""
    K, L, _ = log_q.shape
    for k in range(K):
        s = log_pi[k] if use_pi else 0.0
        for i in range(L):
            s += log_q[k, i, x[u, i]]
        out[k] = s


@njit(cache=True)
def _em(x, w, log_pi, log_q, max_iter, tol, smoothing, hard):
    """EM (soft) or winner-take-all EM (hard) for a latent-class model, in place.

    x [U, L] unique sample rows, w [U] their weights (counts or probabilities), log_pi [K] and
    log_q [K, L, V] the starting point, overwritten with the fit. Smoothing mixes every
    re-estimated distribution with the uniform one: q = (1 - s) q_ML + s / V, pi likewise with
    1 / K, so tokens no sample shows keep a floor.

    Soft: responsibilities r_uk proportional to pi_k Q_k(x_u). Hard: each row goes wholly to the
    mode with the highest Q_k(x_u) (pi left out, like a min-over-modes loss); an empty mode is
    re-seeded on the row the current fit explains worst.

    Returns (trace [max_iter + 1], n_iter): trace[t] is the weighted mean log-likelihood of the
    mixture at the start of iteration t (soft) or the weighted mean best-mode log-likelihood
    (hard); trace[n_iter] is the value for the returned parameters.
    """
    U, L = x.shape
    K, _, V = log_q.shape
    trace = np.full(max_iter + 1, np.nan)
    counts = np.zeros((K, L, V))  # [K, L, V]
    nk = np.zeros(K)
    lj = np.empty(K)
    best_row = np.empty(U)
    assign = np.full(U, -1, np.int64)
    total_w = 0.0
    for u in range(U):
        total_w += w[u]
    n_iter = 0
    for it in range(max_iter + 1):
        # E-step (and the objective of the current parameters)
        counts[:] = 0.0
        nk[:] = 0.0
        obj = 0.0
        changed = 0
        for u in range(U):
            if hard:
                _row_log_joint(x, u, log_pi, log_q, False, lj)
                kb = 0
                for k in range(1, K):
                    if lj[k] > lj[kb]:
                        kb = k
                best_row[u] = lj[kb]
                obj += w[u] * lj[kb]
                if assign[u] != kb:
                    changed += 1
                    assign[u] = kb
                nk[kb] += w[u]
                for i in range(L):
                    counts[kb, i, x[u, i]] += w[u]
            else:
                _row_log_joint(x, u, log_pi, log_q, True, lj)
                m = lj[0]
                for k in range(1, K):
                    if lj[k] > m:
                        m = lj[k]
                z = 0.0
                for k in range(K):
                    lj[k] = np.exp(lj[k] - m)
                    z += lj[k]
                obj += w[u] * (m + np.log(z))
                for k in range(K):
                    r = w[u] * lj[k] / z
                    if r == 0.0:
                        continue
                    nk[k] += r
                    for i in range(L):
                        counts[k, i, x[u, i]] += r
        trace[it] = obj / total_w
        n_iter = it
        if it == max_iter:
            break
        if it > 0:
            if hard and changed == 0:
                break
            if (not hard) and abs(trace[it] - trace[it - 1]) <= tol * max(1.0, abs(trace[it])):
                break
        # M-step
        if hard:
            for k in range(K):
                if nk[k] > 0.0:
                    continue
                # re-seed an empty mode on the worst-explained row
                uw = 0
                for u in range(1, U):
                    if best_row[u] < best_row[uw]:
                        uw = u
                best_row[uw] = np.inf
                nk[k] = w[uw]
                ko = assign[uw]
                nk[ko] -= w[uw]
                for i in range(L):
                    counts[ko, i, x[uw, i]] -= w[uw]
                    counts[k, i, x[uw, i]] += w[uw]
                assign[uw] = k
        for k in range(K):
            pk = (1.0 - smoothing) * nk[k] / total_w + smoothing / K
            log_pi[k] = np.log(pk) if pk > 0.0 else -np.inf
            for i in range(L):
                for v in range(V):
                    if nk[k] > 0.0:
                        q = (1.0 - smoothing) * max(counts[k, i, v], 0.0) / nk[k] + smoothing / V
                    else:
                        q = 1.0 / V
                    log_q[k, i, v] = np.log(q) if q > 0.0 else -np.inf
    return trace, n_iter


@njit(cache=True)
def _log_likelihood(x, log_pi, log_q, out):
    """out[u] = log sum_k pi_k Q_k(x_u) for every row of x [U, L]."""
    U = x.shape[0]
    K = log_pi.shape[0]
    lj = np.empty(K)
    for u in range(U):
        _row_log_joint(x, u, log_pi, log_q, True, lj)
        m = lj[0]
        for k in range(1, K):
            if lj[k] > m:
                m = lj[k]
        if m == -np.inf:
            out[u] = -np.inf
            continue
        z = 0.0
        for k in range(K):
            z += np.exp(lj[k] - m)
        out[u] = m + np.log(z)
