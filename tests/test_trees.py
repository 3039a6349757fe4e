"""Tree builders and DraftTree against the enumerating twins in tests/reference.py.

The top-N set is not unique under ties, so a built tree is checked against the rule itself
(reference.top_n_violations) and against the twin's sorted score vector, which *is* unique.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import reference as ref
import strategies as mst
from mfd_theory.distributions import MixtureOfProducts, pos_tol
from mfd_theory.trees import DraftTree, chain_tree, mixture_tree, oracle_tree, product_tree

# Scores are sums of <= 4 log-probs (and a logsumexp over <= 3 modes) taken in another order
# than the twin's math.fsum: float64 rounding differs by ~1e-15, so 1e-9 only absorbs rounding.
SCORE_TOL = 1e-9
# float32 input: each log-prob is exact after upcasting, but a float32 accumulator would round
# each of the <= 4 partial sums to ~6e-8 relative; scores here are O(10), hence 1e-5.
FLOAT32_TOL = 1e-5


# ----------------------------------------------------------------------------- shared checks

def check_structure(t: DraftTree, L: int | None = None) -> list[tuple[int, ...]]:
    """Array types, parent-before-child order, depths, distinct paths; returns the paths."""
    n = len(t)
    for name in ("parent", "token", "depth"):
        arr = getattr(t, name)
        assert arr.dtype == np.int64 and arr.shape == (n,), (name, arr.dtype, arr.shape)
    assert t.log_score.dtype == np.float64 and t.log_score.shape == (n,)
    idx = np.arange(n)
    assert np.all(t.parent < idx), "a parent must precede its children"
    assert np.all(t.parent >= -1)
    want_depth = np.where(t.parent == -1, 1, t.depth[np.maximum(t.parent, 0)] + 1)
    np.testing.assert_array_equal(t.depth, want_depth, err_msg="depth != parent's depth + 1")
    paths = ref.tree_paths(t)
    assert len(set(paths)) == n, "two nodes share a path"
    assert [tuple(p) for p in t.paths()] == paths
    if L is not None:
        assert n == 0 or t.depth.max() <= L
    return paths


def check_top_n(t, score, prefixes, budget, twin, tol=SCORE_TOL, L=None):
    """The tree obeys the top-N rule, reports the right scores, and matches the twin's scores."""
    paths = check_structure(t, L)
    problems = ref.top_n_violations(paths, score, prefixes, budget, tol)
    assert not problems, problems
    ref.assert_log_close(t.log_score, [score(p) for p in paths], tol, "log_score vs twin score")
    _, twin_scores = twin
    ref.assert_log_close(
        np.sort(t.log_score)[::-1], np.sort(np.array(twin_scores))[::-1], tol, "sorted scores"
    )
    # best-first emission: scores never increase along the node order (up to rounding)
    assert np.all(np.diff(t.log_score[np.isfinite(t.log_score)]) <= tol)
    return paths


# ----------------------------------------------------------------------------- builders vs twins

@given(mst.products(), mst.budgets())
def test_product_tree_top_n(mix, budget):
    log_q = mix.log_q[0]  # [L, V]
    t = product_tree(log_q, budget)
    check_top_n(
        t, lambda p: ref.product_score(log_q, p), ref.all_prefixes(mix.L, mix.V), budget,
        ref.product_tree(log_q, budget), L=mix.L,
    )


@given(mst.mixtures(max_L=3, max_V=8, min_V=5), st.integers(1, 6))
def test_builders_when_the_vocabulary_exceeds_the_budget(mix, budget):
    """V > N: the dense builders must look past each row's top-N when a parent needs it."""
    score = lambda p: ref.log_prefix_prob(mix.log_pi, mix.log_q, p)
    prefixes = ref.all_prefixes(mix.L, mix.V)
    t = mixture_tree(mix.log_pi, mix.log_q, budget)
    check_top_n(t, score, prefixes, budget, ref.mixture_tree(mix.log_pi, mix.log_q, budget), L=mix.L)
    log_q = mix.log_q[0]
    t = product_tree(log_q, budget)
    check_top_n(
        t, lambda p: ref.product_score(log_q, p), prefixes, budget, ref.product_tree(log_q, budget), L=mix.L
    )


