"""Slow, obviously correct twins for the end-to-end training code (loops, no vectorisation)."""

from __future__ import annotations

import math

import torch


def block_loss_product(log_probs, labels, weights):
    """sum_i w_i * (-log q_i(x_i)), averaged over the batch, over sum_i w_i."""
    B, L, _ = log_probs.shape
    total = 0.0
    for b in range(B):
        for i in range(L):
            total += -float(weights[i]) * float(log_probs[b, i, labels[b, i]])
    return total / B / float(weights.sum())


def block_loss_mixture(log_pi, log_q, labels, weights):
    """-log sum_k pi_k exp(sum_i w_i log q_{k,i}(x_i)), batch mean, over sum_i w_i."""
    B, K, L, _ = log_q.shape
    total = 0.0
    for b in range(B):
        terms = []
        for k in range(K):
            s = float(log_pi[b, k])
            for i in range(L):
                s += float(weights[i]) * float(log_q[b, k, i, labels[b, i]])
            terms.append(s)
        m = max(terms)
        total += -(m + math.log(sum(math.exp(t - m) for t in terms)))
    return total / B / float(weights.sum())


def block_loss_wta(log_pi, log_q, labels, weights, eps):
    """Relaxed winner-take-all: per block, the mode k* with the largest sum_i w_i log q_{k,i}(x_i)
    (the first such k on ties) is weighted 1 - eps and each other mode eps / (K - 1); plus
    -log pi_{k*}. Batch mean, over sum_i w_i. Returns (loss, winners)."""
    B, K, L, _ = log_q.shape
    total, winners = 0.0, []
    for b in range(B):
        scores = []
        for k in range(K):
            s = 0.0
            for i in range(L):
                s += float(weights[i]) * float(log_q[b, k, i, labels[b, i]])
            scores.append(s)
        best = 0
        for k in range(1, K):
            if scores[k] > scores[best]:
                best = k
        winners.append(best)
        for k in range(K):
            share = (1.0 - eps if k == best else eps / (K - 1)) if K > 1 else 1.0
            total -= share * scores[k]
        total -= float(log_pi[b, best])
    return total / B / float(weights.sum()), winners


def left_align(ctx, t):
    """Row b: zeros then ctx[b, :t[b]], right-aligned to length max(t)."""
    B, _, H = ctx.shape
    T = int(max(t))
    out = torch.zeros(B, T, H, dtype=ctx.dtype)
    valid = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        n = int(t[b])
        out[b, T - n:] = ctx[b, :n]
        valid[b, T - n:] = True
    return out, valid
