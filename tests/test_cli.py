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


def test_quiet_silences_transformers_bars(monkeypatch):
    transformers = pytest.importorskip("transformers")
    from mfd_theory.progress import quiet_transformers

    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    log = transformers.utils.logging
    verbosity = log.get_verbosity()
    log.enable_progress_bar()
    log.set_verbosity_warning()
    try:
        quiet_transformers()
        assert not log.is_progress_bar_enabled()
        assert log.get_verbosity() == log.ERROR
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    finally:
        log.enable_progress_bar()
        log.set_verbosity(verbosity)
        import huggingface_hub

        huggingface_hub.utils.enable_progress_bars()
    # before transformers is imported (what `mfd e2e --quiet` meets): the environment decides
    code = ("from mfd_theory.progress import quiet_transformers; quiet_transformers(); "
            "import sys; assert 'transformers' not in sys.modules; "
            "import transformers; log = transformers.utils.logging; "
            "print(log.is_progress_bar_enabled(), log.get_verbosity() == log.ERROR)")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY")}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0 and res.stdout.strip() == "False True", res.stderr[-500:]


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
    import mfd_theory.commands.pipeline.train_drafter as train_drafter

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_drafter, "main", interrupted)
    assert main(["train-drafter", "--help-not-parsed"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "mfd train-drafter: interrupted"


@pytest.mark.parametrize("write", [False, True])
def test_interrupt_leaves_no_empty_out_and_says_what_it_kept(write, tmp_path, capsys, monkeypatch):
    """Ctrl-C mid-run: an output directory the run made and left empty is removed ("nothing was
    written"), one with files is kept and named; the line starts on a line of its own even when a
    progress bar was open."""
    pytest.importorskip("torch")
    from tqdm.auto import tqdm

    import mfd_theory.runs.pipeline.entry as eval_cmd
    from mfd_theory.validation import make_out_dir

    out = tmp_path / "runs" / "ev"

    def run(config, opts):
        d = make_out_dir(opts.out)
        (d / "cache").mkdir()
        if write:
            (d / "predictions.json").write_text("{}")
        bar = tqdm(total=10, desc="cells")
        bar.update(3)
        raise KeyboardInterrupt

    monkeypatch.setattr(eval_cmd, "_eval", run)
    assert main(["eval", "--target", str(tmp_path), "--drafter", str(tmp_path), "--prompts", "p.jsonl",
                 "--out", str(out)]) == 130
    last = capsys.readouterr().err.splitlines()[-1]
    if write:
        assert last == f"mfd eval: interrupted; the files written so far are kept in {out}"
        assert (out / "predictions.json").is_file()
    else:
        assert last == "mfd eval: interrupted; nothing was written"
        assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("cmd", ["e2e", "natural", "own-target"])
def test_cuda_without_cuda_names_device_and_leaves_nothing(cmd, tmp_path, capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a CPU-only torch
    out = tmp_path / "new" / "out"
    assert main([cmd, "--device", "cuda", "--out", str(out), "--quiet"]) == 2
    assert "error: --device: 'cuda' requested but CUDA is not available" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()  # neither OUT nor OUT/cache, nor the folder made for them


_PROC = "/proc/self"
needs_proc = pytest.mark.skipif(not os.path.isdir(_PROC), reason="needs /proc, a folder nobody can create entries in")


def _no_work(monkeypatch, module: str):
    """Make the command's work fail loudly: a path check must refuse before it."""
    import importlib

    def boom(*a, **k):
        raise AssertionError("the work started before the output paths were checked")

    monkeypatch.setattr(importlib.import_module(module), "run", boom)


@needs_proc
@pytest.mark.parametrize("cmd", [c for c in _all_commands() if c[0] not in ("reproduce", "report", "compare-runs", "distill",
                                                                             "train-drafter", "eval", "check-modes",
                                                                             "ceiling", "corpus", "tau")],
             ids=" ".join)
def test_out_that_cannot_be_created_exits_2_naming_out(cmd, tmp_path, capsys, monkeypatch):
    # /proc refuses new entries even to root, for whom the permission bits say nothing
    monkeypatch.chdir(tmp_path)
    assert main([*cmd, "--out", "/proc/mfd-nope"]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "/proc/mfd-nope" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@needs_proc
@pytest.mark.parametrize("argv,module", [(["core-table", "--out", "/proc/nope"], "mfd_theory.commands.theory.core_table"),
                                         (["e2e", "--out", "/proc/nope"], "mfd_theory.commands.experiments.e2e")])
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
    _no_work(monkeypatch, "mfd_theory.commands.theory.core_table")
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
@pytest.mark.parametrize("cmd,module", [("e2e", "mfd_theory.commands.experiments.e2e"),
                                        ("own-target", "mfd_theory.commands.experiments.own_target")])
def test_cache_dir_that_cannot_be_created_exits_2_naming_it(cmd, module, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _no_work(monkeypatch, module)
    assert main([cmd, "--out", str(tmp_path / "out"), "--cache-dir", "/proc/nope"]) == 2
    err = capsys.readouterr().err
    assert "--cache-dir" in err and "out_dir" not in err
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- one framework: presets and config files

import dataclasses  # noqa: E402
import importlib  # noqa: E402
from pathlib import Path  # noqa: E402

from mfd_theory.configs import options as _cli  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _framework_commands():
    """(command words, module) of every command built on the framework (all but report)."""
    out = [([c], m) for c, (m, _, _) in COMMANDS.items() if c != "report"]
    out += [(["bench", b], m) for b, (m, _, _) in BENCHES.items()]
    return out + [(["python -m mfd_theory.commands.theory.chimera_exact"], "mfd_theory.commands.theory.chimera_exact")]


FRAMEWORK = _framework_commands()


def _preset_files():
    return [(m, path) for _, m in FRAMEWORK
            for path in sorted((_cli.EXPERIMENTS / importlib.import_module(m).CLI.folder).glob("*.toml"))]


@pytest.mark.parametrize("module", [m for _, m in FRAMEWORK], ids=[" ".join(c) for c, _ in FRAMEWORK])
def test_default_preset_file_is_the_dataclass_defaults(module):
    cli = importlib.import_module(module).CLI
    path = _cli.EXPERIMENTS / cli.folder / f"{cli.default_preset()}.toml"
    assert path.is_file(), f"{path}: every command has a file for its default preset"
    assert cli.config(**_cli.read_config(cli.config, path, "test")) == cli.config()


@pytest.mark.parametrize("module,path", _preset_files(), ids=[str(p.relative_to(ROOT)) for _, p in _preset_files()])
def test_every_preset_file_loads_and_is_written_as_show_config_writes_it(module, path):
    """Each file loads into a valid config and holds every field with its current help: it is
    exactly what ``mfd <command> --preset NAME --show-config`` prints (regenerate it so when a
    field changes)."""
    cli = importlib.import_module(module).CLI
    config = cli.config(**_cli.read_config(cli.config, path, "test"))
    assert path.read_text() == cli.to_toml(config), \
        f"regenerate: {cli.prog} --preset {path.stem} --show-config > {path.relative_to(ROOT)}"


@pytest.mark.parametrize("module", [m for _, m in FRAMEWORK], ids=[" ".join(c) for c, _ in FRAMEWORK])
def test_show_config_reads_back_to_the_same_config(module, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = importlib.import_module(module).CLI
    assert cli.main(["--show-config"], lambda c, o: pytest.fail("--show-config ran the command")) is None
    (tmp_path / "c.toml").write_text(capsys.readouterr().out)
    assert cli.config(**_cli.read_config(cli.config, tmp_path / "c.toml", "test")) == cli.config()
    again, _ = cli.parse(["--config", "c.toml", "--show-config"])  # through the command line too
    assert again == cli.config()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]  # nothing written but the file itself


def test_show_config_of_changed_options_round_trips(tmp_path, capsys):
    """Non-default values of every kind (tuples of floats, booleans, strings, an optional integer)
    survive --show-config and --config."""
    from mfd_theory.commands.experiments.e2e import CLI as E2E
    from mfd_theory.configs.pipeline.train_drafter import CLI as TRAIN

    argv = ["--preset", "micro", "--temperatures", "0,0.5", "--hf-assisted", "false", "--device", "cuda:1",
            "--target-lr", "1e-05", "--budgets", "4", "16"]
    assert main(["e2e", *argv, "--show-config"]) == 0
    (tmp_path / "e.toml").write_text(capsys.readouterr().out)
    want, _ = E2E.parse(argv)
    assert want.temperatures == (0.0, 0.5) and want.hf_assisted is False and want.preset == "micro"
    got, _ = E2E.parse(["--config", str(tmp_path / "e.toml")])
    assert got == want
    argv = ["--target", "t", "--data", "d", "--rank", "8", "--kind", "dartree", "--lr", "0.001", "--out", "x"]
    assert main(["train-drafter", *argv, "--show-config"]) == 0
    (tmp_path / "t.toml").write_text(capsys.readouterr().out)
    got, _ = TRAIN.parse(["--config", str(tmp_path / "t.toml"), "--out", str(tmp_path / "o")])
    assert got == TRAIN.parse([*argv[:-2], "--out", str(tmp_path / "o")])[0] and got.rank == 8 and got.warmup is None


def test_config_file_and_explicit_options_combine_and_the_options_win(tmp_path):
    from mfd_theory.commands.experiments.e2e import CLI as E2E, preset_config

    path = tmp_path / "my.toml"
    path.write_text('target_steps = 7\nbudgets = [4, 8]\nhf_assisted = false\n')  # the rest: defaults
    cfg, opts = E2E.parse(["--config", str(path), "--budgets", "16", "--out", str(tmp_path / "o")])
    assert (cfg.target_steps, cfg.budgets, cfg.hf_assisted) == (7, (16,), False)
    assert cfg.n_train == E2EConfig_default("n_train") and opts.out == str(tmp_path / "o")
    # --preset first, then --config, then the options typed
    cfg, _ = E2E.parse(["--preset", "micro", "--config", str(path), "--target-steps", "9"])
    micro = preset_config("micro")
    assert (cfg.n_train, cfg.target_steps, cfg.budgets, cfg.preset) == (micro.n_train, 9, (4, 8), "micro")


def E2EConfig_default(name: str):
    from mfd_theory.commands.experiments.e2e import E2EConfig

    return getattr(E2EConfig(), name)


@pytest.mark.parametrize("text,what", [
    ("target_steps = 7\nno_such_option = 1\n", "unknown key 'no_such_option'"),
    ("target_steps = 0\n", "target_steps: must be an integer >= 1, got 0"),
    ("target_steps = 2.5\n", "target_steps: must be an integer"),
    ("temperatures = [0.0, -1.0]\n", "temperatures: must be a finite number >= 0"),
    ("target_arch = \"qwen9\"\n", "target_arch: must be one of qwen3, qwen3_5"),
    ("hf_assisted = \"no\"\n", "hf_assisted: must be true or false"),
    ("budgets = 16\n", "budgets: must be a list of values"),
    ("[section]\nx = 1\n", "unknown key 'section'"),
    ("target_steps = \n", "not a valid TOML file"),
])
def test_a_bad_config_file_is_refused_naming_the_key(text, what, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.toml").write_text(text)
    assert main(["e2e", "--config", "bad.toml", "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert "--config bad.toml: " in err and what in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


def test_a_bad_preset_file_is_refused_naming_the_key(tmp_path, capsys, monkeypatch):
    (tmp_path / "e2e").mkdir()
    (tmp_path / "e2e" / "odd.toml").write_text("seed = -1\n")
    (tmp_path / "e2e" / "extra.toml").write_text("seeds = 1\n")
    monkeypatch.setattr(_cli, "EXPERIMENTS", tmp_path)
    assert main(["e2e", "--preset", "odd", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--preset odd" in err and "seed: must be an integer >= 0, got -1" in err
    assert main(["e2e", "--preset", "extra", "--out", str(tmp_path / "o")]) == 2
    assert "unknown key 'seeds'" in capsys.readouterr().err
    assert main(["e2e", "--preset", "micro", "--out", str(tmp_path / "o")]) == 2
    assert "no preset 'micro'; choose one of extra, odd" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_preset_without_the_experiments_folder_names_the_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_cli, "EXPERIMENTS", tmp_path / "experiments")
    assert main(["natural", "--preset", "micro", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"--preset: no folder {tmp_path / 'experiments' / 'natural'}" in err and "--config FILE" in err
    # without --preset nothing is read: the dataclass defaults need no file
    cfg, _ = importlib.import_module("mfd_theory.commands.experiments.natural").CLI.parse(["--out", str(tmp_path / "o")])
    assert cfg == importlib.import_module("mfd_theory.commands.experiments.natural").NaturalConfig()


def test_a_missing_config_file_is_a_usage_error(tmp_path, capsys):
    assert main(["core-table", "--config", str(tmp_path / "none.toml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--config" in err and "cannot read" in err and not (tmp_path / "o").exists()


def test_bool_options_read_as_a_switch_or_with_a_value():
    from mfd_theory.configs.pipeline.distill import CLI as DISTILL

    base = ["--target", "t", "--prompts", "a.jsonl", "b,c.jsonl", "--prompts", "d.jsonl", "--out", "o"]
    on, _ = DISTILL.parse([*base, "--enable-thinking", "--quiet"])
    off, _ = DISTILL.parse([*base, "--enable-thinking", "false"])
    assert on.enable_thinking is True and off.enable_thinking is False
    # file paths keep their commas, and a repeated option adds to the list
    assert on.prompts == ("a.jsonl", "b,c.jsonl", "d.jsonl")


def test_required_options_are_named_when_missing(capsys):
    assert main(["eval", "--target", "t"]) == 2
    err = capsys.readouterr().err
    assert "the following arguments are required: --drafter, --prompts, --out" in err


def test_help_and_refusals_import_no_torch():
    """``--help`` and a refused option stay fast: torch is imported only once every check passed."""
    code = ("import sys\nfrom mfd_theory.cli import main, COMMANDS, BENCHES\n"
            "for c in [[c] for c in COMMANDS] + [['bench', b] for b in BENCHES]:\n"
            "    assert main([*c, '--help']) == 0, c\n"
            "    assert main([*c, '--no-such-option']) == 2, c\n"
            "for argv in (['e2e', '--target-steps', '0'], ['eval', '--budgets', 'x'], ['distill', '--seed', 'y'],\n"
            "             ['bench', 'decode', '--preset', 'huge'], ['train-drafter', '--kind', 'beam']):\n"
            "    assert main(argv) == 2, argv\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip().splitlines()[-1] == "[]", res.stderr[-2000:]


def test_library_errors_name_the_flag():
    """A ValueError the work raises in the library's style (``max_new_tokens: ...``) reaches the
    user naming the flag; any other message is left alone."""
    from mfd_theory.configs.pipeline.eval import CLI as EVAL

    for raised, shown in (("max_new_tokens: too many", "--max-new-tokens: too many"),
                          ("out_dir: cannot write", "--out: cannot write"), ("something else: x", "something else: x")):
        with pytest.raises(ValueError) as exc:
            with EVAL.flag_errors():
                raise ValueError(raised)
        assert str(exc.value) == shown


def test_every_parser_error_is_one_line_naming_the_flag(capsys, tmp_path):
    """A usage error of any command, benchmark or the top level: exit 2, one line on stderr that
    names the flag and points at --help (the usage is for --help, not for every typo), and no output."""
    import pytest

    from mfd_theory.cli import BENCHES, COMMANDS

    calls = [[name, "--no-such-flag"] for name in COMMANDS if name != "target"]
    calls += [["bench", name, "--no-such-flag"] for name in BENCHES]
    calls += [["target", "list", "--no-such-flag"], ["no-such-command"], ["bench", "no-such-bench"],
              ["e2e", "--budgets"], ["e2e", "--seed", "x"]]
    for argv in calls:
        assert main(argv + ["--out", str(tmp_path / "o")] if argv[0] != "no-such-command" else argv) == 2, argv
        cap = capsys.readouterr()
        err = cap.err.strip().splitlines()
        assert len(err) <= 2 and "error:" in err[0] and "--help" in err[-1], (argv, cap.err)
        assert "usage:" not in cap.err and cap.out == "", argv
        named = next((a for a in argv if a.startswith("--")), argv[-1])
        assert named.split("=")[0] in cap.err, (argv, cap.err)
    assert not (tmp_path / "o").exists()


def test_show_config_names_the_preset_file_it_started_from(capsys):
    """``--show-config``'s ``preset`` key and the ``--preset`` flag mean one thing: the file the values
    started from (a shape or the e2e run a benchmark decodes has a key of its own)."""
    from mfd_theory.commands.bench.bench_decode import CLI as DECODE
    from mfd_theory.commands.experiments.e2e import CLI as E2E

    assert main(["e2e", "--preset", "k8", "--show-config"]) == 0
    assert 'preset = "k8"' in capsys.readouterr().out.splitlines()[2]
    cfg, _ = E2E.parse(["--preset", "hybrid-k8"])
    assert cfg.preset == "hybrid-k8" and cfg.target_arch == "qwen3_5"
    cfg, _ = DECODE.parse(["--preset", "hybrid"])
    assert (cfg.preset, cfg.shape, cfg.arch) == ("hybrid", "small", "qwen3_5")
    assert main(["bench", "batch", "--preset", "micro", "--show-config"]) == 0
    assert 'e2e_preset = "micro"' in capsys.readouterr().out


def test_seed_and_budgets_are_declared_once_for_every_command():
    """Every command's ``seed`` and ``budgets`` take the shared declarations of
    :mod:`mfd_theory.configs.options` (an integer >= 0; tree sizes >= 1, at least one), so they
    mean the same thing and refuse the same values everywhere; a declaration of its own fails."""
    seeds = budgets = 0
    for _, module in FRAMEWORK:
        config = importlib.import_module(module).CLI.config
        for f in dataclasses.fields(config):
            meta = dict(f.metadata)
            if f.name == "seed":
                seeds += 1
                assert (meta["ge"], meta["gt"], meta["le"], meta["lt"], meta["choices"]) == (0, None, None, None, None), module
                with pytest.raises(ValueError, match="seed"):
                    config(**{**({"target": "x"} if "target" in config.__dataclass_fields__ else {}), "seed": -1})
            if f.name == "budgets":
                budgets += 1
                assert (meta["ge"], meta["empty"], meta["choices"]) == (1, False, None), module
    assert seeds >= 15 and budgets >= 13
    own = dataclasses.make_dataclass("Own", [("seed", int, _cli.opt(0, "random seed"))], bases=(_cli.Checked,),
                                     frozen=True)
    assert dict(dataclasses.fields(own)[0].metadata)["ge"] is None  # what the check above would catch
