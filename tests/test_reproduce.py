"""`mfd reproduce` records each step's seconds as it goes (results/reproduce_times.json)."""

import json
import sys
import types

import pytest


def test_reproduce_records_step_times_as_it_goes(tmp_path, monkeypatch):
    from mfd_theory import reproduce

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
    monkeypatch.setattr(reproduce, "STEPS", [("first", fake.__name__, ["--x"]), ("second", boom.__name__, [])])
    (tmp_path / "results").mkdir()
    with pytest.raises(RuntimeError):
        reproduce.main(["--skip-notebooks", "--quiet"])
    saved = json.loads((tmp_path / "results" / "reproduce_times.json").read_text())
    assert calls == [["--x", "--quiet"]]
    assert list(saved["data"]["seconds"]) == ["first"]  # the step that finished is kept
    assert saved["data"]["total_s"] >= saved["data"]["seconds"]["first"] >= 0
