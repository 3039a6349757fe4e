"""The mfd scorer through the measuring layer: cells, records, rows, gains, calibration, predictions,
budget choices and the round profile keep mixture and best-mode cells of one drafter apart, and a
mixture-only evaluation keeps the keys and tables it had before scorers existed."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import tiny_qwen3  # noqa: E402

from mfd_theory.llm import TargetModel, build_drafter  # noqa: E402
from mfd_theory.llm.decoding.generate import speculative_generate  # noqa: E402
from mfd_theory.llm.measure.evaluate import (  # noqa: E402
    Cell, best_budgets, cell_key, decode_cells, format_gains, format_rows, make_cells, mfd_gains, per_prompt_records,
    rows_from_records, scorer_of,
)
from mfd_theory.llm.measure.predict import (  # noqa: E402
    attach_predictions, calibrate_acceptance, choose_budgets, per_round_rules, predict_cells, prediction_check,
    uncalibrated,
)
from mfd_theory.llm.measure.profile import measure_round_profile  # noqa: E402

PROMPTS = [torch.tensor([3, 7, 1, 9, 4]), torch.tensor([50, 2, 8])]
BUDGETS = (4, 8)


@pytest.fixture(scope="module")
def setup():
    model = tiny_qwen3(seed=0)
    drafters = {"k1": build_drafter(model, block_size=5, num_layers=1, seed=3),
                "k3": build_drafter(model, block_size=5, num_layers=1, num_modes=3, seed=4)}
    cells = make_cells(drafters, ("ar", "ddtree", "mfd"), BUDGETS, scorers=("mixture", "best_mode"))
    target = TargetModel(model)
    recs = decode_cells(target, cells, PROMPTS, temperatures=(0.0,), max_new_tokens=8, passes=1, eos_token_id=[],
                        progress=False)
    return model, target, drafters, cells, recs, rows_from_records(recs, cells)


def test_cells_carry_their_scorer_and_the_default_grid_is_unchanged(setup):
    _, _, drafters, cells, _, _ = setup
    mfd = [(c.scorer, c.budget) for c in cells if c.method == "mfd"]
    assert mfd == [("mixture", 4), ("mixture", 8), ("best_mode", 4), ("best_mode", 8)]
    assert all(c.scorer is None for c in cells if c.method != "mfd")
    assert [c.label for c in cells if c.method == "mfd"] == ["mfd"] * 2 + ["mfd best-mode"] * 2
    default = make_cells(drafters, ("ar", "ddtree", "mfd"), BUDGETS)
    assert [(c.method, c.drafter_label, c.budget, c.scorer) for c in default] == [
        ("ar", "none", 0, None), ("ddtree", "k1", 4, None), ("ddtree", "k1", 8, None), ("ddtree", "k3", 4, None),
        ("ddtree", "k3", 8, None), ("mfd", "k3", 4, "mixture"), ("mfd", "k3", 8, "mixture")]
    assert Cell("mfd", "k3", 4) == Cell("mfd", "k3", 4, scorer="mixture")
    with pytest.raises(ValueError, match="scorer"):
        Cell("ddtree", "k1", 4, scorer="best_mode")
    with pytest.raises(ValueError, match="scorer"):
        make_cells(drafters, ("mfd",), BUDGETS, scorers=("best",))
    assert cell_key("mfd", "k3", 4) == cell_key("mfd", "k3", 4, scorer="mixture") == ("mfd", "k3", 4)
    assert cell_key("mfd", "k3", 4, scorer="best_mode") == ("mfd", "k3", 4, "best_mode")
    assert cell_key("ddtree", "k3") == ("ddtree", "k3")
    assert scorer_of({"method": "mfd"}) == "mixture" and scorer_of({"method": "ddtree"}) is None


def test_records_and_rows_are_the_scorers_own_decodes(setup):
    """Each mfd row holds the decodes of its own scorer (their accepted lengths are what a direct
    decode with that scorer accepts), every row is lossless, and no two rows share a cell."""
    _, target, drafters, cells, recs, rows = setup
    assert len({(r["method"], r["scorer"], r["drafter"], r["budget"]) for r in rows}) == len(rows) == len(cells)
    assert all(r["matches_ar"] is True for r in rows)
    for r in (r for r in recs if r["method"] == "mfd"):
        direct = speculative_generate(target, drafters["k3"], PROMPTS[r["item"]], 8, "mfd", budget=r["budget"],
                                      eos_token_id=[], scorer=r["scorer"], keep_trees=True)
        assert r["accepted"] == [s.accepted for s in direct.steps]
    trees = {sc: [s.tree for s in speculative_generate(target, drafters["k3"], PROMPTS[0], 8, "mfd", budget=8,
                                                       eos_token_id=[], scorer=sc, keep_trees=True).steps]
             for sc in ("mixture", "best_mode")}
    assert trees["mixture"] != trees["best_mode"]  # the two cells decode different trees
    assert {p["scorer"] for p in per_prompt_records(recs) if p["method"] == "mfd"} == {"mixture", "best_mode"}


def test_gains_best_budgets_and_tables_name_the_scorer(setup):
    _, _, _, _, _, rows = setup
    gains = mfd_gains(rows)
    best = {(g["method"], g["scorer"]) for g in gains if g["best_budget"]}
    assert best == {("mfd", "mixture"), ("mfd", "best_mode"), ("ddtree", None)}
    per = [(g["method"], g["scorer"], g["budget"]) for g in gains if not g["best_budget"]]
    assert sorted(per, key=str) == sorted([("mfd", sc, n) for sc in ("mixture", "best_mode") for n in BUDGETS]
                                          + [("ddtree", None, n) for n in BUDGETS], key=str)
    bb = {(b["method"], b["scorer"], b["drafter"]) for b in best_budgets(rows)}
    assert {("mfd", "mixture", "k3"), ("mfd", "best_mode", "k3")} <= bb
    table = "\n".join(format_rows(rows))
    assert "| mfd best-mode | k3 | 4 |" in table and "| mfd | k3 | 4 |" in table
    assert "| mfd best-mode | k3 |" in "\n".join(format_gains(gains))


def test_calibration_predictions_and_budget_choices_keep_the_scorers_apart(setup):
    _, target, _, cells, _, rows = setup
    prompts = [p.numpy() for p in PROMPTS]
    cal = calibrate_acceptance(target, cells, prompts, temperatures=(0.0,), max_new_tokens=8, eos_token_id=[],
                               progress=False)
    mixture, best = cal.find("mfd", "k3", 0.0, 8), cal.find("mfd", "k3", 0.0, 8, scorer="best_mode")
    assert mixture is not None and best is not None and mixture is not best
    assert cal.find("mfd", "k3", 0.0, 8, scorer="mixture") is mixture and best.scorer == "best_mode"
    assert uncalibrated(cal, cells, (0.0,)) == []
    preds = predict_cells(cal, cells, (0.0,))
    keys = [(p["method"], p["scorer"], p["drafter"], p["budget"]) for p in preds]
    assert len(set(keys)) == len(keys) == len(cells)
    for p in (p for p in preds if p["method"] == "mfd"):
        e = cal.find("mfd", "k3", 0.0, p["budget"], scorer=p["scorer"])
        assert p["predicted_accepted"] == pytest.approx(sum(e.mass) / len(e.mass))
    attach_predictions(rows, {"cells": preds})
    by = {(p["method"], p["scorer"], p["drafter"], p["budget"]): p for p in preds}
    for r in rows:
        assert r["predicted_tau"] == by[(r["method"], r["scorer"], r["drafter"], r["budget"])]["predicted_tau"]
    check = prediction_check({"cells": preds}, rows)
    assert {(c["method"], c["scorer"], c["per_round_budget"]) for c in check["cells"]} == {
        ("ddtree", None, False), ("mfd", "mixture", False), ("mfd", "best_mode", False)}
    speed: dict = {}
    profile = measure_round_profile(target, cells, prompts[:1], 6, context_probe=False, progress=False,
                                    speed_out=speed)
    assert {("mfd", "k3", 4), ("mfd", "k3", 4, "best_mode"), ("ddtree", "k3", 8)} <= set(speed)
    choices = choose_budgets(cal, cells, (0.0,), profile, speed, on_grid=True)
    picked = {(c["method"], c["scorer"], c["drafter"]) for c in choices}
    assert {("mfd", "mixture", "k3"), ("mfd", "best_mode", "k3"), ("ddtree", None, "k3")} <= picked
    assert all("naive_calibration_best" in c for c in choices)
    # at T > 0 the naive rule reads the profile's sampled timings where given, at T = 0 the greedy ones
    import dataclasses

    from mfd_theory.llm.measure.evaluate import cell_key
    from mfd_theory.llm.measure.predict import Calibration

    hot_cal = Calibration(cal.entries + [dataclasses.replace(e, temperature=1.0) for e in cal.entries], cal.prompts)
    sampled = {k: 100.0 / k[2] for k in speed}  # the smallest budget ran fastest sampled
    both = choose_budgets(hot_cal, cells, (0.0, 1.0), profile, speed, on_grid=True, calibration_speed_sampled=sampled)
    for c in both:
        timed = speed if c["temperature"] == 0 else sampled
        fastest = max(c["grid"], key=lambda n: (timed[cell_key(c["method"], c["drafter"], n, scorer=c["scorer"])], -n))
        assert c["naive_calibration_best"] == fastest
        assert c["naive_calibration_timed"] == ("greedy" if c["temperature"] == 0 else "sampled")
    assert [c for c in both if c["temperature"] == 0] == choices
    rules = per_round_rules(choices, profile, cells)
    assert {("mfd", "k3"), ("mfd", "k3", "best_mode"), ("ddtree", "k1")} <= set(rules)
