"""The e2e run's ceiling and its reach table: the micro run measures the ceiling on calibration
prompts only (none evaluated) and the reach rows pair what they say they pair."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")

from mfd_theory.ceiling_stats import pool_ceiling  # noqa: E402
from mfd_theory.runs.experiments.e2e_ceiling import reach_rows  # noqa: E402
from mfd_theory.stats import compare, compare_rows  # noqa: E402


def _record(i: int) -> dict:
    """One prompt's record as prompt_ceiling writes it, with known coverages."""
    base = {"16": 0.6 + 0.03 * i, "32": 0.8 + 0.03 * i}
    cov = {"product": base, "mixture K=2": {k: v * 1.06 for k, v in base.items()},
           "best_mode K=2": {k: v * 1.04 for k, v in base.items()},
           "oracle": {k: v * 1.2 for k, v in base.items()}}
    return {"dataset": "heldout", "id": f"calibration-{i}", "temperature": 1.0, "L": 7, "samples": 16,
            "budgets": [16, 32], "coverage": cov, "mc": {k: {n: [c, 0.01] for n, c in v.items()} for k, v in cov.items()},
            "tc": {"tc": 2.0, "h_positions": 9.0, "h_block": 7.0, "h_block_se": 0.1},
            "heldout": {"1": {"ll": -7.0}, "2": {"ll": -6.5, "gain": [0.5, 0.1]}},
            "dead": {"nodes": 32, "dead_share": 0.1, "dead_splice_share": 0.05, "dead_mass_lost": 0.001},
            "forwards": 3, "prompt_tokens": 12, "wall_s": 1.0}


def _row(method, drafter, n, taus, scorer=None, temp=1.0):
    return {"method": method, "drafter": drafter, "budget": n, "temperature": temp, "scorer": scorer,
            "prompt_ids": [str(i) for i in range(len(taus))], "prompt_tau": list(taus),
            "prompt_tokens_per_s": [100.0] * len(taus), "tau": float(np.mean(taus))}


def test_reach_rows_pair_each_drafter_with_ddtree_on_the_product_drafter():
    pooled = pool_ceiling([_record(i) for i in range(5)])
    ceiling = {"pooled": pooled, "prompts": [{} for _ in range(5)], "options": {"samples": 16}}
    rng = np.random.default_rng(0)
    prod = {n: 3 + rng.random(6) for n in (16, 32)}
    rows = [_row("ddtree", "product", n, prod[n]) for n in (16, 32)]
    rows += [_row("mfd", "mfd-k2", n, prod[n] * 1.05, "mixture") for n in (16, 32)]
    rows += [_row("mfd", "mfd-k2", 16, prod[16] * 1.02, "best_mode"), _row("dartree", "dartree", 16, prod[16])]
    rows += [_row("mfd", "mfd-k2", 16, prod[16], "mixture", temp=0.0),  # T = 0: no ceiling there
             _row("chain", "product", 7, prod[16])]
    cmp = compare([[1.1, 1.2], [1.0, 1.1], [1.2, 1.3]], [[1.0, 1.0]] * 3).to_dict()
    replicated = {"comparisons": [
        {"question": "against_product", "temperature": 1.0, "a": {"method": "mfd", "drafter": "mfd-k2", "budget": 32,
                                                                  "scorer": "mixture"},
         "b": {"method": "ddtree", "drafter": "product", "budget": 16, "scorer": None}, "tau_cmp": cmp},
        {"question": "against_product", "temperature": 1.0, "a": {"method": "mfd", "drafter": "mfd-k2", "budget": 32,
                                                                  "scorer": "mixture"},
         "b": {"method": "chain", "drafter": "product", "budget": 7, "scorer": None}, "tau_cmp": cmp},
        {"question": "scorer", "temperature": 1.0, "a": {"method": "mfd", "drafter": "mfd-k2", "budget": 32,
                                                         "scorer": "best_mode"},
         "b": {"method": "mfd", "drafter": "mfd-k2", "budget": 32, "scorer": "mixture"}, "tau_cmp": cmp}]}
    out = reach_rows(ceiling, rows, replicated)
    grid = [r for r in out if r["runs"] == 1]
    assert [(r["drafter"], r["scorer"], r["budget"], r["ceiling"]) for r in grid] == [
        ("mfd-k2", "mixture", 16, "mixture K=2"), ("mfd-k2", "mixture", 32, "mixture K=2"),
        ("mfd-k2", "best_mode", 16, "best_mode K=2"), ("dartree", "mixture", 16, "oracle")]
    want = compare_rows(rows[2], rows[0], family=4)["tau_cmp"]
    assert grid[0]["gain"] == pytest.approx(want["gain"]) and grid[0]["gain"] == pytest.approx(0.05)
    assert grid[0]["predicted"]["gain"] == pytest.approx(0.06 * np.mean([0.6 + 0.03 * i for i in range(5)])
                                                         / np.mean([1.6 + 0.03 * i for i in range(5)]), rel=0.05)
    assert grid[0]["reach"] == pytest.approx(grid[0]["gain"] / grid[0]["predicted"]["gain"])
    # the replicated row: only the one against ddtree, the product at its own chosen budget
    (rep,) = [r for r in out if r["runs"] > 1]
    assert rep["runs"] == 3 and rep["budget"] == 32 and rep["base_budget"] == 16
    per = pooled["heldout"]["1"]["by_budget"]
    assert rep["predicted"] == compare(1 + np.asarray(per["32"]["per_prompt"]["mixture K=2"]),
                                       1 + np.asarray(per["16"]["per_prompt"]["product"]), family=len(out)).to_dict()
    assert reach_rows(None, rows, replicated) == []


