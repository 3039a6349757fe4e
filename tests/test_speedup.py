"""Tests for mfd_theory.speedup: latency profiles, the speedup formula and the budget choices."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mfd_theory.sequoia import sequoia_tree
from mfd_theory.speedup import (
    LatencyProfile,
    best_fixed_budget,
    default_profile,
    default_profile_names,
    load_latency_profile,
    per_step_budget,
    per_step_speedup,
    sequoia_choice,
    speedup,
)

from reference_sequoia import per_step_budget_loop, speedup_by_hand

ROUNDOFF = 1e-12  # a handful of float64 operations

TABLE = dict(
    name="toy", device="cpu", model="toy", assumption=True, t_target_ms=10.0, t_draft_ms=2.0,
    tree_sizes=[1, 4, 16, 64], verify_ms=[10.0, 11.0, 14.0, 30.0],
)


def toy(**changes) -> LatencyProfile:
    return LatencyProfile(**{**TABLE, **changes})


def test_default_profiles_load_and_are_labelled_assumptions():
    names = default_profile_names()
    assert "h100_qwen3-8b" in names and len(names) >= 2
    for name in names:
        prof = default_profile(name)
        assert prof.assumption and "ASSUMPTION" in prof.note and "ASSUMED" in prof.label


def test_t_verify_interpolates_monotonically():
    prof = toy()
    np.testing.assert_allclose(prof.t_verify(TABLE["tree_sizes"]), TABLE["verify_ms"], atol=ROUNDOFF)
    grid = np.linspace(0, 200, 2001)
    t = prof.t_verify(grid)
    assert np.all(np.diff(t) >= -ROUNDOFF)
    assert prof.t_verify(0.5) == TABLE["verify_ms"][0]  # held below the smallest size
    assert prof.t_verify(128) == pytest.approx(30.0 + 64 * 16.0 / 48, abs=ROUNDOFF)  # last slope


def test_speedup_formula():
    prof = toy()
    for cov, n in [(0.0, 1), (2.5, 4), (7.0, 64)]:
        want = speedup_by_hand(cov, n, 10.0, 2.0, TABLE["tree_sizes"], TABLE["verify_ms"])
        assert speedup(cov, n, prof) == pytest.approx(want, abs=ROUNDOFF)
    np.testing.assert_allclose(speedup([0.0, 7.0], [1, 64], prof), [10 / 12, 80 / 32], atol=ROUNDOFF)


def test_best_fixed_budget_is_the_argmax():
    prof = toy()
    rng = np.random.default_rng(0)
    gains = np.sort(rng.uniform(0, 0.5, size=(5, 64)), axis=1)[:, ::-1]  # [S, M], decreasing
    curves = np.concatenate([np.zeros((5, 1)), np.cumsum(gains, axis=1)], axis=1)  # [S, M + 1]
    choice = best_fixed_budget(curves, prof)
    brute = [speedup(curves[:, n].mean(), n, prof) for n in range(1, 65)]
    assert choice.budget == int(np.argmax(brute)) + 1
    assert choice.speedup == pytest.approx(max(brute), abs=ROUNDOFF)


def test_per_step_budget_matches_loop():
    prof = toy()
    rng = np.random.default_rng(1)
    for _ in range(20):
        gains = np.sort(rng.exponential(0.2, size=60))[::-1]
        assert per_step_budget(gains, prof) == per_step_budget_loop(gains, prof.step_ms)


def test_per_step_never_loses_to_fixed_with_exact_predictions():
    # predicted gains = true gains and concave throughput: each step's stop is its own optimum
    prof = toy()
    rng = np.random.default_rng(2)
    gains = np.sort(rng.uniform(0, 1, size=(8, 64)) * rng.uniform(0.1, 1, size=(8, 1)), axis=1)[:, ::-1]
    curves = np.concatenate([np.zeros((8, 1)), np.cumsum(gains, axis=1)], axis=1)
    s_step, chosen = per_step_speedup(gains, curves, prof)
    assert chosen.shape == (8,)
    assert s_step >= best_fixed_budget(curves, prof).speedup - 0.05


def test_sequoia_choice_matches_search():
    prof = toy()
    p = [0.6, 0.2, 0.1]
    got = sequoia_choice(p, prof, 20, 4, draft="autoregressive")
    best = max(
        (speedup(sequoia_tree(p, n, d).expected_accepted, n, prof, draft_passes=d), n, d)
        for d in range(1, 5) for n in range(1, 21) if n <= sum(3**i for i in range(1, d + 1))
    )
    assert got.speedup == pytest.approx(best[0], abs=ROUNDOFF)
    assert (got.budget, got.max_depth) == (best[1], best[2])


def test_save_load_round_trip(tmp_path):
    prof = toy(assumption=False, note="measured")
    path = prof.save(tmp_path / "lat.json")
    assert load_latency_profile(path) == prof


# ------------------------------------------------------------------------------ bad input
def test_non_monotone_table():
    with pytest.raises(ValueError, match="verify_ms.*not monotone"):
        toy(verify_ms=[10.0, 12.0, 11.0, 30.0])


def test_empty_table():
    with pytest.raises(ValueError, match="empty"):
        toy(tree_sizes=[], verify_ms=[])


def test_table_length_mismatch():
    with pytest.raises(ValueError, match="verify_ms"):
        toy(verify_ms=[10.0, 11.0])


def test_sizes_not_increasing():
    with pytest.raises(ValueError, match="tree_sizes"):
        toy(tree_sizes=[1, 16, 4, 64])


def test_non_positive_target_time():
    with pytest.raises(ValueError, match="t_target_ms"):
        toy(t_target_ms=0.0)


def test_file_missing_field(tmp_path):
    d = dict(TABLE)
    del d["verify_ms"]
    (tmp_path / "p.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="verify_ms"):
        load_latency_profile(tmp_path / "p.json")


def test_file_not_json(tmp_path):
    (tmp_path / "p.json").write_text("{not json")
    with pytest.raises(ValueError, match="JSON"):
        load_latency_profile(tmp_path / "p.json")


def test_file_absent(tmp_path):
    with pytest.raises(ValueError, match="path"):
        load_latency_profile(tmp_path / "nope.json")


def test_unknown_default():
    with pytest.raises(ValueError, match="name"):
        default_profile("tpu")


def test_negative_coverage():
    with pytest.raises(ValueError, match="coverage"):
        speedup(-0.1, 4, toy())


def test_sequoia_choice_bad_acceptance():
    with pytest.raises(ValueError, match="acceptance"):
        sequoia_choice([0.8, 0.5], toy(), 10, 3)


def test_make_monotone_on_load(tmp_path):
    d = {**TABLE, "verify_ms": [10.0, 9.9, 14.0, 30.0], "provenance": {"git_sha": "x"}}
    (tmp_path / "p.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="not monotone"):
        load_latency_profile(tmp_path / "p.json")
    prof = load_latency_profile(tmp_path / "p.json", make_monotone=True)
    assert prof.verify_ms == (10.0, 10.0, 14.0, 30.0) and "running maximum" in prof.note


def test_nan_draft_time():
    with pytest.raises(ValueError, match="t_draft_ms.*NaN"):
        toy(t_draft_ms=float("nan"))


# ------------------------------------------------------------------ the measured round cost model
from mfd_theory.speedup import OverheadTable, cell_speedup, isotonic, length_factor  # noqa: E402

from reference_speedup import expected_rounds, isotonic_minmax, round_ms_by_hand  # noqa: E402

ROUND = dict(
    TABLE, assumption=False, t_target_ms=4.0, t_draft_ms=1.0, tree_sizes=[8, 32], verify_ms=[5.0, 7.0],
    draw_ms=0.05, draft_modes=[1, 2, 4], draft_ms=[1.0, 2.0, 3.0],
    overhead=[dict(method="mfd", K=2, tree_sizes=[8, 32], tree_ms=[0.5, 1.0], walk_ms=[0.1, 0.2],
                   commit_ms=[0.2, 0.2]),
              dict(method="ddtree", K=1, tree_sizes=[8], tree_ms=[0.3], walk_ms=[0.1], commit_ms=[0.2])],
)


def round_profile(**changes) -> LatencyProfile:
    return LatencyProfile.from_dict({**ROUND, **changes})


def test_cell_speedup_hand_computed():
    prof = round_profile()
    # mfd, K = 2, N = 8, T = 1, 1.5 accepted: round = 2 + 0.5 + 5 + 0.1 + 2.5 * 0.05 + 0.2 = 7.925 ms,
    # AR round 4 + 0.05 ms, 2.5 tokens per round
    assert cell_speedup(1.5, "mfd", 2, 8, prof, temperature=1.0) == pytest.approx(2.5 * 4.05 / 7.925, abs=ROUNDOFF)
    # greedy: no draws; N = 20 halfway along the tables (a 2-point verify table is a line)
    want = 2.5 * 4.0 / round_ms_by_hand(2.0, 0.75, 6.0, 0.15, 0.2, 0.05, 1.5, 0.0)
    assert cell_speedup(1.5, "mfd", 2, 20, prof) == pytest.approx(want, abs=ROUNDOFF)
    # K = 3 interpolates the drafting table; a one-size overhead table is constant in N
    assert prof.t_draft(3) == pytest.approx(2.5, abs=ROUNDOFF)
    assert cell_speedup(2.0, "ddtree", 1, 32, prof) == pytest.approx(
        3.0 * 4.0 / round_ms_by_hand(1.0, 0.3, 7.0, 0.1, 0.2, 0.05, 2.0, 0.0), abs=ROUNDOFF)
    assert cell_speedup(0.0, "ar", 0, 0, prof) == 1.0
    # a tree built at 32 and cut to 8 nodes pays the tree term at 32, the rest at 8
    want = 2.5 * 4.0 / round_ms_by_hand(2.0, 1.0, 5.0, 0.1, 0.2, 0.05, 1.5, 0.0)
    assert cell_speedup(1.5, "mfd", 2, 8, prof, build_budget=32) == pytest.approx(want, abs=ROUNDOFF)
    with pytest.raises(ValueError, match="build_n"):
        prof.round_ms("mfd", 2, 32, build_n=8)
    with pytest.raises(ValueError, match="no overhead table"):
        cell_speedup(1.0, "mfd", 4, 8, prof)


def test_old_profile_rounds_are_draft_plus_verify():
    prof = toy()
    assert not prof.measured_round and prof.t_draft(4) == 2.0
    assert sum(prof.round_ms("ddtree", 4, 16).values()) == pytest.approx(2.0 + 14.0, abs=ROUNDOFF)
    assert cell_speedup(2.5, "ddtree", 1, 4, prof) == pytest.approx(speedup(2.5, 4, prof), abs=ROUNDOFF)


def test_fake_profile_predicts_a_synthetic_run_exactly():
    """A synthetic run whose every round takes exactly the profile's terms: measured speedup (AR
    time per token over the cell's) equals the prediction from its mean accepted length."""
    prof = round_profile()
    rng = np.random.default_rng(0)
    accepted = rng.integers(0, 6, size=40)
    for temp in (0.0, 1.0):
        secs = sum(sum(prof.round_ms("mfd", 2, 32, temp, a).values()) for a in accepted)
        tokens = int(np.sum(accepted + 1))
        measured = (prof.t_ar(temp) * tokens / tokens) / (secs / tokens)  # AR: one token per round
        assert cell_speedup(float(accepted.mean()), "mfd", 2, 32, prof, temp) == pytest.approx(measured, rel=1e-12)


