"""Slow, obviously correct twins of mfd_theory.speedup's round cost helpers."""

from __future__ import annotations

from functools import lru_cache


def isotonic_minmax(values) -> list[float]:
    """Least-squares non-decreasing fit by the min-max formula: fit[i] = max over j <= i of
    min over k >= i of mean(values[j..k]). O(n^3), for short tables."""
    y = [float(v) for v in values]
    n = len(y)
    return [max(min(sum(y[j:k + 1]) / (k + 1 - j) for k in range(i, n)) for j in range(i + 1)) for i in range(n)]


def expected_rounds(probs: dict[int, float], m: int) -> float:
    """E[rounds] to emit m tokens when each round emits X tokens (P(X = x) = probs[x], x >= 1), the
    last round cut at m: R(m) = 1 + sum_x p_x R(m - x), R(m <= 0) = 0."""

    @lru_cache(maxsize=None)
    def r(left: int) -> float:
        if left <= 0:
            return 0.0
        return 1.0 + sum(p * r(left - x) for x, p in probs.items())

    return r(m)


def round_ms_by_hand(draft_ms, tree_ms, verify_ms, walk_ms, commit_ms, draw_ms, accepted, temperature) -> float:
    """One round's time written out term by term."""
    sampled = draw_ms * (1 + accepted) if temperature > 0 else 0.0
    return draft_ms + tree_ms + verify_ms + walk_ms + sampled + commit_ms
