"""The dense builders' row selection (one fused pass per row) against a sorting twin.

The tree tests use vocabularies of a few tokens, where the selection never reaches its screened
blocks or its column threshold; here rows are long enough for both, with ties, zeros
(log-prob -inf), adversarial orders (the large entries bunched at one end) and bad entries
placed anywhere.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import reference as ref
from mfd_theory._kernels import trees as kern

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
    vals, ids, by_id, status = kern._topk_rows(x, M, POS_TOL)
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