@pytest.mark.parametrize("probs", [{1: 0.5, 2: 0.5}, {1: 0.2, 3: 0.3, 6: 0.5}, {1: 1.0}])
def test_length_factor_matches_exact_expected_rounds(probs):
    mu = sum(x * p for x, p in probs.items())
    var = sum(x * x * p for x, p in probs.items()) - mu * mu
    for m in (40, 63, 64):
        exact = m / (mu * expected_rounds(probs, m))  # share of the long-run rate this length keeps
        # the renewal limit is approached geometrically fast in m for these aperiodic X
        assert length_factor(mu - 1, var, m) == pytest.approx(exact, abs=2e-3)


def test_length_factor_of_a_constant_round_is_exact_on_average():
    # X = 4 always: 64 tokens take 16 rounds, 61 take 16 as well; the limit averages over m mod 4
    exact = np.mean([m / (4 * expected_rounds({4: 1.0}, m)) for m in (61, 62, 63, 64)])
    assert length_factor(3.0, 0.0, 62) == pytest.approx(exact, abs=1e-3)


def test_isotonic_matches_minmax_formula():
    rng = np.random.default_rng(1)
    for n in (1, 2, 5, 11):
        y = rng.normal(size=n).cumsum() + rng.normal(scale=2, size=n)
        np.testing.assert_allclose(isotonic(y), isotonic_minmax(y), atol=1e-12)  # sums of a few floats
    np.testing.assert_array_equal(isotonic([1.0, 2.0, 3.0]), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="values"):
        isotonic([1.0, float("nan")])


