"""C1 as what it is (mfd_theory.llm.measure.calibration): the walk check passes the decoder's own
walk and fails a walk that stops a node early or draws from the wrong row; the cells' z^2 sum is
explained (cells that decode one sampled text are coupled, each z still standard normal); the
drafter-side calibration gap fails an over-confident drafter and passes a calibrated one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mfd_theory.coverage import acceptance_variance, coverage
from mfd_theory.distributions import MixtureOfProducts
from mfd_theory.llm.decoding.sampling import children_map, walk_tree
from mfd_theory.llm.measure.calibration import (calibration_gap, calibration_gaps, coupled_chi_square,
                                                 walk_check)
from mfd_theory.trees import mixture_tree, product_tree


def _target(seed=0, K=2, L=4, V=5):
    g = np.random.default_rng(seed)
    q = g.dirichlet(np.full(V, 0.4), size=(K, L))  # [K, L, V], peaked
    return MixtureOfProducts(np.log(g.dirichlet(np.ones(K))), np.log(q))


def _prefix_prob(target, prefix) -> float:
    """P(prefix) under the mixture, written out."""
    pi = np.exp(target.log_pi)
    q = np.exp(target.log_q)
    return float(sum(pi[k] * np.prod([q[k, i, t] for i, t in enumerate(prefix)]) for k in range(target.K)))


def _paths(tree):
    out = []
    for i in range(len(tree)):
        p = int(tree.parent[i])
        out.append((out[p] if p >= 0 else ()) + (int(tree.token[i]),))
    return out


def _rounds(target, tree, rounds, seed, walk="right"):
    """``rounds`` rounds of the lossless walk on ``tree`` (the decoder's walk_tree, drawing each row's
    token from the target's conditional given that row's path): accepted per round. ``walk``:
    "right", "stops_early" (the walk's path cut by one node) or "wrong_row" (each draw from the
    parent's row instead of its own)."""
    g = np.random.default_rng(seed)
    paths = _paths(tree)
    V = target.V
    cond = {}
    for row in range(len(tree) + 1):
        prefix = () if row == 0 else paths[row - 1]
        if len(prefix) >= target.L:
            continue
        base = _prefix_prob(target, prefix)
        cond[row] = np.array([_prefix_prob(target, prefix + (x,)) / base for x in range(V)])
    parent_row = {0: 0, **{i + 1: int(tree.parent[i]) + 1 for i in range(len(tree))}}
    children = children_map(tree)
    out = []
    for _ in range(rounds):
        def draw(row):
            r = parent_row[row] if walk == "wrong_row" else row
            p = cond.get(r, cond[0])
            return int(g.choice(V, p=p / p.sum()))
        path, _ = walk_tree(children, draw)
        if walk == "stops_early" and path:
            path = path[:-1]
        out.append(len(path))
    return np.array(out, dtype=float)


@pytest.mark.parametrize("walk, passes", [("right", True), ("stops_early", False), ("wrong_row", False)])
def test_the_walk_check_passes_the_lossless_walk_and_fails_a_wrong_one(walk, passes):
    target = _target()
    tree = mixture_tree(target, 12)
    acc = _rounds(target, tree, 1500, seed=1, walk=walk)
    pred, var = coverage(tree, target), acceptance_variance(tree, target)
    got = walk_check(acc, np.full(acc.size, pred), np.full(acc.size, var))
    # its z written out: the summed gap over the square root of the summed exact variances
    want = sum(a - pred for a in acc) / math.sqrt(var * acc.size)
    assert got["z"] == pytest.approx(want) and got["rounds"] == 1500
    assert got["passes"] is passes, got


def test_the_walk_check_holds_for_any_drafter_even_a_random_one():
    """The identity: whatever tree the drafter proposes, the walk's acceptance matches that tree's own
    exact covered mass; a random drafter's tree passes as well as the target's best."""
    target = _target(seed=3)
    g = np.random.default_rng(7)
    random_rows = np.log(g.dirichlet(np.ones(target.V), size=target.L))
    for tree in (product_tree(random_rows, 10), mixture_tree(target, 10)):
        acc = _rounds(target, tree, 1200, seed=2)
        got = walk_check(acc, np.full(acc.size, coverage(tree, target)),
                         np.full(acc.size, acceptance_variance(tree, target)))
        assert got["passes"], got


def _accepted_on(tree, blocks):
    paths = set(_paths(tree))
    out = np.zeros(len(blocks))
    for j, b in enumerate(blocks):
        d = 0
        while d < len(b) and tuple(int(x) for x in b[:d + 1]) in paths:
            d += 1
        out[j] = d
    return out


def test_cells_that_decode_one_sampled_text_are_coupled_so_their_z2_sum_is_no_chi_square():
    """Why the real target's 30 C1 cells summed z^2 = 9.9, not about 30: each cell's z is standard
    normal (the exact variance is right: over replications its variance is 1), but cells that decode
    the same sampled text (one sampling seed, inverse-CDF draws keyed by position) share its luck,
    so the sum's spread is far wider than a chi-square's with one degree per cell: a sum a third of
    its mean is common, where a chi-square would call it a 1-in-5,000 event."""
    target = _target(seed=5)
    trees = [product_tree(target.marginals(), n) for n in (3, 6, 12)] + [mixture_tree(target, n) for n in (3, 6, 12)]
    pred = np.array([coverage(t, target) for t in trees])
    var = np.array([acceptance_variance(t, target) for t in trees])
    n, reps = 40, 300
    shared, own = [], []
    for r in range(reps):
        blocks = target.sample(n, seed=10_000 + r)  # one text for every cell
        z = [(_accepted_on(t, blocks) - p).sum() / math.sqrt(v * n) for t, p, v in zip(trees, pred, var)]
        shared.append(z)
        z_own = [(_accepted_on(t, target.sample(n, seed=50_000 + 10 * r + i)) - p).sum() / math.sqrt(v * n)
                 for i, (t, p, v) in enumerate(zip(trees, pred, var))]
        own.append(z_own)
    shared, own = np.array(shared), np.array(own)  # [reps, cells]
    assert np.all(np.abs(shared.var(axis=0) - 1) < 0.3)  # each cell's z: variance 1, the s.e. is not overstated
    corr = np.corrcoef(shared.T)[np.triu_indices(len(trees), 1)]
    assert corr.mean() > 0.5  # the cells move together
    s_shared, s_own = (shared ** 2).sum(axis=1), (own ** 2).sum(axis=1)
    assert abs(s_shared.mean() - len(trees)) < 1.5 and abs(s_own.mean() - len(trees)) < 1.5  # same mean
    assert s_shared.var() > 3 * s_own.var()  # a far wider spread than independent cells' chi-square
    third = len(trees) / 3
    low_shared, low_own = (s_shared <= third).mean(), (s_own <= third).mean()
    assert low_shared > 2 * low_own, (low_shared, low_own)  # a sum a third of its mean: common only when coupled
    # what the report prints: no p-value for coupled cells, a two-sided chi-square one for independent
    got = coupled_chi_square(shared[0])
    assert got["pvalue"] is None and "coupled" in got["note"] and got["df"] == len(trees)
    ind = coupled_chi_square([0.1] * 30, independent=True)
    assert ind["pvalue"] < 1e-3 and ind["sum_z2"] == pytest.approx(0.3)


def test_the_drafter_side_gap_fails_an_over_confident_drafter_and_passes_a_calibrated_one():
    g = np.random.default_rng(0)
    prompts = np.repeat(np.arange(12), 30)  # 12 prompts x 30 rounds
    truth = g.uniform(1.0, 3.0, size=prompts.size)  # each round's tree: its covered mass under the target
    accepted = g.poisson(truth).astype(float)
    calibrated = calibration_gap(truth * g.uniform(0.97, 1.03, size=truth.size), accepted, prompts)
    assert calibrated["calibrated"] is True and abs(calibrated["gap"]) < 0.05
    bold = calibration_gap(truth * 1.3, accepted, prompts)
    assert bold["calibrated"] is False and bold["gap"] > 0.2 and bold["z"] > 2
    # the same numbers written out: the ratio of sums, and the per-prompt residuals' spread
    s, m = truth * 1.3, accepted
    r = s.sum() / m.sum()
    e = np.array([(s[prompts == p] - r * m[prompts == p]).sum() for p in range(12)])
    assert bold["gap"] == pytest.approx(r - 1)
    assert bold["gap_se"] == pytest.approx(math.sqrt(12 / 11 * (e ** 2).sum()) / m.sum())
    assert calibration_gap([1.0, 2.0], [1.0, 2.0])["calibrated"] is True
    with pytest.raises(ValueError, match="^measured: shape"):
        calibration_gap([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="^prompt: shape"):
        calibration_gap([1.0, 2.0], [1.0, 2.0], prompt=[0])
    with pytest.raises(ValueError, match="^self_mass, measured"):
        calibration_gap([1.0, -2.0], [1.0, 2.0])


def test_calibration_gaps_from_a_prediction_files_summaries():
    entries = [{"method": "chain", "drafter": "product", "mean_self_mass": None, "mean_target_mass": 1.0},
               {"method": "ddtree", "drafter": "product", "K": 1, "temperature": 1.0, "budget": 16, "rounds": 40,
                "mean_self_mass": 3.0, "mean_target_mass": 2.0}]
    (row,) = calibration_gaps(entries)
    assert row["gap"] == pytest.approx(0.5) and row["drafter"] == "product" and row["budget"] == 16


def test_the_report_floor_keeps_the_walk_checks_threshold():
    from mfd_theory.llm.measure.calibration import WALK_Z
    from mfd_theory.report.real_drafters import WALK_Z as REPORT_WALK_Z

    assert REPORT_WALK_Z == WALK_Z


def test_the_real_drafters_block_reports_c1_as_a_walk_check_and_the_drafter_side_gap():
    from mfd_theory.report.real_drafters import _c1

    def row(z, seed_gap=0.0):
        return dict(dataset="code", temperature=1.0, method="ddtree", drafter="product", budget=16, scorer=None,
                    accepted_mean=2.0, covered_mass_insample=2.0 + seed_gap, pred_gap_z=z, dead_share=0.5)

    cal = [{"drafter": "product", "method": "ddtree", "scorer": None, "temperature": 1.0, "budget": 16,
            "self_mass_mean": 3.0, "target_mass_mean": 2.0, "gap": 0.5}]
    d = {"runs": [{"seed": 0, "rows": [row(0.5)], "drafter_calibration": cal}, {"seed": 1, "rows": [row(-5.0)]}]}
    text = "\n".join(_c1(d))
    assert "C1 as a check of the decoder's walk" in text and "not the drafter" in text
    assert "| walk z |" in text and "+0.5 / -5.0" in text
    assert "Walk check: fails in 1 of 2 cells x seeds" in text and "Sum of z^2 over the cells: 25.2" in text
    assert "no p-value" in text
    assert "Drafter-side C1 (can fail)" in text and "| 0 | product | ddtree | 1 | 16 | 3.00 | 2.00 | +50% |" in text
    d["runs"][1]["rows"] = [row(1.0)]
    assert "Walk check: passes in 2 of 2 cells x seeds" in "\n".join(_c1(d))
    # an older record kept a shared calibration file's entries once per data set: the repeat is shown once
    d["runs"][0]["drafter_calibration"] = cal + [dict(cal[0])]
    text = "\n".join(_c1(d))
    assert text.count("| 0 | product | ddtree | 1 | 16 | 3.00 | 2.00 | +50% |") == 1 and "1 row that repeated" in text
    # where the entries name their calibration set and budget rule, the table shows both
    # (a record from before calibration_set was kept also averaged its two masses over different rounds: said)
    assert "rounds / rounds with a tree" in text
    d["runs"][0]["drafter_calibration"] = [cal[0] | {"calibration_set": "code", "per_round": True}]
    text = "\n".join(_c1(d))
    assert "| 0 | code | product | ddtree | 1 | 16 (per round) | 3.00 | 2.00 | +50% |" in text
    assert "rounds / rounds with a tree" not in text
