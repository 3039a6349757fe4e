"""Repeating cycles in generated text: does a greedy continuation fall into a loop, and how much of
it does the loop hold?

A small target decoded greedily often ends in a loop of a few tokens that every prompt reaches. Then
every T = 0 cell of an evaluation measures how well a drafter predicts that one loop, and its
prompts are not independent texts: a prompt-paired interval at T = 0 counts the same loop once per
prompt. :func:`trailing_cycle` finds a text's loop, :func:`cycle_summary` says how many texts end in
one, how many distinct loops there are and what share of the tokens they hold. The twin in the tests
checks every (start, period) by brute force.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

__all__ = ["Cycle", "canonical_cycle", "cycle_summary", "trailing_cycle"]


class Cycle(NamedTuple):
    """``tokens[start:]`` repeats with period ``period`` (at least ``min_repeats`` full periods)."""

    start: int
    period: int

    def repeated(self, n: int) -> int:
        """Tokens of a text of length ``n`` after the cycle's first period: what copying predicts."""
        return max(0, n - self.start - self.period)


def _as_tokens(tokens, name: str = "tokens") -> np.ndarray:
    a = np.asarray(list(tokens) if not isinstance(tokens, np.ndarray) else tokens)
    if a.ndim != 1:
        raise ValueError(f"{name}: a 1-D sequence of token ids, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name}: token ids must be integers, got dtype {a.dtype}")
    return a.astype(np.int64, copy=False)


def trailing_cycle(tokens: Sequence[int], min_repeats: int = 2) -> Cycle | None:
    """The loop the text ends in: the period p and the earliest start s such that ``tokens[s:]``
    has period p (``tokens[i] == tokens[i + p]`` for every i >= s) and spans at least
    ``min_repeats`` full periods. Of all such (s, p) the longest suffix wins (smallest s), then the
    shortest period. None when no period qualifies (a text shorter than ``min_repeats`` tokens, or
    one that does not end in a loop)."""
    if int(min_repeats) != min_repeats or min_repeats < 2:
        raise ValueError(f"min_repeats: an integer >= 2, got {min_repeats!r}")
    a = _as_tokens(tokens)
    n = a.size
    best: Cycle | None = None
    for p in range(1, n // int(min_repeats) + 1):
        same = a[p:] == a[:-p]  # same[i]: tokens[i] == tokens[i + p], i < n - p
        bad = np.flatnonzero(~same)
        s = int(bad[-1]) + 1 if bad.size else 0  # the periodic stretch starts after the last mismatch
        if n - s >= min_repeats * p and (best is None or s < best.start):
            best = Cycle(s, p)
    return best


def canonical_cycle(tokens: Sequence[int], cycle: Cycle) -> tuple[int, ...]:
    """The loop's tokens as one period, rotated to its lexicographically smallest form, so two texts
    in the same loop (entered at different phases) give the same tuple."""
    a = _as_tokens(tokens)
    one = [int(t) for t in a[cycle.start: cycle.start + cycle.period]]
    return min(tuple(one[i:] + one[:i]) for i in range(len(one)))


def cycle_summary(texts: Sequence[Sequence[int]], min_repeats: int = 2) -> dict:
    """Over ``texts`` (e.g. each prompt's greedy continuation): how many end in a loop, the distinct
    loops (by :func:`canonical_cycle`) with their periods and how many texts each holds, and the
    share of all tokens that lie after a loop's first period (what copying the loop predicts)."""
    if not len(texts):
        raise ValueError("texts: at least one text")
    found, loops = 0, {}
    repeated = total = 0
    for i, t in enumerate(texts):
        a = _as_tokens(t, f"texts[{i}]")
        total += a.size
        c = trailing_cycle(a, min_repeats)
        if c is None:
            continue
        found += 1
        repeated += c.repeated(a.size)
        key = canonical_cycle(a, c)
        loops[key] = loops.get(key, 0) + 1
    by_size = sorted(loops.items(), key=lambda kv: (-kv[1], len(kv[0]), kv[0]))
    return {"texts": len(texts), "in_cycle": found, "distinct_cycles": len(loops),
            "cycles": [{"period": len(k), "texts": v} for k, v in by_size],
            "repeated_share": repeated / total if total else 0.0, "min_repeats": int(min_repeats)}