def test_round_profile_round_trip(tmp_path):
    prof = round_profile(context_probe={"contexts": [12, 40], "tree_sizes": [8, 32],
                                        "verify_ms": [[5.0, 7.0], [5.2, 7.4]]})
    assert prof.measured_round and isinstance(prof.overhead[0], OverheadTable)
    back = load_latency_profile(prof.save(tmp_path / "p.json"))
    assert back == prof and back.to_dict() == prof.to_dict()
    old = toy()
    assert load_latency_profile(old.save(tmp_path / "old.json")) == old
    assert "overhead" not in json.loads((tmp_path / "old.json").read_text())  # old files stay old


@pytest.mark.parametrize("change, field", [
    (dict(verify_ms=[5.0]), "verify_ms"),                                            # a missing N value
    (dict(verify_ms=[5.0, float("nan")]), "verify_ms"),
    (dict(verify_ms=[7.0, 5.0]), "verify_ms: the table is not monotone"),
    (dict(draft_ms=[1.0, 3.0, 2.0]), "draft_ms: not monotone"),
    (dict(draft_ms=[1.0, 2.0]), "draft_ms: has 2 entries"),
    (dict(draw_ms=float("nan")), "draw_ms: is NaN"),
    (dict(overhead=[dict(ROUND["overhead"][0], walk_ms=[0.1])]), r"overhead\[0\]\.walk_ms: has 1 entries"),
    (dict(overhead=[dict(ROUND["overhead"][0], tree_ms=[0.5, float("nan")])]), r"overhead\[0\]\.tree_ms\[1\]: is NaN"),
    (dict(overhead=[{k: v for k, v in ROUND["overhead"][0].items() if k != "commit_ms"}]),
     r"overhead\[0\]: lacks the fields \['commit_ms'\]"),
    (dict(overhead=[dict(ROUND["overhead"][0], tree_sizes=[8, 8])]), r"overhead\[0\]\.tree_sizes: must be strictly"),
    (dict(context_probe={"contexts": [12], "tree_sizes": [8, 32], "verify_ms": [[5.0]]}),
     r"context_probe\.verify_ms\[0\]: has 1 entries"),
])
def test_bad_round_profiles_name_file_and_field(tmp_path, change, field):
    path = tmp_path / "bad_profile.json"
    path.write_text(json.dumps({**ROUND, **change}))  # json writes NaN as NaN, which it reads back
    with pytest.raises(ValueError) as err:
        load_latency_profile(path)
    assert str(path) in str(err.value)
    assert err.match(field)


