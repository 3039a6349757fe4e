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
