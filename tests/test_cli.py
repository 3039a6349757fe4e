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
    rc = main(["core-table", "--budget", "0", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "--budget" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_core_table_writes_a_result_with_provenance(tmp_path, capsys):
    rc = main(["core-table", "--V", "50", "--budgets", "4,16", "--out", str(tmp_path)])
    out = tmp_path / "core_table.json"
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


# ---------------------------------------------------------------- options are checked before work

import argparse  # noqa: E402
import os  # noqa: E402

import pytest  # noqa: E402

from mfd_theory.cli import BENCHES, COMMANDS  # noqa: E402

BAD_VALUES = [
    (["mixture-gain", "--hard", "maybe"], "--hard"),
    (["core-table", "--disagree-prob", "1.5"], "--disagree-prob"),
    (["core-table", "--L", "-3"], "--L"),
    (["core-table", "--V", "0"], "--V"),
    (["core-table", "--weights", "0.5,0.5"], "--weights"),
    (["chimera-bound", "--m-max", "0"], "--m-max"),
    (["chimera-share", "--eps", "nan"], "--eps"),
    (["e2e", "--temperatures", "-1"], "--temperatures"),
    (["e2e", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["e2e", "--modes", "0"], "--modes"),
    (["e2e", "--preset", "micro", "--budgets", "8,0"], "--budgets"),
    (["mixture-gain", "--Ks", "2,4"], "--Ks"),
    (["mixture-gain", "--families", "nope"], "--families"),
    (["bench", "trees", "--repeats", "0"], "--repeats"),
    (["bench", "fit", "--K", "0"], "--K"),
    (["own-target", "--heldout-prompts", "21"], "--heldout-prompts"),  # the micro corpus has 20
    (["own-target", "--modes", "1,1"], "--modes"),
    (["own-target", "--budgets", "0"], "--budgets"),
    (["own-target", "--device", "tpu"], "--device"),
]


@pytest.mark.parametrize("argv,flag", BAD_VALUES, ids=[" ".join(a) for a, _ in BAD_VALUES])
def test_bad_option_exits_2_naming_the_flag_and_writes_nothing(argv, flag, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything written by mistake would land here
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 2
    assert flag in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("cmd", ["core-table", "chimera-share", "e2e", "mixture-gain", "own-target"])
def test_out_at_a_file_or_under_a_file_is_a_usage_error(cmd, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in (blocker, blocker / "sub"):
        assert main([cmd, "--out", str(out)]) == 2
        assert "--out" in capsys.readouterr().err
    assert blocker.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def _all_commands():
    return [[c] for c in COMMANDS if c != "reproduce"] + [["reproduce"]] + [["bench", b] for b in BENCHES]


@pytest.mark.parametrize("cmd", _all_commands(), ids=" ".join)
def test_every_command_has_mfd_usage_and_a_help_line_per_option(cmd, capsys, monkeypatch):
    seen = {}
    original = argparse.ArgumentParser.parse_args

    def spy(self, args=None, namespace=None):
        if self.prog.startswith("mfd "):
            seen[self.prog] = [a for a in self._actions if not a.help and a.dest != "help"]
        return original(self, args, namespace)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", spy)
    assert main([*cmd, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: mfd {' '.join(cmd)} ")
    assert "--out-dir" not in out and "--no-progress" not in out
    if cmd != ["report"]:
        assert "--quiet" in out
    if cmd not in (["reproduce"],):
        assert "--out" in out
    prog = f"mfd {' '.join(cmd)}"
    assert seen.get(prog) == [], f"options without a help line: {[a.dest for a in seen.get(prog, [])]}"


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip().startswith("mfd ")


def test_core_table_writes_only_under_out_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "o"
    assert main(["core-table", "--V", "40", "--budgets", "4,8", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files == [out / "core_table.json"]  # no paper_figs/ unless asked
    assert f"wrote {out / 'core_table.json'}" in stdout
    # a rerun replaces the file and says so; a figure is written only when asked, and announced
    fig = tmp_path / "figs" / "cov.png"
    assert main(["core-table", "--V", "40", "--budgets", "4,8", "--out", str(out), "--figure", str(fig)]) == 0
    stdout = capsys.readouterr().out
    assert f"wrote {out / 'core_table.json'} (replaced)" in stdout and f"wrote {fig}" in stdout
    assert fig.is_file()


def test_mixture_gain_with_other_budgets_and_modes_summarises(tmp_path, capsys):
    # --budgets without 256 crashed in the summary; --Ks without 4 printed a table with no rows
    argv = ["mixture-gain", "--families", "two_futures", "--Fs", "1,2", "--two-futures-ms", "2", "--seeds", "0",
            "--Ks", "1,2", "--budgets", "16,64", "--L", "5", "--n-samples", "300", "--n-restarts", "1",
            "--max-iter", "5", "--hard", "false", "--exact-fit", "false", "--confidences", "",
            "--noise-repeats", "0", "--out", str(tmp_path), "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| two_futures |" in out and "product N=64" in out and "mixture K=2 N=64" in out
    assert f"wrote {tmp_path / 'mixture_gain.json'}" in out and "cell files under" in out


def test_quiet_e2e_silences_transformers_bars(monkeypatch):
    transformers = pytest.importorskip("transformers")
    from mfd_theory.commands.e2e import _quiet_transformers

    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    transformers.utils.logging.enable_progress_bar()
    try:
        _quiet_transformers()
        assert not transformers.utils.logging.is_progress_bar_enabled()
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    finally:
        transformers.utils.logging.enable_progress_bar()
        import huggingface_hub

        huggingface_hub.utils.enable_progress_bars()
    # before transformers is imported (what `mfd e2e --quiet` meets): the environment decides
    code = ("from mfd_theory.commands.e2e import _quiet_transformers; _quiet_transformers(); "
            "import transformers; print(transformers.utils.logging.is_progress_bar_enabled())")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0 and res.stdout.strip() == "False", res.stderr[-500:]


BENCH_DECODE_BAD = [
    (["--target-dir", "/nonexistent"], "--target-dir"),
    (["--drafter-dir", "/nonexistent"], "--drafter-dir"),
]


@pytest.mark.parametrize("argv,flag", BENCH_DECODE_BAD, ids=[a[0] for a, _ in BENCH_DECODE_BAD])
def test_bench_decode_missing_checkpoints_exit_2_naming_the_flag(argv, flag, tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "decode", *argv, "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_bench_decode_target_dir_that_is_no_model_exits_2(tmp_path, capsys):
    pytest.importorskip("torch")
    d = tmp_path / "broken"
    d.mkdir()
    (d / "config.json").write_text("{}")  # a config, but no model
    assert main(["bench", "decode", "--target-dir", str(d), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "--target-dir" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_bench_decode_cuda_without_cuda_exits_2_naming_the_flag(tmp_path, capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a CPU-only torch
    assert main(["bench", "decode", "--device", "cuda", "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "--device" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_ctrl_c_is_one_line_and_exit_130(capsys, monkeypatch):
    pytest.importorskip("torch")
    import mfd_theory.commands.pipeline as pipeline

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "train_drafter_main", interrupted)
    assert main(["train-drafter", "--help-not-parsed"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "mfd train-drafter: interrupted; checkpoints written so far are kept"


_PROC = "/proc/self"
needs_proc = pytest.mark.skipif(not os.path.isdir(_PROC), reason="needs /proc, a folder nobody can create entries in")


def _no_work(monkeypatch, module: str):
    """Make the command's work fail loudly: a path check must refuse before it."""
    import importlib

    def boom(*a, **k):
        raise AssertionError("the work started before the output paths were checked")

    monkeypatch.setattr(importlib.import_module(module), "run", boom)


@needs_proc
@pytest.mark.parametrize("cmd", [c for c in _all_commands() if c[0] not in ("reproduce", "report", "distill",
                                                                             "train-drafter", "eval")], ids=" ".join)
def test_out_that_cannot_be_created_exits_2_naming_out(cmd, tmp_path, capsys, monkeypatch):
    # /proc refuses new entries even to root, for whom the permission bits say nothing
    monkeypatch.chdir(tmp_path)
    assert main([*cmd, "--out", "/proc/mfd-nope"]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "/proc/mfd-nope" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@needs_proc
@pytest.mark.parametrize("argv,module", [(["core-table", "--out", "/proc/nope"], "mfd_theory.commands.core_table"),
                                         (["e2e", "--out", "/proc/nope"], "mfd_theory.commands.e2e")])
def test_bad_out_is_refused_before_any_work(argv, module, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _no_work(monkeypatch, module)
    assert main(argv) == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.parametrize("figure", ["/proc/x.png", "fig.txt", "fig", "sub"])
def test_core_table_bad_figure_path_exits_2_before_work_and_writes_nothing(figure, tmp_path, capsys, monkeypatch):
    if figure.startswith("/proc") and not os.path.isdir(_PROC):
        pytest.skip("needs /proc")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()  # a directory is no figure file
    _no_work(monkeypatch, "mfd_theory.commands.core_table")
    assert main(["core-table", "--V", "40", "--budgets", "4,8", "--out", "out", "--figure", figure]) == 2
    err = capsys.readouterr().err
    assert "--figure" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"] and not any((tmp_path / "sub").iterdir())


@pytest.mark.parametrize("suffix", [".png", ".pdf", ".svg"])
def test_core_table_writes_each_figure_format(suffix, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    fig = tmp_path / f"fig{suffix}"
    assert main(["core-table", "--V", "40", "--budgets", "4,8", "--out", str(tmp_path / "out"),
                 "--figure", str(fig)]) == 0
    assert fig.stat().st_size > 0


@needs_proc
@pytest.mark.parametrize("cmd,module", [("e2e", "mfd_theory.commands.e2e"),
                                        ("own-target", "mfd_theory.commands.own_target")])
def test_cache_dir_that_cannot_be_created_exits_2_naming_it(cmd, module, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _no_work(monkeypatch, module)
    assert main([cmd, "--out", str(tmp_path / "out"), "--cache-dir", "/proc/nope"]) == 2
    err = capsys.readouterr().err
    assert "--cache-dir" in err and "out_dir" not in err
    assert list(tmp_path.iterdir()) == []
