"""Slow, obviously correct twins for mfd_theory.sequoia and mfd_theory.speedup."""

from __future__ import annotations

import heapq
import itertools

import numpy as np


def rank_lattice(k: int, depth: int) -> list[tuple[int, ...]]:
    """Every rank path of length 1..depth with ranks in [0, k)."""
    out = []
    for d in range(1, depth + 1):
        out.extend(itertools.product(range(k), repeat=d))
    return out


def path_value(path, p) -> float:
    return float(np.prod([p[r] for r in path]))


def brute_force_sequoia(p, budget: int, max_depth: int) -> float:
    """Best expected accepted length over every prefix-closed set of `budget` rank paths."""
    nodes = rank_lattice(len(p), max_depth)
    best = -np.inf
    for subset in itertools.combinations(nodes, budget):
        s = set(subset)
        if all(len(t) == 1 or t[:-1] in s for t in subset):
            best = max(best, sum(path_value(t, p) for t in subset))
    return best


def greedy_sequoia(p, budget: int, max_depth: int) -> float:
    """Best-first: pop the highest-value rank path, push its children; sum the first `budget`."""
    heap = [(-p[r], (r,)) for r in range(len(p))]
    heapq.heapify(heap)
    total = 0.0
    for _ in range(budget):
        negv, path = heapq.heappop(heap)
        total += -negv
        if len(path) < max_depth:
            for r in range(len(p)):
                heapq.heappush(heap, (negv * p[r], path + (r,)))
    return total


def speedup_by_hand(cov: float, n: int, t_target: float, t_draft: float, sizes, times) -> float:
    """(1 + C) t_target / (t_draft + t_verify(n)) with t_verify read off the table (n in it)."""
    t_verify = dict(zip(sizes, times))[n]
    return (1.0 + cov) * t_target / (t_draft + t_verify)


def per_step_budget_loop(gains, step_ms) -> int:
    """Add nodes one at a time; stop before the first node that does not raise throughput."""
    n, covered = 1, gains[0]
    while n < len(gains):
        now = (1 + covered) / step_ms(n)
        nxt = (1 + covered + gains[n]) / step_ms(n + 1)
        if nxt <= now:
            break
        covered += gains[n]
        n += 1
    return n