def test_budget_choices_with_the_measured_round():
    prof = round_profile()
    # coverage at N = 8 and 32: the round at N costs t_round(N); speedups by hand (T = 1)
    curve = np.zeros(33)
    curve[8], curve[32] = 1.0, 1.6
    choice = best_fixed_budget(curve, prof, budgets=[8, 32], method="mfd", K=2, temperature=1.0)
    by_hand = [(1 + c) * 4.05 / round_ms_by_hand(2.0, t, v, w, 0.2, 0.05, c, 1.0)
               for c, t, v, w in ((1.0, 0.5, 5.0, 0.1), (1.6, 1.0, 7.0, 0.2))]
    np.testing.assert_allclose(choice.speedups, by_hand, atol=ROUNDOFF)
    assert choice.budget == 8 + 24 * int(by_hand[1] > by_hand[0])
    for n in (8, 20, 32):  # the vectorised round time equals round_ms term by term
        assert cell_speedup(0.7, "mfd", 2, n, prof, 1.0) == pytest.approx(
            best_fixed_budget(np.full(33, 0.7), prof, budgets=[n], method="mfd", K=2, temperature=1.0).speedup,
            abs=ROUNDOFF)
    # per round (greedy: the round time does not depend on the accepted length): the slow loop
    gains = np.array([0.6, 0.3, 0.2, 0.1, 0.05] + [0.02] * 20 + [0.001] * 40)
    want = per_step_budget_loop(gains, lambda n: sum(prof.round_ms("mfd", 2, n, 0.0).values()))
    assert per_step_budget(gains, prof, method="mfd", K=2) == want and 1 < want < len(gains)


