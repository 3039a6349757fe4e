"""Paired comparisons (mfd_theory.stats): each verdict on data built to be it, the interval's
coverage under the model it claims, and the single-run interval's failure when runs differ."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mfd_theory.stats import MARGIN, compare, runs_to_decide, verdict


def _runs(gain: float, run_sd: float, prompt_sd: float, runs: int = 3, prompts: int = 24, seed: int = 0):
    """(a, b) [runs, prompts]: b a positive baseline, a = b x exp(log(1 + gain) + run effect + prompt noise)."""
    g = np.random.default_rng(seed)
    b = np.exp(g.normal(1.5, 0.3, size=(runs, prompts)))
    log_ratio = math.log1p(gain) + g.normal(0, run_sd, size=(runs, 1)) + g.normal(0, prompt_sd, size=(runs, prompts))
    return b * np.exp(log_ratio), b


def test_verdict_words():
    assert verdict(0.01, 0.05) == "gain"
    assert verdict(-0.05, -0.001) == "loss"
    assert verdict(-0.02, 0.025) == "equivalent"
    assert verdict(-0.02, 0.04) == "inconclusive"
    assert verdict(-0.031, 0.01) == "inconclusive"
    assert verdict(0.001, 0.02) == "gain"  # excluding 0 comes first, even inside the margin


@pytest.mark.parametrize("gain, run_sd, prompt_sd, expected", [
    (0.10, 0.005, 0.02, "gain"),
    (-0.10, 0.005, 0.02, "loss"),
    (0.0, 0.001, 0.005, "equivalent"),
    (0.05, 0.08, 0.02, "inconclusive"),  # training noise as large as the effect: 3 runs cannot tell
])
def test_each_verdict_on_data_built_to_be_it(gain, run_sd, prompt_sd, expected):
    a, b = _runs(gain, run_sd, prompt_sd, seed=1)
    c = compare(a, b)
    assert c.verdict == expected, c.text()
    assert c.model == "runs" and c.n_runs == 3 and c.n_prompts == 24 and c.df == 2
    assert c.lo <= c.gain <= c.hi
    assert len(c.run_gains) == 3


def test_one_run_is_a_prompts_only_interval():
    a, b = _runs(0.1, 0.0, 0.05, runs=1, seed=2)
    c = compare(a[0], b[0])
    assert c.model == "prompts" and c.n_runs == 1 and c.df == 23
    assert "1 run, 24 prompts" in c.text()


def test_runs_interval_covers_the_true_gain_and_a_single_runs_does_not_when_runs_differ():
    """Under large training variance the runs interval keeps its level; a prompts-only interval from
    one run misses the true gain far more often than 5% (the failure the replicated design fixes)."""
    true, hit_runs, hit_one, sims = 0.04, 0, 0, 400
    for s in range(sims):
        a, b = _runs(true, 0.05, 0.02, runs=3, prompts=24, seed=100 + s)
        c = compare(a, b)
        hit_runs += c.lo <= true <= c.hi
        one = compare(a[0], b[0])
        hit_one += one.lo <= true <= one.hi
    assert hit_runs / sims >= 0.92
    assert hit_one / sims < 0.5


def test_bonferroni_widens_the_interval_and_records_the_level():
    a, b = _runs(0.05, 0.01, 0.02, seed=3)
    one, many = compare(a, b), compare(a, b, family=12)
    assert many.lo < one.lo and many.hi > one.hi and many.gain == one.gain
    assert many.level == pytest.approx(1 - 0.05 / 12) and one.level == pytest.approx(0.95)
    assert one.margin == MARGIN


def test_bad_input_is_refused_by_name():
    a, b = _runs(0.05, 0.01, 0.02)
    with pytest.raises(ValueError, match="^b: shape"):
        compare(a, b[:, :5])
    with pytest.raises(ValueError, match="^a, b: every value"):
        compare(np.where(a > 3, -1.0, a), b)
    with pytest.raises(ValueError, match="^a: expected values"):
        compare(a[:, :1], b[:, :1])
    with pytest.raises(ValueError, match="^family"):
        compare(a, b, family=0)
    with pytest.raises(ValueError, match="^level"):
        compare(a, b, level=1.0)


def _runs_to_decide_by_compare(run_gains, *, family=1, max_runs=50):
    """The slow twin of runs_to_decide: for R = 2, 3, ... build R runs whose log ratios have exactly
    the measured mean and spread (a standardised vector scaled back) and ask compare() itself."""
    x = np.log1p(np.asarray(run_gains, dtype=float))
    mean, sd = x.mean(), x.std(ddof=1)
    for r in range(2, max_runs + 1):
        z = np.linspace(-1.0, 1.0, r)
        z = (z - z.mean()) / z.std(ddof=1)
        obs = mean + sd * z
        a = np.exp(obs)[:, None] * np.ones((r, 2))
        if compare(a, np.ones((r, 2)), family=family).verdict != "inconclusive":
            return r
    return None


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("family", [1, 4])
def test_runs_to_decide_matches_compare_on_runs_of_the_same_mean_and_spread(seed, family):
    g = np.random.default_rng(seed)
    gains = np.expm1(g.normal(g.choice([0.0, 0.02, 0.1, -0.1]), g.choice([0.005, 0.05, 0.3]), size=g.integers(2, 6)))
    assert runs_to_decide(gains, family=family) == _runs_to_decide_by_compare(gains, family=family)


def test_runs_to_decide_on_known_cases():
    # the measured runs decide already: no more are needed than were run
    a, b = _runs(0.2, 0.01, 0.02, runs=3)
    cmp = compare(a, b)
    assert cmp.verdict == "gain"
    assert runs_to_decide(cmp.run_gains) <= 3
    # a mean of exactly 0 with a wide spread never decides within 50 runs; a tight one becomes equivalent
    assert runs_to_decide([0.5, 1 / 1.5 - 1]) is None
    r = runs_to_decide([0.01, 1 / 1.01 - 1])
    assert r is not None and r > 2
    assert _runs_to_decide_by_compare([0.01, 1 / 1.01 - 1]) == r
    # a larger family (Bonferroni) never needs fewer runs
    gains = [0.08, 0.02, 0.15]
    assert runs_to_decide(gains, family=6) >= runs_to_decide(gains)
    with pytest.raises(ValueError, match="^run_gains"):
        runs_to_decide([0.1])
    with pytest.raises(ValueError, match="^run_gains"):
        runs_to_decide([0.1, -1.5])
    with pytest.raises(ValueError, match="^max_runs"):
        runs_to_decide([0.1, 0.2], max_runs=1)