@given(mst.products(), mst.budgets())
def test_product_tree_float32_input(mix, budget):
    log_q32 = mix.log_q[0].astype(np.float32)  # [L, V] as a GPU hands it over
    log_q = log_q32.astype(np.float64)
    t = product_tree(log_q32, budget)
    check_top_n(
        t, lambda p: ref.product_score(log_q, p), ref.all_prefixes(mix.L, mix.V), budget,
        ref.product_tree(log_q, budget), tol=FLOAT32_TOL, L=mix.L,
    )


@given(mst.mixtures(), mst.budgets())
def test_mixture_tree_top_n(mix, budget):
    t = mixture_tree(mix.log_pi, mix.log_q, budget)
    check_top_n(
        t, lambda p: ref.log_prefix_prob(mix.log_pi, mix.log_q, p),
        ref.all_prefixes(mix.L, mix.V), budget, ref.mixture_tree(mix.log_pi, mix.log_q, budget),
        L=mix.L,
    )


@given(mst.targets(), mst.budgets())
def test_oracle_tree_top_n(spec, budget):
    target = spec.build()
    t = oracle_tree(target, budget)
    lp, lq = target.log_pi, target.log_q
    check_top_n(
        t, lambda p: ref.log_prefix_prob(lp, lq, p), ref.all_prefixes(target.L, target.V), budget,
        ref.oracle_tree(lp, lq, budget), L=target.L,
    )


@given(mst.candidates(K=1), mst.budgets())
def test_product_tree_from_candidates(cand, budget):
    values, ids = cand.values[0], cand.token_ids[0]  # [L, k], [L, k]
    t = product_tree(values, budget, token_ids=ids)
    tables = ref.candidate_tables(values, ids)
    prefixes = ref.candidate_prefixes([list(tab) for tab in tables[0]])
    check_top_n(
        t, lambda p: ref.candidate_score([0.0], tables, p), prefixes, budget,
        ref.product_tree_candidates(values, ids, budget), L=values.shape[0],
    )


@given(mst.candidates(), mst.budgets())
def test_mixture_tree_from_candidates(cand, budget):
    t = mixture_tree(cand.log_pi, cand.values, budget, token_ids=cand.token_ids)
    tables = ref.candidate_tables(cand.values, cand.token_ids)
    K, L, _ = cand.values.shape
    token_sets = [sorted(set().union(*(tables[k][i] for k in range(K)))) for i in range(L)]
    check_top_n(
        t, lambda p: ref.candidate_score(cand.log_pi, tables, p),
        ref.candidate_prefixes(token_sets), budget,
        ref.mixture_tree_candidates(cand.log_pi, cand.values, cand.token_ids, budget), L=L,
    )


@given(mst.products(), mst.budgets())
def test_candidates_equal_dense_when_complete(mix, budget):
    """Handing over every token as a candidate gives the dense builder's scores."""
    log_q = mix.log_q[0]
    ids = np.tile(np.arange(mix.V), (mix.L, 1))  # [L, V]
    a = product_tree(log_q, budget)
    b = product_tree(log_q, budget, token_ids=ids)
    ref.assert_log_close(a.log_score, b.log_score, SCORE_TOL, "dense vs complete candidates")


@given(mst.products(), mst.budgets())
def test_mixture_with_one_mode_equals_product(mix, budget):
    a = product_tree(mix.log_q[0], budget)
    b = mixture_tree(np.zeros(1), mix.log_q, budget)
    ref.assert_log_close(a.log_score, b.log_score, SCORE_TOL, "K=1 mixture vs product")