def test_per_round_budget_maximises_the_round_throughput():
    from mfd_theory.speedup import PerRoundBudget

    prof = round_profile()
    rng = np.random.default_rng(3)
    for temp in (0.0, 1.0):
        rule = PerRoundBudget(prof, "mfd", 2, temp, 64)
        for _ in range(20):
            gains = np.sort(rng.dirichlet(np.full(80, 0.2)))[::-1] * rng.uniform(1, 4)

            def thr(n):  # the slow way: the round at n nodes, term by term
                g = float(gains[:n].sum())
                return (1 + g) / sum(prof.round_ms("mfd", 2, n, temp, g).values())
            best = max(range(1, 65), key=lambda n: (thr(n), -n))
            assert rule(gains) == best
    with pytest.raises(ValueError, match="max_budget"):
        PerRoundBudget(prof, "mfd", 2, 0.0, 0)


def test_drafting_by_n_in_an_overhead_table(tmp_path):
    table = dict(ROUND["overhead"][0], draft_ms=[1.5, 2.5])  # drafting after a verify of 8 / 32 nodes
    prof = round_profile(overhead=[table])
    # at N = 32 the drafting term is the table's 2.5, not the by-K table's 2.0 at K = 2
    want = 2.5 * 4.0 / round_ms_by_hand(2.5, 1.0, 7.0, 0.2, 0.2, 0.05, 1.5, 0.0)
    assert cell_speedup(1.5, "mfd", 2, 32, prof) == pytest.approx(want, abs=ROUNDOFF)
    assert prof.round_ms("mfd", 2, 8)["draft"] == 1.5
    assert best_fixed_budget(np.full(33, 1.5), prof, budgets=[32], method="mfd", K=2).speedup == pytest.approx(
        want, abs=ROUNDOFF)  # the vectorised round time takes the same term
    assert load_latency_profile(prof.save(tmp_path / "p.json")) == prof
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**ROUND, "overhead": [dict(table, draft_ms=[1.5])]}))
    with pytest.raises(ValueError, match=r"overhead\[0\]\.draft_ms: has 1 entries"):
        load_latency_profile(path)
