"""The measured round cost model in the decoding pipeline: measure_round_profile on tiny models,
per-row predicted speedups, and the predicted-vs-measured check."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402
from llm_helpers import OracleDrafter, tiny_qwen3  # noqa: E402

from mfd_theory.llm import TargetModel  # noqa: E402
from mfd_theory.llm.measure.evaluate import Cell, add_speedup_predictions, rows_from_records, speedup_check  # noqa: E402
from mfd_theory.llm.measure.profile import measure_round_profile, trimmed_mean  # noqa: E402
from mfd_theory.speedup import LatencyProfile, cell_speedup  # noqa: E402

ROUNDOFF = 1e-12  # a few float64 operations


@pytest.fixture(scope="module")
def tiny():
    hf = tiny_qwen3(num_layers=2)
    return TargetModel(hf), {1: OracleDrafter(hf, block_size=4, num_modes=1), 2: OracleDrafter(hf, block_size=4)}


def test_measure_round_profile_tiny(tiny):
    target, drafters = tiny
    cells = [Cell("chain", "k1", 3, drafters[1]), Cell("ddtree", "k1", 4, drafters[1]),
             Cell("ddtree", "k2", 4, drafters[2]), Cell("mfd", "k2", 4, drafters[2]),
             Cell("mfd", "k2", 12, drafters[2])]
    prompts = [np.arange(1, 9), np.arange(5, 15)]
    prof = measure_round_profile(target, cells, prompts, 8, progress=False, name="t", model="tiny")
    assert prof.measured_round and not prof.assumption
    assert prof.tree_sizes == (3, 4, 12) and prof.draft_modes == (1, 2)
    assert {(t.method, t.K) for t in prof.overhead} == {("chain", 1), ("ddtree", 1), ("ddtree", 2), ("mfd", 2)}
    mfd = next(t for t in prof.overhead if t.method == "mfd")
    assert mfd.tree_sizes == (4, 12) and len(mfd.draft_ms) == 2 and all(t > 0 for t in mfd.draft_ms)
    assert prof.t_target_ms > 0 and prof.draw_ms > 0 and all(t > 0 for t in prof.verify_ms)
    assert prof.context_probe["contexts"] == [8, 16] and prof.context_probe["tree_sizes"] == [1, 12]
    assert LatencyProfile.from_dict(prof.to_dict()) == prof  # the stored form validates and round-trips
    assert cell_speedup(1.0, "mfd", 2, 4, prof) > 0
    with pytest.raises(ValueError, match="repeats"):
        measure_round_profile(target, cells, prompts, 8, repeats=0, progress=False)
    with pytest.raises(ValueError, match="cells"):
        measure_round_profile(target, [Cell("ar", "none", 0)], prompts, 8, progress=False)
    with pytest.raises(ValueError, match="prompts"):
        measure_round_profile(target, cells, [], 8, progress=False)
    with pytest.raises(ValueError, match="max_new_tokens: must be an integer >= 2, got 1"):
        measure_round_profile(target, cells, prompts, 1, progress=False)
    speed = {}
    measure_round_profile(target, cells, prompts[:1], 4, progress=False, context_probe=False, speed_out=speed)
    assert set(speed) == {(c.method, c.drafter_label, c.budget) for c in cells if c.method != "ar"}
    assert all(v > 0 for v in speed.values())


def test_sampled_rounds_give_the_walk_without_its_draws(tiny):
    """With a T > 0 among the temperatures every table gets ``walk_sampled_ms``, and a T > 0 round
    is priced with it (plus its draws) instead of the greedy walk, which reads an argmax over every
    verified row that a sampled round never runs."""
    target, drafters = tiny
    cells = [Cell("ddtree", "k1", 4, drafters[1]), Cell("mfd", "k2", 12, drafters[2])]
    prompts = [np.arange(1, 9)]
    greedy = measure_round_profile(target, cells, prompts, 6, progress=False, context_probe=False)
    assert all(not t.walk_sampled_ms for t in greedy.overhead)
    hot: dict = {}
    both = measure_round_profile(target, cells, prompts, 6, progress=False, context_probe=False,
                                 temperatures=(0.0, 1.0), sampled_speed_out=hot)
    assert set(hot) == {(c.method, c.drafter_label, c.budget) for c in cells} and all(v > 0 for v in hot.values())
    assert all(len(t.walk_sampled_ms) == len(t.tree_sizes) and min(t.walk_sampled_ms) > 0 for t in both.overhead)
    assert "sampled at T = 1" in both.note
    assert LatencyProfile.from_dict(both.to_dict()) == both
    t = next(t for t in both.overhead if t.method == "mfd")
    r1, r0 = both.round_ms("mfd", 2, 12, 1.0, 2.0), both.round_ms("mfd", 2, 12, 0.0, 2.0)
    assert r1["walk"] == pytest.approx(t.walk_sampled_ms[0] + 3 * both.draw_ms, rel=ROUNDOFF)
    assert r0["walk"] == pytest.approx(t.walk_ms[0], rel=ROUNDOFF)


def test_sampled_walk_column_prices_t1_rounds_only():
    table = dict(method="mfd", K=2, tree_sizes=[8, 32], tree_ms=[0.5, 1.0], walk_ms=[0.4, 0.8],
                 commit_ms=[0.2, 0.2])
    base = dict(name="fake", device="cpu", model="fake", assumption=False, t_target_ms=4.0, t_draft_ms=1.0,
                tree_sizes=[8, 32], verify_ms=[5.0, 7.0], draw_ms=0.05, draft_modes=[2], draft_ms=[2.0])
    old = LatencyProfile.from_dict({**base, "overhead": [table]})
    new = LatencyProfile.from_dict({**base, "overhead": [{**table, "walk_sampled_ms": [0.1, 0.3]}]})
    assert new.round_ms("mfd", 2, 8, 0.0, 1.0) == old.round_ms("mfd", 2, 8, 0.0, 1.0)  # greedy unchanged
    assert old.round_ms("mfd", 2, 8, 1.0, 1.0)["walk"] == pytest.approx(0.4 + 2 * 0.05)
    assert new.round_ms("mfd", 2, 8, 1.0, 1.0)["walk"] == pytest.approx(0.1 + 2 * 0.05)
    # the vectorised round time the budget rules use agrees with round_ms
    from mfd_theory.speedup.budget import _round_time

    assert _round_time(new, np.array([8.0]), "mfd", 2, 1.0, np.array([1.0]))[0] == pytest.approx(
        sum(new.round_ms("mfd", 2, 8, 1.0, 1.0).values()))
    with pytest.raises(ValueError, match="walk_sampled_ms"):
        LatencyProfile.from_dict({**base, "overhead": [{**table, "walk_sampled_ms": [0.1]}]})


def test_trimmed_mean():
    assert trimmed_mean([1.0, 2.0, 3.0]) == 2.0
    assert trimmed_mean(list(range(10)) + [1000.0]) == pytest.approx(np.mean(range(1, 10)), abs=ROUNDOFF)
    with pytest.raises(ValueError, match="values"):
        trimmed_mean([])


class _K2:
    num_modes = 2


PROFILE = LatencyProfile.from_dict(dict(
    name="fake", device="cpu", model="fake", assumption=False, t_target_ms=4.0, t_draft_ms=1.0,
    tree_sizes=[8, 32], verify_ms=[5.0, 7.0], draw_ms=0.05, draft_modes=[2], draft_ms=[2.0],
    overhead=[dict(method="mfd", K=2, tree_sizes=[8, 32], tree_ms=[0.5, 1.0], walk_ms=[0.1, 0.2],
                   commit_ms=[0.2, 0.2])]))


def _records(temperature, accepted, predicted, pvar, n_tokens):
    """One ar record (n_tokens rounds of t_ar) and one mfd record whose rounds take the profile's
    times exactly (split and secs), at N = 8."""
    t_ar = PROFILE.t_ar(temperature) / 1e3
    rounds = [PROFILE.round_ms("mfd", 2, 8, temperature, a) for a in accepted]
    split = {k: sum(r[k] for r in rounds) / 1e3 for k in ("draft", "tree", "verify", "walk", "commit")}
    base = {"temperature": temperature, "dataset": "d", "item": 0, "id": "0", "K": 2, "dead": [], "dead_splice": []}
    ar = {**base, "cell": 0, "method": "ar", "drafter": "none", "K": 0, "budget": 0, "tokens": [1] * (n_tokens + 1),
          "turn_lengths": [n_tokens + 1], "rounds": n_tokens, "accepted": [0] * n_tokens, "predicted": [0.0] * n_tokens,
          "predicted_var": [0.0] * n_tokens, "covered": [0.0] * n_tokens, "tree_sizes": [0] * n_tokens,
          "split": {"draft": 0.0, "tree": 0.0, "verify": t_ar * n_tokens, "walk": 0.0, "commit": 0.0}, "secs": [t_ar * n_tokens] * 3, "n_decoded": n_tokens}
    secs = sum(sum(r.values()) for r in rounds) / 1e3
    mfd = {**base, "cell": 1, "method": "mfd", "drafter": "k2", "budget": 8, "tokens": [1] * (n_tokens + 1),
           "turn_lengths": [n_tokens + 1], "rounds": len(accepted), "accepted": list(accepted),
           "predicted": list(predicted), "predicted_var": list(pvar), "covered": list(predicted),
           "tree_sizes": [8] * len(accepted), "split": split, "secs": [secs, 1.1 * secs, 0.9 * secs],
           "n_decoded": n_tokens}
    return [ar, mfd], [Cell("ar", "none", 0), Cell("mfd", "k2", 8, _K2())]


def test_predictions_in_rows_follow_the_formula():
    accepted = [3, 1, 2, 2, 0, 3, 3, 2, 0, 3]  # 29 tokens in 10 rounds
    predicted = [2.5, 1.5, 2.0, 2.0, 0.5, 2.5, 2.5, 2.0, 0.5, 2.5]
    pvar = [0.5] * 10
    for temp in (0.0, 1.0):
        records, cells = _records(temp, accepted, predicted, pvar, 29)
        rows = add_speedup_predictions(rows_from_records(records, cells), records, PROFILE)
        ar, row = rows
        assert ar["speedup_from_insample_coverage"] == 1.0
        a_hat = 1.85  # the theory's mean acceptance, by hand
        want = 2.85 * PROFILE.t_ar(temp) / sum(PROFILE.round_ms("mfd", 2, 8, temp, a_hat).values())
        assert row["speedup_from_insample_coverage"] == pytest.approx(want, abs=ROUNDOFF)
        # the synthetic rounds take exactly the profile's times and emit 1 + accepted tokens each:
        # the prediction from the measured acceptance is the measured speedup of the first pass
        m_acc = 1.9
        assert row["speedup_from_measured_tau"] == pytest.approx(
            cell_speedup(m_acc, "mfd", 2, 8, PROFILE, temp), abs=ROUNDOFF)
        assert row["speedup_passes"][0] == pytest.approx(row["speedup_from_measured_tau"], rel=1e-9)
        meas, at_tau = row["round_ms_measured"], PROFILE.round_ms("mfd", 2, 8, temp, m_acc)
        for k in meas:
            assert meas[k] == pytest.approx(at_tau[k], abs=1e-9)  # ms from seconds and back


def _row(budget, measured, predicted, std, method="mfd", temp=0.0):
    return {"dataset": "d", "method": method, "drafter": "k2", "budget": budget, "temperature": temp,
            "speedup": measured, "speedup_std": std, "speedup_from_insample_coverage": predicted,
            "speedup_from_measured_tau": predicted}


def test_speedup_check_by_hand():
    rows = [_row(8, 1.00, 1.10, 0.02), _row(32, 1.20, 1.14, 0.02), _row(64, 1.19, 1.18, 0.02),  # pick 64: hit
            _row(8, 2.00, 1.90, 0.01, temp=1.0), _row(32, 1.50, 1.95, 0.01, temp=1.0),              # pick 32: miss
            {"dataset": "d", "method": "ar", "drafter": "none", "budget": 0, "temperature": 0.0, "speedup": 1.0,
             "speedup_std": 0.0, "speedup_from_insample_coverage": 1.0}]
    c = speedup_check(rows)
    errs = sorted(abs(p / m - 1) for m, p in ((1.0, 1.1), (1.2, 1.14), (1.19, 1.18), (2.0, 1.9), (1.5, 1.95)))
    assert c["n_rows"] == 5
    assert c["theory"]["median_rel_error"] == pytest.approx(errs[2], abs=ROUNDOFF)
    assert c["theory"]["worst_rel_error"] == pytest.approx(0.3, abs=ROUNDOFF)
    assert c["theory"]["worst_row"]["budget"] == 32 and c["theory"]["within_spread"] == 1  # only 1.19 vs 1.18
    picks = {p["temperature"]: p for p in c["best_budget"]}
    assert picks[0.0]["predicted_budget"] == 64 and picks[0.0]["measured_budget"] == 32
    assert picks[0.0]["hit"] and not picks[0.0]["exact"]  # 1.20 - 1.19 <= hypot(0.02, 0.02)
    assert not picks[1.0]["hit"] and c["best_budget_hits"] == 1 and c["best_budget_exact"] == 0
    assert speedup_check([])["n_rows"] == 0
    assert c["median_rel_spread"] == pytest.approx(np.median([0.02 / 1.0, 0.02 / 1.2, 0.02 / 1.19, 0.01 / 2.0,
                                                              0.01 / 1.5]), abs=ROUNDOFF)
    assert math.isfinite(c["theory"]["mean_rel_error"])


def test_speedup_check_block_and_figure():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from mfd_theory.figures.e2e import speedup_check_figure
    from mfd_theory.report import speedup_check_block
    from mfd_theory.results import Result

    records, cells = _records(1.0, [3, 1, 2, 2, 0, 3], [2.5, 1.5, 2.0, 2.0, 0.5, 2.5], [0.5] * 6, 17)
    rows = add_speedup_predictions(rows_from_records(records, cells), records, PROFILE)
    data = {"rows": rows, "round_profile": PROFILE.to_dict(), "speedup_check": speedup_check(rows),
            "timings_s": {"round_profile": 1.0}}
    res = Result("end_to_end", {"profile_prompts": 2, "max_new_tokens": 18}, data, seed=0)
    text = speedup_check_block(res)
    err = rows[1]["speedup_from_insample_coverage"] / rows[1]["speedup"] - 1
    assert f"{100 * err:+.1f}%" in text and f"median {100 * abs(err):.1f}%" in text
    assert "| verify |" in text and "The largest share of the error is in" in text
    (ar,) = data["speedup_check"]["ar_round"]
    assert ar["measured_over_predicted"] == pytest.approx(1.0, abs=1e-9) and "state held" in text
    assert "No round profile" in speedup_check_block(Result("end_to_end", {}, {"rows": rows}, seed=0))
    fig = speedup_check_figure(data)
    assert len(fig.axes) == 2 and fig.axes[0].get_ylabel() == "predicted speedup over AR"


def test_budget_rule_cuts_each_round_and_stays_lossless(tiny):
    from mfd_theory.llm.decoding.generate import speculative_generate
    from mfd_theory.speedup import PerRoundBudget

    target, drafters = tiny
    prompt = torch.arange(1, 9)
    ar = speculative_generate(target, None, prompt, 12, "ar")
    seen = []

    def two(gains):
        seen.append(np.asarray(gains))
        return 2

    res = speculative_generate(target, drafters[2], prompt, 12, "mfd", budget=8, budget_rule=two, keep_trees=True)
    assert res.tokens == ar.tokens and all(s.tree_size <= 2 for s in res.steps)
    assert all(np.all(np.diff(g) <= 1e-12) and g[0] <= 1 for g in seen)  # best first, probabilities
    rule = PerRoundBudget(PROFILE, "mfd", 2, 0.0, 8)
    res = speculative_generate(target, drafters[2], prompt, 12, "mfd", budget=8, budget_rule=rule)
    assert res.tokens == ar.tokens and all(1 <= s.tree_size <= 8 for s in res.steps)
    with pytest.raises(ValueError, match="budget_rule"):
        speculative_generate(target, drafters[2], prompt, 12, "mfd", budget=8, budget_rule=3)