@given(mst.products(), mst.budgets())
def test_threshold_search_with_one_mode_equals_the_lattice(mix, budget):
    """The two exact kernels (DDTree's lattice for K = 1, the threshold search for K > 1) agree
    when the search is run on one mode: same score sequence, node for node."""
    from mfd_theory import trees as trees_mod
    from mfd_theory._kernels import trees as kern

    V = mix.V
    lattice = product_tree(mix.log_q[0], budget)
    vals, ids, _, _, status = kern._topk_rows(mix.log_q, V, pos_tol(np.float64), *trees_mod._whole_rows(mix.log_q))
    assert status == kern.OK
    lens = np.full((1, mix.L), V, dtype=np.int64)
    N = len(lattice)
    parent, token, depth, score, st_ = trees_mod._search(np.zeros(1), vals, ids, lens, N, None, True)
    assert st_ == kern.OK and len(score) == N
    ref.assert_log_close(score, lattice.log_score, SCORE_TOL, "threshold search vs lattice")


# ----------------------------------------------------------------------------- properties

@given(mst.mixtures(), mst.budgets(), mst.budgets())
def test_trees_of_increasing_budget_are_nested_in_score(mix, n1, n2):
    small, big = sorted((n1, n2))
    for build in (
        lambda n: product_tree(mix.log_q[0], n),
        lambda n: mixture_tree(mix.log_pi, mix.log_q, n),
        lambda n: oracle_tree(mix.build(), n),
    ):
        a, b = build(small), build(big)
        sa = np.sort(a.log_score)[::-1]
        sb = np.sort(b.log_score)[::-1][: len(sa)]
        ref.assert_log_close(sa, sb, SCORE_TOL, f"top-{small} vs top-{big} scores")


@given(mst.mixtures(max_V=8), mst.budgets(), mst.budgets())
def test_smaller_budget_is_a_prefix_of_the_emission(mix, n1, n2):
    """Best-first emission with a budget-independent tie order: the tree of budget N is the
    first N nodes of any larger tree (a caller may truncate instead of rebuilding)."""
    small, big = sorted((n1, n2))
    for build in (
        lambda n: product_tree(mix.log_q[0], n),
        lambda n: mixture_tree(mix.log_pi, mix.log_q, n),
    ):
        a, b = build(small), build(big)
        assert ref.tree_paths(a) == ref.tree_paths(b)[: len(a)]


@given(mst.mixtures(), mst.budgets())
def test_builders_are_deterministic(mix, budget):
    for build in (
        lambda: product_tree(mix.log_q[0], budget),
        lambda: mixture_tree(mix.log_pi, mix.log_q, budget),
        lambda: oracle_tree(mix.build(), budget),
    ):
        a, b = build(), build()
        for name in ("parent", "token", "depth", "log_score"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 4), st.integers(2, 6),
       mst.budgets(60))
def test_permuting_the_vocabulary_permutes_the_tree(seed, K, L, V, budget):
    """Without ties the top-N set is unique, so relabelling tokens relabels the tree exactly."""
    log_q = mst.generic_log_q(seed, (K, L, V))  # [K, L, V]
    log_pi = mst.generic_log_q(seed + 1, (K,))
    perm = np.random.default_rng(seed).permutation(V)  # new id of old token v is perm[v]
    inv = np.argsort(perm)
    permuted = log_q[:, :, inv]  # permuted[..., perm[v]] == log_q[..., v]
    for a, b in (
        (product_tree(log_q[0], budget), product_tree(permuted[0], budget)),
        (mixture_tree(log_pi, log_q, budget), mixture_tree(log_pi, permuted, budget)),
        (oracle_tree(MixtureOfProducts(log_pi, log_q), budget),
         oracle_tree(MixtureOfProducts(log_pi, permuted), budget)),
    ):
        relabelled = {tuple(int(perm[v]) for v in p) for p in ref.tree_paths(a)}
        assert relabelled == set(ref.tree_paths(b))


@given(mst.mixtures(ties=True), mst.budgets(), st.randoms(use_true_random=False))
def test_permutation_with_ties_keeps_the_scores(mix, budget, rnd):
    perm = list(range(mix.V))
    rnd.shuffle(perm)
    inv = np.argsort(perm)
    a = mixture_tree(mix.log_pi, mix.log_q, budget)
    b = mixture_tree(mix.log_pi, mix.log_q[:, :, inv], budget)
    ref.assert_log_close(np.sort(a.log_score), np.sort(b.log_score), SCORE_TOL, "scores")


