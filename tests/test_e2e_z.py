"""The predicted-vs-measured z of the end-to-end rows uses the trees' exact acceptance variance."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from mfd_theory.coverage import acceptance_variance, coverage  # noqa: E402
from mfd_theory.llm.measure.evaluate import Cell, prediction_summary, rows_from_records  # noqa: E402
from mfd_theory.trees import chain_tree  # noqa: E402


class _Drafter:
    num_modes = 2


def _row(method, temperature, acc, pred, pvar):
    """The evaluator's row for one cell whose one prompt produced these rounds."""
    n = len(acc)
    cells = [Cell(method, "k2", 8, _Drafter())]
    rec = {"temperature": float(temperature), "dataset": "d", "item": 0, "id": "0", "cell": 0, "tokens": [1] * (n + 1),
           "accepted": list(acc), "predicted": list(pred), "predicted_var": list(pvar), "covered": list(pred),
           "dead": [0.0] * n, "dead_splice": [0.0] * n, "tree_sizes": [3] * n, "split": {}, "secs": [1.0],
           "n_decoded": n}
    (row,) = rows_from_records([rec], cells)
    return row


def test_rare_event_row_is_not_flagged():
    # a chain whose first token the target takes w.p. 0.0297: about 0.030 predicted per round;
    # 38 rounds with 0 accepted is what one expects a third of the time (0.97^38 = 0.31)
    t = chain_tree([0, 0, 0])
    cond = np.log([0.0297, 0.01, 0.01])
    mu, var = coverage(t, node_log_cond=cond), acceptance_variance(t, node_log_cond=cond)
    assert abs(mu - 0.030) < 1e-3
    row = _row("chain", 1.0, [0] * 38, [mu] * 38, [var] * 38)
    # the empirical std of (accepted - predicted) is 0 here; the exact variance gives
    # z = -38 mu / sqrt(38 var) = -1.1 (it was -2.7 in the micro preset, and infinite here)
    assert -1.3 < row["pred_gap_z"] < -0.9, row["pred_gap_z"]
    assert prediction_summary([row])["max_abs_z"] < 2


def test_z_is_the_sum_of_gaps_over_the_root_of_summed_variances():
    acc, pred, pvar = [1, 0, 2, 1], [0.5, 0.8, 1.2, 0.9], [0.3, 0.4, 0.9, 0.5]
    row = _row("mfd", 1.0, acc, pred, pvar)
    want = (sum(acc) - sum(pred)) / np.sqrt(sum(pvar))
    assert row["pred_gap_z"] == pytest.approx(want, rel=1e-12)  # same sums in another order
    greedy = _row("mfd", 0.0, [1, 2], [1, 2], [0, 0])
    assert greedy["pred_gap_z"] is None  # no randomness at T = 0: nothing to test


def test_step_records_carry_the_exact_predicted_variance():
    pytest.importorskip("transformers")
    from llm_helpers import OracleDrafter, tiny_qwen3

    from mfd_theory.llm import TargetModel
    from mfd_theory.llm.decoding.generate import speculative_generate

    model = tiny_qwen3(seed=0)
    res = speculative_generate(TargetModel(model), OracleDrafter(model, 6, 2, seed=5),
                               torch_prompt(), 20, "mfd", budget=12, temperature=1.0, seed=3, keep_trees=True)
    assert len(res.steps) > 2
    for s in res.steps:
        if s.tree is None:  # a round cut to no tree (the last new token): nothing can be accepted
            assert s.tree_size == 0 and s.predicted == 0 and s.predicted_var == 0
            continue
        want = acceptance_variance(s.tree, node_log_cond=s.node_log_cond)
        # same prefix probabilities, cumulated in another order: float64 rounding only
        assert s.predicted_var == pytest.approx(want, rel=1e-9, abs=1e-12)
        assert s.predicted_var >= s.predicted - s.predicted**2 - 1e-12  # integer count: E[X^2] >= E[X]


def torch_prompt():
    import torch

    return torch.tensor([5, 9, 3, 17, 2, 8], dtype=torch.long)


@pytest.mark.parametrize("bad", [0, 2.0, True])
def test_decode_cells_refuses_a_bad_pass_count(bad):
    from mfd_theory.llm.measure.evaluate import decode_cells

    with pytest.raises(ValueError, match="passes: must be an integer >= 1"):
        decode_cells(None, [], [], temperatures=(0.0,), max_new_tokens=4, passes=bad)
