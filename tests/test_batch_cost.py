"""The batch cost model: profile interpolation, predicted throughput, the auto plan, the bench's checks."""

import numpy as np
import pytest

from mfd_theory.speedup import BatchCell, BatchPlan, BatchProfile, batch_rows_profile, default_profile


def _profile():
    cells = []
    for b, ar, per, glo in ((1, 10.0, 20.0, 21.0), (4, 12.0, 30.0, 33.0), (16, 16.0, 80.0, 90.0)):
        cells.append(BatchCell(b, "off", 0, ar))
        cells.append(BatchCell(b, "per_request", 8, per, 9.0))
        cells.append(BatchCell(b, "global", 8 * b, glo, 12.0))
    return BatchProfile(cells, name="t")


def test_round_time_interpolates_in_batch_size_and_matches_global_by_share():
    p = _profile()
    assert p.round_ms(4, "per_request", 8) == 30.0
    assert p.round_ms(10, "per_request", 8) == pytest.approx(55.0)  # halfway between B = 4 and 16
    assert p.round_ms(10, "global", 80) == pytest.approx(61.5)  # share 8 per request at both ends
    assert p.round_ms(16, "off", 0) == 16.0
    with pytest.raises(ValueError, match="batch_size"):
        p.round_ms(32, "off", 0)
    with pytest.raises(ValueError, match="not measured"):
        p.round_ms(4, "per_request", 16)
    assert p.tokens_per_s(4, "per_request", 8, 2.0) == pytest.approx(1000 * 4 * 3 / 30.0)


def test_plan_picks_the_predicted_fastest_and_finds_the_crossover():
    p = _profile()
    acc = {(1, "per_request", 8): 2.0, (1, "global", 8): 2.1, (4, "per_request", 8): 2.0,
           (4, "global", 32): 2.5, (16, "per_request", 8): 2.0, (16, "global", 128): 2.2}
    plan = BatchPlan(p, acc)
    # B=1: per 3/20=.150, global 3.1/21=.148, off 1/10=.1 -> per_request
    assert plan.choose(1) == ("per_request", 8)
    # B=4: per 3/30 = .1, global 3.5/33 = .106, off 1/12 = .083 -> global 32
    assert plan.choose(4) == ("global", 32)
    assert plan.choose(8) == ("global", 64)  # the B = 4 choice, total scaled to the batch
    # B=16: per 3/80, global 3.2/90, off 1/16 = .0625 -> off
    assert plan.choose(16) == ("off", 0)
    assert plan.crossover() == 16
    rows = plan.table[4]
    assert [r["tokens_per_s"] for r in rows] == sorted([r["tokens_per_s"] for r in rows], reverse=True)
    assert BatchPlan(p, {k: 9.0 for k in acc}).crossover() is None


def test_profile_round_trips_and_refuses_bad_cells():
    p = _profile()
    q = BatchProfile.from_dict(p.to_dict())
    assert q.to_dict() == p.to_dict()
    with pytest.raises(ValueError, match="policy"):
        BatchCell(1, "greedy", 0, 1.0)
    with pytest.raises(ValueError, match="nodes"):
        BatchCell(1, "off", 4, 1.0)
    with pytest.raises(ValueError, match="round_ms"):
        BatchCell(1, "per_request", 4, float("nan"))
    with pytest.raises(ValueError, match="twice"):
        BatchProfile([BatchCell(1, "off", 0, 1.0), BatchCell(1, "off", 0, 2.0)])
    with pytest.raises(ValueError, match="no prediction"):
        BatchPlan(BatchProfile([BatchCell(1, "per_request", 4, 1.0)]), {})


def test_rows_model_from_a_one_request_table_is_labelled_an_assumption():
    gpu = default_profile("h100_qwen3-8b")
    p = batch_rows_profile(gpu, [1, 8], [16])
    assert p.assumption
    assert p.round_ms(1, "off", 0) == gpu.t_target_ms
    assert p.round_ms(8, "per_request", 16) == pytest.approx(gpu.t_draft_ms + float(gpu.t_verify(8 * 17 - 1)))
    assert p.round_ms(8, "per_request", 16) >= p.round_ms(1, "per_request", 16)


