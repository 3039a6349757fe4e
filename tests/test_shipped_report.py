"""The shipped drafters' block (``real-shipped``, mfd_theory/report/shipped.py): what make reproduce's
drafter step shows, each verdict computed from the record's per-problem tau."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mfd_theory.report import BLOCKS, Results
from mfd_theory.report.shipped import real_shipped, summary
from test_report import shipped_record


def _by_hand_gain(a, b) -> float:
    """The geometric mean ratio minus one, from the per-problem values (the slow twin of the gain)."""
    logs = [math.log(x / y) for x, y in zip(a, b)]
    return math.exp(sum(logs) / len(logs)) - 1


def test_the_summary_pairs_mfd_with_the_k1_drafter_problem_by_problem():
    k1, mix = (1.5, 1.4, 1.6, 1.5), (1.65, 1.4, 1.7, 1.45)
    s = summary(shipped_record(k1_tau=k1, mix_tau=mix).data)
    b = s["code-eval"]["32"]
    assert [r["drafter"] for r in b["rows"]] == ["qwen-x-k1", "run-k4"]  # a run's drafter/ subfolder named by its run
    assert list(b["rows"][1]["cells"]) == ["chain", "MFD mixture", "MFD best-mode", "DDTree"]
    qs = {q["question"]: q for q in b["questions"]}
    assert set(qs) == {"MFD mixture vs K = 1 DDTree", "MFD best-mode vs K = 1 DDTree", "MFD mixture vs its own DDTree"}
    assert qs["MFD mixture vs K = 1 DDTree"]["gain"] == pytest.approx(_by_hand_gain(mix, k1), rel=1e-12)
    assert qs["MFD mixture vs K = 1 DDTree"]["against"] == "qwen-x-k1"
    assert all(q["family"] == 3 and q["problems"] == 4 for q in qs.values())
    # the mixture against its own DDTree: the same values, gain 0 and an interval of positive width (the floor)
    own = qs["MFD mixture vs its own DDTree"]
    assert own["gain"] == 0 and own["lo"] < 0 < own["hi"]
    assert b["timing"][0]["cells"][1] == {"cell": "DDTree", "round_s": 0.5, "tau": 1.4, "speedup": 0.3,
                                          "full_set_tau": 1.5, "full_set_speedup": pytest.approx(0.31)}


def test_a_clear_difference_is_a_verdict_and_no_k1_drafter_asks_only_the_own_question():
    rec = shipped_record(k1_tau=(1.2, 1.25, 1.3, 1.2), mix_tau=(2.0, 2.1, 1.9, 2.0))
    qs = {q["question"]: q for q in summary(rec.data)["code-eval"]["32"]["questions"]}
    assert qs["MFD mixture vs K = 1 DDTree"]["verdict"] == "gain"
    rec.data["drafters"] = rec.data["drafters"][1:]
    qs = summary(rec.data)["code-eval"]["32"]["questions"]
    assert [q["question"] for q in qs] == ["MFD mixture vs its own DDTree"] and qs[0]["family"] == 1


def test_the_block_shows_every_cell_question_and_timed_tree_and_moves_with_them():
    text = BLOCKS["real-shipped"].make(Results(None, ("shipped/tau.json",), {"shipped/tau.json": shipped_record()}))
    assert "**code-eval, N = 32** (4 problems, 400 answer tokens" in text
    assert "| qwen-x-k1 | 1 | DDTree | 1.500 | 0.400 |" in text
    assert "| run-k4 | 4 | MFD mixture | 1.525 | 0.400 |" in text
    assert "| MFD mixture vs K = 1 DDTree | 1.525 / 1.500 | +1.7% [-3.0%, +6.7%] inconclusive | 4 |" in text
    assert "| qwen-x-k1 | DDTree | 0.500 | 1.400 | 0.30x | 1.500 | 0.31x |" in text
    assert "plain decoding 140 ms a token over 2 timed problems; each timed problem's speedup predicted" in text
    assert "numerics reproducible, float32, 2 threads, on Some CPU (avx2); measured 2026-12-07 at `abcdef1`" in text
    other = real_shipped(Results(None, ("shipped/tau.json",), {"shipped/tau.json": shipped_record(speedups=(0.9, 0.7))}))
    assert "| qwen-x-k1 | DDTree | 0.500 | 1.400 | 0.70x | 1.500 | 0.71x |" in other


def test_a_record_without_drafters_or_with_unpaired_problems_is_refused_in_one_line():
    rec = shipped_record()
    rec.data["drafters"] = []
    with pytest.raises(ValueError, match="^real-shipped: the tau record has no drafters$"):
        summary(rec.data)
    rec = shipped_record()
    cell = rec.data["drafters"][1]["sets"]["code-eval"]["budgets"]["32"]["cells"][1]
    cell["per_sequence_tau"] = cell["per_sequence_tau"][:3]
    with pytest.raises(ValueError, match="cannot be paired"):
        summary(rec.data)


def test_an_answer_without_rounds_is_left_out_of_the_pairing():
    rec = shipped_record(k1_tau=(1.5, 1.4, float("nan"), 1.5), mix_tau=(1.6, 1.5, 1.7, 1.5))
    q = summary(rec.data)["code-eval"]["32"]["questions"][0]
    assert q["problems"] == 3
    assert q["gain"] == pytest.approx(_by_hand_gain((1.6, 1.5, 1.5), (1.5, 1.4, 1.5)))
    assert np.isfinite(q["lo"])