def test_ties_and_zeros_by_hand():
    """Uniform rows: every prefix of a depth ties; the tree fills depth by depth, then -inf."""
    log_q = np.log(np.full((2, 2), 0.5))  # [L=2, V=2]
    t = product_tree(log_q, 5)
    assert len(t) == 5 and sorted(t.depth.tolist()) == [1, 1, 2, 2, 2]
    with np.errstate(divide="ignore"):
        log_q0 = np.log(np.array([[1.0, 0.0], [0.0, 1.0]]))
    t0 = product_tree(log_q0, 6)  # all 6 prefixes, four of them of probability zero
    assert len(t0) == 6
    assert [tuple(p) for p in t0.paths()[:2]] == [(0,), (0, 1)]
    assert np.isneginf(t0.log_score).sum() == 4


def test_budget_larger_than_the_prefix_space():
    log_q = np.log(np.array([[0.7, 0.3], [0.4, 0.6]]))
    t = product_tree(log_q, 100)
    assert len(t) == 6


# ----------------------------------------------------------------------------- DraftTree

@given(st.integers(1, 4), st.integers(1, 4), st.data())
def test_from_paths_round_trip_and_structure(L, V, data):
    paths = data.draw(mst.prefix_closed_paths(L, V))
    t = DraftTree.from_paths(paths)
    got = check_structure(t, L)
    assert set(got) == set(paths) and len(t) == len(paths)
    again = DraftTree.from_paths(t.paths())
    assert ref.tree_paths(again) == got


@given(st.integers(1, 4), st.integers(1, 4), st.data())
def test_children_and_ancestor_mask(L, V, data):
    t = DraftTree.from_paths(data.draw(mst.prefix_closed_paths(L, V)))
    paths = ref.tree_paths(t)
    for i in range(-1, len(t)):
        assert sorted(np.asarray(t.children(i)).tolist()) == ref.children(paths, i), i
    mask = t.ancestor_mask()
    assert mask.dtype == np.bool_
    np.testing.assert_array_equal(mask, ref.ancestor_mask(paths))


def test_from_paths_keeps_scores():
    t = DraftTree.from_paths([(1,), (1, 0), (2,)], log_score=[-0.1, -0.5, -0.7])
    order = [tuple(p) for p in t.paths()]
    scores = dict(zip(order, t.log_score.tolist()))
    assert scores == {(1,): -0.1, (1, 0): -0.5, (2,): -0.7}


def test_chain_tree():
    t = chain_tree([5, 3, 9])
    assert [tuple(p) for p in t.paths()] == [(5,), (5, 3), (5, 3, 9)]
    np.testing.assert_array_equal(t.parent, [-1, 0, 1])
    np.testing.assert_array_equal(t.depth, [1, 2, 3])


@given(mst.mixtures(), mst.budgets())
def test_save_load_round_trip(tmp_path_factory, mix, budget):
    t = mixture_tree(mix.log_pi, mix.log_q, budget)
    path = tmp_path_factory.mktemp("trees") / "tree.npz"
    t.save(path)
    back = DraftTree.load(path)
    for name in ("parent", "token", "depth", "log_score"):
        a, b = getattr(t, name), getattr(back, name)
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_dense_mixture_child_outside_every_modes_top_list():
    """The best child can lie outside every mode's top-N list: token 10 has q = 0.1 in both modes,
    while each mode's top five (0..4 resp. 5..9) get 0.15 there and ~0 in the other mode, so under
    pi = (1/2, 1/2) token 10 (0.1) beats them all (0.075). The dense builder must look past its
    first top-M pass and still be exact."""
    V, N = 50, 5
    rows = np.full((2, V), 1e-3)
    rows[0, :5] = 0.15
    rows[1, 5:10] = 0.15
    rows[:, 10] = 0.1
    rows /= rows.sum(axis=1, keepdims=True)
    first = np.full(V, 0.2 / (V - 1))
    first[7] = 0.8
    log_q = np.log(np.stack([np.stack([first, rows[k]]) for k in range(2)]))  # [K=2, L=2, V]
    log_pi = np.log([0.5, 0.5])
    t = mixture_tree(log_pi, log_q, N)
    score = lambda p: ref.log_prefix_prob(log_pi, log_q, p)
    check_top_n(t, score, ref.all_prefixes(2, V), N, ref.mixture_tree(log_pi, log_q, N), L=2)
    assert (7, 10) in [tuple(p) for p in t.paths()]


