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
    log_q [K, L, V] the starting point, overwritten with the fit.

    Smoothing s is a Dirichlet prior (MAP-EM): with W the total weight, every token of every
    mode's row gets beta = s W / V pseudo-counts and every mode's weight gamma = s W / K, so the
    M-step is q = (c + beta) / (n_k + V beta) and pi = (n_k + gamma) / (W + K gamma), which
    maximises the expected complete log-likelihood plus the log prior
    beta sum log q + gamma sum log pi exactly. EM then never decreases the penalised objective
    J = [sum_u w_u log Q(x_u) + beta sum_{k,i,v} log q_{k,i,v} + gamma sum_k log pi_k] / W,
    which is what the trace records (s = 0: the plain mean log-likelihood). A token no sample
    shows keeps probability about s / V.

    Soft: responsibilities r_uk proportional to pi_k Q_k(x_u). Hard: each row goes wholly to the
    mode with the highest Q_k(x_u) (pi left out, like a min-over-modes loss; its objective is
    the best-mode log-likelihood plus beta sum log q); an empty mode is re-seeded on the row the
    current fit explains worst.

    Returns (trace [max_iter + 1], n_iter): trace[t] is the objective at the start of iteration
    t; trace[n_iter] is the value for the returned parameters.
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
    beta = smoothing * total_w / V  # Dirichlet pseudo-counts per token of a mode's row
    gamma = smoothing * total_w / K  # and per mode weight
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
        if smoothing > 0.0:  # the log prior of the current parameters
            prior = 0.0
            for k in range(K):
                if not hard:
                    prior += gamma * log_pi[k]
                for i in range(L):
                    for v in range(V):
                        prior += beta * log_q[k, i, v]
            obj += prior
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
            pk = (nk[k] + gamma) / (total_w + K * gamma)
            log_pi[k] = np.log(pk) if pk > 0.0 else -np.inf
            for i in range(L):
                for v in range(V):
                    if nk[k] + V * beta > 0.0:
                        q = (max(counts[k, i, v], 0.0) + beta) / (nk[k] + V * beta)
                    else:
                        q = 1.0 / V  # an empty mode without a prior: uniform
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


@njit(cache=True)
def _lse(a):
    """log sum exp over a 1-D array (-inf when every entry is)."""
    m = a[0]
    for k in range(1, a.shape[0]):
        if a[k] > m:
            m = a[k]
    if m == -np.inf:
        return m
    z = 0.0
    for k in range(a.shape[0]):
        z += np.exp(a[k] - m)
    return m + np.log(z)


@njit(cache=True)
def _em_rows(x, ids, p, g, tail, log_pi, log_q, max_iter, tol, floor):
    """EM on sampled paths and the target's exact conditionals along them, in place.

    x [n, L] the sampled paths; ids / p [n, L, k] the listed tokens of each path's conditional
    row c_{m,i} and their probabilities; an unlisted token v has c_{m,i}(v) = g[m, i] tail[i, v]
    (g [n, L], tail [L, V]: the row's remaining mass shaped like ``tail``; g = 0 when k = V).
    log_pi [K] and log_q [K, L, V] the starting point, overwritten with the fit.

    E-step: the path responsibility r_mk = pi_k Q_k(x_m) / Q(x_m) and, per position i, the prefix
    responsibility rho_mk(i) from positions < i alone. M-step: the mode's statistic
    S_ki(v) = sum_m rho_mk(i) c_mi(v) + (r_mk - rho_mk(i)) [x_mi = v], an unbiased estimate of
    plain EM's sum_m r_mk [x_mi = v] (rho_mk(i) does not depend on x_mi, so its term's expectation
    given the prefix is its row), then q_ki = max(S_ki, 0) renormalised and mixed with ``floor``
    of the uniform row, pi_k = sum_m r_mk / n. The trace is the mean log Q(x_m) of the paths.

    Returns (trace [max_iter + 1], n_iter) as :func:`_em` does.
    """
    n, L = x.shape
    kk = ids.shape[2]
    K, _, V = log_q.shape
    trace = np.full(max_iter + 1, np.nan)
    S = np.zeros((K, L, V))  # [K, L, V]: the listed and the path-token parts
    base = np.zeros((K, L))  # [K, L]: the unlisted mass, given to every token v in proportion to tail[i, v]
    nk = np.zeros(K)
    a = np.empty(K)
    r = np.empty(K)
    rho = np.empty(K)
    row = np.empty(V)
    n_iter = 0
    for it in range(max_iter + 1):
        S[:] = 0.0
        base[:] = 0.0
        nk[:] = 0.0
        obj = 0.0
        for m in range(n):
            for k in range(K):
                s = log_pi[k]
                for i in range(L):
                    s += log_q[k, i, x[m, i]]
                a[k] = s
            lse = _lse(a)
            obj += lse
            for k in range(K):
                r[k] = np.exp(a[k] - lse)
                nk[k] += r[k]
                a[k] = log_pi[k]
            for i in range(L):
                lse_i = _lse(a)
                for k in range(K):
                    rho[k] = np.exp(a[k] - lse_i)
                for k in range(K):
                    if rho[k] > 1e-12:  # a mode the prefix has ruled out adds nothing visible
                        base[k, i] += rho[k] * g[m, i]
                        for j in range(kk):
                            t = ids[m, i, j]
                            S[k, i, t] += rho[k] * (p[m, i, j] - g[m, i] * tail[i, t])
                    S[k, i, x[m, i]] += r[k] - rho[k]
                    a[k] += log_q[k, i, x[m, i]]
        trace[it] = obj / n
        n_iter = it
        if it == max_iter:
            break
        if it > 0 and abs(trace[it] - trace[it - 1]) <= tol * max(1.0, abs(trace[it])):
            break
        for k in range(K):
            log_pi[k] = np.log(nk[k] / n) if nk[k] > 0.0 else -np.inf
            if nk[k] <= 0.0:
                continue  # a mode no path chose keeps its rows (its weight is 0)
            for i in range(L):
                total = 0.0
                for v in range(V):
                    s = S[k, i, v] + base[k, i] * tail[i, v]
                    row[v] = s if s > 0.0 else 0.0
                    total += row[v]
                for v in range(V):
                    q = (1.0 - floor) * (row[v] / total if total > 0.0 else 1.0 / V) + floor / V
                    log_q[k, i, v] = np.log(q)
    return trace, n_iter
