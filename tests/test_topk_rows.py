"""The dense builders' row selection (one fused pass per row) against a sorting twin.

The tree tests use vocabularies of a few tokens, where the selection never reaches its screened
blocks or its column threshold; here rows are long enough for both, with ties, zeros
(log-prob -inf), adversarial orders (the large entries bunched at one end) and bad entries
placed anywhere.
"""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import reference as ref
from mfd_theory._kernels import trees as kern
from mfd_theory import trees
from mfd_theory.trees import _whole_rows, mixture_tree, product_tree

POS_TOL = 1e-6
STATUS = {kern.OK: "ok", kern.HAS_NAN: "nan", kern.HAS_POSINF: "posinf", kern.HAS_POSITIVE: "positive"}


@st.composite
def rows(draw):
    """x [K, L, V] of log-probs: Gaussian logits, optionally quantised (ties), some -inf."""
    K, L = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    V = draw(st.sampled_from([1, 7, 64, 129, 300, 1000, 2600]))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((K, L, V)) * draw(st.sampled_from([0.5, 3.0]))  # [K, L, V]
    levels = draw(st.sampled_from([0, 3, 40]))  # 0: continuous, else that many distinct values
    if levels:
        x = np.round(x * levels / 4) * 4 / levels
    x[rng.random((K, L, V)) < draw(st.sampled_from([0.0, 0.2, 0.95]))] = -np.inf
    order = draw(st.sampled_from(["random", "ascending", "descending"]))
    if order != "random":
        x = np.sort(x, axis=-1)
        if order == "descending":
            x = x[..., ::-1]
    x = x - np.max(np.where(np.isfinite(x), x, -1e9), axis=-1, keepdims=True) - 1e-3  # <= 0
    x = np.ascontiguousarray(x.astype(dtype))
    bad = draw(st.sampled_from([None, None, np.nan, np.inf, 0.5]))
    if bad is not None:
        for _ in range(draw(st.integers(1, 3))):
            x[rng.integers(K), rng.integers(L), rng.integers(V)] = bad
    M = draw(st.integers(1, V))
    return x, M


@settings(deadline=None, max_examples=150)
@given(rows())
def test_topk_rows_equals_sorting(case):
    x, M = case
    vals, ids, by_id, lens, status = kern._topk_rows(x, M, POS_TOL, *_whole_rows(x))
    want_vals, want_ids, want_status = ref.top_m_rows(x, M, POS_TOL)
    assert STATUS[status] == want_status
    if want_status != "ok":
        return
    np.testing.assert_array_equal(ids, np.array(want_ids))
    np.testing.assert_array_equal(vals, np.array(want_vals))  # exact: float32 -> float64 is exact
    for k in range(x.shape[0]):
        for d in range(x.shape[1]):
            assert sorted(by_id[k, d]) == list(range(M))
            assert np.all(np.diff(ids[k, d][by_id[k, d]]) > 0), "by_id must list ids in increasing order"


@settings(deadline=None, max_examples=60)
@given(rows(), st.data())
def test_topk_rows_with_a_floor(case, data):
    """Rows marked todo keep their top M at or above the floor; other rows are left out."""
    x, M = case
    if not np.isfinite(x[~np.isinf(x)]).all() or (x > POS_TOL).any():
        return  # a floor may hide bad entries: the builders only use one on checked rows
    K, L, V = x.shape
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    todo = rng.random((K, L)) < 0.7
    pick = x[np.arange(K)[:, None], np.arange(L)[None, :], rng.integers(0, V, (K, L))]  # [K, L]
    floor = np.where(rng.random((K, L)) < 0.8, pick, -np.inf).astype(x.dtype)
    vals, ids, by_id, lens, status = kern._topk_rows(x, M, POS_TOL, floor, todo)
    assert status == kern.OK
    want_vals, want_ids, _ = ref.top_m_rows(x, M, POS_TOL)
    for k in range(K):
        for d in range(L):
            if not todo[k, d]:
                assert lens[k, d] == 0
                continue
            keep = [i for i, v in enumerate(want_vals[k][d]) if v >= floor[k, d]]
            assert lens[k, d] == len(keep)
            np.testing.assert_array_equal(ids[k, d, : lens[k, d]], np.array(want_ids[k][d])[keep])
            np.testing.assert_array_equal(vals[k, d, : lens[k, d]], np.array(want_vals[k][d])[keep])


@contextlib.contextmanager
def first_list(n):
    """The builders' first-list length set to n for the block."""
    saved = trees.FIRST_LIST
    trees.FIRST_LIST = n
    try:
        yield
    finally:
        trees.FIRST_LIST = saved


@st.composite
def wide_mixtures(draw):
    """log_q [K, L, V] peaked log-softmax rows with V and budgets beyond a first list's length."""
    K, L = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    V = draw(st.integers(2, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    z = rng.standard_normal((K, L, V)) * draw(st.sampled_from([0.3, 2.0, 5.0]))  # [K, L, V]
    if draw(st.booleans()):
        z = np.round(z * 2) / 2  # ties
    z[rng.random((K, L, V)) < draw(st.sampled_from([0.0, 0.3]))] = -np.inf
    z[..., 0] = np.maximum(z[..., 0], 0.0)  # every row keeps a finite entry
    z = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    log_pi = np.log(rng.dirichlet(np.ones(K)))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    # first lists of a few tokens, so that trees of up to ~100 nodes need rows read again
    return log_pi, z.astype(dtype), draw(st.integers(1, 120)), draw(st.sampled_from([1, 2, 3, 8]))


@settings(deadline=None, max_examples=60)
@given(wide_mixtures())
def test_dense_builders_equal_complete_candidate_lists(case):
    """Dense rows, read with short first lists and re-read past the floor where needed, give
    the tree that complete candidate lists (every token, sorted by numpy) give, node for node."""
    log_pi, log_q, budget, first = case
    K = log_q.shape[0]
    order = np.argsort(-log_q.astype(np.float64), axis=-1, kind="stable")  # [K, L, V]
    vals = np.take_along_axis(log_q, order, axis=-1)
    with first_list(first):
        if K == 1:
            dense, cand = product_tree(log_q[0], budget), product_tree(vals[0], budget, token_ids=order[0])
        else:
            dense = mixture_tree(log_pi, log_q, budget)
            cand = mixture_tree(log_pi, vals, budget, token_ids=order)
    np.testing.assert_array_equal(dense.parent, cand.parent)
    np.testing.assert_array_equal(dense.token, cand.token)
    np.testing.assert_array_equal(dense.log_score, cand.log_score)
