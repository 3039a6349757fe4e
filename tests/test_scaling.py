"""mfd scaling: the plan of runs, what counts as finished, the assembled record, and the curve's
verdicts against a direct computation (no model is trained: the runs and tau records are made up)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from mfd_theory.cli import main as cli_main
from mfd_theory.commands.experiments.scaling import ScalingConfig
from mfd_theory.configs.options import load_preset
from mfd_theory.report.inputs import Results
from mfd_theory.report.scaling import curve, real_scaling
from mfd_theory.results import Result
from mfd_theory.runs.experiments.scaling import Job, assemble, measured, plan, trained

PROBLEMS = 12


def fake_run(run_dir: Path, *, modes: int, seed: int, max_tokens: int, steps: int = 300, last: int = 300) -> Path:
    (run_dir / "drafter").mkdir(parents=True)
    cfg = {"kind": "dflash", "train": {"num_modes": modes, "seed": seed, "steps": steps},
           "n_sequences": max_tokens // 100, "draft_vocab": {"size": 64, "answer_tokens": max_tokens // 2,
                                                             "distinct": 50, "coverage": 1.0},
           "corpus": {"max_tokens": max_tokens, "tokens": max_tokens - 7, "ids_sha256": f"ids{max_tokens}"}}
    (run_dir / "train_config.json").write_text(json.dumps(cfg))
    (run_dir / "run_record.json").write_text(json.dumps(
        {"sessions": [{"provenance": {"numerics": {"cpu": "test cpu", "mode": "reproducible"}, "git_sha": "abc"},
                       "last_step": last}], "train_seconds": 60.0 * (1 + seed)}))
    (run_dir / "loss_curve.json").write_text(json.dumps([{"step": i, "loss": 9.0 - i / 100, "acc1": 0.1}
                                                         for i in range(1, 101)]))
    return run_dir


def fake_tau(path: Path, run_dir: Path, cells: dict) -> Path:
    """A tau record of ``run_dir``'s drafter: ``cells`` {(method, scorer): per-problem tau}."""
    rows = [{"method": m, "scorer": sc, "tau": float(np.mean(v)), "per_sequence_tau": list(map(float, v))}
            for (m, sc), v in cells.items()]
    rec = {"name": "tau", "config": {}, "seed": 0,
           "provenance": {"git_sha": "def", "created": "2026-12-07T00:00:00", "numerics": {"cpu": "test cpu"}},
           "data": {"dtype": "float32", "temperature": 0.0, "drafters": [
               {"drafter": str(run_dir / "drafter"), "modes": 1,
                "sets": {"code-eval": {"draft_vocab_coverage": {"coverage": 0.9},
                                       "budgets": {"32": {"sequences": PROBLEMS, "answer_tokens": 60 * PROBLEMS,
                                                          "cells": rows}}}}}]}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))
    return path


def here(tmp_path, **kw) -> ScalingConfig:
    return load_preset(ScalingConfig, "scaling", "here", **kw)


def test_the_plan_lays_out_every_kind_size_and_seed_and_reuse_takes_a_jobs_place(tmp_path):
    run = fake_run(tmp_path / "elsewhere" / "k1", modes=1, seed=1, max_tokens=200000)
    tau = fake_tau(tmp_path / "elsewhere" / "tau.json", run, {("ddtree", None): [1.5] * PROBLEMS})
    jobs = plan(here(tmp_path, reuse=(f"{run}={tau}",)), tmp_path / "out")
    # 2 kinds x (3 sizes x 1 seed + the largest x 3 seeds)
    assert len(jobs) == 2 * (3 + 3)
    k1_top = [j for j in jobs if j.preset == "release-k1" and j.tokens == 200000]
    assert [j.seed for j in k1_top] == [0, 1, 2]
    assert [j.reused for j in k1_top] == [False, True, False]
    assert k1_top[1].run_dir == run and k1_top[1].tau_file == tau
    own = k1_top[0]
    assert own.run_dir == tmp_path / "out" / "drafters" / "release-k1-200000-s0"
    assert own.tau_file == tmp_path / "out" / "tau" / "release-k1-200000-s0" / "tau.json"
    # a reused K = 4 run does not replace a K = 1 job
    assert not any(j.reused for j in jobs if j.preset == "release-mfd4")
    # the largest size first, both kinds at a size before the next size
    assert [(j.tokens, j.preset) for j in jobs[6:8]] == [(50000, "release-k1"), (50000, "release-mfd4")]
    assert [j.tokens for j in jobs] == sorted((j.tokens for j in jobs), reverse=True)


