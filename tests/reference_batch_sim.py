"""Slow, obviously correct twins of mfd_theory.batch_sim's kernels: a round's counts and a replay."""

from __future__ import annotations

import itertools

import numpy as np

from mfd_theory.allocation import allocate_global


def accepted(path, n: int) -> int:
    """Tokens accepted by the first n nodes: walk the accepted path while its nodes are kept."""
    a = 0
    for node in path:
        if node < 0 or node >= n:
            break
        a += 1
    return a


def counts(policy, scores, paths, sizes, budget: int, cap: int) -> list[int]:
    """One round's node counts, each policy written out."""
    B = len(sizes)
    if policy == "per_request":
        return [min(budget, int(z)) for z in sizes]
    capped = [min(int(z), cap) for z in sizes]
    total = budget * B
    if policy == "global":
        return [int(c) for c in allocate_global([s[:z] for s, z in zip(scores, capped)], total)]
    if policy == "proportional":  # gain of node j: log(1 + c_j / (1 + c_0 + ... + c_{j-1}))
        keys = []
        for s, z in zip(scores, capped):
            c = np.exp(np.asarray(s[:z], dtype=float))
            tau = 1.0 + np.concatenate([[0.0], np.cumsum(c)[:-1]])
            k = np.log(np.log1p(c / tau))
            keys.append(np.minimum.accumulate(k) if k.size else k)
        return [int(c) for c in allocate_global(keys, total)]
    # oracle: the most accepted within the budget, f(b, t) = max_n f(b - 1, t - n) + a_b(n), each
    # request's count the smallest best one for the budget the later requests leave it
    from functools import lru_cache

    @lru_cache(maxsize=None)
    def f(b: int, t: int) -> int:
        if b < 0:
            return 0
        return max(f(b - 1, t - n) + accepted(paths[b], n) for n in range(min(capped[b], t) + 1))

    out, t = [0] * B, total
    for b in range(B - 1, -1, -1):
        out[b] = next(n for n in range(min(capped[b], t) + 1)
                      if f(b - 1, t - n) + accepted(paths[b], n) == f(b, t))
        t -= out[b]
    return out


def oracle_best(scores, paths, sizes, budget: int, cap: int) -> int:
    """The oracle's objective by brute force over every count vector within the budget."""
    capped = [min(int(z), cap) for z in sizes]
    return max(sum(accepted(p, n) for p, n in zip(paths, cnt))
               for cnt in itertools.product(*[range(z + 1) for z in capped]) if sum(cnt) <= budget * len(sizes))


def replay(traces, policy: str, budget: int, batch_size: int, cap: int, static: bool = True):
    """The decode loop in plain Python: (request, position, nodes, accepted) per request-round and
    each round's batch size."""
    P = traces.n_requests
    lengths = traces.lengths
    pos = [0] * P
    recs, sizes_out = [], []
    waiting = [i for i in range(P)]
    active: list[int] = []
    while waiting or active:
        if static:
            if not active:
                group, waiting = waiting[:batch_size], waiting[batch_size:]
                active = [i for i in group if lengths[i] > 1]
        else:
            while waiting and len(active) < batch_size:
                i = waiting.pop(0)
                if lengths[i] > 1:
                    active.append(i)
        if not active:
            continue
        sc = [traces.scores[i, pos[i]] for i in active]
        pa = [traces.paths[i, pos[i]] for i in active]
        sz = [traces.sizes[i, pos[i]] for i in active]
        cnt = counts(policy, sc, pa, sz, budget, cap)
        for i, p, n in zip(active, pa, cnt):
            a = accepted(p, n)
            recs.append((i, pos[i], n, a))
            pos[i] = min(pos[i] + a + 1, int(lengths[i]) - 1)
        sizes_out.append(len(active))
        active = [i for i in active if pos[i] < lengths[i] - 1]
    return recs, sizes_out
