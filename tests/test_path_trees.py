"""Path-dependent drafters and path_tree against the enumerating twins in tests/reference.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference as ref
import strategies as mst
from mfd_theory import MemoryDrafter, path_tree
from mfd_theory.coverage import coverage
from mfd_theory.distributions import MixtureOfProducts
from mfd_theory.trees import oracle_tree, product_tree

# Scores are sums of <= 4 log-probs; the twins sum in the same order, but a MemoryDrafter's row
# comes from numpy's logsumexp where the twin uses math.fsum: ~1e-15 apart, 1e-9 absorbs rounding.
SCORE_TOL = 1e-9


def _table_cond(drafter):
    return lambda p: drafter.log_cond(p)


# ----------------------------------------------------------------------------- the builder

@given(mst.table_drafters(), mst.budgets())
def test_path_tree_is_the_tie_rule_order_of_brute_force(drafter, budget):
    """Every prefix scored and sorted by (score, parent's place, rank in the parent's row, id):
    the builder emits exactly that order (paths and scores), ties and zeros included."""
    t = path_tree(drafter, budget)
    want = ref.path_tie_rule_order(_table_cond(drafter), drafter.L, drafter.V, budget)
    assert [tuple(p) for p in t.paths()] == want
    np.testing.assert_array_equal(t.log_score, [ref.path_score(_table_cond(drafter), p) for p in want])


class _Batched:
    """A table drafter whose rows cost a forward each, many per forward (the target's shape): it
    counts the forwards and the rows each one held."""

    def __init__(self, drafter):
        self.d, self.L, self.V = drafter, drafter.L, drafter.V
        self.rows, self.sizes = {}, []

    def has_row(self, prefix):
        return tuple(prefix) in self.rows

    def prefetch(self, prefixes):
        want = {tuple(int(t) for t in p) for p in prefixes} - set(self.rows)
        if want:
            self.sizes.append(len(want))
            self.rows.update({p: self.d.log_cond(p) for p in want})

    def log_cond(self, prefix):
        if not self.has_row(prefix):
            self.prefetch([prefix])
        return self.rows[tuple(prefix)]


@given(mst.table_drafters(), mst.budgets(), st.sampled_from([1, 3, 64]))
def test_rows_read_ahead_leave_the_search_as_it_was(drafter, budget, lookahead):
    """Rows fetched many per forward (lookahead > 0) give exactly the unbatched emission, ties
    included, each forward holding at most lookahead + 1 rows."""
    from mfd_theory.path_trees import best_first
    from mfd_theory.trees import total_prefixes

    N = min(budget, total_prefixes([drafter.V] * drafter.L, budget))
    want = best_first(drafter, drafter.L, drafter.V, N)
    batched = _Batched(drafter)
    got = best_first(batched, drafter.L, drafter.V, N, lookahead=lookahead)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert max(batched.sizes) <= lookahead + 1


def test_rows_read_ahead_deepen_every_preferred_path_at_once():
    """A product drafter of depth L whose top-40 tree holds many deep paths: read ahead over the
    held rows, the search needs at most L forwards (one per depth below L, plus the root's), not one
    per path and depth (the one-child-per-parent read-ahead it replaced needed L + 1 here), and it
    holds every row the search read."""
    from mfd_theory.path_trees import best_first

    L, V, N = 6, 3, 40
    mix = MixtureOfProducts(np.zeros(1), np.log(np.tile([[0.6, 0.3, 0.1]], (1, L, 1))))
    drafter = MemoryDrafter(mix, memory=0)
    want = best_first(drafter, L, V, N)
    batched = _Batched(drafter)
    got = best_first(batched, L, V, N, lookahead=64)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert len(batched.sizes) <= L
    paths: list[tuple[int, ...]] = []
    for p, t in zip(got[0], got[1]):
        paths.append((paths[p] if p >= 0 else ()) + (int(t),))
    assert set(batched.rows) >= {p for p in paths[:-1] if len(p) < L} | {()}  # every row the search read


@given(mst.table_drafters(max_L=2, max_V=7), st.integers(1, 6))
def test_vocabulary_larger_than_the_budget(drafter, budget):
    """V > N: each row is cut to its best N tokens (ties at the cut by id) before sorting."""
    t = path_tree(drafter, budget)
    want = ref.path_tie_rule_order(_table_cond(drafter), drafter.L, drafter.V, budget)
    assert [tuple(p) for p in t.paths()] == want


@given(mst.table_drafters(ties=False), mst.budgets())
def test_path_tree_obeys_the_top_n_rule(drafter, budget):
    """Prefix-closed, size min(N, #prefixes), no excluded frontier prefix above the lowest node,
    parents before children, scores non-increasing in emission order."""
    t = path_tree(drafter, budget)
    paths = ref.tree_paths(t)
    score = lambda p: ref.path_score(_table_cond(drafter), p)
    problems = ref.top_n_violations(paths, score, ref.all_prefixes(drafter.L, drafter.V), budget, SCORE_TOL)
    assert not problems, problems
    assert ref.is_prefix_closed(paths)
    assert np.all(t.parent < np.arange(len(t)))
    finite = t.log_score[np.isfinite(t.log_score)]
    assert np.all(np.diff(finite) <= 0)


@given(mst.table_drafters(), mst.budgets(), mst.budgets())
def test_smaller_budget_is_a_prefix_of_the_emission(drafter, n1, n2):
    small, big = sorted((n1, n2))
    a, b = path_tree(drafter, small), path_tree(drafter, big)
    assert ref.tree_paths(a) == ref.tree_paths(b)[: len(a)]
    np.testing.assert_array_equal(a.log_score, b.log_score[: len(a)])


@given(mst.table_drafters(), mst.budgets(), st.integers(1, 3))
def test_max_depth_is_the_top_n_among_short_prefixes(drafter, budget, max_depth):
    t = path_tree(drafter, budget, max_depth=max_depth)
    D = min(max_depth, drafter.L)
    assert [tuple(p) for p in t.paths()] == ref.path_tie_rule_order(_table_cond(drafter), D, drafter.V, budget)


def test_tie_rule_by_hand():
    """Uniform rows: all prefixes of a depth tie. Children of the first-emitted parent go first,
    then by token id; a zero-probability branch comes last, ranked under its own parent."""
    with np.errstate(divide="ignore"):
        rows = {(): np.log([0.5, 0.5]), (0,): np.log([0.0, 1.0]), (1,): np.log([0.5, 0.5])}
    d = mst.TableDrafter(2, 2, rows)
    t = path_tree(d, 6)
    assert [tuple(p) for p in t.paths()] == [(0,), (1,), (0, 1), (1, 0), (1, 1), (0, 0)]
    assert np.isneginf(t.log_score[-1])


# ----------------------------------------------------------------------------- the memory drafter

@given(mst.mixtures(), st.integers(0, 4), st.sampled_from([1.0, 0.5, 2.0]), st.sampled_from([0.0, 0.1]))
def test_memory_drafter_rows_equal_the_twin(mix, memory, temperature, smoothing):
    d = MemoryDrafter(mix.build(), memory, temperature=temperature, smoothing=smoothing)
    for p in [()] + [q for q in ref.all_prefixes(mix.L - 1, mix.V)]:
        want = ref.memory_log_cond(mix.log_pi, mix.log_q, p, memory, temperature, smoothing)
        ref.assert_log_close(d.log_cond(p), want, SCORE_TOL, f"log q(. | {p})")
        row = np.exp(d.log_cond(p))
        assert abs(row.sum() - 1.0) <= 1e-12


@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 4), st.integers(2, 4), mst.budgets(60))
def test_memory_zero_is_the_product_tree_of_the_marginals(seed, K, L, V, budget):
    """No memory: every parent gets the target's marginal row, so the path tree is DDTree's."""
    target = MixtureOfProducts(mst.generic_log_q(seed + 1, (K,)), mst.generic_log_q(seed, (K, L, V)))
    a = path_tree(MemoryDrafter(target, 0), budget)
    b = product_tree(target.marginals(), budget)
    ref.assert_log_close(a.log_score, b.log_score, SCORE_TOL, "memory 0 vs product of marginals")
    assert ref.tree_paths(a) == ref.tree_paths(b)


@given(mst.targets(), mst.budgets())
def test_full_memory_is_the_oracle_tree(spec, budget):
    """Memory L - 1, temperature 1, no smoothing: Q(s) = P(s), so the scores are the oracle's."""
    target = spec.build()
    t = path_tree(MemoryDrafter(target, max(target.L - 1, 0)), budget)
    o = oracle_tree(target, budget)
    ref.assert_log_close(t.log_score, o.log_score, SCORE_TOL, "full memory vs oracle, in emission order")
    ref.assert_log_close(t.log_score, target.node_log_probs(t), SCORE_TOL, "Q(s) = P(s)")


@given(mst.mixtures(), st.integers(0, 3), mst.budgets())
def test_path_tree_scores_and_coverage_against_twins(mix, memory, budget):
    """log_score is the drafter's own log Q(s); coverage under the target (the package's exact
    code) equals the twin's sum of prefix probabilities."""
    target = mix.build()
    d = MemoryDrafter(target, memory, smoothing=0.05)
    t = path_tree(d, budget)
    paths = ref.tree_paths(t)
    cond = lambda p: ref.memory_log_cond(mix.log_pi, mix.log_q, p, memory, 1.0, 0.05)
    ref.assert_log_close(t.log_score, [ref.path_score(cond, p) for p in paths], SCORE_TOL, "scores vs twin")
    ref.assert_log_close(t.log_score, [d.log_prefix_prob(p) for p in paths], SCORE_TOL, "log_prefix_prob")
    assert abs(coverage(t, target) - ref.coverage(paths, mix.log_pi, mix.log_q)) <= 1e-12


def test_memory_helps_exactly_where_the_futures_disagree_out_of_sight():
    """Two futures that agree on a long middle stretch: a drafter that sees less than that
    stretch forgets which future it is in and splices; one that sees past it does not."""
    a = [0, 1, 2, 3, 4, 5]
    b = [1, 1, 2, 3, 4, 6]  # disagree at positions 0 and 5, agree on the four in between
    target = MixtureOfProducts.futures([a, b], weights=[0.6, 0.4], vocab_size=7)
    cov = {r: coverage(path_tree(MemoryDrafter(target, r), 12), target) for r in (0, 1, 4, 5)}
    oracle = coverage(oracle_tree(target, 12), target)
    assert cov[5] == pytest.approx(oracle) == pytest.approx(6.0)  # both futures whole: 6 accepted always
    # memory 0..4 misses position 0 when choosing position 5: the futures' last tokens are spliced
    # with Q = 0.6 * 0.4 = 0.24 each, the chimera (a[:5], 6) ties the second future's end and
    # wins the tie (its parent came first): 12 nodes cover 5 + 0.6 = 5.6 instead of 6
    for r in (0, 1, 4):
        assert cov[r] == pytest.approx(5.6)


# ----------------------------------------------------------------------------- bad input

def _target():
    return MixtureOfProducts.futures([[0, 1], [1, 0]], vocab_size=3, noise=0.1)


class _Bad:
    L, V = 2, 3

    def __init__(self, row):
        self.row = row

    def log_cond(self, prefix):
        return self.row


@pytest.mark.parametrize("budget", [0, -1, 1.5, True, "3", np.nan])
def test_bad_budget(budget):
    with pytest.raises(ValueError, match="budget"):
        path_tree(MemoryDrafter(_target(), 1), budget)


@pytest.mark.parametrize("drafter", [
    object(), _target(), type("NoL", (), {"V": 3, "log_cond": lambda self, p: np.zeros(3)})(),
    _Bad(np.zeros(2)), _Bad(np.array([0.0, np.nan, -1.0])), _Bad(np.array([0.0, np.inf, -1.0])),
    _Bad(np.array([0.5, -1.0, -1.0])), _Bad(np.array(["a", "b", "c"])),
])
def test_bad_drafter(drafter):
    with pytest.raises(ValueError, match="drafter"):
        path_tree(drafter, 3)


@pytest.mark.parametrize("max_depth", [0, -2, 1.5, True])
def test_bad_max_depth(max_depth):
    with pytest.raises(ValueError, match="max_depth"):
        path_tree(MemoryDrafter(_target(), 1), 3, max_depth=max_depth)


@pytest.mark.parametrize("kw, name", [
    (dict(target=np.zeros((1, 2, 3))), "target"), (dict(memory=-1), "memory"), (dict(memory=1.5), "memory"),
    (dict(memory=True), "memory"), (dict(temperature=0.0), "temperature"), (dict(temperature=np.inf), "temperature"),
    (dict(smoothing=1.5), "smoothing"), (dict(smoothing=-0.1), "smoothing"), (dict(smoothing=None), "smoothing"),
    (dict(temperature="1"), "temperature"),
])
def test_bad_memory_drafter(kw, name):
    args = dict(target=_target(), memory=1) | kw
    with pytest.raises(ValueError, match=name):
        MemoryDrafter(**args)


@pytest.mark.parametrize("prefix", [[0, 1], [0, 5], [-1]])
def test_bad_prefix(prefix):
    with pytest.raises(ValueError, match="prefix"):
        MemoryDrafter(_target(), 1).log_cond(prefix)