def test_a_run_is_finished_at_its_last_step_and_measured_when_its_record_names_it(tmp_path):
    done = fake_run(tmp_path / "a", modes=1, seed=0, max_tokens=100)
    half = fake_run(tmp_path / "b", modes=1, seed=0, max_tokens=100, last=200)
    assert trained(done) and not trained(half) and not trained(tmp_path / "c")
    job = Job("release-k1", 100, 0, done, tmp_path / "tau" / "tau.json")
    assert not measured(job)
    fake_tau(job.tau_file, half, {("ddtree", None): [1.0] * PROBLEMS})  # another drafter's record
    assert not measured(job)
    fake_tau(job.tau_file, done, {("ddtree", None): [1.0] * PROBLEMS})
    assert measured(job)


def _world(tmp_path, rng):
    """K = 1 and K = 4 at two sizes; two seeds at the larger. Returns the jobs and the taus."""
    jobs, taus = [], {}
    for size, seeds in ((1000, (0,)), (4000, (0, 1))):
        for modes in (1, 4):
            for seed in seeds:
                run = fake_run(tmp_path / f"k{modes}-{size}-s{seed}", modes=modes, seed=seed, max_tokens=size)
                base = 1 + rng.integers(1, 40, PROBLEMS) / 20
                cells = {("ddtree", None): base}
                if modes == 4:
                    cells[("mfd", "mixture")] = base * (1 + rng.uniform(0, 0.1, PROBLEMS))
                    cells[("mfd", "best_mode")] = base * (1 - rng.uniform(0, 0.1, PROBLEMS))
                else:
                    cells[("chain", None)] = np.ones(PROBLEMS)
                taus[(modes, size, seed)] = cells
                tau = fake_tau(tmp_path / "tau" / f"k{modes}-{size}-s{seed}.json", run, cells)
                jobs.append(Job(f"k{modes}", size, seed, run, tau))
    return jobs, taus


def _by_hand(a: np.ndarray, b: np.ndarray) -> float:
    """The gain of A over B: the geometric-mean ratio minus one, mean over the seeds of each seed's
    mean log ratio (the obvious twin of the runs and prompts models' point estimate)."""
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    return math.expm1(float(np.mean([np.mean(np.log(x / y)) for x, y in zip(a, b)])))


def test_the_curve_pairs_the_right_cells_and_seeds(tmp_path):
    jobs, taus = _world(tmp_path, np.random.default_rng(3))
    res = assemble(jobs, 32)
    assert len(res.data["drafters"]) == len(jobs) and res.seed == [0, 1]
    row = next(r for r in res.data["drafters"] if r["kind"] == "K=4" and r["max_tokens"] == 4000 and r["seed"] == 1)
    assert row["tokens"] == 3993 and row["vocab_coverage_eval"] == 0.9 and row["steps"] == 300
    assert row["loss_last50"] == pytest.approx(np.mean([9.0 - i / 100 for i in range(51, 101)]))
    cv = curve(res.data)
    points = {(p["kind"], p["max_tokens"]): p for p in cv["points"]}
    assert points[("K=1", 4000)]["seeds"] == [0, 1]
    want = np.mean([np.mean(taus[(1, 4000, s)][("ddtree", None)]) for s in (0, 1)])
    assert points[("K=1", 4000)]["cells"]["DDTree"]["tau"] == pytest.approx(want)
    rows = {(r["max_tokens"], r["question"]): r for r in cv["mfd"]}
    assert len(rows) == 6
    for size, seeds in ((1000, (0,)), (4000, (0, 1))):
        k4 = np.stack([taus[(4, size, s)][("mfd", "mixture")] for s in seeds])
        k1 = np.stack([taus[(1, size, s)][("ddtree", None)] for s in seeds])
        own = np.stack([taus[(4, size, s)][("ddtree", None)] for s in seeds])
        best = np.stack([taus[(4, size, s)][("mfd", "best_mode")] for s in seeds])
        r = rows[(size, "mixture vs K = 1 DDTree")]
        assert r["gain"] == pytest.approx(_by_hand(k4, k1))
        assert r["model"] == ("runs" if len(seeds) > 1 else "prompts") and r["seeds"] == len(seeds)
        assert r["family"] == 3
        assert rows[(size, "best-mode vs K = 1 DDTree")]["gain"] == pytest.approx(_by_hand(best, k1))
        r = rows[(size, "mixture vs its own DDTree")]
        assert r["gain"] == pytest.approx(_by_hand(k4, own)) and r["gain"] > 0 and r["lo"] <= r["gain"] <= r["hi"]
    # four times the data: K = 1's DDTree and K = 4's mixture, each on the seed both sizes have
    dg = {(r["kind"], r["from"], r["to"]): r for r in cv["data_gain"]}
    assert set(dg) == {("K=1", 1000, 4000), ("K=4", 1000, 4000)}
    assert dg[("K=1", 1000, 4000)]["gain"] == pytest.approx(
        _by_hand(taus[(1, 4000, 0)][("ddtree", None)], taus[(1, 1000, 0)][("ddtree", None)]))
    assert dg[("K=4", 1000, 4000)]["cell"] == "MFD mixture"


