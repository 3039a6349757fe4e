"""Kernels for mfd_theory.batch_sim: one round's node counts under a policy, a whole batched decode
replayed from traces, and a policy's counts on another decode's rounds."""

import numpy as np
from numba import njit

PER_REQUEST = 0
GLOBAL = 1
PROPORTIONAL = 2
ORACLE = 3


@njit(cache=True)
def _accepted(path, n):
    """Draft tokens accepted by a tree's first n nodes: the accepted path's nodes among them (a
    path's node indices rise along it, parents before children)."""
    a = 0
    for j in range(path.shape[0]):
        if path[j] < 0 or path[j] >= n:
            break
        a += 1
    return a


@njit(cache=True)
def _merge(keys, sizes, total, out):
    """out[b] = how many of row b's first sizes[b] keys are among the ``total`` largest of all rows
    (each row non-increasing; ties to the lower row, then the earlier key)."""
    B = sizes.shape[0]
    for b in range(B):
        out[b] = 0
    for _ in range(total):
        best = -1
        for b in range(B):
            if out[b] < sizes[b] and (best < 0 or keys[b, out[b]] > keys[best, out[best]]):
                best = b
        if best < 0:
            return
        out[best] += 1


@njit(cache=True)
def _oracle(paths, sizes, total, out):
    """out: counts maximising the accepted total (each request's acceptance a_b(n) known), a
    knapsack over the budget; the fewest nodes among equal totals."""
    B = sizes.shape[0]
    best = np.zeros(total + 1)
    choice = np.zeros((B, total + 1), dtype=np.int64)
    for b in range(B):
        new = np.full(total + 1, -1.0)
        for t in range(total + 1):
            for n in range(min(sizes[b], t) + 1):
                v = best[t - n] + _accepted(paths[b], n)
                if v > new[t]:
                    new[t] = v
                    choice[b, t] = n
        best = new
    t = total
    for b in range(B - 1, -1, -1):
        out[b] = choice[b, t]
        t -= out[b]


@njit(cache=True)
def _counts(scores, paths, sizes, policy, budget, cap, out):
    """One round's node counts ``out`` [B] for B requests' trees: scores [B, C] (best first),
    paths [B, D], sizes [B] (nodes built), ``budget`` per request (global policies: budget * B in
    all, each request at most ``cap``)."""
    B = sizes.shape[0]
    if policy == PER_REQUEST:
        for b in range(B):
            out[b] = min(budget, sizes[b])
        return
    capped = np.minimum(sizes, cap)
    total = budget * B
    if policy == ORACLE:
        _oracle(paths, capped, total, out)
        return
    if policy == GLOBAL:
        _merge(scores, capped, total, out)
        return
    # PROPORTIONAL: node j's gain in log tokens per round, log(1 + c_j / tau_j) with tau_j the
    # tree's expected tokens from its first j nodes (1 + their drafter probabilities)
    keys = np.full(scores.shape, -np.inf)
    for b in range(B):
        tau = 1.0
        prev = np.inf
        for j in range(capped[b]):
            c = np.exp(scores[b, j])
            k = np.log(np.log1p(c / tau)) if c > 0 else -np.inf
            k = min(k, prev)  # non-increasing, as the merge needs (round-off aside it already is)
            keys[b, j] = k
            prev = k
            tau += c
    _merge(keys, capped, total, out)


@njit(cache=True)
def _replay(scores, paths, sizes, lengths, policy, budget, batch_size, cap, static):
    """Decode every request from its traces: scores [P, T, C], paths [P, T, D], sizes [P, T],
    lengths [P] (tokens per request, the prefill's first one included). ``static``: requests in
    consecutive groups of ``batch_size``, each group to its end (the bench's batches); otherwise
    ``batch_size`` slots, a waiting request joining as one ends. Returns per request-round
    (round, request, position, nodes, accepted) arrays and each round's batch size."""
    P, T, C = scores.shape
    D = paths.shape[2]
    cap_rr = 0
    for i in range(P):
        cap_rr += lengths[i]
    rr_round = np.empty(cap_rr, dtype=np.int64)
    rr_req = np.empty(cap_rr, dtype=np.int64)
    rr_pos = np.empty(cap_rr, dtype=np.int64)
    rr_nodes = np.empty(cap_rr, dtype=np.int64)
    rr_acc = np.empty(cap_rr, dtype=np.int64)
    round_size = np.empty(cap_rr, dtype=np.int64)
    pos = np.zeros(P, dtype=np.int64)
    active = np.empty(batch_size, dtype=np.int64)
    sc = np.empty((batch_size, C))
    pa = np.empty((batch_size, D), dtype=np.int64)
    sz = np.empty(batch_size, dtype=np.int64)
    out = np.empty(batch_size, dtype=np.int64)
    n_rr = 0
    n_round = 0
    nxt = 0  # the next request to join
    n_act = 0
    group_end = 0
    while nxt < P or n_act > 0:
        if static:
            if n_act == 0:
                group_end = min(nxt + batch_size, P)
                while nxt < group_end:
                    if lengths[nxt] > 1:
                        active[n_act] = nxt
                        n_act += 1
                    nxt += 1
        else:
            while nxt < P and n_act < batch_size:
                if lengths[nxt] > 1:
                    active[n_act] = nxt
                    n_act += 1
                nxt += 1
        if n_act == 0:
            continue
        for k in range(n_act):
            i = active[k]
            sc[k] = scores[i, pos[i]]
            pa[k] = paths[i, pos[i]]
            sz[k] = sizes[i, pos[i]]
        _counts(sc[:n_act], pa[:n_act], sz[:n_act], policy, budget, cap, out[:n_act])
        keep = 0
        for k in range(n_act):
            i = active[k]
            a = _accepted(pa[k], out[k])
            rr_round[n_rr] = n_round
            rr_req[n_rr] = i
            rr_pos[n_rr] = pos[i]
            rr_nodes[n_rr] = out[k]
            rr_acc[n_rr] = a
            n_rr += 1
            pos[i] = min(pos[i] + a + 1, lengths[i] - 1)
            if pos[i] < lengths[i] - 1:
                active[keep] = i
                keep += 1
        round_size[n_round] = n_act
        n_round += 1
        n_act = keep
    return (rr_round[:n_rr], rr_req[:n_rr], rr_pos[:n_rr], rr_nodes[:n_rr], rr_acc[:n_rr],
            round_size[:n_round])


@njit(cache=True)
def _rescore(scores, paths, sizes, rr_round, rr_req, rr_pos, policy, budget, cap):
    """Nodes and accepted tokens ``policy`` gives every request-round of a replayed decode, on that
    decode's own rounds (the same requests at the same positions)."""
    n = rr_round.shape[0]
    C, D = scores.shape[2], paths.shape[2]
    nodes = np.empty(n, dtype=np.int64)
    acc = np.empty(n, dtype=np.int64)
    start = 0
    while start < n:
        end = start
        while end < n and rr_round[end] == rr_round[start]:
            end += 1
        m = end - start
        sc = np.empty((m, C))
        pa = np.empty((m, D), dtype=np.int64)
        sz = np.empty(m, dtype=np.int64)
        for k in range(m):
            i, s = rr_req[start + k], rr_pos[start + k]
            sc[k] = scores[i, s]
            pa[k] = paths[i, s]
            sz[k] = sizes[i, s]
        out = np.empty(m, dtype=np.int64)
        _counts(sc, pa, sz, policy, budget, cap, out)
        for k in range(m):
            nodes[start + k] = out[k]
            acc[start + k] = _accepted(pa[k], out[k])
        start = end
    return nodes, acc