# ------------------------------------------------------------------ float16 input
@given(mst.mixtures(), mst.budgets())
def test_float16_input_is_upcast_in_every_builder(mix, budget):
    # float16 -> float32 is exact, so each builder's tree is the one the float16 values define
    lq16 = mix.log_q.astype(np.float16)  # [K, L, V]
    lq32 = lq16.astype(np.float32)
    lp = mix.log_pi
    assert product_tree(lq16[0], budget) == product_tree(lq32[0], budget)
    assert mixture_tree(lp, lq16, budget) == mixture_tree(lp, lq32, budget)
    k = lq16.shape[2]
    ids = np.broadcast_to(np.arange(k), lq16.shape)
    assert product_tree(lq16[0], budget, token_ids=ids[0]) == product_tree(lq32[0], budget, token_ids=ids[0])
    assert mixture_tree(lp, lq16, budget, token_ids=ids) == mixture_tree(lp, lq32, budget, token_ids=ids)
    target = MixtureOfProducts(lp.astype(np.float16), lq16)
    assert target.log_q.dtype == np.float64
    assert oracle_tree(target, budget) == mixture_tree(target.log_pi, target.log_q, budget)


def test_float16_logits_are_refused_by_name():
    x = np.zeros((2, 4), dtype=np.float16)
    x[0, 1] = 0.5  # probability above one
    with np.testing.assert_raises_regex(ValueError, "log_q: has entries above 0"):
        product_tree(x, 3)


# ------------------------------------------------------------------ one tie rule everywhere
# Tie-heavy inputs (integer weights: equal log-probs, zeros) and exact comparisons: every entry
# point must follow the documented order (score, then parent's emission, then token id).

@st.composite
def _tie_heavy(draw, max_K=3):
    mix = draw(mst.mixtures(ties=True, max_K=max_K, max_V=5))
    return mix


@given(_tie_heavy(), mst.budgets())
def test_product_tree_follows_the_tie_rule_exactly(mix, budget):
    lq = mix.log_q[0]
    want = ref.tie_rule_order(lq, budget)
    assert product_tree(lq, budget).paths() == want


@given(_tie_heavy(), mst.budgets(), st.randoms(use_true_random=False), st.booleans())
def test_candidates_in_any_order_give_the_dense_tree(mix, budget, rnd, descending):
    lq = mix.log_q[0]  # [L, V]
    L, V = lq.shape
    ids = np.empty((L, V), dtype=np.int64)
    for i in range(L):
        if descending:  # sorted by value as torch.topk might, ties in descending id order
            ids[i] = np.lexsort((-np.arange(V), -lq[i]))
        else:
            perm = list(range(V))
            rnd.shuffle(perm)
            ids[i] = perm
    vals = np.take_along_axis(lq, ids, axis=1)  # [L, V]
    assert product_tree(vals, budget, token_ids=ids) == product_tree(lq, budget)
    assert product_tree(vals, budget, token_ids=ids).paths() == ref.tie_rule_order(vals, budget, ids)


@given(_tie_heavy(max_K=1), st.integers(2, 3), mst.budgets(), st.data())
def test_mixture_of_duplicated_modes_is_the_product_tree(mix, K, budget, data):
    lq = mix.log_q[0]  # [L, V]
    w = np.array(data.draw(st.lists(st.integers(1, 3), min_size=K, max_size=K)), dtype=np.float64)
    log_pi = np.log(w / w.sum())
    stacked = np.broadcast_to(lq, (K,) + lq.shape).copy()  # [K, L, V]
    want = product_tree(lq, budget)
    assert mixture_tree(log_pi, stacked, budget) == want
    ids = np.broadcast_to(np.arange(lq.shape[1]), stacked.shape).copy()
    assert mixture_tree(log_pi, stacked, budget, token_ids=ids) == want


