"""Slow, obviously correct twins for mfd_theory.fit (one EM step written out sample by sample)."""

from __future__ import annotations

import math

import numpy as np


def em_step(x, w, log_pi, log_q, smoothing: float, hard: bool):
    """One E-step + M-step from (log_pi, log_q); returns (objective before the step, log_pi, log_q).

    Soft: r_uk = pi_k Q_k(x_u) / sum_j pi_j Q_j(x_u). Hard: r_uk = 1 for the k with the largest
    Q_k(x_u) (first on ties). Smoothing is a Dirichlet prior: beta = smoothing * W / V
    pseudo-counts per token of every mode's row, gamma = smoothing * W / K per mode weight
    (W = total weight); the objective adds the log prior beta sum log q (+ gamma sum log pi, soft).
    """
    K, L, V = log_q.shape
    total = sum(w)
    beta, gamma = smoothing * total / V, smoothing * total / K
    counts = np.zeros((K, L, V))
    nk = np.zeros(K)
    obj = 0.0
    for u in range(x.shape[0]):
        joint = [sum(log_q[k, i, x[u, i]] for i in range(L)) for k in range(K)]
        if hard:
            best = max(range(K), key=lambda k: (joint[k], -k))
            r = [1.0 if k == best else 0.0 for k in range(K)]
            obj += w[u] * joint[best]
        else:
            lj = [log_pi[k] + joint[k] for k in range(K)]
            m = max(lj)
            z = sum(math.exp(a - m) for a in lj)
            r = [math.exp(a - m) / z for a in lj]
            obj += w[u] * (m + math.log(z))
        for k in range(K):
            nk[k] += w[u] * r[k]
            for i in range(L):
                counts[k, i, x[u, i]] += w[u] * r[k]
    if smoothing > 0:
        obj += beta * math.fsum(float(v) for v in np.ravel(log_q))
        if not hard:
            obj += gamma * math.fsum(float(v) for v in log_pi)
    new_pi = (nk + gamma) / (total + K * gamma)
    new_q = np.empty_like(log_q)
    for k in range(K):
        for i in range(L):
            for v in range(V):
                if nk[k] + V * beta > 0:
                    new_q[k, i, v] = (counts[k, i, v] + beta) / (nk[k] + V * beta)
                else:
                    new_q[k, i, v] = 1.0 / V
    with np.errstate(divide="ignore"):
        return obj / total, np.log(new_pi), np.log(new_q)


def smoothed_marginals(x, V: int, smoothing: float) -> np.ndarray:
    """[L, V]: per-position token counts plus smoothing * n / V pseudo-counts, normalised."""
    L = x.shape[1]
    out = np.zeros((L, V))
    for row in x:
        for i, t in enumerate(row):
            out[i, t] += 1
    n = x.shape[0]
    return (out + smoothing * n / V) / (n + smoothing * n)


def em_rows_step(x, rows, log_pi, log_q, floor: float):
    """One step of the EM on paths and exact rows, written out path by path, position by position.

    ``rows`` [n, L, V]: path m's dense conditional c_{m,i} at every position. r_mk: the mode's
    responsibility for the whole path; rho_mk(i): for its first i tokens only (pi_k at i = 0).
    S_ki(v) = sum_m rho_mk(i) c_mi(v) + (r_mk - rho_mk(i)) [x_mi = v]; q = max(S, 0) normalised,
    then (1 - floor) q + floor / V; pi_k = sum_m r_mk / n. Returns (mean log Q(x_m) before the
    step, log_pi, log_q)."""
    n, L = x.shape
    K, _, V = log_q.shape
    S = np.zeros((K, L, V))
    nk = np.zeros(K)
    obj = 0.0
    for m in range(n):
        full = [log_pi[k] + sum(log_q[k, i, x[m, i]] for i in range(L)) for k in range(K)]
        top = max(full)
        z = sum(math.exp(a - top) for a in full)
        obj += top + math.log(z)
        r = [math.exp(a - top) / z for a in full]
        for k in range(K):
            nk[k] += r[k]
        for i in range(L):
            part = [log_pi[k] + sum(log_q[k, j, x[m, j]] for j in range(i)) for k in range(K)]
            top_i = max(part)
            zi = sum(math.exp(a - top_i) for a in part)
            rho = [math.exp(a - top_i) / zi for a in part]
            for k in range(K):
                for v in range(V):
                    S[k, i, v] += rho[k] * rows[m, i, v] + (r[k] - rho[k]) * (1.0 if x[m, i] == v else 0.0)
    new_pi = nk / n
    new_q = np.empty_like(log_q)
    for k in range(K):
        for i in range(L):
            s = np.maximum(S[k, i], 0.0)
            new_q[k, i] = (1 - floor) * s / s.sum() + floor / V
    with np.errstate(divide="ignore"):
        return obj / n, np.log(new_pi), np.log(new_q)


def exact_total_correlation(target) -> float:
    """sum_i H(X_i) - H(X) of a MixtureOfProducts by enumerating every block (small L, V only)."""
    import itertools

    p = np.exp(target.log_q)  # [K, L, V]
    w = np.exp(target.log_pi)
    L, V = target.L, target.V
    marg = np.einsum("k,kiv->iv", w, p)
    h_pos = -sum(float(q * math.log(q)) for q in marg.ravel() if q > 0)
    h_block = 0.0
    for s in itertools.product(range(V), repeat=L):
        prob = float(sum(w[k] * np.prod([p[k, i, s[i]] for i in range(L)]) for k in range(len(w))))
        if prob > 0:
            h_block -= prob * math.log(prob)
    return h_pos - h_block
