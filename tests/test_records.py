"""The committed records (records/results/): every page block and tracked figure checked against
them by ``mfd report --check``, which fails when one committed number is edited; what
``mfd report --record`` refuses (a dirty tree's results, a file over the cap) and copies."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mfd_theory.cli import main
from mfd_theory.report import BLOCKS
from mfd_theory.report.records import (FIGURES, MAX_BYTES, RECORDS, figure_notes, record_files, record_problems,
                                       save_records, strip_unrecorded_note, unrecorded_note)
from mfd_theory.report_files import BLOCK_FILES
from mfd_theory.results import Result

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / RECORDS


def test_the_pages_and_figures_match_the_committed_records(capsys):
    """``mfd report --check`` over the repository: every block with a record renders to what its
    page holds, every block without one says so on its page, every figure with a record redraws
    pixel for pixel, and no record comes from a dirty tree."""
    assert main(["report", "--check", "--results", str(RECORDED)]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    recorded = [n for n, b in BLOCKS.items() if all((RECORDED / f).is_file() for f in b.files)]
    assert "core-table" in recorded and f"checked {len(recorded)} of {len(BLOCKS)} report block(s)" in out
    assert "0 out of date" in out and "0 differ" in out and "refused" not in out
    for name in set(BLOCKS) - set(recorded):  # each listed, and its page says so
        assert f"unrecorded block {name} ({BLOCK_FILES[name]})" in out and "as the page says" in out
    drawn = [f for f, fig in FIGURES.items() if (RECORDED / fig.file).is_file()]
    assert f"checked {len(drawn)} of {len(FIGURES)} tracked figure(s)" in out and "paper_figs/chimera_bound.png" in drawn


def test_one_edited_number_fails_the_check_naming_its_block(tmp_path, capsys):
    records = tmp_path / "records"
    shutil.copytree(RECORDED, records)
    path = records / "core_table.json"
    res = json.loads(path.read_text())
    res["data"]["rows"]["product"]["coverage"] += 0.5  # one number of the product tree's row
    path.write_text(json.dumps(res, indent=1))
    capsys.readouterr()
    assert main(["report", "--check", "--results", str(records), "--figures", "false"]) == 1
    out = capsys.readouterr().out
    assert "out of date: block core-table (docs/results.md)" in out and "1 out of date" in out
    assert [ln for ln in out.splitlines() if ln.startswith("out of date")] == [
        f"out of date: block core-table (docs/results.md) differs from {path}"]


def test_an_edited_figure_record_fails_the_figure_check(tmp_path, capsys):
    """The figures are compared too: chimera_bound.json with one count changed redraws another image."""
    records = tmp_path / "records"
    records.mkdir()
    res = json.loads((RECORDED / "chimera_bound.json").read_text())
    res["data"]["verify"]["table"][0]["max"] += 3
    (records / "chimera_bound.json").write_text(json.dumps(res))
    shutil.copy(RECORDED / "core_table.json", records / "core_table.json")
    assert main(["report", "--check", "--results", str(records)]) == 1
    out = capsys.readouterr().out
    assert "out of date: figure paper_figs/chimera_bound.png differs" in out
    assert "figure paper_figs/coverage_vs_budget.png" not in out  # its record is the committed one


def test_every_committed_record_is_fit_and_read():
    files = sorted(str(p.relative_to(RECORDED)) for p in RECORDED.rglob("*") if p.is_file())
    assert files and set(files) <= set(record_files()), set(files) - set(record_files())
    for f in files:
        assert record_problems(RECORDED / f) == []
    # the records' code is a commit of this repository (when git and its history are here)
    sha = json.loads((RECORDED / files[0]).read_text())["provenance"]["git_sha"]
    git = subprocess.run(["git", "cat-file", "-t", sha], cwd=ROOT, capture_output=True, text=True)
    assert git.returncode != 0 or git.stdout.strip() == "commit"


def test_every_tracked_figure_is_named_with_its_input():
    tracked = {str(p.relative_to(ROOT)) for p in (ROOT / "paper_figs").glob("*.png")}
    assert tracked == set(FIGURES)


def _result(tmp: Path, name: str, sha: str | None) -> Path:
    path = tmp / name
    Result("core_table", {}, {"table": []}).save(path)
    res = json.loads(path.read_text())
    res["provenance"]["git_sha"] = sha
    path.write_text(json.dumps(res))
    return path


def test_record_refuses_a_dirty_tree_and_a_large_file_and_copies_nothing(tmp_path, capsys):
    results, records = tmp_path / "results", tmp_path / "records"
    results.mkdir()
    _result(results, "core_table.json", "a" * 40)
    _result(results, "chimera_bound.json", "b" * 40 + "+dirty")
    with pytest.raises(ValueError, match=r"chimera_bound.json: made from a dirty tree \(git sha b+\+dirty\)"):
        save_records(results, records)
    assert not records.exists()
    assert main(["report", "--record", str(results), "--results", str(records)]) == 2  # the CLI: one line, exit 2
    assert "made from a dirty tree" in capsys.readouterr().err and not records.exists()
    _result(results, "chimera_bound.json", None)
    assert "no git sha" in save_records_error(results, records)
    _result(results, "chimera_bound.json", "b" * 40)
    big = results / "bench_fit.json"
    big.write_bytes(b" " * (MAX_BYTES + 1))
    assert "over the 8,000,000-byte cap" in save_records_error(results, records)
    big.unlink()
    assert save_records(results, records) == ["chimera_bound.json", "core_table.json"]
    assert (records / "core_table.json").read_bytes() == (results / "core_table.json").read_bytes()
    with pytest.raises(ValueError, match="the records directory itself"):
        save_records(records, records)


def save_records_error(results: Path, records: Path) -> str:
    with pytest.raises(ValueError) as exc:
        save_records(results, records)
    assert not records.exists()
    return str(exc.value)


def test_the_unrecorded_note_comes_and_goes():
    body = "| a | 1.5% |\n"
    noted = unrecorded_note(["real/real.json"]) + "\n" + body
    assert noted.startswith("> **No committed record:**") and "`real/real.json`" in noted
    assert strip_unrecorded_note(noted) == body and strip_unrecorded_note(body) == body


def test_a_figure_from_a_dirty_tree_is_refused(tmp_path, capsys):
    records = tmp_path / "records"
    records.mkdir()
    res = json.loads((RECORDED / "chimera_bound.json").read_text())
    res["provenance"]["git_sha"] += "+dirty"
    (records / "chimera_bound.json").write_text(json.dumps(res))
    assert main(["report", "--check", "--results", str(records)]) == 1
    out = capsys.readouterr().out
    assert "refused figure paper_figs/chimera_bound.png: " in out and "made from a dirty tree" in out
    assert "checked 0 of" in out and "1 refused" in out


def test_a_page_says_under_a_figure_that_it_has_no_record(tmp_path):
    page = "Intro\n\n![ceiling](paper_figs/real_ceiling.png)\n\nMore.\n![bound](../paper_figs/chimera_bound.png)\n"
    noted = figure_notes(page, tmp_path)
    assert noted.count("> **No committed record for the figure above** (paper_figs/") == 2
    assert "no `real/real.json` under `records/results/`" in noted and figure_notes(noted, tmp_path) == noted
    shutil.copy(RECORDED / "chimera_bound.json", tmp_path / "chimera_bound.json")
    partly = figure_notes(noted, tmp_path)  # the recorded figure's note goes, the other stays
    assert partly.count("No committed record") == 1 and "chimera_bound.png: no" not in partly
    (tmp_path / "real").mkdir()
    shutil.copy(RECORDED / "chimera_bound.json", tmp_path / "real" / "real.json")
    assert figure_notes(noted, tmp_path) == page


def test_reproduce_records_its_results_and_falls_back_to_the_records(tmp_path, monkeypatch, capsys):
    """``mfd reproduce`` ends with ``mfd report --record results``; refused (a dirty tree), it
    says why and redraws the pages from the committed records instead."""
    import mfd_theory.reproduce as reproduce

    calls = []

    def report(argv):
        calls.append(list(argv))
        if "--record" in argv and refuse:
            raise ValueError("--record: refused, nothing copied:\n  results/x.json: made from a dirty tree")

    monkeypatch.chdir(tmp_path)  # reproduce changes to its ROOT; the test's cwd comes back after it
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    monkeypatch.setattr(reproduce, "plan", lambda jobs, part="main": [[]])
    monkeypatch.setattr("mfd_theory.commands.report.main", report)
    for refuse, want in ((False, [["--record", "results"]]), (True, [["--record", "results"], []])):
        calls.clear()
        reproduce.main(["--skip-notebooks", "--quiet", "--jobs", "1"])
        assert calls == want
    assert "made from a dirty tree\nthe pages and figures are redrawn from the committed records" in capsys.readouterr().out
