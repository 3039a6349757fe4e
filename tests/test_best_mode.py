"""best_mode_tree against the enumerating twins in tests/reference.py, and how it relates to the
mixture and product trees (docs/chimeras.md, "Best-mode trees").

Tie-heavy inputs (integer weights: equal log-probs, exact zeros) are compared exactly with the
tie rule's order; generic inputs through the top-N rule and the sorted score vector.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference as ref
import strategies as mst
from mfd_theory import best_mode_tree as exported
from mfd_theory.trees import enumerated_best_mode
from mfd_theory.coverage import coverage
from mfd_theory.distributions import MixtureOfProducts
from mfd_theory.trees import best_mode_tree, mixture_tree, product_tree
from test_trees import SCORE_TOL, check_top_n


def _score(log_q, token_ids=None):
    tables = ref.best_mode_tables(log_q, token_ids)
    return lambda p: ref.best_mode_score(tables, p)


# ----------------------------------------------------------------------------- against the twins

@given(mst.mixtures(), mst.budgets())
def test_best_mode_tree_top_n(mix, budget):
    t = best_mode_tree(mix.log_q, budget)
    check_top_n(t, _score(mix.log_q), ref.all_prefixes(mix.L, mix.V), budget,
                ref.best_mode_tree(mix.log_q, budget), L=mix.L)


@given(mst.mixtures(ties=True, max_V=5), mst.budgets())
def test_best_mode_tree_follows_the_tie_rule_exactly(mix, budget):
    assert best_mode_tree(mix.log_q, budget).paths() == ref.best_mode_tie_rule_order(mix.log_q, budget)


@given(mst.mixtures(max_L=3, max_V=8, min_V=5), st.integers(1, 6))
def test_best_mode_tree_when_the_vocabulary_exceeds_the_budget(mix, budget):
    """V > N: rows are read for short lists, and a parent may need a token beyond all of them."""
    assert best_mode_tree(mix.log_q, budget).paths() == ref.best_mode_tie_rule_order(mix.log_q, budget)


@given(mst.candidates(), mst.budgets())
def test_best_mode_tree_from_candidates(cand, budget):
    t = best_mode_tree(cand.values, budget, token_ids=cand.token_ids)
    tables = ref.best_mode_tables(cand.values, cand.token_ids)
    check_top_n(t, _score(cand.values, cand.token_ids), ref.best_mode_prefixes(tables), budget,
                ref.best_mode_tree(cand.values, budget, cand.token_ids), L=cand.values.shape[1])
    assert t.paths() == ref.best_mode_tie_rule_order(cand.values, budget, cand.token_ids)


@given(mst.mixtures(ties=True, max_V=5), mst.budgets(), st.randoms(use_true_random=False))
def test_candidates_in_any_order_give_the_dense_tree(mix, budget, rnd):
    K, L, V = mix.log_q.shape
    ids = np.array([[rnd.sample(range(V), V) for _ in range(L)] for _ in range(K)], dtype=np.int64)  # [K, L, V]
    vals = np.take_along_axis(mix.log_q, ids, axis=2)  # [K, L, V]
    assert best_mode_tree(vals, budget, token_ids=ids) == best_mode_tree(mix.log_q, budget)


def test_float_rows_with_infinities_and_ties_by_hand():
    """Two modes, L = 2: mode 0 certain of (0, 1), mode 1 split over tokens 1 and 2 at both
    positions. Best-mode scores: (0,) 0, (0, 1) 0, then (1,), (2,) at log 1/2 (token 1 ranks 0
    in mode 1's list, token 2 rank 1), then their children at log 1/4."""
    with np.errstate(divide="ignore"):
        q = np.log(np.array([[[1, 0, 0], [0, 1, 0]],
                             [[0, .5, .5], [0, .5, .5]]]))  # [K=2, L=2, V=3]
    t = best_mode_tree(q, 8)
    assert t.paths()[:4] == [(0,), (0, 1), (1,), (2,)]
    np.testing.assert_allclose(np.exp(t.log_score[:8]), [1, 1, .5, .5, .25, .25, .25, .25])
    assert t.paths() == ref.best_mode_tie_rule_order(q, 8)


# ----------------------------------------------------------------------------- properties

@given(mst.products(ties=True, max_V=5), mst.budgets())
def test_one_mode_is_the_product_tree(mix, budget):
    assert best_mode_tree(mix.log_q, budget) == product_tree(mix.log_q[0], budget)


@given(mst.products(ties=True, max_V=5), st.integers(2, 3), mst.budgets())
def test_duplicated_modes_give_the_product_tree(mix, K, budget):
    stacked = np.broadcast_to(mix.log_q[0], (K,) + mix.log_q.shape[1:]).copy()  # [K, L, V]
    assert best_mode_tree(stacked, budget) == product_tree(mix.log_q[0], budget)


@given(mst.mixtures(max_V=8), mst.budgets(), mst.budgets())
def test_smaller_budget_is_a_prefix_of_the_emission(mix, n1, n2):
    small, big = sorted((n1, n2))
    a, b = best_mode_tree(mix.log_q, small), best_mode_tree(mix.log_q, big)
    assert ref.tree_paths(a) == ref.tree_paths(b)[: len(a)]
    np.testing.assert_array_equal(a.log_score, b.log_score[: len(a)])


@given(mst.mixtures(ties=True, max_V=5), mst.budgets(), st.randoms(use_true_random=False))
def test_permuting_the_modes_changes_nothing(mix, budget, rnd):
    """The score and the tie rule (best rank over the modes) are symmetric in the modes."""
    order = list(range(mix.K))
    rnd.shuffle(order)
    assert best_mode_tree(mix.log_q[order], budget) == best_mode_tree(mix.log_q, budget)


@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 4), st.integers(2, 6), mst.budgets(60))
def test_permuting_the_vocabulary_permutes_the_tree(seed, K, L, V, budget):
    log_q = mst.generic_log_q(seed, (K, L, V))  # [K, L, V], no ties
    perm = np.random.default_rng(seed).permutation(V)
    permuted = log_q[:, :, np.argsort(perm)]  # permuted[..., perm[v]] == log_q[..., v]
    a, b = best_mode_tree(log_q, budget), best_mode_tree(permuted, budget)
    assert {tuple(int(perm[v]) for v in p) for p in ref.tree_paths(a)} == set(ref.tree_paths(b))
    np.testing.assert_array_equal(a.log_score, b.log_score)


