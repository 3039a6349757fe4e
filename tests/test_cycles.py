"""Loops in generated text (mfd_theory.cycles) against brute force over every (start, period)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mfd_theory.cycles import Cycle, canonical_cycle, cycle_summary, trailing_cycle


def brute_cycle(tokens: list[int], min_repeats: int = 2) -> Cycle | None:
    """Every start s (earliest first), then every period p (shortest first): the first (s, p) whose
    suffix is p-periodic element by element and spans min_repeats periods."""
    n = len(tokens)
    for s in range(n):
        for p in range(1, n + 1):
            if n - s < min_repeats * p:
                break
            if all(tokens[i] == tokens[i + p] for i in range(s, n - p)):
                return Cycle(s, p)
    return None


@settings(max_examples=600, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=0, max_size=30), st.integers(2, 4))
def test_trailing_cycle_equals_brute_force(tokens, reps):
    assert trailing_cycle(tokens, reps) == brute_cycle(tokens, reps)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=0, max_size=12), st.lists(st.integers(0, 50), min_size=1, max_size=8),
       st.integers(2, 5))
def test_a_prefix_then_a_loop_is_found_at_or_before_the_loop(head, loop, times):
    text = head + loop * times
    c = trailing_cycle(text)
    assert c is not None and c == brute_cycle(text)
    assert c.start <= len(head)  # the loop itself qualifies, so the stretch found starts no later


def test_the_measured_shape_one_loop_from_every_prompt():
    loop = [0, 290, 312, 2, 35, 6, 72, 145, 195, 99, 80, 72]
    texts = [[3] + loop * 5 + loop[:3], [70, 197, 112] + loop[4:] + loop * 4, loop * 5 + loop[:4], [7, 8, 9, 10]]
    s = cycle_summary(texts)
    assert (s["texts"], s["in_cycle"], s["distinct_cycles"]) == (4, 3, 1)
    assert s["cycles"] == [{"period": 12, "texts": 3}]
    # each looping text repeats all but its head and first period
    c = [trailing_cycle(t) for t in texts[:3]]
    assert c[0] == Cycle(1, 12) and c[2] == Cycle(0, 12)
    want = sum(len(t) - x.start - 12 for t, x in zip(texts, c))
    assert s["repeated_share"] == pytest.approx(want / sum(map(len, texts)))
    # entered at another phase, the same loop
    assert canonical_cycle(texts[0], c[0]) == canonical_cycle(texts[1], c[1])


def test_no_loop_and_bad_input():
    assert trailing_cycle([1, 2, 3, 4, 5]) is None and trailing_cycle([]) is None
    assert trailing_cycle([4, 4]) == Cycle(0, 1)
    assert cycle_summary([[1, 2, 3]])["in_cycle"] == 0
    with pytest.raises(ValueError, match="min_repeats"):
        trailing_cycle([1, 1], min_repeats=1)
    with pytest.raises(ValueError, match="tokens: a 1-D"):
        trailing_cycle(np.zeros((2, 2), dtype=int))
    with pytest.raises(ValueError, match="integers"):
        trailing_cycle([0.5, 1.5])
    with pytest.raises(ValueError, match="texts"):
        cycle_summary([])
