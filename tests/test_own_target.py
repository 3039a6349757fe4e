"""``mfd own-target`` at a tiny size: the eval rows, lossless greedy rows, a rerun that reuses every
step, step bookkeeping on a changed option, the report block made from the run, and the docs'
commands being the ones the experiment runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.cli import main as mfd  # noqa: E402
from mfd_theory.commands.experiments.own_target import OwnTargetConfig, command_lines  # noqa: E402
from mfd_theory.report import BLOCKS, own_target_block, render  # noqa: E402
from mfd_theory.results import Result  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("target", "prompts", "distill", "drafter-k1", "drafter-k2", "eval")
# Every step at a few seconds: a 4-step target, 6 training prompts, 2-step drafters, 3 held-out prompts (one
# calibrates, two are evaluated).
TINY = ["--target-steps", "4", "--train-prompts", "6", "--heldout-prompts", "3", "--prompt-words", "4",
        "--distill-new-tokens", "10", "--drafter-steps", "2", "--drafter-batch", "4", "--ckpt-every", "1",
        "--budgets", "4", "--eval-new-tokens", "6", "--eval-prompts", "2", "--calibration-prompts", "1", "--passes", "2",
        "--quiet"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    results = tmp_path_factory.mktemp("own") / "results"
    out = results / "own_target"  # the layout `mfd reproduce` uses, so `mfd report` finds it
    assert mfd(["own-target", "--out", str(out), *TINY]) == 0
    return results, out


def _mtimes(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("*")
            if p.is_file() and p.name != "steps.json" and "cache" not in p.parts}


def test_rows_exist_and_greedy_rows_match_ar(run):
    _, out = run
    assert (out / "target" / "config.json").is_file() and (out / "target" / "tokenizer.json").is_file()
    train = (out / "prompts" / "train.jsonl").read_text().splitlines()
    held = (out / "prompts" / "heldout.jsonl").read_text().splitlines()
    assert len(train) == 6 and len(held) == 3
    assert all(len(json.loads(x)["prompt"].split()) <= 4 for x in train + held)
    rows = Result.load(out / "eval" / "eval.json").data["rows"]
    got = {(r["temperature"], r["method"], r["K"], r["budget"]) for r in rows}
    # block size 5: chain drafts L = 4 tokens; budget 4 for the trees; mfd only for K = 2
    want = {(t, m, k, n) for t in (0.0, 1.0) for m, k, n in
            [("ar", 0, 0), ("chain", 1, 4), ("ddtree", 1, 4), ("chain", 2, 4), ("ddtree", 2, 4), ("mfd", 2, 4)]}
    assert got == want
    greedy = [r for r in rows if r["temperature"] == 0]
    assert greedy and all(r["matches_ar"] is True for r in greedy)
    assert all(r["n_prompts"] == 2 and len(r["speedup_passes"]) == 2 for r in rows)
    steps = json.loads((out / "steps.json").read_text())["steps"]
    assert list(steps) == list(STEPS) and all(s["done"] for s in steps.values())


def test_rerun_reuses_every_step(run, capsys):
    _, out = run
    before = _mtimes(out)
    capsys.readouterr()
    assert mfd(["own-target", "--out", str(out), *TINY]) == 0
    said = capsys.readouterr().out
    for name in STEPS:
        assert f"{name}: finished earlier, reusing" in said, name
    assert "== " not in said  # no step ran
    assert _mtimes(out) == before
    assert f"wrote {out / 'steps.json'} (replaced)" in said


def test_changed_option_redoes_the_step_and_what_follows(tmp_path, capsys):
    """The bookkeeping alone, with stand-in work: reuse, redo on a new key, resume when unfinished."""
    from mfd_theory.runs.steps import Steps

    ran = []

    def work(tag):
        def f():
            ran.append(tag)
            (tmp_path / "a").mkdir(exist_ok=True)
            (tmp_path / "a" / "done").write_text(tag)
        return f

    def finished():
        return (tmp_path / "a" / "done").is_file()

    steps = Steps(tmp_path / "steps.json")
    assert steps.run("a", "k1", "mfd x", tmp_path / "a", finished, work("first"))
    again = Steps(tmp_path / "steps.json")
    assert not again.run("a", "k1", "mfd x", tmp_path / "a", finished, work("second"))
    (tmp_path / "a" / "partial").write_text("left by the old options")
    assert again.run("a", "k2", "mfd x --other", tmp_path / "a", finished, work("third"))
    assert not (tmp_path / "a" / "partial").exists()  # a new key starts from an empty directory
    # started but not finished (a killed run): rerun into the same directory, which the command resumes
    again.data["steps"]["a"]["done"] = False
    (tmp_path / "a" / "partial").write_text("a finished shard")
    assert again.run("a", "k2", "mfd x --other", tmp_path / "a", finished, work("fourth"))
    assert (tmp_path / "a" / "partial").exists()
    assert ran == ["first", "third", "fourth"]
    assert "options or inputs changed" in capsys.readouterr().out


def test_report_block_from_the_run(run):
    results, out = run
    res = Result.load(out / "eval" / "eval.json")
    text = own_target_block(res, out / "eval" / "eval.json")
    rows = [r for r in res.data["rows"] if r["method"] != "ar"]
    table = [ln for ln in text.splitlines() if re.match(r"\| [01] \| (chain|ddtree|mfd) \|", ln)]
    assert len(table) == len(rows)
    for ln, r in zip(table, rows):
        cells = [c.strip() for c in ln.strip("|").split("|")]
        assert cells[:5] == [f"{r['temperature']:g}", r["method"], f"K = {r['K']}", str(r["budget"]),
                             f"{r['tau']:.2f}"]
        assert cells[5] == f"{r['speedup']:.2f} ± {r['speedup_std']:.2f}"
        assert cells[6] == f"{r['predicted_speedup']:.2f}"  # predicted before decoding, from predictions.json
        assert cells[7] == ("yes" if r["temperature"] == 0 else "")
    manifest = json.loads((out / "data" / "manifest.json").read_text())
    curve = json.loads((out / "drafter-k2" / "loss_curve.json").read_text())
    assert f"distill: {manifest['n_sequences']} sequences, {manifest['n_response_tokens']:,} response tokens" in text
    assert f"K = 2 loss {curve[0]['loss']:.2f} -> {curve[-1]['loss']:.2f} over 2 steps" in text
    assert "Greedy rows whose tokens equal ar's on every prompt: 5 of 5." in text
    chk = res.data["speedup_check"]
    assert f"* Relative error |predicted / measured - 1| over {chk['theory']['n']} rows: median " \
           f"{100 * chk['theory']['median_rel_error']:.1f}%" in text
    # without the files beside eval.json (a copied eval.json): the rows alone, no training line
    alone = own_target_block(res)
    assert "distill:" not in alone and alone in text
    # through `mfd report`'s renderer, from the results directory as `mfd reproduce` lays it out
    assert BLOCKS["own-target"][0] == "own_target/eval/eval.json"
    readme = "intro\n<!-- report:own-target -->\nold\n<!-- /report:own-target -->\nend\n"
    new, changed, skipped = render(readme, results)
    assert changed == ["own-target"] and skipped == []
    assert text in new and "old" not in new


def test_docs_show_the_commands_the_experiment_runs():
    """The page that holds the own-target block shows the exact commands the experiment runs."""
    from mfd_theory.report_files import BLOCK_FILES

    text = (ROOT / BLOCK_FILES["own-target"]).read_text()
    flat = re.sub(r"\s*\\\n\s*", " ", text)  # join continued shell lines
    for line in command_lines(OwnTargetConfig()):
        assert line in flat, line


def test_reproduce_runs_it_where_the_report_block_reads_it():
    from mfd_theory.reproduce import STEPS

    argv = next(a for _, module, a in STEPS if module == "mfd_theory.commands.experiments.own_target")
    out = Path(argv[argv.index("--out") + 1])
    assert Path("results") / BLOCKS["own-target"][0] == out / "eval" / "eval.json"


def test_calibration_is_held_out_and_never_the_distilled_prompts(run):
    _, out = run
    pred = json.loads((out / "eval" / "predictions.json").read_text())["data"]
    cal = {p["sha256"] for p in pred["calibration_prompts"]}
    evaluated = {p["sha256"] for p in pred["evaluation_prompts"]}
    assert len(cal) == 1 and not cal & evaluated
    from mfd_theory.runs.pipeline.train_drafter import distilled_prompts

    for k in (1, 2):
        assert not cal & distilled_prompts(out / f"drafter-k{k}" / "drafter")