@given(mst.mixtures(ties=True, max_V=5), mst.budgets(), st.randoms(use_true_random=False))
def test_permuting_the_vocabulary_with_ties_keeps_the_scores(mix, budget, rnd):
    perm = list(range(mix.V))
    rnd.shuffle(perm)
    a = best_mode_tree(mix.log_q, budget)
    b = best_mode_tree(mix.log_q[:, :, np.argsort(perm)], budget)
    np.testing.assert_array_equal(a.log_score, b.log_score)


def test_a_mixture_stands_for_its_rows_and_the_package_exports_it():
    rng = np.random.default_rng(0)
    mix = MixtureOfProducts(np.log([0.9, 0.1]), mst.generic_log_q(1, (2, 3, 4)))
    assert best_mode_tree(mix, 20) == best_mode_tree(mix.log_q, 20)
    assert exported is best_mode_tree
    x = mst.generic_log_q(2, (2, 3, 4)).astype(np.float32)
    assert best_mode_tree(x, 9) == best_mode_tree(x.astype(np.float64), 9)  # float32 upcast exactly
    assert len(best_mode_tree(rng.normal(size=(3, 2, 2)) - 5, 100)) == 6  # capped at the 2 + 4 prefixes


# ----------------------------------------------------------------------------- against the mixture

@given(mst.mixtures(max_K=3), mst.budgets())
def test_the_mixture_tree_covers_at_least_the_best_mode_trees_mixture_mass(mix, budget):
    """Proven (docs/chimeras.md): the mixture tree holds the N largest Q(s), so no N-set covers
    more of the drafter's own mixture; the best-mode tree covers at least pi_min of it."""
    Q = mix.build()
    bm, mx = best_mode_tree(mix.log_q, budget), mixture_tree(mix.log_pi, mix.log_q, budget)
    c_bm, c_mx = coverage(bm, Q), coverage(mx, Q)
    assert c_bm <= c_mx + 1e-12
    assert c_bm >= float(np.exp(mix.log_pi.min())) * c_mx - 1e-12


@given(mst.mixtures(max_K=3), mst.budgets())
def test_the_two_scores_lie_within_the_smallest_weight(mix, budget):
    """pi_min max_k Q_k(s) <= Q(s) <= max_k Q_k(s) on every node (the sandwich)."""
    t = best_mode_tree(mix.log_q, budget)
    log_mix = mix.build().node_log_probs(t)
    ok = np.isfinite(t.log_score)
    assert np.all(log_mix[ok] <= t.log_score[ok] + SCORE_TOL)
    assert np.all(log_mix[ok] >= t.log_score[ok] + mix.log_pi.min() - SCORE_TOL)


