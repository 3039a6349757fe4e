"""`mfd reproduce`: each step's seconds recorded as it goes (results/reproduce_times.json), and the
two lanes (a pinned worker for untimed work; a timed step waits until it is idle)."""

import json
import os
import sys
import types

import pytest


def test_reproduce_records_step_times_as_it_goes(tmp_path, monkeypatch):
    import mfd_theory.reproduce as reproduce

    calls = []
    fake = types.ModuleType("fake_step_for_reproduce")
    fake.main = lambda argv: calls.append(argv)
    boom = types.ModuleType("failing_step_for_reproduce")

    def fail(argv):
        raise RuntimeError("second step fails")

    boom.main = fail
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setitem(sys.modules, boom.__name__, boom)
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    monkeypatch.setitem(reproduce.PARTS, "main", [("first", fake.__name__, ["--x"]), ("second", boom.__name__, [])])
    (tmp_path / "results").mkdir()
    with pytest.raises(RuntimeError):
        reproduce.main(["--skip-notebooks", "--quiet", "--jobs", "1"])
    saved = json.loads((tmp_path / "results" / "reproduce_times.json").read_text())
    assert calls == [["--x", "--quiet"]]
    assert list(saved["data"]["seconds"]) == ["first"]  # the step that finished is kept
    assert saved["data"]["total_s"] >= saved["data"]["seconds"]["first"] >= 0


def test_plan_runs_every_step_once_and_times_nothing_beside_a_timed_run():
    import mfd_theory.reproduce as reproduce

    assert reproduce.STEPS == reproduce.PARTS["main"] + reproduce.PARTS["drafters"] + reproduce.PARTS["toy"]
    for part in reproduce.PARTS:
        one = reproduce.plan(1, part)
        assert [(lab, w) for lab, _, _, w in one[0]] == [(s[0], "run") for s in reproduce.PARTS[part]]
    # the main job is the real target's: one lane, the shipped drafters' timed evaluation last; the drafter
    # study is a part of its own, one lane too
    main = reproduce.plan(2, "main")
    assert len(main) == 1 and [s[:3] for s in main[0]] == reproduce.PARTS["main"]
    assert main[0][-1][0] == reproduce.SHIPPED[0] and reproduce.SHIPPED[0] in reproduce.TIMED
    assert reproduce.SHIPPED[2][:2] == ["--preset", "reproduce"] and "results/shipped" in reproduce.SHIPPED[2]
    study = reproduce.plan(2, "drafters")
    assert study == [[(*reproduce.REAL_DRAFTERS, "run")]] and reproduce.REAL_DRAFTERS[0] in reproduce.TIMED
    two = reproduce.plan(2, "toy")
    runs = [lab for lane in two for lab, _, _, w in lane if w == "run"]
    assert sorted(runs) == sorted(s[0] for s in reproduce.PARTS["toy"])  # every step run once, on some lane
    assert {lab for lab, _, _, w in two[0] + two[1] if w == "prepare"} == reproduce.PREPARED
    # lane 1 holds untimed work only; each prepared step is prepared before lane 0 runs it
    assert not any(w == "run" and lab in reproduce.TIMED for lab, _, _, w in two[1])
    lane0 = [(lab, w) for lab, _, _, w in two[0]]
    for lab in reproduce.PREPARED:
        if (lab, "prepare") in lane0:
            assert lane0.index((lab, "prepare")) < lane0.index((lab, "run"))
        else:  # prepared on lane 1: its run is timed, so it waits for lane 1
            assert lab in reproduce.TIMED and (lab, "run") in lane0
    assert reproduce.step_argv(reproduce.E2E[0], ["--x"], "prepare", 2, True) == [
        "--x", "--prepare-only", "--threads", "1", "--quiet"]
    assert reproduce.step_argv(reproduce.E2E[0], ["--x"], "run", 1, False) == ["--x"]
    with pytest.raises(ValueError, match="part"):
        reproduce.plan(1, "everything")
    # every notebook belongs to exactly one part
    nbs = [nb for part in reproduce.PART_NOTEBOOKS.values() for nb in part]
    assert len(nbs) == len(set(nbs)) == len(reproduce.NOTEBOOKS)


