"""The mfd command: help, errors that name the argument, and the core table end to end."""

import json
import subprocess
import sys

from mfd_theory.cli import main


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for cmd in ("reproduce", "core-table", "chimera-bound", "chimera-share", "mixture-gain", "e2e", "bench"):
        assert cmd in out


def test_unknown_command_and_missing_benchmark_fail(capsys):
    try:
        rc = main(["frobnicate"])
    except SystemExit as exc:  # argparse exits with 2 on an unknown choice
        rc = exc.code
    assert rc == 2
    try:
        rc = main(["bench"])
    except SystemExit as exc:
        rc = exc.code
    assert rc == 2


def test_bad_value_is_reported_by_argument_name(capsys, tmp_path):
    rc = main(["core-table", "--budget", "0", "--out", str(tmp_path / "t.json"), "--figure", ""])
    assert rc == 2
    assert "budget" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


def test_core_table_writes_a_result_with_provenance(tmp_path, capsys):
    out = tmp_path / "core.json"
    rc = main(["core-table", "--V", "50", "--budgets", "4,16", "--out", str(out), "--figure", ""])
    assert rc == 0
    table = capsys.readouterr().out
    assert "| product |" in table and "| oracle |" in table
    raw = json.loads(out.read_text())
    assert raw["config"]["V"] == 50 and raw["seed"] == 0
    assert {"git_sha", "versions"} <= set(raw["provenance"])
    rows = raw["data"]["rows"]
    # the oracle is the coverage ceiling among trees of the same size
    assert rows["oracle"]["coverage"] >= rows["product"]["coverage"] - 1e-12
    assert rows["oracle"]["coverage"] >= rows["mixture"]["coverage"] - 1e-12


def test_module_entry_point_runs():
    res = subprocess.run([sys.executable, "-m", "mfd_theory.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "core-table" in res.stdout