def test_reach_rows_of_a_pipeline_run_go_by_data_set_and_the_rows_k():
    """mfd eval's rows (natural's): a data set each, drafters named by their directories, K a field."""
    recs = [dict(_record(i), dataset=ds) for ds in ("code", "prose") for i in range(4)]
    pooled = pool_ceiling(recs)
    rows = []
    for ds, lift in (("code", 1.05), ("prose", 0.98)):
        prod = 3 + np.arange(5) / 10
        rows += [dict(_row("ddtree", "drafter", 16, prod), dataset=ds, K=1),
                 dict(_row("mfd", "drafter-2", 16, prod * lift, "mixture"), dataset=ds, K=2),
                 dict(_row("dartree", "dartree-run", 16, prod), dataset=ds, K=1)]
    out = reach_rows({"pooled": pooled}, rows, None)
    assert [(r["dataset"], r["drafter"], r["K"], r["ceiling"]) for r in out] == [
        ("code", "drafter-2", 2, "mixture K=2"), ("code", "dartree-run", None, "oracle"),
        ("prose", "drafter-2", 2, "mixture K=2"), ("prose", "dartree-run", None, "oracle")]
    assert out[0]["gain"] == pytest.approx(0.05) and out[2]["gain"] == pytest.approx(-0.02)
    assert out[2]["reach"] < 0 < out[0]["reach"]
    with pytest.raises(ValueError, match="drafter 'mystery' has no K"):
        reach_rows({"pooled": pooled}, [_row("ddtree", "mystery", 16, [3.0, 3.1])], None)


def test_the_micro_run_measures_its_ceiling_on_calibration_prompts_only(tmp_path, micro_e2e_cache):
    import shutil

    from mfd_theory.commands.experiments.e2e import main
    from mfd_theory.report import render

    shutil.copytree(micro_e2e_cache, tmp_path / "cache")  # the session's micro checkpoints: one replicate's reused
    main(["--preset", "micro", "--out", str(tmp_path), "--quiet", "--temperatures", "1", "--replicates", "1",
          "--budgets", "8", "--eval-prompts", "2", "--hf-assisted", "false", "--wta-modes", "",
          "--timing-passes", "1"])  # one timing pass: nothing here reads a time
    d = json.loads((tmp_path / "end_to_end.json").read_text())["data"]
    evaluated = {p["sha256"] for p in d["evaluation_prompts"]}
    ceiling = d["ceiling"]
    assert len(ceiling["prompts"]) == 2 and not evaluated & {p["sha256"] for p in ceiling["prompts"]}
    assert {p["sha256"] for p in ceiling["prompts"]} <= {p["sha256"] for p in d["calibration_prompts"]}
    tab = ceiling["pooled"]["heldout"]["1"]
    assert tab["n_prompts"] == 2 and "oracle" in tab["trees"] and "mixture K=2" in tab["trees"]
    reach = d["ceiling_reach"]
    assert {r["drafter"] for r in reach} >= {"mfd-k2", "dartree"} and all(r["runs"] == 1 for r in reach)
    assert all((r["predicted"] is None) == ("why" in r and r["reach"] is None) or r["reach"] is None for r in reach)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "end_to_end.json").write_text((tmp_path / "end_to_end.json").read_text())
    text, changed, _ = render("<!-- report:e2e-ceiling -->\nold\n<!-- /report:e2e-ceiling -->\n",
                              tmp_path / "results")
    assert changed == ["e2e-ceiling"] and "| heldout | 1 | 8 | mfd-k2 | 1 | K = 2 |" in text
