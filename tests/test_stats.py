"""Paired comparisons (mfd_theory.stats): each verdict on data built to be it, the interval's
coverage under the model it claims, and the single-run interval's failure when runs differ."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mfd_theory.stats import MARGIN, POWER, compare, decide_power, floor_interval, runs_to_decide, tau_resolution, verdict

from tests.reference_stats import decide_power_by_simulation, nested_var_by_loops, quantised_tau


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
    """The slow twin of runs_to_decide(power=None): for R = 2, 3, ... build R runs whose log ratios have exactly
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
    assert runs_to_decide(gains, family=family, power=None) == _runs_to_decide_by_compare(gains, family=family)


def test_runs_to_decide_on_known_cases():
    # the measured runs decide already: no more are needed than were run
    a, b = _runs(0.2, 0.01, 0.02, runs=3)
    cmp = compare(a, b)
    assert cmp.verdict == "gain"
    assert runs_to_decide(cmp.run_gains, power=None) <= 3
    # a mean of exactly 0 with a wide spread never decides within 50 runs; a tight one becomes equivalent
    assert runs_to_decide([0.5, 1 / 1.5 - 1]) is None
    assert runs_to_decide([0.5, 1 / 1.5 - 1], power=None) is None
    r = runs_to_decide([0.01, 1 / 1.01 - 1], power=None)
    assert r is not None and r > 2
    assert _runs_to_decide_by_compare([0.01, 1 / 1.01 - 1]) == r
    assert runs_to_decide([0.01, 1 / 1.01 - 1]) >= r  # 80% power never needs fewer than the median case
    # a larger family (Bonferroni) never needs fewer runs
    gains = [0.08, 0.02, 0.15]
    assert runs_to_decide(gains, family=6) >= runs_to_decide(gains)
    with pytest.raises(ValueError, match="^run_gains"):
        runs_to_decide([0.1])
    with pytest.raises(ValueError, match="^run_gains"):
        runs_to_decide([0.1, -1.5])
    with pytest.raises(ValueError, match="^max_runs"):
        runs_to_decide([0.1, 0.2], max_runs=1)
    with pytest.raises(ValueError, match="^power"):
        runs_to_decide([0.1, 0.2], power=1.0)


# ----------------------------------------------------------------------------- power of "runs to decide"
@pytest.mark.parametrize("mean, sd, runs, margin", [
    (0.05, 0.05, 3, MARGIN),   # a gain, poorly resolved
    (0.05, 0.05, 8, MARGIN),
    (-0.03, 0.02, 4, MARGIN),  # a loss
    (0.0, 0.01, 5, MARGIN),    # equivalence is the only way to decide
    (0.01, 0.02, 6, 0.05),     # gain and equivalence both reachable
])
def test_decide_power_matches_simulated_replications(mean, sd, runs, margin):
    got = decide_power(mean, sd, runs, margin=margin)
    want = decide_power_by_simulation(mean, sd, runs, margin=margin, sims=3000)
    assert abs(got - want) < 0.03, (got, want)  # 3000 simulations: s.e. <= 0.009


def test_runs_to_decide_at_80_percent_power_and_what_holding_the_runs_fixed_means():
    gains = np.expm1([0.04, 0.09, 0.02])
    x = np.log1p(gains)
    mean, sd = x.mean(), x.std(ddof=1)
    r80 = runs_to_decide(gains)
    assert POWER == 0.8 and r80 is not None
    assert decide_power(mean, sd, r80) >= 0.8 > decide_power(mean, sd, r80 - 1)
    # the old projection (mean and spread held as measured) is the median case: about 50% power
    r50 = runs_to_decide(gains, power=None)
    assert r50 < r80
    assert 0.35 < decide_power(mean, sd, r50) < 0.75
    # a floor under the spread (the resolution's) never needs fewer runs
    assert runs_to_decide(gains, min_sd=0.1) >= r80


# ----------------------------------------------------------------------------- floors: no interval of width 0
def test_resolution_of_tau_is_one_round():
    # 48 tokens at tau 3 are 16 rounds; one round more is tau 48 / 17: log(17 / 16)
    assert tau_resolution(3.0, 48) == pytest.approx(math.log(17 / 16))
    assert tau_resolution([3.0, 6.0], 48) == pytest.approx([math.log1p(3 / 48), math.log1p(6 / 48)])
    with pytest.raises(ValueError, match="^tokens"):
        tau_resolution(3.0, 0)
    with pytest.raises(ValueError, match="^tau"):
        tau_resolution(-1.0, 48)