def _rows(tok, per_round=None):
    """bench rows from {(B, method, policy, nodes): whole-decode tok/s}, 2 drafter sets x 4 requests,
    each request's tokens per round ``per_round[key]`` (default 3.0 everywhere)."""
    rows = []
    for (b, m, pol, n), t in tok.items():
        tpr = (per_round or {}).get((b, m, pol, n), 3.0)
        rows.append({"batch_size": b, "method": m, "policy": pol, "nodes": n, "full_tokens_per_s": t,
                     "steady_tokens_per_s": t, "accepted": 1.0, "overhead_share": 0.05, "pass_spread": 0.01,
                     "request_tokens_per_round": [[tpr * (1 + 0.01 * i + 0.003 * r) for i in range(4)] for r in range(2)],
                     "request_tokens_per_s": [[t * (1 + 0.01 * i + 0.003 * r) for i in range(4)] for r in range(2)]})
    return rows


def test_bench_checks_can_fail():
    from mfd_theory.commands.bench.bench_batch import BenchBatchConfig, checks, measured_crossover

    cfg = BenchBatchConfig(batch_sizes=(1, 4), budgets=(8,))
    tok = {}
    for b in (1, 4):
        tok[(b, "ar", "off", 0)] = 100.0 * b
        for m in ("ddtree", "mfd"):
            tok[(b, m, "per_request", 8)] = 150.0 * b
            tok[(b, m, "global", 8 * b)] = 160.0 * b
            tok[(b, m, "proportional", 8 * b)] = 150.0 * b
            tok[(b, m, "auto", 0)] = 149.0 * b
    rows = _rows(tok, {k: 3.3 for k in tok if k[2] == "global"})
    out = checks(rows, cfg)
    s = out["summary"]
    assert s["shared_5pct_somewhere_b4"] and s["auto_within_3pct_everywhere"] is False  # 149 < .97 * 160
    g = next(x for x in out["shared_accepts_at_least_per_request"] if x["policy"] == "global" and x["batch_size"] == 4)
    assert g["tokens_per_round"]["verdict"] == "gain" and g["tokens_per_round"]["n_runs"] == 2
    p = next(x for x in out["shared_accepts_at_least_per_request"] if x["policy"] == "proportional")
    assert p["tokens_per_round"]["verdict"] == "equivalent"
    b4 = next(x for x in out["shared_vs_best_per_request"] if x["policy"] == "global" and x["batch_size"] == 4)
    assert b4["gain"] == pytest.approx(160 / 150 - 1) and b4["request_tokens_per_s"]["verdict"] == "gain"
    assert measured_crossover(rows, cfg.batch_sizes) is None
    for b in (1, 4):
        for m in ("ddtree", "mfd"):
            tok[(b, m, "auto", 0)] = 158.0 * b
    tok[(4, "ar", "off", 0)] = 10_000.0
    rows = _rows(tok)
    s = checks(rows, cfg)["summary"]
    assert measured_crossover(rows, cfg.batch_sizes) == 4
    assert not s["auto_within_3pct_everywhere"]  # at B = 4 AR is far faster than auto
    rows[2]["accepted"] = 0.5  # a global row accepting less than per-request: flagged
    assert not checks(rows, cfg)["summary"]["shared_accepts_at_least_per_request"]
    assert np.isfinite(s["best_shared_gain_b4"])
    tok[(4, "mfd", "auto", 0)] = 100.0  # auto far behind the best per-request N: a paired loss
    assert not checks(_rows(tok), cfg)["summary"]["auto_never_loses_to_best_per_request"]