def test_the_block_renders_from_the_saved_record_and_a_missing_record_is_named(tmp_path):
    jobs, _ = _world(tmp_path, np.random.default_rng(5))
    path = assemble(jobs, 32).save(tmp_path / "scaling" / "scaling.json")
    text = real_scaling(Results.holding(Result.load(path), path))
    assert "| K=4 | 4,000 | mixture vs K = 1 DDTree |" in text and "2 seeds" in text and "1 seed, 12 problems" in text
    assert "| K=1 | DDTree | 1,000 -> 4,000 |" in text
    with pytest.raises(ValueError, match="no tau record yet"):
        assemble([Job("k1", 1, 0, tmp_path / "none", tmp_path / "none.json")], 32)


@pytest.mark.parametrize("args, words", [
    (["--reuse", "just-a-dir"], "--reuse"),
    (["--sizes", "1000"], "--sizes"),
    (["--sizes", "1000,1000"], "--sizes"),
    (["--kinds", "release-mfd4"], "--kinds"),
    (["--kinds", "no-such-preset"], "--kinds"),
    (["--tau-preset", "nope"], "--tau-preset"),
])
def test_bad_options_are_one_line_errors_and_write_nothing(tmp_path, capsys, args, words):
    out = tmp_path / "out"
    assert cli_main(["scaling", "--preset", "here", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not out.exists()


def test_assemble_writes_the_curve_so_far_and_lists_what_is_pending(tmp_path, capsys):
    from mfd_theory.runs.experiments.scaling import run

    out = tmp_path / "out"
    config = here(tmp_path, sizes=(1000, 4000), largest_seeds=2)
    jobs = plan(config, out)
    rng = np.random.default_rng(7)
    for job in jobs[:3]:  # the largest size first: K = 1 seeds 0 and 1, K = 4 seed 0
        modes = 1 if job.preset == "release-k1" else 4
        fake_run(job.run_dir, modes=modes, seed=job.seed, max_tokens=job.tokens)
        cells = {("ddtree", None): 1 + rng.random(PROBLEMS)}
        if modes == 4:
            cells[("mfd", "mixture")] = cells[("mfd", "best_mode")] = cells[("ddtree", None)] * 1.01
        fake_tau(job.tau_file, job.run_dir, cells)
    fake_run(jobs[3].run_dir, modes=4, seed=1, max_tokens=4000, last=100)  # half trained, not measured
    res = run(config, out, assemble_only=True)
    assert len(res.data["drafters"]) == 3
    assert [(p["preset"], p["tokens"], p["seed"], p["trained"]) for p in res.data["pending"]] == [
        ("release-mfd4", 4000, 1, False), ("release-k1", 1000, 0, False), ("release-mfd4", 1000, 0, False)]
    saved = Result.load(out / "scaling.json")
    text = real_scaling(Results.holding(saved, out / "scaling.json"))
    assert "Not measured yet (3): release-mfd4 on 4,000 tokens seed 1" in text
    assert "| K=4 | 4,000 | mixture vs K = 1 DDTree |" in text and "1 seed, 12 problems" in text
    # nothing measured: a one-line error, and the command writes nothing
    empty = tmp_path / "empty"
    assert cli_main(["scaling", "--preset", "here", "--assemble", "--out", str(empty)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no drafter of the curve is measured yet" in err[0]
    assert not empty.exists()