def test_the_one_over_k_lower_bound_is_approached():
    """The docs' instance: N shared tokens every mode gives b, N / K private tokens per mode at
    b (1 + delta). The best-mode tree takes the private ones and covers (1 + delta) / K of the
    mixture tree's mass under uniform weights."""
    K, N, delta, b = 4, 8, 1e-3, 0.09
    V = N + N + 2  # two filler tokens take the rest, each below b
    q = np.zeros((K, 1, V))
    q[:, 0, :N] = b  # shared
    for k in range(K):
        q[k, 0, N + k * (N // K): N + (k + 1) * (N // K)] = b * (1 + delta)  # private
    q[:, 0, -2:] = (1 - q[:, 0, :-2].sum(axis=1, keepdims=True)) / 2
    assert q[:, 0, -2:].max() < b
    with np.errstate(divide="ignore"):
        lq = np.log(q)
    Q = MixtureOfProducts(np.full(K, -np.log(K)), lq)
    ratio = coverage(best_mode_tree(lq, N), Q) / coverage(mixture_tree(Q, N), Q)
    assert ratio == pytest.approx((1 + delta) / K, rel=1e-9)


def test_neither_tree_dominates_under_a_target():
    """The docs' L = 1 example: q_1 = (0.7, 0.3, 0), q_2 = (0, 0.6, 0.4), uniform weights. At
    N = 1 the mixture keeps token 1 (Q = 0.45), best-mode token 0 (score 0.7); a target that is
    the drafter favours the mixture, a target that is mode 1 favours best-mode."""
    with np.errstate(divide="ignore"):
        lq = np.log(np.array([[[0.7, 0.3, 0.0]], [[0.0, 0.6, 0.4]]]))  # [K=2, L=1, V=3]
    drafter = MixtureOfProducts(np.log([0.5, 0.5]), lq)
    bm, mx = best_mode_tree(lq, 1), mixture_tree(drafter, 1)
    assert bm.paths() == [(0,)] and mx.paths() == [(1,)]
    mode1 = MixtureOfProducts(np.zeros(1), lq[:1])
    assert coverage(mx, drafter) > coverage(bm, drafter)
    assert coverage(bm, mode1) > coverage(mx, mode1)


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("args, match", [
    ((np.zeros((2, 3)), 4), "log_q: expected shape"),
    ((np.full((2, 2, 3), np.nan), 4), "log_q: contains NaN"),
    ((np.full((2, 2, 3), 0.5), 4), "log_q: has entries above 0"),
    ((np.zeros((2, 2, 3)), 0), "budget"),
    ((np.zeros((0, 2, 3)), 4), "log_q"),
    ((np.zeros((2, 2, 3)), 4, np.zeros((2, 2), dtype=np.int64)), "token_ids: expected shape"),
    ((np.zeros((2, 2, 3)), 4, np.zeros((2, 2, 3))), "token_ids: must be integers"),
    ((np.zeros((2, 2, 3)), 4, -np.ones((2, 2, 3), dtype=np.int64)), "token_ids"),
    ((np.array([["a"]]), 4), "log_q: expected a float array"),
])
def test_bad_input_names_the_argument(args, match):
    with pytest.raises(ValueError, match=match):
        best_mode_tree(*args)


def test_duplicate_candidates_are_refused():
    ids = np.array([[[0, 0]], [[1, 2]]])  # mode 0 lists token 0 twice
    with pytest.raises(ValueError, match="token_ids: a token appears twice"):
        best_mode_tree(np.log(np.full((2, 1, 2), 0.5)), 3, token_ids=ids)


# ----------------------------------------------------------------------------- mfd best-mode

import mfd_theory.commands.theory.best_mode as bmc  # noqa: E402
import mfd_theory.runs.theory.best_mode as bmr  # noqa: E402
from mfd_theory.cli import main  # noqa: E402

SMALL = bmc.Config(n_instances=200, families=("two_futures", "branching"), two_futures_ms=(3,), Fs=(3,),
                   branch_at=2, L=6, V=8, budgets=(8, 32), Ks=(2,), seeds=(0, 1))


@given(mst.mixtures(ties=True, max_V=5), mst.budgets())
def test_the_commands_enumeration_is_the_tie_rule(mix, budget):
    """Two enumerations written apart (a nested key sort here, an unrolled flat key there) agree."""
    paths, scores = enumerated_best_mode(mix.log_q, budget)
    assert paths == ref.best_mode_tie_rule_order(mix.log_q, budget)
    tables = ref.best_mode_tables(mix.log_q)
    np.testing.assert_array_equal(scores, [ref.best_mode_score(tables, p) for p in paths])


@given(mst.candidates(max_k=4, id_pool=4, large_ids=False), mst.budgets())
def test_the_commands_enumeration_of_candidates_is_the_tie_rule(cand, budget):
    K, L, _ = cand.values.shape
    V = int(cand.token_ids.max()) + 1
    log_q = np.full((K, L, V), -np.inf)
    present = np.zeros((K, L, V), dtype=bool)
    np.put_along_axis(log_q, cand.token_ids, cand.values, axis=2)
    np.put_along_axis(present, cand.token_ids, True, axis=2)
    paths, _ = enumerated_best_mode(log_q, budget, present)
    assert paths == ref.best_mode_tie_rule_order(cand.values, budget, cand.token_ids)


def test_the_check_catches_a_wrong_builder(monkeypatch):
    """The enumeration check fails a builder that ranks by the first mode only."""
    cfg = bmc.Config(n_instances=40)
    assert bmr.check_instances(cfg)["mismatches"] == 0
    monkeypatch.setattr(bmr, "best_mode_tree", lambda lq, n, token_ids=None: best_mode_tree(
        lq[:1], n, token_ids=None if token_ids is None else token_ids[:1]))
    out = bmr.check_instances(cfg)
    assert out["mismatches"] > 0 and out["first_mismatch"] is not None


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("best_mode")
    return bmc.run(SMALL, out_dir=out, progress=False), out


def test_small_run_meets_the_theorems_and_the_oracle(small_run):
    res, _ = small_run
    d = res.data
    assert d["check"]["instances"] == 200 and d["check"]["mismatches"] == 0
    assert d["check"]["with_ties"] > 0 and all(r["instances"] == 50 for r in d["check"]["by_kind"].values())
    assert d["theorems"]["mixture_optimal_violations"] == 0 and d["theorems"]["lower_bound_violations"] == 0
    # two settings (one per family) x two seeds x two drafters (own, fit K=2) x two budgets
    assert len(d["rows"]) == 2 * 2 * 2 * 2 == d["theorems"]["rows"]
    for r in d["rows"]:
        assert all(not isinstance(v, (list, dict)) for v in r.values())
        for t in bmr.TREES:
            assert r[f"coverage_{t}"] <= r["oracle"] + 1e-9 and 0 <= r[f"chimera_share_{t}"] <= 1
        if r["drafter"] == "own":  # the target's own mixture tree is the oracle's
            assert r["coverage_mixture"] == pytest.approx(r["oracle"], rel=1e-12)
            assert r["chimera_share_mixture"] == 0 == r["chimera_share_best_mode"]
    for e in d["table"]:
        assert e["best_mode_more"] + e["best_mode_less"] <= e["cells"] == 2  # one setting x two seeds


def test_rerun_resumes_and_the_report_block_renders(small_run, capsys):
    from mfd_theory.report import render

    _, out = small_run
    capsys.readouterr()
    bmc.run(SMALL, out_dir=out, progress=False)
    assert "wrote 0 cell files" in capsys.readouterr().out
    text, changed, skipped = render("<!-- report:best-mode -->\nold\n<!-- /report:best-mode -->\n", out)
    assert changed == ["best-mode"] and skipped == [] and "old" not in text
    assert "**0 mismatches** in 200 random drafters" in text and "| branching | fit K=2 | 32 |" in text


@pytest.mark.parametrize("argv, flag", [
    (["--branch-at", "15"], "--branch-at"), (["--families", "nope"], "--families"),
    (["--max-V", "9"], "--max-V"), (["--two-futures-ms", "20"], "--two-futures-ms"), (["--Ks", "1"], "--Ks"),
])
def test_cli_refuses_bad_flags_before_writing(tmp_path, capsys, argv, flag):
    out = tmp_path / "o"
    assert main(["best-mode", *argv, "--out", str(out), "--quiet"]) == 2
    assert flag in capsys.readouterr().err
    assert not out.exists()