def test_bench_batch_micro_writes_predictions_before_measuring(tmp_path):
    pytest.importorskip("torch")
    import json

    from mfd_theory.commands.bench.bench_batch import main

    res = main(["--preset", "micro", "--batch-sizes", "1,2", "--budgets", "4", "--max-new-tokens", "8",
                "--calibration-prompts", "2", "--passes", "1", "--replicates", "2", "--min-requests", "2",
                "--analysis-prompts", "3",
                "--out", str(tmp_path), "--quiet", "--figure", str(tmp_path / "fig.png")])
    assert (tmp_path / "fig.png").stat().st_size > 10_000
    pred = json.loads((tmp_path / "bench_batch_predictions.json").read_text())["predictions"]
    saved = json.loads((tmp_path / "bench_batch.json").read_text())
    assert (tmp_path / "bench_batch_predictions.json").stat().st_mtime <= (tmp_path / "bench_batch.json").stat().st_mtime
    import datetime

    created = datetime.datetime.fromisoformat(saved["provenance"]["created"]).timestamp()
    assert pred["written_unix"] <= created + 1  # the result's clock reads whole seconds
    assert not {d["sha256"] for d in pred["calibration_prompts"]} & {d["sha256"] for d in pred["eval_prompts"]}
    rows = res.data["rows"]
    # per B: ar, chain, (per_request, global, proportional, auto) x 2 methods with one budget
    assert len(rows) == 2 * (2 + 2 * 4)
    assert {(r["method"], r["policy"]) for r in rows} >= {("ar", "off"), ("mfd", "global"), ("ddtree", "auto"),
                                                          ("mfd", "proportional")}
    for r in rows:
        assert r["steady_tokens_per_s"] > 0 and r["full_tokens_per_s"] > 0 and np.isfinite(r["prediction_error"])
        assert np.shape(r["request_tokens_per_round"]) == ((1 if r["policy"] == "off" else 2), 2)
        assert r["predicted_tokens_per_s"] == next(
            p["predicted_tokens_per_s"] for p in pred["cells"]
            if (p["batch_size"], p["method"], p["policy"], p["nodes"]) == (r["batch_size"], r["method"], r["policy"], r["nodes"]))
    assert set(res.data["checks"]["summary"]) >= {"auto_within_3pct_everywhere", "shared_5pct_somewhere_b4"}
    assert all(g["tokens_per_round"]["n_runs"] == 2 for g in res.data["checks"]["shared_accepts_at_least_per_request"])
    w = res.data["whole_decode"]
    assert w["prompts"] == 3 and {r["batch_size"] for r in w["rows"]} == {2}
    assert w["replay_matches_measured"]["requests"] > 0  # the simulator checked against the decoder
    for r in w["rows"]:  # NaN when per-request accepted nothing at all (a micro drafter may not)
        o, g = r["oracle"]["same_rounds"], r["global"]["same_rounds"]
        assert np.isnan(o) == np.isnan(g) and (np.isnan(o) or o >= g - 1e-12)
    from mfd_theory.report import bench_batch_block

    block = bench_batch_block(res)
    assert block.count("\n| 1 |") == 1 and block.count("\n| 2 |") == 1  # one table row per batch size
    assert "PREDICTED, not measured" in block


def test_plan_takes_a_shared_policy_only_beyond_its_margin():
    cells = [BatchCell(4, "off", 0, 12.0), BatchCell(4, "per_request", 8, 30.0, 9.0),
             BatchCell(4, "global", 32, 30.0, 9.0), BatchCell(4, "proportional", 32, 30.0, 9.0)]
    p = BatchProfile(cells)
    acc = {(4, "per_request", 8): 2.0, (4, "global", 32): 2.06, (4, "proportional", 32): 2.05}
    assert BatchPlan(p, acc).choose(4) == ("global", 32)  # 3 % faster by the prediction
    assert BatchPlan(p, acc, margin=0.03).choose(4) == ("per_request", 8)  # 2 % lead: within the margin
    assert BatchPlan(p, acc, margin=0.03).choose(8) == ("per_request", 8)
    assert BatchPlan(p, {**acc, (4, "proportional", 32): 2.2}, margin=0.03).choose(8) == ("proportional", 64)
    with pytest.raises(ValueError, match="margin"):
        BatchPlan(p, acc, margin=-0.1)
