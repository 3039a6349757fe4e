"""Tests of the chimera bound (mfd_theory.chimeras): reference twins, exhaustive and properties."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mfd_theory import chimeras as ch
from mfd_theory.layouts import widen_setting
from mfd_theory.trees import product_tree

import reference_chimeras as ref


def _dirichlet_log_q(rng, L, V, alpha=1.0):
    return np.log(rng.dirichlet(np.full(V, alpha), size=L))  # [L, V]


# ----------------------------------------------------------------------------- basics


def test_lower_bound_values():
    assert [ch.chimera_lower_bound(m) for m in range(1, 7)] == [0, 1, 3, 7, 15, 31]


def test_splices_match_reference_and_pair_complements():
    a = np.array([0, 1, 2, 3, 1])
    b = np.array([0, 2, 2, 1, 0])
    sp = ch.splices(a, b)
    assert sp.shape == (8, 5)
    assert {tuple(r) for r in sp.tolist()} == ref.splices(a, b)
    np.testing.assert_array_equal(sp[0], b)
    np.testing.assert_array_equal(sp[-1], a)
    full = sp.shape[0] - 1
    for k in range(sp.shape[0]):  # complements carry a's token exactly where row k carries b's
        comp = sp[full ^ k]
        diff = a != b
        assert np.all((sp[k][diff] == a[diff]) == (comp[diff] == b[diff]))


def test_min_tree_matches_reference_and_core_builder():
    rng = np.random.default_rng(0)
    for _ in range(40):
        L, V = int(rng.integers(1, 5)), int(rng.integers(2, 4))
        log_q = _dirichlet_log_q(rng, L, V)
        seqs = rng.integers(0, V, size=(int(rng.integers(1, 4)), L))
        tree = ch.min_product_tree_containing(log_q, seqs)
        assert set(tree.paths()) == ref.min_tree_paths(log_q, seqs)
        # generic marginals have no ties, so DDTree's top-N at the same N is the same tree
        assert set(product_tree(log_q, len(tree)).paths()) == set(tree.paths())
        got = ch.count_chimeras(tree, seqs)
        want = ref.chimera_counts(tree.paths(), seqs)
        assert (got.full_length, got.shorter, got.full_length_splices, got.shorter_splices) == (
            want["full_length"], want["shorter"], want["full_length_splices"], want["shorter_splices"])
        assert np.all(np.diff(tree.log_score) <= 1e-12)  # best-first order


def test_score_count_kernel_matches_reference():
    # tolerance: both sides use the same 1e-9 tie rule; differences would be real disagreements
    rng = np.random.default_rng(1)
    for _ in range(200):
        L, V = int(rng.integers(1, 8)), int(rng.integers(2, 5))
        m = int(rng.integers(1, L + 1))
        log_q = _dirichlet_log_q(rng, L, V)
        a = rng.integers(0, V, size=L)
        b = a.copy()
        pos = rng.choice(L, size=m, replace=False)
        b[pos] = (a[pos] + rng.integers(1, V, size=m)) % V
        assert ch.splice_chimeras_from_scores(log_q, a, b) == ref.splice_chimeras_above(log_q, a, b)


# ----------------------------------------------------------------------------- exhaustive


def test_bound_exhaustive_over_every_disagreement_pattern_small():
    """Every (positions, b-tokens) pattern for L <= 6, V <= 3 with a fixed a, random marginals."""
    rng = np.random.default_rng(2)
    checked = 0
    for L in range(1, 7):
        for V in (2, 3):
            a = rng.integers(0, V, size=L)
            choices = [[t for t in range(V)] for _ in range(L)]  # b_i = a_i (agree) or another token
            for b_tuple in itertools.product(*choices):
                b = np.array(b_tuple)
                m = int((a != b).sum())
                if m == 0:
                    continue
                log_q = _dirichlet_log_q(rng, L, V)
                above, tied = ch.splice_chimeras_from_scores(log_q, a, b)
                assert tied == 0  # continuous marginals: ties have probability zero
                assert ch.chimera_lower_bound(m) <= above <= (1 << m) - 2
                if L <= 4:  # explicit trees for the smaller cases (V^L prefixes each)
                    tree = ch.min_product_tree_containing(log_q, [a, b])
                    assert ch.count_chimeras(tree, [a, b]).full_length_splices == above
                checked += 1
    assert checked == sum(2**L - 1 + 3**L - 1 for L in range(1, 7))


# ----------------------------------------------------------------------------- properties


@st.composite
def pair_instances(draw, L_max=12, V_max=5):
    L = draw(st.integers(1, L_max))
    V = draw(st.integers(2, V_max))
    m = draw(st.integers(1, min(L, 10)))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    log_q = _dirichlet_log_q(rng, L, V, alpha=draw(st.sampled_from([0.3, 1.0, 5.0])))
    a = rng.integers(0, V, size=L)
    b = a.copy()
    pos = rng.choice(L, size=m, replace=False)
    b[pos] = (a[pos] + rng.integers(1, V, size=m)) % V
    return log_q, a, b, m


@settings(deadline=None, max_examples=60)
@given(pair_instances())
def test_property_bound_holds_and_is_symmetric(inst):
    log_q, a, b, m = inst
    above, tied = ch.splice_chimeras_from_scores(log_q, a, b)
    if tied:
        return  # the theorem is stated barring ties
    assert ch.chimera_lower_bound(m) <= above <= (1 << m) - 2
    assert ch.splice_chimeras_from_scores(log_q, b, a) == (above, tied)  # swapping the futures
    # metamorphic: relabelling the vocabulary at every position leaves the count unchanged
    rng = np.random.default_rng(m)
    perms = np.stack([rng.permutation(log_q.shape[1]) for _ in range(log_q.shape[0])])  # [L, V]
    lq2 = np.empty_like(log_q)
    np.put_along_axis(lq2, perms, log_q, axis=1)  # token v at position i becomes perms[i, v]
    a2 = perms[np.arange(len(a)), a]
    b2 = perms[np.arange(len(b)), b]
    assert ch.splice_chimeras_from_scores(lq2, a2, b2) == (above, tied)


@settings(deadline=None, max_examples=40)
@given(pair_instances(L_max=12, V_max=3))
def test_property_one_splice_of_every_complementary_pair_is_kept(inst):
    log_q, a, b, m = inst
    sp = ch.splices(a, b)  # [2^m, L]
    sc = log_q[np.arange(len(a))[None, :], sp].sum(axis=1)
    t = min(sc[0], sc[-1])
    full = sp.shape[0] - 1
    # tolerance: 1e-9 relative, the module's tie rule
    kept = sc >= t - 1e-9 * (1 + abs(t))
    assert all(kept[k] or kept[full ^ k] for k in range(sp.shape[0]))
    np.testing.assert_allclose(sc + sc[::-1], sc[0] + sc[-1], rtol=0, atol=1e-9)  # Q(s) Q(s') = Q(a) Q(b)


@settings(deadline=None, max_examples=30)
@given(st.integers(1, 9), st.integers(0, 6), st.integers(2, 6), st.integers(0, 10_000))
def test_property_tight_and_worst_instances(m, extra, V, seed):
    L = m + extra
    for make, want in ((ch.tight_instance, ch.chimera_lower_bound(m)), (ch.worst_instance, (1 << m) - 2)):
        log_q, a, b = make(m, L=L, V=V, seed=seed)
        assert int((a != b).sum()) == m
        np.testing.assert_allclose(np.exp(log_q).sum(axis=1), 1.0, atol=1e-12)
        assert ch.splice_chimeras_from_scores(log_q, a, b) == (want, 0)
        if m <= 7:
            c = ch.count_chimeras(ch.min_product_tree_containing(log_q, [a, b]), [a, b])
            assert c.full_length_splices == want
            assert c.full_length == want  # no non-splice sequence reaches the weaker future


def test_verify_bound_reports_zero_violations_and_only_tied_futures_can_break_it():
    res = ch.verify_bound(20_000, seed=3)
    assert res.instances + res.ties == 20_000
    assert res.violations == 0
    assert all(v >= 0 for v in res.min_slack.values())
    table = res.table()
    assert [r["m"] for r in table] == list(range(1, 11))
    assert all(r["min"] == r["bound"] for r in table)  # near-tied instances reach the bound
    tie = ch.verify_bound(5_000, seed=4, grid=2)
    # sharper theorem: ties other than Q(a) = Q(b) are harmless, so on the tie-prone grid the
    # checked instances (many with tied splices) never go below; only futures that tie can
    assert tie.other_ties > 0 and tie.violations == 0
    assert tie.ties > 0 and sum(r.get("tie_violations", 0) for r in tie.table()) > 0
    assert tie.instances + tie.ties == 5_000


def test_sharper_theorem_on_exact_rational_grid_instances():
    # integer weights 1..3: ties are frequent and decided exactly with fractions
    import reference_chimeras as rc

    rng = np.random.default_rng(11)
    unequal = other_tied = equal = equal_below = 0
    for _ in range(1500):
        L, V = int(rng.integers(2, 6)), int(rng.integers(2, 4))
        w = rng.integers(1, 4, size=(L, V))  # [L, V]
        a = rng.integers(0, V, size=L)
        m = int(rng.integers(1, L + 1))
        b = a.copy()
        pos = rng.choice(L, size=m, replace=False)
        b[pos] = (a[pos] + rng.integers(1, V, size=m)) % V
        above, tied, futures_tie = rc.exact_splice_counts(w, a, b)
        log_q = np.log(w / w.sum(axis=1, keepdims=True))
        if not futures_tie:
            unequal += 1
            other_tied += tied > 0
            assert above >= ch.chimera_lower_bound(m), (w, a, b)  # whatever the other ties
        else:
            equal += 1
            equal_below += above < ch.chimera_lower_bound(m)
        # the float count agrees with the exact one (ties within the package's tolerance)
        assert ch.splice_chimeras_from_scores(log_q, a, b) == (above, tied)
    assert unequal > 500 and other_tied > 50  # the harmless ties were exercised
    assert equal > 50 and equal_below > 0  # and Q(a) = Q(b) does break the bound


def test_futures_that_tie_can_break_the_bound():
    # Q(a) = Q(b) with a complementary pair tied at t: both splices of the pair can be left out
    w = np.array([[1, 1], [1, 2], [2, 1]])  # a = 000, b = 111: Q(a) = Q(b) = 1/2 * 1/3 * 2/3
    a, b = np.array([0, 0, 0]), np.array([1, 1, 1])
    import reference_chimeras as rc

    above, tied, futures_tie = rc.exact_splice_counts(w, a, b)
    assert futures_tie and above < ch.chimera_lower_bound(3) <= above + tied


def test_equal_ratio_ties_leave_no_chimera():
    # q(a_i) = q(b_i) everywhere they differ: every splice ties with both futures
    log_q = np.log(np.full((4, 2), 0.5))
    a, b = np.array([0, 0, 0, 0]), np.array([1, 1, 1, 0])
    assert ch.splice_chimeras_from_scores(log_q, a, b) == (0, 6)
    tree = ch.min_product_tree_containing(log_q, [a, b])
    assert ch.count_chimeras(tree, [a, b]).full_length == 0


# ----------------------------------------------------------------------------- bad input


def test_unequal_lengths_raise():
    with pytest.raises(ValueError, match="unequal length"):
        ch.splices([0, 1, 2], [0, 1])
    with pytest.raises(ValueError, match="unequal length"):
        ch.min_product_tree_containing(np.log(np.full((3, 2), 0.5)), [[0, 1, 0], [0, 1]])


def test_sequences_shorter_than_drafter_raise():
    with pytest.raises(ValueError, match="L = 3"):
        ch.min_product_tree_containing(np.log(np.full((3, 2), 0.5)), [[0, 1]])


def test_identical_futures_raise():
    with pytest.raises(ValueError, match="m = 0"):
        ch.splices([0, 1, 2], [0, 1, 2])
    with pytest.raises(ValueError, match="m = 0"):
        ch.splice_chimeras_from_scores(np.log(np.full((3, 2), 0.5)), [0, 1, 1], [0, 1, 1])


def test_tokens_outside_vocabulary_raise():
    log_q = np.log(np.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ch.min_product_tree_containing(log_q, [[0, 1, 2]])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ch.splices([0, 1, 5], [0, 1, 0], V=3)
    with pytest.raises(ValueError, match="negative"):
        ch.splices([0, -1], [0, 1])


def test_zero_probability_future_raises():
    q = np.array([[1.0, 0.0], [0.5, 0.5]])
    with np.errstate(divide="ignore"):
        log_q = np.log(q)
    with pytest.raises(ValueError, match="probability zero"):
        ch.min_product_tree_containing(log_q, [[0, 0], [1, 1]])
    # outside the theorem, but counted: (0, 1) has probability 1/2 > 0 = t, (1, 0) has 0 = t
    assert ch.splice_chimeras_from_scores(log_q, [0, 0], [1, 1]) == (1, 1)


def test_other_bad_arguments_raise():
    with pytest.raises(ValueError, match="m"):
        ch.chimera_lower_bound(0)
    with pytest.raises(ValueError, match="log_q"):
        ch.min_product_tree_containing(np.zeros((2, 2)) + 0.5, [[0, 0]])
    with pytest.raises(ValueError, match="max_nodes"):
        ch.min_product_tree_containing(np.log(np.full((12, 2), 0.5)) + np.array([0, -1e-3]), [[1] * 12],
                                       max_nodes=10)
    with pytest.raises(ValueError, match="L"):
        ch.tight_instance(5, L=3)
    with pytest.raises(ValueError, match="n_instances"):
        ch.verify_bound(0)


# ----------------------------------------------------------------------------- F >= 3 futures


def test_patterns_round_trip_and_canonical_form():
    fut = ch.futures_from_pattern({"01|2": 2, "0|1|2": 1})
    assert fut.shape == (3, 3)
    assert ch.column_pattern(fut) == {"01|2": 2, "0|1|2": 1}
    assert ch.canonical_pattern({"0|12": 1, "01|2": 1}, 3) == ch.canonical_pattern({"01|2": 1, "02|1": 1}, 3)
    assert len(ch.column_types(3)) == 4 and len(ch.column_types(4)) == 14
    with pytest.raises(ValueError, match="identical"):
        ch.futures_from_pattern({"01|2": 1})  # futures 0 and 1 never separated


def test_multi_future_two_futures_reduce_to_the_theorem():
    for m in range(1, 6):
        r = ch.min_chimeras_multi(ch.futures_from_pattern({"0|1": m}), n_trials=200)
        assert r.lower_bound == r.observed_min == ch.chimera_lower_bound(m)


def test_multi_future_lower_bound_never_exceeds_a_witness():
    # the witness drafter, built into a real tree, keeps exactly observed_min full-length chimeras
    for pat in ({"0|1|2": 3}, {"01|2": 2, "0|12": 2}, {"01|2": 1, "0|1|2": 2}, {"0|1|2|3": 2}):
        fut = ch.futures_from_pattern(pat)
        r = ch.min_chimeras_multi(fut, n_trials=300, witness=True)
        assert r.pairwise_bound <= r.lower_bound <= r.observed_min <= r.splices
        tree = ch.min_product_tree_containing(r.witness_log_q, fut)
        assert ch.count_chimeras(tree, fut).full_length == r.observed_min


def test_all_distinct_minimum_matches_the_conjectured_formula_small():
    for F, m in ((3, 2), (3, 3), (4, 2), (4, 3)):
        lab = "|".join(str(f) for f in range(F))
        r = ch.min_chimeras_multi(ch.futures_from_pattern({lab: m}), n_trials=500)
        assert r.proven and r.observed_min == ch.conjectured_min_all_distinct(F, m)


# ----------------------------------------------------------------------------- experiment CLIs


def test_chimera_bound_cli_writes_a_result(tmp_path):
    import mfd_theory.commands.theory.chimera_bound as cb
    from mfd_theory.results import Result

    cb.main(["--n-instances", "5000", "--n-tie-instances", "1000", "--n-cross-check", "5",
             "--multi-F3-columns", "2", "--multi-F4-columns", "1", "--multi-all-distinct-F3", "3",
             "--multi-all-distinct-F4", "2", "--multi-trials", "100", "--out", str(tmp_path), "--quiet"])
    res = Result.load(tmp_path / "chimera_bound.json")
    assert res.config["n_instances"] == 5000
    assert res.data["verify"]["violations"] == 0
    assert res.data["cross_check"]["count_agrees"] == 5
    assert all(r["proven"] for r in res.data["multi_future"])


def test_chimera_share_cli_writes_a_result_and_resumes(tmp_path):
    import mfd_theory.commands.theory.chimera_share as cs
    import mfd_theory.synthetic as syn
    from mfd_theory.results import Result

    argv = ["--n-seeds", "1", "--budgets", "16", "64", "--two-futures-m", "2", "--F-values", "2",
            "--branch-points", "1", "--noisy-F", "2", "--temperatures", "0.5", "--zipf-F", "2",
            "--zipf-profiles", "medusa", "--noise-levels", "0.2", "--out", str(tmp_path), "--quiet"]
    cs.main(argv)
    res = Result.load(tmp_path / "chimera_share.json")
    rows = res.data["settings"]
    assert {r["family"] for r in rows} == set(syn.FAMILIES)
    assert res.seed == [0]  # the seeds the settings ran with
    for row in rows:
        # long format: one row of scalars per budget, no per-budget list inside the setting's row
        assert [b["budget"] for b in row["by_budget"]] == [16, 64]
        assert all(not isinstance(v, list) for k, v in row.items() if k != "by_budget")
        assert all(not isinstance(v, (list, dict)) for b in row["by_budget"] for v in b.values())
        assert row["share_at_64"] == row["by_budget"][1]["chimera_share"]
        r = widen_setting(row)
        assert r["budgets"] == [16, 64]
        assert all(0.0 <= x <= 1.0 for x in r["chimera_share"])
        assert all(p <= o + 1e-9 for p, o in zip(r["cov_product"], r["cov_oracle"]))  # oracle is the ceiling
        # exact modes make the mixture tree the oracle; 1e-9: sums of the same probabilities
        np.testing.assert_allclose(r["cov_mixture"], r["cov_oracle"], rtol=1e-9)
    n_cells = len(list((tmp_path / "chimera_share").glob("*.json")))
    cs.main(argv)  # the second run loads every cell from the store
    assert len(list((tmp_path / "chimera_share").glob("*.json"))) == n_cells


def test_tight_instance_is_tie_free_over_its_whole_range():
    # the near-tie gap 2^-(m-1) must stay above the tie tolerance for every allowed m
    for m in range(1, ch.TIGHT_M_MAX + 1):
        log_q, a, b = ch.tight_instance(m, L=max(15, m), V=4, seed=m)
        assert ch.splice_chimeras_from_scores(log_q, a, b) == (ch.chimera_lower_bound(m), 0), m
    with pytest.raises(ValueError, match="m: at most 24"):
        ch.tight_instance(ch.TIGHT_M_MAX + 1, L=30)


def test_count_chimeras_and_chimera_mask_take_the_same_arguments():
    import dataclasses

    from mfd_theory.coverage import chimera_mask
    from mfd_theory.distributions import MixtureOfProducts
    from mfd_theory.trees import product_tree

    fut = np.array([[0, 1, 2, 3], [0, 2, 1, 3], [1, 1, 2, 0]])
    target = MixtureOfProducts.futures(fut, weights=[0.5, 0.3, 0.2], vocab_size=4)
    tree = product_tree(target.marginals(), 30)
    by_futures, by_target = ch.count_chimeras(tree, fut), ch.count_chimeras(tree, target)
    assert by_futures == by_target and by_futures.total > 0
    mask = chimera_mask(tree, fut)
    np.testing.assert_array_equal(mask, chimera_mask(tree, target))
    assert int(mask.sum()) == by_futures.total
    assert {f.name for f in dataclasses.fields(ch.ChimeraCount)} == {
        "n_nodes", "full_length", "shorter", "full_length_splices", "shorter_splices"}
    with pytest.raises(ValueError, match="eps"):
        chimera_mask(tree, fut, eps=0.1)
    with pytest.raises(ValueError, match="target"):
        chimera_mask(tree, "abc")


def test_pattern_sweep_builds_and_counts_every_witness_tree():
    from mfd_theory.commands.theory.chimera_bound import Config
    from mfd_theory.runs.theory.chimera_bound import multi_future_rows

    cfg = Config(multi_F3_columns=2, multi_F4_columns=1, multi_all_distinct_F3=3, multi_all_distinct_F4=2,
                 multi_trials=200, multi_retry_trials=400, multi_retries=2)
    rows = multi_future_rows(cfg)
    assert len(rows) > 5
    for r in rows:
        assert r["witness_full_length_chimeras"] == r["observed_min"], r  # counted on a real tree
        assert r["witness_checked"] and r["witness_tree_nodes"] >= r["observed_min"]
        assert r["proven"] == (r["lower_bound"] == r["observed_min"])


def test_exact_minima_artifact_is_consistent():
    # the stored one-off results: every exact row was re-counted on its witness tree and meets
    # its lower bound; the search-only rows are upper bounds
    import json
    from pathlib import Path

    import mfd_theory

    path = Path(mfd_theory.__file__).parent / "data" / "chimera_all_distinct.json"
    data = json.loads(path.read_text())
    assert data["name"] == "chimera_all_distinct" and "git_sha" in data["provenance"]
    for r in data["data"]["rows"]:
        assert r["witness_full_length_chimeras"] == r["observed_min"] and r["witness_checked"]
        assert r["conjecture"] == ch.conjectured_min_all_distinct(r["F"], r["m"])
        if r["lower_bound"] is not None:
            assert r["exact"] == (r["lower_bound"] == r["observed_min"])
        else:
            assert not r["exact"]


# ----------------------------------------------------------------------------- zero-probability futures


def test_zero_probability_future_is_outside_the_theorem():
    # q_1 = (1, 0), q_2 = (0, 1), a = (1, 0), b = (0, 1): the theorem's min(Q(a), Q(b)) > 0 fails
    with np.errstate(divide="ignore"):
        log_q = np.log(np.array([[1.0, 0.0], [0.0, 1.0]]))
    a, b = [1, 0], [0, 1]
    # a legitimate top-4 set holding both futures and no chimera: nothing left out outscores it
    kept = {(0,), (0, 1), (1,), (1, 0)}
    every = {(0,), (1,), *itertools.product(range(2), repeat=2)}
    score = {s: float(sum(log_q[i, t] for i, t in enumerate(s))) for s in every}
    assert max(score[s] for s in every - kept) <= min(score[s] for s in kept)
    assert tuple(a) in kept and tuple(b) in kept
    assert not any(len(s) == 2 and s not in (tuple(a), tuple(b)) for s in kept)
    above, tied = ch.splice_chimeras_from_scores(log_q, a, b)
    assert above == 0 < ch.chimera_lower_bound(2) and above + tied == 2
    with pytest.raises(ValueError, match=r"min\(Q\(a\), Q\(b\)\) > 0"):
        ch.min_product_tree_containing(log_q, [a, b])


def test_zero_probability_counts_match_exact_arithmetic():
    import reference_chimeras as rc

    rng = np.random.default_rng(5)
    zero = below = 0
    for _ in range(600):
        L, V = int(rng.integers(2, 6)), int(rng.integers(2, 4))
        w = rng.integers(0, 3, size=(L, V))  # zeros: impossible tokens
        w[w.sum(axis=1) == 0, 0] = 1
        a = rng.integers(0, V, size=L)
        m = int(rng.integers(1, L + 1))
        b = a.copy()
        pos = rng.choice(L, size=m, replace=False)
        b[pos] = (a[pos] + rng.integers(1, V, size=m)) % V
        with np.errstate(divide="ignore"):
            log_q = np.log(w / w.sum(axis=1, keepdims=True))
        above, tied, _ = rc.exact_splice_counts(w, a, b)
        assert ch.splice_chimeras_from_scores(log_q, a, b) == (above, tied), (w, a, b)
        if np.isneginf(log_q[np.arange(L), a]).any() or np.isneginf(log_q[np.arange(L), b]).any():
            zero += 1
            below += above < ch.chimera_lower_bound(m)
    assert zero > 100 and below > 0


def test_verify_bound_with_a_tiny_alpha_keeps_every_future_possible():
    res = ch.verify_bound(2000, alpha=0.003, m_max=6, L_max=8)
    assert res.instances + res.ties == 2000 and res.violations == 0


# ----------------------------------------------------------------------------- one set of input types
def test_every_chimeras_function_takes_the_same_input_types():
    """A drafter as rows [L, V] or a one-mode MixtureOfProducts (target.marginals(), as product_tree
    takes it); futures as token ids (array or lists) or a MixtureOfProducts (its modes' most
    likely sequences), in every function of mfd_theory.chimeras; anything else refused in one
    line naming the argument."""
    from mfd_theory.chimeras import (column_pattern, count_chimeras, min_chimeras_multi, min_product_tree_containing,
                                     pairwise_bound, splice_chimeras_from_scores)
    from mfd_theory.distributions import MixtureOfProducts
    from reference import tree_paths

    a, b, c = [3, 1, 4, 1, 5], [3, 2, 4, 0, 5], [0, 2, 4, 1, 1]
    target = MixtureOfProducts.futures([a, b, c], weights=[0.5, 0.3, 0.2], vocab_size=6, noise=0.02)
    marg = target.marginals()
    rows, seqs = marg.log_q[0], np.array([a, b, c])
    want = min_product_tree_containing(rows, seqs)
    for drafter in (marg, rows, rows.astype(np.float32), rows.tolist()):
        for futures in (target, seqs, seqs.tolist()):
            got = min_product_tree_containing(drafter, futures)
            assert len(got) == len(want) and set(tree_paths(got)) == set(tree_paths(want))
    assert splice_chimeras_from_scores(marg, a, b) == splice_chimeras_from_scores(rows, np.array(a), np.array(b))
    assert column_pattern(target) == column_pattern(seqs) == column_pattern(seqs.tolist())
    assert pairwise_bound(target) == pairwise_bound(seqs)
    assert (min_chimeras_multi(target, n_trials=5, lower_bound=False).observed_min
            == min_chimeras_multi(seqs, n_trials=5, lower_bound=False).observed_min)
    assert count_chimeras(want, seqs.tolist()) == count_chimeras(want, seqs)
    with pytest.raises(ValueError, match=r"^log_q: a MixtureOfProducts with K = 3 modes is not a product drafter"):
        min_product_tree_containing(target, seqs)
    with pytest.raises(ValueError, match=r"^log_q: a MixtureOfProducts with K = 3"):
        splice_chimeras_from_scores(target, a, b)
    with pytest.raises(ValueError, match=r"^log_q: expected a \[L, V\] array"):
        min_product_tree_containing("not a drafter", seqs)
    with pytest.raises(ValueError, match=r"^futures: "):
        pairwise_bound([[1, 2], [3]])
    with pytest.raises(ValueError, match=r"^target: "):
        count_chimeras(want, [[1.5, 2.0]])