def _lanes(tmp_path, lane0, lane1):
    rec = str(tmp_path / "record.jsonl")
    mod = "reproduce_fake_steps"
    return rec, [[(lab, mod, [rec, lab, *flags], w) for lab, flags, w in lane0],
                 [(lab, mod, [rec, lab, *flags], w) for lab, flags, w in lane1]]


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="two lanes need two usable cores")
def test_two_lanes_pin_their_cores_and_an_evaluation_waits_for_its_preparation(tmp_path, monkeypatch):
    import mfd_theory.reproduce as reproduce

    rec, lanes = _lanes(tmp_path, [("theory", [], "run"), ("e2e", [], "run")],
                        [("e2e", ["--sleep", "1.0"], "prepare"), ("natural", ["--sleep", "0.5"], "run")])
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    monkeypatch.setattr(reproduce, "plan", lambda jobs, part="main": lanes)
    monkeypatch.setattr(reproduce, "TIMED", {"e2e"})
    monkeypatch.setattr("mfd_theory.commands.report.main", lambda argv: None)
    before = os.sched_getaffinity(0)
    reproduce.main(["--skip-notebooks", "--quiet", "--jobs", "2"])
    assert os.sched_getaffinity(0) == before  # the calling process gets its cores back
    rows = {(r["label"], "--prepare-only" in r["flags"]): r
            for r in map(json.loads, open(rec).read().splitlines())}
    assert set(rows) == {("theory", False), ("e2e", False), ("e2e", True), ("natural", False)}
    cpus = reproduce.lane_cpus(2)
    main_pid = os.getpid()
    assert rows[("theory", False)]["pid"] == main_pid and rows[("theory", False)]["affinity"] == [cpus[0]]
    # the timed step runs alone, on every core the caller had
    assert rows[("e2e", False)]["pid"] == main_pid and rows[("e2e", False)]["affinity"] == sorted(before)
    for key in (("e2e", True), ("natural", False)):
        assert rows[key]["pid"] != main_pid and rows[key]["affinity"] == [cpus[1]]
    # the timed step started only after lane 1 had finished everything; the untimed ones overlapped
    assert rows[("e2e", False)]["start"] >= max(rows[("e2e", True)]["end"], rows[("natural", False)]["end"])
    assert rows[("theory", False)]["end"] < rows[("e2e", True)]["end"]
    saved = json.loads((tmp_path / "results" / "reproduce_times.json").read_text())["data"]["seconds"]
    assert set(saved) == {"theory", "e2e", "lane 1: prepare e2e", "lane 1: natural"}
    assert saved["lane 1: prepare e2e"] >= 1.0


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="two lanes need two usable cores")
def test_a_failing_lane_one_step_stops_the_run(tmp_path, monkeypatch):
    import mfd_theory.reproduce as reproduce

    rec, lanes = _lanes(tmp_path, [("first", ["--wait-for", str(tmp_path / "record.jsonl.failed"),
                                              "--sleep", "0.5"], "run"), ("second", [], "run")],
                        [("broken", ["--fail"], "run"), ("later", [], "run")])
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    monkeypatch.setattr(reproduce, "plan", lambda jobs, part="main": lanes)
    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError, match="step broken fails"):
        reproduce.main(["--skip-notebooks", "--quiet", "--jobs", "2"])
    assert os.sched_getaffinity(0) == before
    labels = [json.loads(x)["label"] for x in open(rec).read().splitlines()]
    assert labels == ["first"]  # lane 0 stopped before its next step; lane 1's queue was dropped


def test_two_lanes_on_one_usable_core_are_refused(tmp_path, monkeypatch, capsys):
    import mfd_theory.reproduce as reproduce

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no affinity on this platform")
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert reproduce.default_jobs() == 1
    with pytest.raises(SystemExit) as exc:
        reproduce.main(["--jobs", "2", "--skip-notebooks"])
    assert exc.value.code == 2 and "--jobs: 2 lanes need 2 usable cores" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()  # refused before anything was written
