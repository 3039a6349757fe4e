"""``mfd e2e``: the micro preset end to end (training included), presets, gains, bad input."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.commands.experiments.e2e import E2EConfig, main, preset_config  # noqa: E402
from mfd_theory.runs.experiments.e2e import mfd_gains  # noqa: E402

REQUIRED = ("method", "budget", "temperature", "tau", "accepted_mean", "accepted_std",
            "covered_mass_insample", "n_steps", "speedup", "dead_share")


@pytest.fixture(scope="module")
def micro(tmp_path_factory, micro_e2e_cache):
    """The micro run as ``mfd reproduce`` runs it on two cores: ``--prepare-only`` first (every
    checkpoint trained, nothing evaluated: the session's shared cache, conftest.micro_e2e_cache),
    then the evaluation, which must train nothing (and whose cache keys ignore --threads)."""
    import shutil

    import mfd_theory.llm.training.train as train

    out = tmp_path_factory.mktemp("e2e")
    shutil.copytree(micro_e2e_cache, out / "cache")

    def no_training(*a, **k):
        raise AssertionError("the evaluation after --prepare-only trained a model")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train, "run_training", no_training)
        main(["--preset", "micro", "--out", str(out), "--quiet"])
    return out, json.loads((out / "end_to_end.json").read_text())


def test_micro_preset_writes_the_table(micro):
    out, res = micro
    rows = res["data"]["rows"]
    cfg = preset_config("micro")
    for r in rows:
        assert all(k in r for k in REQUIRED), r
    methods = {(r["method"], r["drafter"]) for r in rows}
    assert {("ar", "none"), ("chain", "product"), ("ddtree", "product"), ("mfd", "mfd-k2"),
            ("dartree", "dartree")} <= methods
    assert not any(r["drafter"] == "dartree" and r["method"] != "dartree" for r in rows)
    for temp in cfg.temperatures:  # dartree at the same budgets and temperatures as mfd
        assert ({r["budget"] for r in rows if r["method"] == "dartree" and r["temperature"] == temp}
                == {r["budget"] for r in rows if r["method"] == "mfd" and r["temperature"] == temp})
    assert {r["temperature"] for r in rows} == set(cfg.temperatures)
    assert {r["budget"] for r in rows if r["method"] == "mfd"} == set(cfg.budgets)
    assert res["data"]["hf_assisted"], "the HF assisted-generation baseline is missing"
    assert set(res["data"]["loss_curves"]) >= {"target", "product", "mfd-k2", "draft_lm", "dartree"}
    # trained identically: the same number of steps as the product drafter
    assert len(res["data"]["loss_curves"]["dartree"]) == len(res["data"]["loss_curves"]["product"])
    # one Domino drafter per replicate (the micro preset trains two drafter sets)
    assert len(list((out / "cache").glob("drafter-dartree-*/drafter/config.json"))) == cfg.replicates == 2
    rep = res["data"]["replicated"]
    assert rep["runs"] == 2 and rep["drafter_seeds"] == [0, 1] and rep["comparisons"]
    sides = {"against_product": ({"mfd-k2", "dartree"}, {"product"}), "scorer": ({"mfd-k2"}, {"mfd-k2"}),
             "objective": ({"mfd-k2-wta"}, {"mfd-k2"})}
    assert {c["question"] for c in rep["comparisons"]} == set(sides)
    for c in rep["comparisons"]:
        assert c["tau_cmp"]["model"] == "runs" and c["tau_cmp"]["n_runs"] == 2 and len(c["tau_runs"]) == 2
        a, b = sides[c["question"]]
        assert c["a"]["drafter"] in a and c["b"]["drafter"] in b
        # one family per question and temperature
        assert c["family"] == sum(1 for x in rep["comparisons"] if (x["question"], x["temperature"])
                                  == (c["question"], c["temperature"]))
        if c["question"] == "scorer":
            assert (c["a"]["scorer"], c["b"]["scorer"]) == ("best_mode", "mixture")
        if c["question"] == "objective":
            assert c["a"]["scorer"] == c["b"]["scorer"]
    # calibration on held-out prompts, none of them evaluated
    cal = {p["sha256"] for p in res["data"]["calibration_prompts"]}
    assert cal and not cal & {p["sha256"] for p in res["data"]["evaluation_prompts"]}
    assert {p["dataset"] for p in res["data"]["calibration_prompts"]} == {"heldout"}
    assert res["data"]["mode_diagnostics"]["mfd-k2"]["K"] == 2
    assert res["data"]["prediction_check"]["n_rows"] > 0


def test_micro_decoding_is_lossless_and_prediction_holds(micro):
    _, res = micro
    for r in res["data"]["rows"]:
        assert r["tau"] >= 1.0 and r["n_steps"] > 0
        if r["temperature"] == 0:
            # Greedy: every method emits exactly ar's tokens, and the one-hot prediction is exact.
            assert r["matches_ar"], r
            assert r["covered_mass_insample"] == pytest.approx(r["accepted_mean"], abs=1e-9)
        elif r["method"] != "ar" and not math.isnan(r["pred_gap_z"]):
            # T = 1: E[accepted] = covered mass; a generous 5-sigma band for a tiny sample.
            assert abs(r["pred_gap_z"]) < 5, r


def test_micro_rows_carry_predicted_speedups(micro):
    """The round profile is measured before decoding, stored, and every row has both predictions."""
    from mfd_theory.speedup import LatencyProfile

    _, res = micro
    data = res["data"]
    prof = LatencyProfile.from_dict(data["round_profile"], source="round_profile")
    assert prof.measured_round and set(prof.tree_sizes) >= set(preset_config("micro").budgets)
    assert data["timings_s"]["round_profile"] > 0
    spec = [r for r in data["rows"] if r["method"] != "ar"]
    for r in spec:
        for key in ("speedup_from_insample_coverage", "speedup_from_measured_tau"):
            assert isinstance(r[key], float) and 0 < r[key] < 10, r
        assert set(r["round_ms_predicted"]) == set(r["round_ms_measured"]) == {"draft", "tree", "verify", "walk",
                                                                                 "commit"}
    check = data["speedup_check"]
    assert check["n_rows"] == len(spec) and check["theory"]["n"] == len(spec)
    # (product ddtree, k2 ddtree, k2 mfd x 2 scorers, k2-wta mfd x 2 scorers, dartree) x 2 temperatures
    assert len(check["best_budget"]) == 14
    # the theory's own budget choices, made before decoding, and their decoded cells
    choices = data["budget_choice"]
    # (product ddtree, k2 mfd x 2 scorers, k2-wta mfd x 2 scorers, dartree) x 2 temperatures: no choice for
    # the ablation (ddtree on k2)
    assert len(choices) == 12 and all(1 <= c["budget"] <= max(preset_config("micro").budgets) for c in choices)
    assert not any(c["method"] == "ddtree" and c["K"] > 1 for c in choices)
    chosen = data["chosen_budget_rows"]
    assert not any(r["method"] == "ddtree" and r["K"] > 1 for r in chosen)
    per_round = [r for r in chosen if r["per_round_budget"]]
    # no per-round cut for dartree: its tree is grown depth by depth, not best first
    assert len(per_round) == 10 and all(r["drafter"].endswith("/per-round") for r in per_round)
    assert not any(r["method"] == "dartree" for r in per_round)
    assert all(1 <= r["mean_tree_size"] <= r["budget"] for r in per_round)
    for r in chosen:
        assert isinstance(r["speedup_from_insample_coverage"], float) and r["tau"] >= 1.0, r
        if r["temperature"] == 0:
            assert r["matches_ar"], r
    grid = {(r["method"], r["drafter"], r["budget"], r.get("scorer")) for r in data["rows"]}
    assert not any((r["method"], r["drafter"], r["budget"], r.get("scorer")) in grid for r in chosen)
    # a fixed chosen budget is decoded at the temperature(s) it was chosen for, and only there
    picked = {(c["temperature"], c["method"], c["drafter"], c["budget"], c.get("scorer")) for c in choices}
    fixed = {(r["temperature"], r["method"], r["drafter"], r["budget"], r.get("scorer")) for r in chosen
             if not r["per_round_budget"]}
    assert fixed == {p for p in picked if p[1:] not in grid}


def test_micro_predictions_are_written_before_the_evaluation_and_checked_after(micro):
    """predictions.json: on disk before the first evaluated prompt, from calibration prompts that
    share none with the evaluated ones, and not a copy of the measurement."""
    out, res = micro
    data = res["data"]
    path = out / "predictions.json"
    pred = json.loads(path.read_text())["data"]
    started = data["evaluation_started_unix"]
    assert pred["written_at_unix"] < started and path.stat().st_mtime <= started
    cal = {p["sha256"] for p in pred["calibration_prompts"]}
    ev = {p["sha256"] for p in pred["evaluation_prompts"]}
    assert len(cal) == preset_config("micro").calibration_prompts and len(ev) == preset_config("micro").eval_prompts
    assert not cal & ev
    assert data["evaluation_prompts"] == pred["evaluation_prompts"]
    chk = data["prediction"]
    spec_cells = [c for c in pred["cells"] if c["method"] != "ar"]
    assert chk["n_cells"] == len(spec_cells) > 0
    for c in chk["cells"]:  # every cell's numbers are the ones written before decoding
        p = next(x for x in spec_cells if (x["method"], x.get("scorer"), x["drafter"], x["budget"], x["temperature"],
                                           x["per_round_budget"]) == (c["method"], c.get("scorer"), c["drafter"],
                                                                      c["budget"], c["temperature"],
                                                                      c["per_round_budget"]))
        assert c["predicted_tau"] == p["predicted_tau"] and c["predicted_speedup"] == p["predicted_speedup"]
        assert p["predicted_speedup_lo"] <= p["predicted_speedup"] <= p["predicted_speedup_hi"]
    # a prediction equal to the measurement in every greedy cell would mean it was computed from it
    assert chk["t0_cells_differing"] >= 1
    assert {e["temperature"] for e in chk["budget_regret"]} == set(preset_config("micro").temperatures)


def test_rerun_skips_training(micro):
    out, _ = micro
    cache = out / "cache"
    stamp = {p: p.stat().st_mtime for p in cache.glob("*/loss_curve.json")}
    assert len(stamp) >= 5  # target, draft LM, two block drafters, the Domino drafter
    # the evaluation's size changes no training key: one prompt of a few tokens, one timing pass,
    # one drafter set, no ceiling (every checkpoint it needs is the micro run's)
    main(["--preset", "micro", "--out", str(out / "rerun"), "--cache-dir", str(cache), "--quiet",
          "--hf-assisted", "false", "--temperatures", "0", "--budgets", "8", "--eval-prompts", "1",
          "--max-new-tokens", "4", "--timing-passes", "1", "--replicates", "1", "--calibration-prompts", "1",
          "--profile-prompts", "1", "--ceiling-prompts", "0"])
    assert (out / "rerun" / "end_to_end.json").is_file()
    assert {p: p.stat().st_mtime for p in cache.glob("*/loss_curve.json")} == stamp


def test_unknown_preset_cli(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--preset", "huge", "--out", str(tmp_path)])
    assert "huge" in capsys.readouterr().err


def test_unknown_preset_config():
    with pytest.raises(ValueError, match="preset"):
        preset_config("huge")


def test_unwritable_out_dir(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SystemExit) as exc:
        main(["--preset", "micro", "--out", str(blocker / "sub"), "--quiet"])
    assert exc.value.code == 2 and "--out" in capsys.readouterr().err


def test_bad_modes(tmp_path):
    from mfd_theory.commands.experiments.e2e import run

    with pytest.raises(ValueError, match="modes"):
        run(preset_config("micro", modes=(1,)), tmp_path, progress=False)


def test_default_preset_is_the_dataclass_default():
    assert preset_config("default") == E2EConfig()


def _row(method, drafter, K, budget, tau, speed, prompt_speed_noise=0.0):
    """A row with 8 prompts: per-prompt tau around ``tau`` and per-prompt speed ``speed`` times a
    deterministic wobble of relative size ``prompt_speed_noise``."""
    wob = [0.0, 1.0, -1.0, 0.5, -0.5, 0.8, -0.8, 0.0]
    return {"temperature": 0.0, "dataset": "d", "method": method, "drafter": drafter, "K": K, "budget": budget,
            "tau": tau, "speedup": speed, "speedup_std": None, "accepted_std": 1.0, "n_steps": 100,
            "prompt_ids": [str(i) for i in range(8)],
            "prompt_tau": [tau * (1 + 0.01 * w) for w in wob],
            "prompt_tokens_per_s": [100 * speed * (1 + prompt_speed_noise * w) for w in wob[::-1]]}


def test_mfd_gains_against_best_single_mode_tree():
    rows = [
        _row("ar", "none", 0, 0, 1.0, 1.0),
        _row("chain", "product", 1, 7, 2.0, 1.5),
        _row("ddtree", "product", 1, 16, 3.0, 2.0),
        _row("ddtree", "product", 1, 32, 3.2, 1.8),
        _row("mfd", "mfd-k2", 2, 16, 3.3, 2.1, 0.001),  # +5% on every prompt: a gain
        _row("mfd", "mfd-k2", 2, 32, 3.2, 1.8, 0.2),  # +0% on average, prompts on both sides: inconclusive
    ]
    g = mfd_gains(rows)
    at16 = next(x for x in g if x["budget"] == 16 and x["method"] == "mfd" and not x["best_budget"])
    assert at16["tau_gain"] == pytest.approx(0.1)
    assert at16["speed_cmp"]["gain"] == pytest.approx(0.05, abs=1e-3) and at16["speed_cmp"]["verdict"] == "gain"
    assert at16["tau_cmp"]["verdict"] == "gain" and at16["tau_cmp"]["model"] == "prompts"
    assert at16["speed_cmp"]["family"] == 2  # the per-budget table has two entries
    at32 = next(x for x in g if x["budget"] == 32 and x["method"] == "mfd")
    assert at32["tau_gain"] == pytest.approx(0.0)
    assert at32["speed_cmp"]["verdict"] == "inconclusive"
    best = next(x for x in g if x["best_budget"])
    assert isinstance(best["budget"], int) and best["budget"] == 16
    assert best["single_budget"] == 16
    assert best["tau_gain"] == pytest.approx(3.3 / 3.0 - 1)  # the fastest budgets' taus
    # every budget in the gain table is a number (pandas gets a numeric column)
    assert all(isinstance(x["budget"], int) for x in g)
    from mfd_theory.llm.measure.evaluate import format_gains

    text = "\n".join(format_gains(g))
    assert "inconclusive" in text and "+5.0% [" in text and "no measurable" not in text
    # a Domino drafter (K = 1, DARTree rows) listed before the product drafter is no single-mode baseline
    domino = [_row("dartree", "domino", 1, 16, 3.5, 2.5)]
    assert mfd_gains(rows[:1] + domino + rows[1:]) == g


def test_cuda_requested_without_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    from mfd_theory.commands.experiments.e2e import run

    torch.set_num_threads(1)
    with pytest.raises(ValueError, match="device"):
        run(preset_config("micro", device="cuda"), tmp_path, progress=False)
    # it had set the preset's training threads (2) before refusing: the caller's count is back
    assert preset_config("micro").threads == 2 and torch.get_num_threads() == 1


def test_budget_choice_without_a_profile_is_refused_before_any_work(tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(["--preset", "micro", "--budget-choice", "true", "--profile-prompts", "0", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--budget-choice" in err and "--profile-prompts" in err
    assert not out.exists()  # nothing written
    with pytest.raises(SystemExit) as exc:  # replicates compare the theory's budgets: they need its choice
        main(["--preset", "micro", "--budget-choice", "false", "--profile-prompts", "0", "--out", str(out)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--replicates" in err and "--budget-choice" in err
    assert not out.exists()  # nothing written
    preset_config("micro", budget_choice=False, profile_prompts=0, replicates=1)  # the consistent set is fine
