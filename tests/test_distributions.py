"""MixtureOfProducts against the enumerating twins in tests/reference.py."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import reference as ref
import strategies as mst
from mfd_theory.distributions import MixtureOfProducts

# log-probs of <= 4 factors and <= 3 modes, summed in another order: float64 rounding is ~1e-15.
LOG_TOL = 1e-9
# probabilities summed over <= 340 prefixes: accumulated rounding stays far below this.
PROB_TOL = 1e-9


@given(mst.mixtures())
def test_attributes(mix):
    m = mix.build()
    assert (m.K, m.L, m.V) == mix.log_q.shape
    assert m.log_q.dtype == np.float64 and m.log_pi.dtype == np.float64
    ref.assert_log_close(m.log_pi, mix.log_pi, LOG_TOL, "log_pi")
    ref.assert_log_close(m.log_q, mix.log_q, LOG_TOL, "log_q")


@given(mst.mixtures(), st.data())
def test_log_prefix_prob_matches_reference(mix, data):
    m = mix.build()
    d = data.draw(st.integers(0, mix.L))
    prefix = data.draw(st.lists(st.integers(0, mix.V - 1), min_size=d, max_size=d))
    got = m.log_prefix_prob(prefix)
    ref.assert_log_close(got, ref.log_prefix_prob(mix.log_pi, mix.log_q, prefix), LOG_TOL, str(prefix))


@given(mst.targets())
def test_prefix_probs_are_consistent(spec):
    """Children's probabilities add up to their parent's; depth-1 prefixes sum to one."""
    m = spec.build()
    parents = [()] + [p for p in ref.all_prefixes(m.L - 1, m.V)] if m.L > 1 else [()]
    for p in parents:
        kids = math.fsum(ref.exp_or_zero(m.log_prefix_prob(list(p) + [v])) for v in range(m.V))
        assert abs(kids - ref.exp_or_zero(m.log_prefix_prob(list(p)))) <= PROB_TOL, p


@given(mst.mixtures())
def test_marginals_match_reference(mix):
    marg = mix.build().marginals()
    assert isinstance(marg, MixtureOfProducts) and marg.K == 1
    ref.assert_log_close(marg.log_q[0], ref.marginals(mix.log_pi, mix.log_q), LOG_TOL, "marginals")
    ref.assert_log_close(marg.log_pi, [0.0], LOG_TOL, "log_pi")


@given(mst.mixtures(), st.data())
def test_node_log_probs_matches_reference(mix, data):
    from mfd_theory.trees import DraftTree

    tree = DraftTree.from_paths(data.draw(mst.prefix_closed_paths(mix.L, mix.V)))
    paths = ref.tree_paths(tree)  # from_paths may store the nodes in another order
    got = mix.build().node_log_probs(tree)
    ref.assert_log_close(got, ref.node_log_probs(paths, mix.log_pi, mix.log_q), LOG_TOL, "nodes")


@given(mst.mixtures(max_K=1))
def test_product_constructor(mix):
    m = MixtureOfProducts.product(mix.log_q[0])
    assert m.K == 1
    ref.assert_log_close(m.log_pi, [0.0], LOG_TOL, "log_pi")
    ref.assert_log_close(m.log_q, mix.log_q, LOG_TOL, "log_q")


@given(mst.futures())
def test_futures_constructor(fut):
    m = fut.build()
    log_pi, log_q = ref.futures_log_params(fut.sequences, fut.weights, fut.V, fut.noise)
    ref.assert_log_close(m.log_pi, log_pi, LOG_TOL, "log_pi")
    ref.assert_log_close(m.log_q, log_q, LOG_TOL, "log_q")


def test_futures_default_weights_are_uniform():
    m = MixtureOfProducts.futures([[0, 1], [1, 0], [1, 1]], vocab_size=3)
    ref.assert_log_close(m.log_pi, np.log(np.full(3, 1 / 3)), LOG_TOL, "log_pi")
    assert m.V == 3 and m.L == 2


@given(mst.targets(), st.integers(0, 2**31 - 1))
def test_sample_shape_support_and_seed(spec, seed):
    m = spec.build()
    x = m.sample(200, seed)
    assert x.dtype == np.int64 and x.shape == (200, m.L)
    assert x.min() >= 0 and x.max() < m.V
    for row in np.unique(x, axis=0)[:20]:
        assert m.log_prefix_prob(row) > -np.inf, f"sampled a zero-probability sequence {row}"
    np.testing.assert_array_equal(x, m.sample(200, seed))


def test_sample_frequencies():
    """Empirical prefix frequencies within 5 standard errors of the exact probabilities."""
    log_pi = np.log([0.3, 0.7])
    with np.errstate(divide="ignore"):
        log_q = np.log(
            np.array(
                [
                    [[0.5, 0.5, 0.0], [0.1, 0.2, 0.7]],
                    [[0.0, 0.2, 0.8], [0.6, 0.3, 0.1]],
                ]
            )
        )
    m = MixtureOfProducts(log_pi, log_q)
    n = 40_000
    x = m.sample(n, seed=7)
    for prefix in ref.all_prefixes(2, 3):
        p = ref.exp_or_zero(ref.log_prefix_prob(log_pi, log_q, prefix))
        freq = np.mean(np.all(x[:, : len(prefix)] == prefix, axis=1))
        se = math.sqrt(p * (1 - p) / n)
        assert abs(freq - p) <= 5 * se + 1e-12, (prefix, freq, p)


def test_sample_with_vocabulary_in_the_tens_of_thousands():
    """A row with one heavy token must not be lost to float rounding at a realistic V."""
    V = 50_000
    q = np.full(V, 0.5 / (V - 1))
    q[123] = 0.5
    m = MixtureOfProducts.product(np.log(q)[None, :].repeat(2, axis=0))
    x = m.sample(4000, seed=3)
    share = np.mean(x == 123)
    assert 0.45 < share < 0.55


# ------------------------------------------------------------------ dtype-scaled tolerances
def _float32_log_softmax_rows(K, L, V, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((K, L, V)) * 3).astype(np.float32)  # [K, L, V] logits
    m = x.max(axis=-1, keepdims=True)
    return (x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))).astype(np.float32)


def test_float32_log_softmax_rows_pass_the_mixture_and_the_builders():
    from mfd_theory.trees import mixture_tree, product_tree

    lq = _float32_log_softmax_rows(2, 3, 1000, 0)  # [2, 3, 1000]
    sums = np.exp(lq.astype(np.float64)).sum(-1)
    assert np.abs(sums - 1).max() > 1e-9  # float32 rounding is above the float64 tolerance
    lp = np.log(np.full(2, 0.5, dtype=np.float32))
    m = MixtureOfProducts(lp, lq)  # was rejected: "row sums to 0.99999992..., not 1"
    assert m.log_q.dtype == np.float64
    assert len(mixture_tree(lp, lq, 20)) == 20
    assert len(product_tree(lq[0], 20)) == 20
    # the same numbers presented as float64 claim float64 precision and are refused
    with np.testing.assert_raises_regex(ValueError, "log_q: row .* not 1"):
        MixtureOfProducts(lp.astype(np.float64), lq.astype(np.float64) + 1e-7)


def test_one_tolerance_rule_for_weights_in_the_mixture_and_the_builders():
    from mfd_theory.distributions import norm_tol
    from mfd_theory.trees import mixture_tree

    lq = np.log(np.full((2, 2, 3), 1 / 3))
    for dtype in (np.float64, np.float32):
        tol = norm_tol(dtype)
        for off, ok in ((0.5 * tol, True), (4 * tol, False)):
            lp = np.log(np.array([0.5, 0.5 + off])).astype(dtype)
            results = []
            for build in (lambda: MixtureOfProducts(lp, lq), lambda: mixture_tree(lp, lq, 3)):
                try:
                    build()
                    results.append(True)
                except ValueError as exc:
                    assert "log_pi" in str(exc)
                    results.append(False)
            assert results == [ok, ok], (dtype, off, results)


def test_tolerances_scale_with_the_dtype():
    from mfd_theory.distributions import norm_tol, pos_tol

    assert norm_tol(np.float64) == 1e-9 and pos_tol(np.float64) == 1e-12
    assert norm_tol(np.int64) == 1e-9
    assert norm_tol(np.float32) == 64 * np.finfo(np.float32).eps
    assert pos_tol(np.float16) == 16 * np.finfo(np.float16).eps
    assert norm_tol(np.float16) > norm_tol(np.float32) > norm_tol(np.float64)
