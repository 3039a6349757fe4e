"""Coverage calculators against the enumerating twins, plus the properties the theory promises."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import reference as ref
import strategies as mst
from mfd_theory.coverage import (
    acceptance_variance,
    chimera_mask,
    coverage,
    depth_profile,
    node_log_probs,
    simulate_acceptance,
    splice_mask,
    spliced_chimera_mask,
    variance_from_prefix_probs,
)
from mfd_theory.trees import DraftTree, mixture_tree, oracle_tree, product_tree

# Sums of at most 40 probabilities, each a product of <= 4 factors: rounding is ~1e-15.
PROB_TOL = 1e-9
LOG_TOL = 1e-9
# Monte Carlo: the mean of n walks lies within 4 standard errors of the exact coverage
# (a false alarm about once in 16,000 examples).
MC_SIGMAS = 4.0
MC_WALKS = 20_000


@st.composite
def target_and_tree(draw, spec_strategy=None):
    """A target and a prefix-closed tree over its vocabulary (random shape, not a ranked tree)."""
    spec = draw(spec_strategy if spec_strategy is not None else mst.targets())
    target = spec.build()
    paths = draw(mst.prefix_closed_paths(target.L, target.V))
    return spec, target, paths


@given(target_and_tree())
def test_coverage_and_node_log_probs_match_reference(args):
    _, target, paths = args
    t = DraftTree.from_paths(paths)
    paths = ref.tree_paths(t)
    lp, lq = target.log_pi, target.log_q
    ref.assert_log_close(node_log_probs(t, target), ref.node_log_probs(paths, lp, lq), LOG_TOL, "nodes")
    assert abs(coverage(t, target) - ref.coverage(paths, lp, lq)) <= PROB_TOL


@given(target_and_tree())
def test_coverage_from_verifier_conditionals(args):
    """coverage(tree, node_log_cond=log p(token | path)) equals coverage(tree, target)."""
    _, target, paths = args
    t = DraftTree.from_paths(paths)
    paths = ref.tree_paths(t)
    lp, lq = target.log_pi, target.log_q
    cond = []
    for p in paths:
        joint, parent = ref.log_prefix_prob(lp, lq, p), ref.log_prefix_prob(lp, lq, p[:-1])
        cond.append(-np.inf if parent == -np.inf else joint - parent)  # [N]
    got = coverage(t, node_log_cond=np.array(cond))
    assert abs(got - ref.coverage(paths, lp, lq)) <= PROB_TOL


@given(target_and_tree())
def test_depth_profile_matches_reference(args):
    _, target, paths = args
    t = DraftTree.from_paths(paths)
    prof = depth_profile(t, target)
    want = ref.depth_profile(ref.tree_paths(t), target.log_pi, target.log_q, target.L)
    assert prof.shape == (target.L,)
    np.testing.assert_allclose(prof, want, rtol=0, atol=PROB_TOL)
    assert np.all(np.diff(prof) <= PROB_TOL), "P(accepted >= d) cannot grow with d"
    assert abs(prof.sum() - coverage(t, target)) <= PROB_TOL


@given(target_and_tree(), st.sampled_from([0.0, 1e-3, 0.05, 0.3]))
def test_chimera_mask_matches_reference(args, eps):
    _, target, paths = args
    t = DraftTree.from_paths(paths)
    paths = ref.tree_paths(t)
    want = ref.chimera_mask(paths, target.log_pi, target.log_q, eps)
    got = chimera_mask(t, target, eps=eps)
    assert got.dtype == np.bool_
    # P(s) == eps up to rounding (e.g. 0.25 * 0.2 vs 0.05) may land on either side of eps
    p = np.array([ref.exp_or_zero(ref.log_prefix_prob(target.log_pi, target.log_q, s)) for s in paths])
    clear = (np.abs(p - eps) > PROB_TOL) | (eps == 0.0)
    np.testing.assert_array_equal(got[clear], want[clear])


@given(target_and_tree(mst.futures()))
def test_spliced_chimera_mask_matches_reference(args):
    spec, _, paths = args
    t = DraftTree.from_paths(paths)
    got = spliced_chimera_mask(t, spec.sequences)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, ref.spliced_chimera_mask(ref.tree_paths(t), spec.sequences))


@given(target_and_tree(mst.futures()))
def test_splice_mask_matches_reference(args):
    spec, _, paths = args
    t = DraftTree.from_paths(paths)
    got = splice_mask(t, spec.sequences)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, ref.splice_mask(ref.tree_paths(t), spec.sequences))


@given(target_and_tree())
def test_coverage_bounds(args):
    _, target, paths = args
    t = DraftTree.from_paths(paths)
    c = coverage(t, target)
    assert -PROB_TOL <= c <= min(target.L, len(t)) + PROB_TOL


@given(target_and_tree(), st.data())
def test_adding_a_node_never_lowers_coverage(args, data):
    _, target, paths = args
    present = set(paths)
    frontier = [
        p + (v,) for p in [()] + paths if len(p) < target.L for v in range(target.V)
        if p + (v,) not in present
    ]
    if not frontier:
        return
    extra = frontier[data.draw(st.integers(0, len(frontier) - 1))]
    before = coverage(DraftTree.from_paths(paths), target)
    after = coverage(DraftTree.from_paths(paths + [extra]), target)
    assert after >= before - PROB_TOL


@given(mst.targets(), mst.budgets(), mst.budgets())
def test_oracle_coverage_non_decreasing_in_budget(spec, n1, n2):
    target = spec.build()
    small, big = sorted((n1, n2))
    assert coverage(oracle_tree(target, big), target) >= coverage(oracle_tree(target, small), target) - PROB_TOL


@given(mst.targets(), st.data())
def test_oracle_covers_at_least_any_tree_of_its_size(spec, data):
    target = spec.build()
    paths = data.draw(mst.prefix_closed_paths(target.L, target.V))
    n = len(paths)
    best = coverage(oracle_tree(target, n), target)
    assert best >= coverage(DraftTree.from_paths(paths), target) - PROB_TOL
    marg = target.marginals()
    assert best >= coverage(product_tree(marg.log_q[0], n), target) - PROB_TOL
    assert best >= coverage(mixture_tree(target.log_pi, target.log_q, n), target) - PROB_TOL


@given(target_and_tree())
def test_monte_carlo_agrees_with_exact_coverage(args):
    _, target, paths = args
    t = DraftTree.from_paths(paths)
    acc = simulate_acceptance(t, target, MC_WALKS, seed=20261129)
    assert acc.dtype == np.int64 and acc.shape == (MC_WALKS,)
    assert acc.min() >= 0 and acc.max() <= min(target.L, int(t.depth.max()))
    exact = coverage(t, target)
    se = acc.std(ddof=1) / math.sqrt(MC_WALKS)
    assert abs(acc.mean() - exact) <= MC_SIGMAS * se + PROB_TOL, (acc.mean(), exact, se)
    # the whole distribution, not just its mean: P(accepted >= d) per depth
    prof = depth_profile(t, target)
    for d in range(1, target.L + 1):
        p = min(max(prof[d - 1], 0.0), 1.0)  # rounding can put a certain event at 1 + 1e-16
        freq = np.mean(acc >= d)
        assert abs(freq - p) <= MC_SIGMAS * math.sqrt(p * (1 - p) / MC_WALKS) + PROB_TOL, (d, freq, p)


def test_monte_carlo_is_seeded():
    target = mst.Futures(np.array([[0, 1, 1], [1, 1, 0]]), np.array([1.0, 2.0]), 2, 0.1).build()
    t = oracle_tree(target, 5)
    a = simulate_acceptance(t, target, 1000, seed=1)
    np.testing.assert_array_equal(a, simulate_acceptance(t, target, 1000, seed=1))
    assert not np.array_equal(a, simulate_acceptance(t, target, 1000, seed=2))


def test_two_futures_product_tree_has_chimeras():
    """Two futures that disagree everywhere: the marginal product tree splices them (claim 2)."""
    seqs = np.array([[0, 0, 0], [1, 1, 1]])
    target = mst.Futures(seqs, np.array([1.0, 1.0]), 2, 0.0).build()
    t = product_tree(target.marginals().log_q[0], 14)  # all 2 + 4 + 8 prefixes tie
    chim = chimera_mask(t, target)
    np.testing.assert_array_equal(chim, ref.chimera_mask(ref.tree_paths(t), target.log_pi, target.log_q))
    assert chim.sum() == 14 - 6
    assert splice_mask(t, seqs).all()
    assert abs(coverage(t, target) - 3.0) <= PROB_TOL


# ----------------------------------------------------------------------------- variance
@given(target_and_tree())
def test_acceptance_variance_equals_brute_force_over_blocks(args):
    spec, target, paths = args
    t = DraftTree.from_paths(paths)
    mean, var = ref.acceptance_moments(ref.tree_paths(t), target.log_pi, target.log_q)
    assert abs(coverage(t, target) - mean) <= PROB_TOL
    # E[X^2] and C^2 are sums of <= 40 terms of size <= L^2: rounding stays near 1e-14
    assert abs(acceptance_variance(t, target) - var) <= PROB_TOL, (acceptance_variance(t, target), var)
    # the same number from the node conditionals a verifier would hand over
    lp = node_log_probs(t, target)
    with np.errstate(invalid="ignore"):  # -inf - -inf below a dead node; set to -inf next
        cond = lp - np.where(t.parent >= 0, lp[np.maximum(t.parent, 0)], 0.0)
    cond = np.where(np.isneginf(lp), -np.inf, cond)
    assert abs(acceptance_variance(t, node_log_cond=cond) - var) <= PROB_TOL


@given(target_and_tree())
def test_acceptance_variance_agrees_with_monte_carlo(args):
    _, target, paths = args
    t = DraftTree.from_paths(paths)
    acc = simulate_acceptance(t, target, MC_WALKS, seed=7)
    var = acceptance_variance(t, target)
    # the sample variance of n walks has s.e. sqrt((mu4 - var^2) / n), mu4 the fourth central
    # moment, taken exactly from the distribution of X: P(X = d) = P(X >= d) - P(X >= d + 1)
    tail = np.append(np.clip(depth_profile(t, target), 0.0, 1.0), 0.0)  # [L + 1]
    px = -np.diff(np.concatenate([[1.0], tail]))  # P(X = d) for d = 0..L
    x = np.arange(px.shape[0])
    mean = coverage(t, target)
    mu4 = float(np.sum(px * (x - mean) ** 4))
    se = math.sqrt(max(mu4 - var**2, 0.0) / MC_WALKS)
    assert abs(acc.var(ddof=1) - var) <= MC_SIGMAS * se + PROB_TOL, (acc.var(ddof=1), var, se)


def test_acceptance_variance_by_hand():
    # chain of 2 with conditionals 0.5, 0.5: X = 0, 1, 2 w.p. 1/2, 1/4, 1/4 -> mean 3/4, var 11/16
    t = DraftTree([-1, 0], [0, 0])
    cond = np.log([0.5, 0.5])
    assert abs(coverage(t, node_log_cond=cond) - 0.75) <= PROB_TOL
    assert abs(acceptance_variance(t, node_log_cond=cond) - 11 / 16) <= PROB_TOL
    # a certain walk has no variance; a rare event's variance is about its mean (mu - mu^2 <= var)
    assert acceptance_variance(t, node_log_cond=np.zeros(2)) == 0.0
    assert acceptance_variance(t, node_log_cond=np.log([0.03, 0.01])) >= 0.03 - 0.03 ** 2


def test_variance_from_prefix_probs_rejects_bad_input():
    import pytest

    with pytest.raises(ValueError, match="prefix_probs"):
        variance_from_prefix_probs([1, 2], [0.5])
    with pytest.raises(ValueError, match="prefix_probs"):
        variance_from_prefix_probs([1], [1.5])
    with pytest.raises(ValueError, match="depth"):
        variance_from_prefix_probs([0], [0.5])
    # depths no prefix-closed tree has: a gap below the deepest node, or a fractional depth
    for bad in ([2], [1, 3], [1, 1, 3, 4], [1, 1.5]):
        with pytest.raises(ValueError, match="depth"):
            variance_from_prefix_probs(bad, [0.1] * len(bad))
    # every realisable depth multiset is accepted, in any order
    assert variance_from_prefix_probs([2, 1, 2, 3, 1], [0.2, 0.5, 0.1, 0.05, 0.3]) >= 0.0