@given(_tie_heavy(), mst.budgets(), st.randoms(use_true_random=False))
def test_mixture_candidates_in_any_order_give_the_dense_tree(mix, budget, rnd):
    K, L, V = mix.log_q.shape
    ids = np.empty((K, L, V), dtype=np.int64)
    for k in range(K):
        for i in range(L):
            perm = list(range(V))
            rnd.shuffle(perm)
            ids[k, i] = perm
    vals = np.take_along_axis(mix.log_q, ids, axis=2)  # [K, L, V]
    assert mixture_tree(mix.log_pi, vals, budget, token_ids=ids) == mixture_tree(mix.log_pi, mix.log_q, budget)


# ----------------------------------------------------------------------------- round-off above 0


def _never_rises(t: DraftTree) -> bool:
    up = np.where(t.parent >= 0, t.log_score[np.maximum(t.parent, 0)], 0.0)
    return bool(np.all(t.log_score <= up))


def _builds(log_q, N):
    """Every builder entry on rows log_q [L, V]: dense and candidate product trees, and mixture
    trees of one mode and of two modes (dense and candidates)."""
    L, V = log_q.shape
    order = np.argsort(-log_q.astype(np.float64), axis=1, kind="stable")  # candidates: every token
    cand = np.take_along_axis(log_q, order, axis=1)
    two = np.stack([log_q, log_q[::-1] if L > 1 else log_q])
    half = np.log(np.array([0.5, 0.5], dtype=log_q.dtype))
    return [
        product_tree(log_q, N),
        product_tree(cand, N, token_ids=order),
        mixture_tree(np.zeros(1, dtype=log_q.dtype), log_q[None], N),
        mixture_tree(half, two, N),
        mixture_tree(half, np.stack([cand, cand]), N, token_ids=np.stack([order, order])),
    ]


def test_round_off_above_zero_is_clipped_once_for_every_builder():
    rows = np.array([[1e-6, -1], [1e-6, -1]], dtype=np.float32)  # within float32's tolerance
    for t in _builds(rows, 3):
        assert _never_rises(t), t.log_score
        assert np.all(t.log_score <= 0)
    rng = np.random.default_rng(0)
    for _ in range(200):
        L, V = int(rng.integers(1, 4)), int(rng.integers(2, 6))
        tol = pos_tol(np.float16)
        x = rng.uniform(-3.0, tol, size=(L, V)).astype(np.float16)  # some entries just above 0
        x[rng.random((L, V)) < 0.3] = np.float16(tol)
        N = int(rng.integers(1, 12))
        clipped = np.minimum(x, np.float16(0))
        for t, want in zip(_builds(x, N), _builds(clipped, N)):
            assert _never_rises(t), (x, N)
            assert t == want  # clipping first changes nothing: the builders read x as clipped


@given(mst.candidate_batches())
def test_candidate_trees_equal_the_one_request_builders(batch):
    """One kernel call for a batch builds, request by request, what the one-request builders build."""
    from mfd_theory.trees import candidate_trees

    cands, depths, budgets = batch
    values = np.stack([c.values for c in cands])  # [B, K, L, k]
    ids = np.stack([c.token_ids for c in cands])
    log_pi = np.stack([c.log_pi for c in cands])
    trees = candidate_trees(log_pi, values, ids, budgets, depths)
    for c, d, n, t in zip(cands, depths, budgets, trees):
        if d == 0:
            assert t is None
            continue
        if c.values.shape[0] == 1:
            one = product_tree(c.values[0, :d], n, token_ids=c.token_ids[0, :d])
        else:
            one = mixture_tree(c.log_pi, c.values[:, :d], n, token_ids=c.token_ids[:, :d])
        assert t == one
        np.testing.assert_array_equal(t.log_score, one.log_score)


