"""Predictions made before decoding (llm/measure/predict.py): subtree coverage, statistics, the check."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llm_helpers import tiny_qwen3  # noqa: E402

from mfd_theory.llm import TargetModel, build_drafter  # noqa: E402
from mfd_theory.llm.decoding.generate import build_tree  # noqa: E402
from mfd_theory.llm.decoding.metrics import _node_conditionals  # noqa: E402
from mfd_theory.llm.measure.predict import (  # noqa: E402
    CoverageMap, _cluster_mean_se, budget_regret, check_disjoint, prediction_check, prediction_se, prompt_digest,
    subtree_coverage,
)
from mfd_theory.speedup import isotonic  # noqa: E402

# the same tree nodes verified under two different masks and batch shapes: float32 round-off only
VERIFY_RTOL = 1e-4


@pytest.fixture(scope="module")
def block():
    model = tiny_qwen3(vocab_size=48, num_layers=2, seed=1, init_std=0.08)
    target = TargetModel(model)
    drafter = build_drafter(model, block_size=6, num_layers=1, num_modes=3, seed=4).eval()
    prompt = torch.tensor([3, 17, 5, 9, 30, 2, 11])
    with torch.no_grad():
        logits, hidden = target.prefill(prompt)
        root = int(torch.argmax(logits))
        drafter.reset()
        log_pi, log_q = drafter.draft_modes(drafter.fuse_hidden(hidden), root)
    return target, prompt, root, log_pi, log_q


def _verify_coverage(target, prompt, root, tree, temperature):
    with torch.no_grad():
        target.prefill(prompt, hidden=False)
        out = target.verify(root, tree, hidden=False, mask=target.tree_mask(tree))
    dec, _ = _node_conditionals(tree, out.logits, temperature, 1.0)
    return subtree_coverage(tree, dec)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_one_verify_at_n_max_gives_every_smaller_product_trees_coverage(block, temperature):
    target, prompt, root, log_pi, log_q = block
    big = build_tree("ddtree", log_pi, log_q, 60)
    cov_big = _verify_coverage(target, prompt, root, big, temperature)
    assert cov_big.shape == (len(big) + 1,) and cov_big[0] == 0
    for n in (1, 4, 11, 27, 60):
        small = build_tree("ddtree", log_pi, log_q, n)
        # the builder emits best first: the n-node tree is the big tree's first n nodes
        assert np.array_equal(small.parent, big.parent[:n]) and np.array_equal(small.token, big.token[:n])
        own = _verify_coverage(target, prompt, root, small, temperature)[-1]
        assert cov_big[n] == pytest.approx(own, rel=VERIFY_RTOL, abs=1e-9), n
    if temperature > 0:  # a soft mass: strictly between 0 and the node count
        assert 0 < cov_big[-1] < len(big)


def test_mixture_trees_are_not_nested_across_budgets_but_their_first_nodes_are(block):
    """Why mfd is verified at each budget: its candidate lists grow with the budget, so on a flat
    drafter the 11-node tree is not the 60-node tree's first 11 nodes. A per-round rule cuts one
    build, and that cut is read off one verify exactly."""
    from mfd_theory.llm.decoding.trees import first_nodes

    target, prompt, root, log_pi, log_q = block
    big = build_tree("mfd", log_pi, log_q, 60)
    assert any(not np.array_equal(build_tree("mfd", log_pi, log_q, n).token, big.token[:n]) for n in (4, 11, 27))
    cov_big = _verify_coverage(target, prompt, root, big, 1.0)
    for n in (3, 17, 40):
        own = _verify_coverage(target, prompt, root, first_nodes(big, n), 1.0)[-1]
        assert cov_big[n] == pytest.approx(own, rel=VERIFY_RTOL)


def test_subtree_coverage_matches_explicit_path_products():
    from mfd_theory.trees import DraftTree

    parent = np.array([-1, -1, 0, 0, 2])
    tree = DraftTree(parent, np.array([1, 2, 3, 4, 5]), np.array([1, 1, 2, 2, 3]), np.zeros(5), validate=False)
    cond = np.log(np.array([0.5, 0.3, 0.6, 0.2, 0.9]))
    want = [0.0]
    for i in range(5):  # the slow twin: walk up to the root and multiply
        p, j = 1.0, i
        while j >= 0:
            p *= math.exp(cond[j])
            j = parent[j]
        want.append(want[-1] + p)
    assert subtree_coverage(tree, cond) == pytest.approx(want, rel=1e-12)


def test_cluster_standard_error_against_a_slow_twin():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(5), [3, 7, 2, 6, 4])
    v = rng.normal(2.0, 1.0, groups.size) + 0.5 * groups
    m, se = _cluster_mean_se(v, groups)
    mean = sum(v) / len(v)
    total = 0.0
    for g in range(5):  # each prompt's summed residual is one independent draw
        s = sum(x - mean for x, gg in zip(v, groups) if gg == g)
        total += s * s
    assert m == pytest.approx(mean)
    assert se == pytest.approx(math.sqrt(5 / 4 * total) / len(v), rel=1e-12)
    assert _cluster_mean_se(v[:3], groups[:3])[1] is None  # one prompt: no spread to measure


def test_coverage_map_is_monotone_and_keeps_monotone_data():
    x = np.array([0.1, 0.5, 0.3, 0.9, 0.7])
    y = np.array([0.2, 0.1, 0.4, 0.8, 0.9])
    cmap = CoverageMap(x, y)
    grid = np.linspace(0, 1, 50)
    assert np.all(np.diff(cmap(grid)) >= -1e-15)
    order = np.argsort(x)
    assert cmap(x[order]) == pytest.approx(isotonic(y[order]))
    mono = CoverageMap([0.1, 0.2, 0.4], [0.05, 0.3, 0.35])
    assert mono([0.1, 0.2, 0.4]) == pytest.approx([0.05, 0.3, 0.35])


def test_overlapping_prompt_sets_are_refused():
    a = [{"sha256": prompt_digest([1, 2, 3])}, {"sha256": prompt_digest([4, 5])}]
    b = [{"sha256": prompt_digest([9])}, {"sha256": prompt_digest([4, 5])}]
    with pytest.raises(ValueError, match="calibration prompts"):
        check_disjoint(a, b)
    check_disjoint(a[:1], b)


def _row(n, sp, tau=3.0, temp=0.0, method="ddtree", passes=None):
    return {"dataset": "d", "method": method, "drafter": "p", "budget": n, "temperature": temp, "tau": tau,
            "speedup": sp, "speedup_std": 0.01, "K": 1,
            "speedup_passes": passes if passes is not None else [sp, sp, sp]}


def test_prediction_check_errors_and_regret_by_hand():
    # N = 32 is fastest on the first pass (2.0) but not on the two others (1.6): the rules are scored there
    rows = [_row(0, 1.0, 1.0, method="ar"), _row(16, 1.5, 3.0, passes=[1.5, 1.5, 1.5]),
            _row(32, 1.8, 3.5, passes=[2.0, 1.6, 1.6]), _row(64, 1.2, 4.0, passes=[1.2, 1.3, 1.1])]
    chosen = [_row(20, 1.7, 3.2)]
    cells = [{"dataset": "d", "method": "ddtree", "drafter": "p", "budget": n, "temperature": 0.0,
              "per_round_budget": False, "predicted_tau": t, "predicted_tau_se": 0.1, "predicted_speedup": s,
              "predicted_speedup_lo": s - 0.1, "predicted_speedup_hi": s + 0.1, "source": "nested"}
             for n, t, s in ((16, 3.3, 1.5), (32, 3.5, 1.9), (64, 3.6, 1.0), (20, 3.2, 1.6))]
    pred = {"cells": cells, "budget_choice": [
        {"dataset": "d", "temperature": 0.0, "method": "ddtree", "drafter": "p", "budget": 20, "theory_grid_budget": 32,
         "naive_smallest": 16, "naive_calibration_best": 64}]}
    chk = prediction_check(pred, rows, chosen)
    assert chk["n_cells"] == 4
    tau_err = sorted(abs(e) for e in (3.3 / 3 - 1, 0.0, 3.6 / 4 - 1, 0.0))
    assert chk["tau"]["median_abs_error"] == pytest.approx(np.median(tau_err))
    assert chk["tau"]["worst_abs_error"] == pytest.approx(max(tau_err))
    assert chk["t0_cells_differing"] == 2 and chk["t0_cells"] == 4
    # signed errors by N: N = 16 too high by 10%, N = 64 too low by 10%
    by_n = chk["tau"]["by_budget"]
    assert by_n["16"]["mean_signed_error"] == pytest.approx(0.1) and by_n["16"]["too_high"] == 1
    assert by_n["64"]["mean_signed_error"] == pytest.approx(-0.1) and by_n["64"]["too_high"] == 0
    (reg,) = chk["budget_regret"]
    assert reg["reported"] and reg["candidates"] == [16, 32, 64]
    assert reg["best_budget"] == 32 and reg["best_speedup"] == pytest.approx(1.6)  # picked on pass 1, scored on 2-3
    assert reg["theory"]["budget"] == 32 and reg["theory"]["regret"] == pytest.approx(0.0)  # the grid choice
    assert reg["smallest"]["regret"] == pytest.approx(1.6 / 1.5 - 1)
    assert reg["calibration_best"]["regret"] == pytest.approx(1.6 / 1.2 - 1)
    assert chk["mean_regret_theory"] == pytest.approx(0.0)
    # a prediction equal to the measurement everywhere is visible as such
    same = {"cells": [dict(c, predicted_tau=r["tau"]) for c, r in zip(cells, rows[1:] + chosen)],
            "budget_choice": []}
    assert prediction_check(same, rows, chosen)["t0_cells_differing"] == 0


def test_regret_is_not_reported_over_fewer_than_three_budgets_or_one_pass():
    choice = [{"dataset": "d", "temperature": 0.0, "method": "ddtree", "drafter": "p", "budget": 16,
               "naive_smallest": 16, "naive_calibration_best": 32}]
    two = [_row(16, 1.5), _row(32, 1.8)]
    (e,) = budget_regret(choice, two)
    assert not e["reported"] and "at least 3" in e["why"]
    one_pass = [_row(16, 1.5, passes=[1.5]), _row(32, 1.8, passes=[1.8]), _row(64, 1.2, passes=[1.2])]
    (e,) = budget_regret(choice, one_pass)
    assert not e["reported"] and "two timing passes" in e["why"]
    chk = prediction_check({"cells": [], "budget_choice": choice}, two)
    assert chk["mean_regret_theory"] is None  # nothing scored: no mean reported


def test_prediction_interval_holds_the_evaluated_prompts_own_noise():
    assert prediction_se(None, 8, 24) is None
    assert prediction_se(0.1, 8, None) == 0.1  # no evaluated set named: the calibration's own
    assert prediction_se(0.1, 8, 8) == pytest.approx(0.1 * math.sqrt(2))  # two sets of one size: sqrt 2
    assert prediction_se(0.1, 8, 24) == pytest.approx(0.1 * math.sqrt(1 + 8 / 24))


def test_clustered_z_pools_every_rows_gaps_per_prompt():
    """The theorem's T > 0 test with prompts as the independent units (rows share a prompt's seed)."""
    from mfd_theory.llm.measure.evaluate import prediction_summary

    recs = []
    gaps = {}
    rng = np.random.default_rng(3)
    for cell in range(3):
        for item in range(4):
            acc = rng.integers(0, 4, 5).astype(float)
            pred = rng.uniform(0, 3, 5)
            recs.append({"temperature": 1.0, "method": "ddtree", "dataset": "d", "item": item, "cell": cell,
                         "accepted": acc.tolist(), "predicted": pred.tolist()})
            gaps[item] = gaps.get(item, 0.0) + float((acc - pred).sum())
    recs.append({"temperature": 0.0, "method": "ddtree", "dataset": "d", "item": 0, "cell": 0,
                 "accepted": [100.0], "predicted": [0.0]})  # greedy rows are not part of the test
    rows = [{"temperature": 1.0, "method": "ddtree", "pred_gap_z": 0.3}]
    got = prediction_summary(rows, recs)["clustered"]
    total = sum(gaps.values())
    assert got["prompts"] == 4
    assert got["z"] == pytest.approx(total / math.sqrt(sum(g * g for g in gaps.values())))
    assert "clustered" not in prediction_summary(rows)