def test_identical_quantised_runs_give_the_resolution_interval_not_width_0():
    """Known answer: two methods measured identically (same tau on every prompt of every run): the
    log ratios are all 0, the spread 0; the interval is +-1.96 x sqrt(step^2 / 3 / P)."""
    tau = np.array([[3.0, 2.4, 4.0, 3.2]] * 3)  # [3 runs, 4 prompts], the runs agree exactly
    bare = compare(tau, tau)
    assert bare.lo == bare.hi == 0.0  # without a resolution: width 0, what the floor is for
    step = tau_resolution(tau, 48)
    c = compare(tau, tau, resolution=step)
    half = 1.959963984540054 * math.sqrt((step ** 2).mean() / 3 / 4)
    assert c.lo == pytest.approx(math.expm1(-half)) and c.hi == pytest.approx(math.expm1(half))
    assert c.hi - c.lo > 0.02 and c.se_from == "resolution" and c.verdict == "inconclusive"
    # with more prompts the same step resolves equivalence
    many = np.tile(tau, (1, 16))
    assert compare(many, many, resolution=tau_resolution(many, 48)).verdict == "equivalent"


def test_resolution_floor_covers_the_true_gain_of_quantised_identical_runs():
    """Prompts of true tau b and a = b x 1.03, measured over 48 tokens (a whole number of rounds),
    three runs that agree exactly (a deterministic decode): without the floor the interval misses
    the true gain far more often than 5%; with it, at most about 5%."""
    true, hit, hit_bare, sims = 0.03, 0, 0, 300
    for s in range(sims):
        g = np.random.default_rng(1000 + s)
        b_true = g.uniform(2.0, 5.0, size=12)
        a = np.tile(quantised_tau(b_true * (1 + true), 48), (3, 1))
        b = np.tile(quantised_tau(b_true, 48), (3, 1))
        c = compare(a, b, resolution=tau_resolution(np.maximum(a, b), 48))
        hit += c.lo <= true <= c.hi
        bare = compare(a, b)
        hit_bare += bare.lo <= true <= bare.hi
    assert hit / sims >= 0.93
    assert hit_bare / sims < 0.2


def test_nested_floor_when_runs_agree_by_chance():
    """Runs whose means agree exactly but whose prompts do not: the runs' spread is 0, the
    prompt-by-run noise is not, and it sets the interval (its variance as written out by loops)."""
    g = np.random.default_rng(4)
    d = g.normal(0.05, 0.1, size=(3, 10))
    d -= d.mean(axis=1, keepdims=True) - 0.05  # every run's mean log ratio is 0.05
    c = compare(np.exp(d), np.ones_like(d))
    assert c.se_from == "nested"
    assert c.se_floor == pytest.approx(math.sqrt(nested_var_by_loops(d) / d.size))
    assert c.hi - c.lo > 0.01


def test_floors_leave_a_well_measured_interval_alone():
    a, b = _runs(0.05, 0.05, 0.02, seed=5)
    c = compare(a, b, resolution=0.01)
    assert c.se_from == "spread"
    assert (c.lo, c.hi) == (compare(a, b).lo, compare(a, b).hi)
    with pytest.raises(ValueError, match="^resolution"):
        compare(a, b, resolution=-0.1)
    with pytest.raises(ValueError, match="^resolution"):
        compare(a, b, resolution=np.ones(5))


def test_floor_interval_of_a_stored_comparison():
    tau = np.array([[3.0, 2.4, 4.0, 3.2]] * 3)
    stored = compare(tau * 1.2, tau).to_dict()  # written without a resolution: width 0
    assert stored["hi"] - stored["lo"] < 1e-12
    got = floor_interval(stored, float(tau_resolution(4.0 * 1.2, 48)))
    assert got["lo"] < stored["gain"] < got["hi"] and got["se_from"] == "resolution" and got["verdict"] == "gain"
    wide = compare(*_runs(0.05, 0.05, 0.02, seed=5)).to_dict()
    assert floor_interval(wide, 0.01) == wide
    assert floor_interval(None, 0.01) is None


def test_compare_rows_floors_tau_by_its_rounds():
    """Two rows of one run with the same tau on every prompt: without the rows' round counts the
    interval has width 0; with them (12 rounds per prompt), tau's step log(1 + 1/12) floors it."""
    from mfd_theory.stats import compare_rows, row_tau_resolution

    ids = [str(i) for i in range(6)]
    row = dict(prompt_ids=ids, prompt_tau=[3.0, 3.2, 2.9, 3.1, 3.0, 3.3], prompt_tokens_per_s=[100.0 + i for i in range(6)])
    bare = compare_rows(row, dict(row))["tau_cmp"]
    assert bare["lo"] == bare["hi"] == 0.0
    counted = dict(row, n_rounds=72, n_prompts=6)
    assert row_tau_resolution(counted, counted) == pytest.approx(math.log1p(1 / 12))
    assert row_tau_resolution(counted, row) is None
    got = compare_rows(counted, dict(counted))["tau_cmp"]
    half = 1.959963984540054 * math.sqrt(math.log1p(1 / 12) ** 2 / 3 / 6)
    assert got["hi"] == pytest.approx(math.expm1(half)) and got["se_from"] == "resolution"