def test_candidate_trees_refuse_bad_input_by_name():
    import pytest

    from mfd_theory.trees import candidate_trees

    v = np.log(np.full((2, 1, 3, 2), 0.5))
    ids = np.tile(np.array([0, 1]), (2, 1, 3, 1))
    assert [len(t) for t in candidate_trees(np.zeros((2, 1)), v, ids, [4, 2], [3, 1])] == [4, 2]
    with pytest.raises(ValueError, match="token_ids: a token appears twice"):
        candidate_trees(np.zeros((2, 1)), v, np.zeros_like(ids), 4, 3)
    with pytest.raises(ValueError, match="token_ids: contains negative"):
        candidate_trees(np.zeros((2, 1)), v, -ids - 1, 4, 3)
    with pytest.raises(ValueError, match="values: contains NaN"):
        candidate_trees(np.zeros((2, 1)), np.full_like(v, np.nan), ids, 4, 3)
    with pytest.raises(ValueError, match="depths"):
        candidate_trees(np.zeros((2, 1)), v, ids, 4, [3, 4])
    with pytest.raises(ValueError, match="budget"):
        candidate_trees(np.zeros((2, 1)), v, ids, [0, 1], 3)
    with pytest.raises(ValueError, match="log_pi"):
        candidate_trees(np.zeros((2, 2)), v, ids, 4, 3)
    with pytest.raises(ValueError, match=r"values: expected shape \[B, K, L, k\]"):
        candidate_trees(np.zeros((2, 1)), v[0], ids[0], 4, 3)


@given(mst.candidate_batches(max_B=4), st.integers(0, 2 ** 16))
def test_greedy_walks_follow_each_tree_as_the_one_tree_walk_does(batch, seed):
    """One kernel call walks every tree; each walk equals following the children map by hand."""
    from mfd_theory.trees import candidate_trees, greedy_walks

    cands, depths, budgets = batch
    trees = candidate_trees(np.stack([c.log_pi for c in cands]), np.stack([c.values for c in cands]),
                            np.stack([c.token_ids for c in cands]), budgets, depths)
    rng = np.random.default_rng(seed)
    sizes = [0 if t is None else len(t) for t in trees]
    start = np.concatenate([[0], np.cumsum(np.asarray(sizes) + 1)])
    nxt = np.empty(int(start[-1]), dtype=np.int64)
    for b, t in enumerate(trees):  # the target's next token per row: often a child's, sometimes not
        for r in range(sizes[b] + 1):
            kids = [] if t is None else [int(t.token[i]) for i in np.flatnonzero(t.parent == r - 1)]
            nxt[start[b] + r] = kids[rng.integers(len(kids))] if kids and rng.random() < 0.8 else 10 ** 9 + r
    for b, (path, bonus) in enumerate(greedy_walks(trees, nxt, start[:-1])):
        node, want = -1, []
        children = {} if trees[b] is None else {(int(p), int(tk)): i for i, (p, tk) in
                                                  enumerate(zip(trees[b].parent, trees[b].token))}
        while (node, int(nxt[start[b] + node + 1])) in children:
            node = children[(node, int(nxt[start[b] + node + 1]))]
            want.append(node)
        assert path == want and bonus == int(nxt[start[b] + node + 1])


@given(st.integers(0, 2 ** 16), st.integers(1, 30), st.booleans())
def test_top_candidates_equal_a_sort_with_the_tie_rule(seed, k, ties):
    """Each row's k best, ties to the lower id: a full stable sort of every row, by hand."""
    from mfd_theory.trees import top_candidates

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, 2, 30)) * 2
    x = np.round(x) if ties else x
    x = x - np.logaddexp.reduce(x, axis=-1, keepdims=True) if not ties else -np.abs(x)
    vals, ids = top_candidates(x, k)
    for idx in np.ndindex(x.shape[:-1]):
        order = sorted(range(30), key=lambda t: (-x[idx][t], t))[:k]
        assert ids[idx].tolist() == order and np.array_equal(vals[idx], x[idx][order])


def test_top_candidates_refuse_bad_rows_by_name():
    import pytest

    from mfd_theory.trees import top_candidates

    x = np.log(np.full((2, 4), 0.25))
    with pytest.raises(ValueError, match="log_q: contains NaN"):
        top_candidates(np.where(np.eye(2, 4, dtype=bool), np.nan, x), 2)
    with pytest.raises(ValueError, match="log_q: has entries above 0"):
        top_candidates(x + 2.0, 2)
    with pytest.raises(ValueError, match="k: must be an integer"):
        top_candidates(x, 5)
