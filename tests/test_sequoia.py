"""Tests for mfd_theory.sequoia: the dynamic program against brute force and best-first search."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mfd_theory.sequoia import _capacity, sequoia_tree, sequoia_values
from mfd_theory.trees import DraftTree

from reference_sequoia import brute_force_sequoia, greedy_sequoia, path_value

ROUNDOFF = 1e-12  # sums of at most a few hundred products of numbers in [0, 1]


@st.composite
def acceptance_vectors(draw, max_k: int, k=None):
    """Sub-probability vectors: a Dirichlet draw with an extra 'nothing accepted' slot, either
    sorted decreasing (a real drafter's ranking) or in any order (the program must not assume it)."""
    k = draw(st.integers(1, max_k)) if k is None else k
    rng = np.random.default_rng(draw(st.integers(0, 10_000)))
    p = rng.dirichlet(np.ones(k + 1))[:k]  # [k]
    return rng.permutation(p) if draw(st.booleans()) else np.sort(p)[::-1].copy()


# (ranks, depth) pairs whose rank lattice has at most 14 nodes, so brute force stays cheap
SMALL_LATTICES = [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3), (3, 1), (3, 2)]


@settings(max_examples=20)
@given(shape=st.sampled_from(SMALL_LATTICES), data=st.data())
def test_matches_brute_force(shape, data):
    k, depth = shape
    p = data.draw(acceptance_vectors(k, k=k))
    budget = data.draw(st.integers(1, min(_capacity(k, depth), 6)))
    got = sequoia_tree(p, budget, depth)
    assert got.expected_accepted == pytest.approx(brute_force_sequoia(p, budget, depth), abs=ROUNDOFF)


@settings(max_examples=20)
@given(p=acceptance_vectors(8), budget=st.integers(1, 200), depth=st.integers(1, 12))
def test_matches_best_first(p, budget, depth):
    budget = min(budget, _capacity(len(p), depth))
    got = sequoia_tree(p, budget, depth)
    assert got.expected_accepted == pytest.approx(greedy_sequoia(p, budget, depth), abs=ROUNDOFF)


@settings(max_examples=15)
@given(p=acceptance_vectors(6), budget=st.integers(1, 120), depth=st.integers(1, 8))
def test_tree_is_valid_and_scores_add_up(p, budget, depth):
    budget = min(budget, _capacity(len(p), depth))
    tree, value = sequoia_tree(p, budget, depth)
    assert isinstance(tree, DraftTree) and len(tree) == budget
    assert tree.max_depth <= depth and tree.token.max() < len(p)
    assert np.all(tree.parent < np.arange(budget))  # parents first
    assert np.all(np.diff(tree.log_score) <= 1e-12)  # best-first order
    values = [path_value(path, p) for path in tree.paths()]
    np.testing.assert_allclose(np.exp(tree.log_score), values, atol=ROUNDOFF)
    assert sum(values) == pytest.approx(value, abs=ROUNDOFF)


def test_values_table_matches_trees():
    p = np.array([0.5, 0.2, 0.1])
    table = sequoia_values(p, 30, 5)
    for D in (1, 3, 5):
        for N in (1, 3, min(30, _capacity(3, D))):
            assert table[D, N] == pytest.approx(sequoia_tree(p, N, D).expected_accepted, abs=ROUNDOFF)
    assert np.isneginf(table[1, 4])  # four nodes do not fit in one level of three ranks


def test_chain_when_one_rank():
    tree, value = sequoia_tree([0.8], 5, 5)
    assert tree.paths()[-1] == (0, 0, 0, 0, 0)
    assert value == pytest.approx(sum(0.8**d for d in range(1, 6)), abs=ROUNDOFF)


# ------------------------------------------------------------------------------ bad input
def test_negative_entry():
    with pytest.raises(ValueError, match="acceptance.*negative"):
        sequoia_tree([0.5, -0.1], 3, 2)


def test_sum_above_one():
    with pytest.raises(ValueError, match="acceptance.*sum"):
        sequoia_tree([0.7, 0.4], 3, 2)


def test_empty_acceptance():
    with pytest.raises(ValueError, match="acceptance"):
        sequoia_tree([], 3, 2)


def test_nan_acceptance():
    with pytest.raises(ValueError, match="acceptance"):
        sequoia_tree([0.5, np.nan], 3, 2)


def test_two_dimensional_acceptance():
    with pytest.raises(ValueError, match="acceptance"):
        sequoia_tree([[0.5, 0.1]], 3, 2)


def test_budget_zero():
    with pytest.raises(ValueError, match="budget"):
        sequoia_tree([0.5], 0, 2)


def test_depth_zero():
    with pytest.raises(ValueError, match="max_depth"):
        sequoia_tree([0.5], 1, 0)


def test_budget_too_large():
    with pytest.raises(ValueError, match="budget.*do not fit"):
        sequoia_tree([0.5, 0.3], 7, 2)
