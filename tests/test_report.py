"""mfd report: the result blocks of README.md and docs/ regenerated from results JSON; which file
holds which block; what --check says when results are missing; spreads and "(1 pass)"; every
block made the same way, from a :class:`Results` that loads each file once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mfd_theory.formatting import comparison_text
from mfd_theory.stats import compare_rows

from mfd_theory.cli import main
from mfd_theory.report import BLOCKS, Results, block_inputs, check_layout, render, value_with_spread
from mfd_theory.report_files import BLOCK_FILES, report_files
from mfd_theory.results import Result

ROOT = Path(__file__).resolve().parent.parent


_WOBBLE = (0.97, 1.01, 1.03, 0.99, 1.02, 0.98)  # per-prompt spread around a row's mean


def _e2e_result(passes: bool) -> Result:
    """A small end-to-end result: product ddtree vs mfd at two budgets, plus chain, ar, HF. Each
    row carries its per-prompt tau and speed; each gain entry the paired comparisons ``mfd eval``
    stores (the report prints them, it never recomputes them)."""
    rows = []

    def row(method, drafter, K, budget, tau, speedup, spread):
        k = len(rows)
        r = dict(method=method, drafter=drafter, K=K, budget=budget, temperature=1.0, tau=tau, speedup=speedup,
                 n_steps=100 + budget, dead_share=0.5, accepted_std=1.0, tokens_per_s=500.0 * speedup,
                 prompt_ids=[str(i) for i in range(6)],
                 prompt_tau=[tau * _WOBBLE[(i + k) % 6] for i in range(6)],
                 prompt_tokens_per_s=[500.0 * speedup * _WOBBLE[(i * (k + 1) + k) % 6] for i in range(6)])
        if passes:
            r["speedup_passes"] = [speedup - spread, speedup, speedup + spread]
            r["speedup_std"] = spread
            r["tokens_per_s_std"] = 500.0 * spread
        return r

    for args in (("ar", "none", 0, 0, 1.0, 1.0, 0.01), ("chain", "product", 1, 7, 2.4, 1.10, 0.02),
                 ("ddtree", "product", 1, 16, 3.6, 1.50, 0.02), ("ddtree", "product", 1, 64, 4.6, 1.40, 0.02),
                 ("mfd", "mfd-k4", 4, 16, 4.0, 1.30, 0.02), ("mfd", "mfd-k4", 4, 64, 5.0, 1.41, 0.02)):
        rows.append(row(*args))

    def entry(a, b, best, family):
        return dict(temperature=1.0, method="mfd", drafter="mfd-k4", budget=a["budget"], best_budget=best,
                    single_budget=b["budget"], tau=a["tau"], speedup=a["speedup"], single_tau=b["tau"],
                    single_speedup=b["speedup"], tau_gain=a["tau"] / b["tau"] - 1, **compare_rows(a, b, family))

    by = {(r["method"], r["budget"]): r for r in rows}
    gains = [entry(by["mfd", n], by["ddtree", n], False, 2) for n in (16, 64)]
    # each at its fastest budget: mfd at N = 64 against the product drafter's ddtree at N = 16
    gains.insert(0, entry(by["mfd", 64], by["ddtree", 16], True, 1))
    hf = [dict(temperature=1.0, method="assisted", tokens_per_s=400.0, speedup=1.1)]
    cfg = dict(eval_prompts=2, max_new_tokens=16)
    return Result("end_to_end", cfg, dict(rows=rows, mfd_gains=gains, hf_assisted=hf,
                                          prediction_check={"n_rows": 0}))


def _readme(tmp_path, names):
    text = "# demo\n\nprose stays\n\n" + "".join(
        f"<!-- report:{n} -->\nstale numbers\n<!-- /report:{n} -->\n\nmore prose\n\n" for n in names)
    p = tmp_path / "README.md"
    p.write_text(text)
    return p


def test_spread_formatting_and_paired_comparison_text():
    a = dict(speedup=1.41, speedup_passes=[1.39, 1.41, 1.43])
    assert value_with_spread(a, "speedup", suffix="x") == "1.41x ± 0.02x"
    # rows of a single timing pass: the value and a "(1 pass)" mark, never a bare sign claim
    assert value_with_spread({"speedup": 1.4}, "speedup", suffix="x") == "1.40x (1 pass)"
    assert value_with_spread({"speedup": None}, "speedup") == "-"  # a missing value (null)
    # two rows compared prompt by prompt: the interval and its word, never "no measurable difference"
    ids = [str(i) for i in range(6)]
    fast = dict(prompt_ids=ids, prompt_tau=[3.0, 3.2, 2.9, 3.1, 3.0, 3.3], prompt_tokens_per_s=[110.0] * 6)
    slow = dict(prompt_ids=ids, prompt_tau=[2.0, 2.1, 2.0, 2.2, 1.9, 2.1], prompt_tokens_per_s=[100.0] * 5 + [99.0])
    cmp = compare_rows(fast, slow)
    assert comparison_text(cmp["tau_cmp"]).endswith("gain") and cmp["tau_cmp"]["model"] == "prompts"
    assert comparison_text(None) == "-"
    assert compare_rows(fast, dict(prompt_ids=["x"], prompt_tau=[1.0], prompt_tokens_per_s=[1.0]))["tau_cmp"] is None


@pytest.mark.parametrize("passes", [True, False])
def test_e2e_blocks_show_spreads_or_one_pass(tmp_path, passes):
    res = _e2e_result(passes)
    res.save(tmp_path / "end_to_end.json")
    readme = _readme(tmp_path, ["e2e", "e2e-gains", "e2e-hf"])
    new, changed, skipped = render(readme.read_text(), tmp_path)
    assert sorted(changed) == ["e2e", "e2e-gains", "e2e-hf"] and skipped == []
    assert "stale numbers" not in new and new.count("more prose") == 3 and "prose stays" in new
    gains = new.split("<!-- report:e2e-gains -->")[1].split("<!-- /report:e2e-gains -->")[0]
    lines = [ln for ln in gains.splitlines() if ln.startswith("| 1 |")]
    assert len(lines) == 3  # the best-budget row and two budgets
    assert "no measurable difference" not in gains and "One run" in gains
    best, n16, n64 = lines
    assert "best (64 vs 16)" in best
    g16 = res.data["mfd_gains"][1]
    assert comparison_text(g16["speed_cmp"]) in n16 and g16["speed_cmp"]["verdict"] == "loss"  # 1.30 vs 1.50
    assert comparison_text(res.data["mfd_gains"][2]["tau_cmp"]) in n64
    if passes:
        assert "(1 pass)" not in new.split("<!-- report:e2e-hf -->")[0]
        assert "400 (1 pass)" in new  # the fixture's HF row has no spread fields
        assert "3 timing passes" in new
    else:
        assert "(1 pass)" in gains
    assert "107-164 rounds" in new  # round counts from the rows, not typed by hand


def test_e2e_hybrid_block_reads_its_own_file_and_summarises(tmp_path):
    """e2e-hybrid: the e2e table of results/hybrid/end_to_end.json plus the run's summary bullets
    (losslessness count, AR rate, fastest cell, best-budget tau of the K = 4 drafter)."""
    res = _e2e_result(True)
    greedy = [dict(r, temperature=0.0, matches_ar=r["method"] != "chain") for r in res.data["rows"]]
    res.data["rows"] += greedy
    (tmp_path / "hybrid").mkdir()
    res.save(tmp_path / "hybrid" / "end_to_end.json")
    _e2e_result(False).save(tmp_path / "end_to_end.json")  # the attention run's file is not read
    text, changed, skipped = render("<!-- report:e2e-hybrid -->\nold\n<!-- /report:e2e-hybrid -->\n", tmp_path)
    assert changed == ["e2e-hybrid"] and skipped == []
    assert "(1 pass)" not in text  # the hybrid fixture has passes; the attention one has none
    assert "Greedy (T = 0): 4 of 5 rows equal ar's output token for token." in text  # ar itself not counted
    # the best-budget entry compares mfd at N = 64 (1.41x) with the product tree at N = 16 (1.50x), with the
    # evaluator's verdict on that speed difference
    speed = comparison_text(res.data["mfd_gains"][0]["speed_cmp"])
    assert speed.endswith("loss")  # 1.41x against 1.50x, prompt by prompt
    assert ("T = 1: ar 500 tokens/s ± 5 tokens/s; fastest ddtree (product) at N = 16: 1.50x ± 0.02x. Against the "
            "product drafter at each one's best budget (product tau 3.60): mfd K = 4 tau 5.00 (+38.9%) and speed "
            f"{speed}.") in text
    assert len([ln for ln in text.splitlines() if ln.startswith("| 0 |")]) == 3  # chain, ddtree, mfd


def test_report_command_rewrites_then_check_passes(tmp_path, capsys):
    results = tmp_path / "results"
    assert main(["core-table", "--V", "40", "--budgets", "4,8", "--out", str(results), "--quiet"]) == 0
    _e2e_result(True).save(results / "end_to_end.json")
    readme = _readme(tmp_path, ["core-table", "e2e", "chimera-share"])
    capsys.readouterr()
    assert main(["report", "--file", str(readme), "--results", str(results), "--check"]) == 1
    assert "out of date: block core-table" in capsys.readouterr().out
    assert "stale numbers" in readme.read_text()  # --check writes nothing
    assert main(["report", "--file", str(readme), "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {readme}" in out and "unrecorded block chimera-share" in out
    text = readme.read_text()
    assert "| oracle |" in text and "V = 40" in text
    # the block without results keeps its text, under a note that it has no record
    assert text.count("stale numbers") == 1
    assert "<!-- report:chimera-share -->\n> **No committed record:**" in text and "`chimera_share.json`" in text
    assert main(["report", "--file", str(readme), "--results", str(results), "--check"]) == 0
    # a result changes -> the README is out of date again
    assert main(["core-table", "--V", "41", "--budgets", "4,8", "--out", str(results), "--quiet"]) == 0
    assert main(["report", "--file", str(readme), "--results", str(results), "--check"]) == 1


def test_report_refuses_unknown_or_unclosed_blocks(tmp_path, capsys):
    readme = tmp_path / "R.md"
    readme.write_text("<!-- report:nope -->\nx\n<!-- /report:nope -->\n")
    assert main(["report", "--file", str(readme), "--results", str(tmp_path)]) == 2
    assert "nope" in capsys.readouterr().err
    readme.write_text("<!-- report:e2e -->\nx\n")
    assert main(["report", "--file", str(readme), "--results", str(tmp_path)]) == 2
    assert main(["report", "--file", str(tmp_path / "missing.md"), "--results", str(tmp_path)]) == 2


def test_the_old_readme_option_is_gone(tmp_path, capsys):
    readme = _readme(tmp_path, ["e2e"])
    assert main(["report", "--readme", str(readme), "--results", str(tmp_path)]) == 2
    assert "--readme" in capsys.readouterr().err


def test_every_block_is_made_from_results_alone():
    """One calling convention: every block's function takes one argument, the Results it reads;
    the files it reads are named in BLOCKS (the first is the file its skip message names first)."""
    import inspect

    for name, block in BLOCKS.items():
        assert list(inspect.signature(block.make).parameters) == ["results"], name
        assert block_inputs(name) == block.files and block.files[0] == block.file


def test_results_load_each_file_once_and_name_what_is_missing(tmp_path, monkeypatch):
    _e2e_result(True).save(tmp_path / "end_to_end.json")
    loads = []
    real = Result.load
    monkeypatch.setattr(Result, "load", classmethod(lambda cls, p: loads.append(Path(p).name) or real(p)))
    text = "".join(f"<!-- report:{n} -->\nx\n<!-- /report:{n} -->\n" for n in ("e2e", "e2e-gains", "e2e-hf"))
    assert render(text, tmp_path)[1] == ["e2e", "e2e-gains", "e2e-hf"]
    assert loads == ["end_to_end.json"]  # three blocks, one read
    r = Results(tmp_path).reading(block_inputs("headline"))
    assert r.missing() == ["chimera_bound.json"]  # natural.json is read when present, not needed
    assert r.main.name == "end_to_end" and r.main_path == tmp_path / "end_to_end.json"
    held = Results.holding(r.main)  # one result in memory, read from no file
    assert held.main is r.main and held.main_path is None and held.missing() == []
    with pytest.raises(KeyError, match="natural.json"):
        held["natural/natural.json"]


def test_result_tables_are_all_generated():
    """Every measured number in a table of the pages mfd report writes sits inside a report block
    the command regenerates (a table row outside the blocks holds no decimal, percentage, speedup
    or spread: those are results; a version in a name, Qwen3.5, is not a number)."""
    import re

    names = set()
    for fname in report_files():
        text = (ROOT / fname).read_text()
        blocks = re.findall(r"<!-- report:([a-z0-9-]+) -->\n(.*?)<!-- /report:\1 -->", text, re.S)
        names |= {n for n, _ in blocks}
        outside = re.sub(r"<!-- report:([a-z0-9-]+) -->\n.*?<!-- /report:\1 -->", "", text, flags=re.S)
        measured = [ln for ln in outside.splitlines()
                    if ln.startswith("|") and re.search(r"(?<![\w.])\d+(?:\.\d+|(?:\.\d+)?%|(?:\.\d+)?x\b)|±", ln)]
        assert measured == [], (fname, measured[:3])
    assert names == set(BLOCKS)


def test_every_block_has_one_file_and_the_repository_follows_it():
    assert set(BLOCK_FILES) == set(BLOCKS)
    assert report_files()[0] == "docs/results.md" and len(set(report_files())) == len(report_files())
    check_layout({f: (ROOT / f).read_text() for f in report_files()})  # raises on a misplaced block
    # the front page holds one generated block, its headline: at most 8 rows and 2,500 characters
    readme = (ROOT / "README.md").read_text()
    assert re.findall(r"<!-- report:([a-z0-9-]+) -->", readme) == ["front"]
    block = readme.split("<!-- report:front -->", 1)[1].split("<!-- /report:front -->", 1)[0]
    rows = [ln for ln in block.splitlines() if ln.startswith("| ")][1:]
    assert len(rows) <= 8 and len(block) <= 2500, (len(rows), len(block))


def test_layout_check_names_misplaced_missing_and_repeated_blocks():
    ok = {f: "".join(f"<!-- report:{n} -->\nx\n<!-- /report:{n} -->\n" for n, g in BLOCK_FILES.items() if g == f)
          for f in report_files()}
    check_layout(ok)
    bench = "docs/benchmarks.md"
    moved = dict(ok, **{bench: ok[bench] + "<!-- report:e2e -->\nx\n<!-- /report:e2e -->\n"})
    with pytest.raises(ValueError, match="docs/benchmarks.md: block.*e2e.*belong in docs/results.md"):
        check_layout(moved)
    with pytest.raises(ValueError, match="docs/results.md: block.*headline.*missing"):
        check_layout(dict(ok, **{"docs/results.md": "no blocks here"}))
    with pytest.raises(ValueError, match="more than once"):
        check_layout(dict(ok, **{"docs/results.md": ok["docs/results.md"] * 2}))


def test_check_counts_blocks_and_lists_the_skipped(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    _e2e_result(True).save(results / "end_to_end.json")
    readme = _readme(tmp_path, ["core-table", "e2e", "chimera-share"])
    assert main(["report", "--file", str(readme), "--results", str(results)]) == 0
    capsys.readouterr()
    assert main(["report", "--file", str(readme), "--results", str(results), "--check"]) == 0
    out = capsys.readouterr().out
    assert f"unrecorded block core-table ({readme}): no {results / 'core_table.json'}, as the page says" in out
    assert f"unrecorded block chimera-share ({readme}): no {results / 'chimera_share.json'}, as the page says" in out
    assert "checked 1 of 3 report block(s)" in out and "1 match, 0 out of date; 2 unrecorded (2 saying so" in out
    # a block without its results whose page does not say so fails the check
    readme.write_text(readme.read_text().replace("> **No committed record:**", "> **Recorded:**", 1))
    assert main(["report", "--file", str(readme), "--results", str(results), "--check"]) == 1
    out = capsys.readouterr().out
    assert "out of date: block core-table" in out and "has no record and the page does not say so" in out


def test_no_results_at_all_is_an_error_naming_the_missing_files(tmp_path, capsys):
    empty = tmp_path / "results"
    empty.mkdir()
    readme = _readme(tmp_path, ["core-table", "e2e"])
    before = readme.read_text()
    for extra in (["--check"], []):
        capsys.readouterr()
        assert main(["report", "--file", str(readme), "--results", str(empty)] + extra) == 2
        err = capsys.readouterr().err
        assert "none of the 2 report block(s)" in err and "core_table.json" in err and "end_to_end.json" in err
    assert readme.read_text() == before  # nothing written
    # the repository's own pages on a fresh clone (no results/): every block skipped, exit 2
    assert main(["report", "--results", str(empty), "--check"]) == 2
    captured = capsys.readouterr()
    assert f"none of the {len(BLOCKS)} report block(s) could be checked" in captured.err
    assert "unrecorded block headline (docs/results.md)" in captured.out


def test_out_needs_file(tmp_path, capsys):
    assert main(["report", "--results", str(tmp_path), "--out", str(tmp_path / "x.md")]) == 2
    assert "--out" in capsys.readouterr().err


def _headline_results(tmp_path) -> Path:
    results = tmp_path / "results"
    results.mkdir()
    e2e = _e2e_result(True)
    e2e.data["prediction"] = {"n_cells": 12, "tau": {"median_abs_error": 0.021, "worst_abs_error": 0.05},
                              "speedup": {"median_abs_error": 0.043, "worst_abs_error": 0.12}}
    e2e.save(results / "end_to_end.json")
    Result("chimera_bound", {"m_max": 10}, {"verify": {"instances": 5000, "violations": 0, "ties": 3}}).save(
        results / "chimera_bound.json")
    (results / "natural").mkdir()
    def cmp(g):
        return {"gain": g, "lo": g - 0.01, "hi": g + 0.01, "verdict": "gain"}

    ceil = {dom: {"1": {"by_budget": {"16": {"gain": {"oracle": cmp(0.05)}}, "64": {"gain": {"oracle": cmp(r)}}}}}
            for dom, r in (("code", 0.104), ("prose", 0.135))}
    Result("natural", {}, {"ceiling": ceil}).save(results / "natural" / "natural.json")
    return results


def test_headline_block_takes_a_few_numbers_from_three_results_files(tmp_path):
    results = _headline_results(tmp_path)
    text, changed, skipped = render("<!-- report:headline -->\nold\n<!-- /report:headline -->\n", results)
    assert changed == ["headline"] and skipped == []
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert len(rows) == 4  # chimera bound, e2e at T = 1, prediction, natural ceiling
    assert "5,000 random instances, m = 1..10: **0 violations** (3 exact ties set aside)" in rows[0]
    # the fixture's mfd best (N = 64, 1.41x) against the product drafter's best (ddtree N = 16, 1.50x)
    assert "ddtree (product) N = 16: tau 3.60, 1.50x ± 0.02x; mfd K = 4 N = 64: tau 5.00, 1.41x ± 0.02x" in rows[1]
    assert "tau: median \\|error\\| 2.1%, worst 5.0%; speedup: median 4.3%, worst 12.0%" in rows[2]
    assert "code +10.4% [+9.4%, +11.4%] gain at N = 64; prose +13.5% [+12.5%, +14.5%] gain at N = 64" in rows[3]
    # the same block from results already in memory: the one calling convention, whatever a block reads
    held = {f: Result.load(results / f) for f in block_inputs("headline")}
    assert BLOCKS["headline"].make(Results(None, block_inputs("headline"), held)) in text
    # without the natural-text run: the headline without its row
    (results / "natural" / "natural.json").unlink()
    text2 = render("<!-- report:headline -->\nold\n<!-- /report:headline -->\n", results)[0]
    rows2 = [ln for ln in text2.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert rows2 == rows[:3]
    # one of its needed files missing: skipped (left as it was), and the message names that file
    (results / "chimera_bound.json").unlink()
    readme = tmp_path / "R.md"
    readme.write_text("<!-- report:headline -->\nold\n<!-- /report:headline -->\n")
    assert render(readme.read_text(), results)[2] == ["headline"]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["report", "--file", str(readme), "--results", str(results)]) == 2
    assert f"no {results / 'chimera_bound.json'}" in out.getvalue()


def test_e2e_gains_print_the_stored_comparison_never_recompute_it():
    res = _e2e_result(passes=True)
    g = dict(res.data["mfd_gains"][0])
    g["speed_cmp"] = dict(g["speed_cmp"], gain=0.02, lo=-0.01, hi=0.05, verdict="inconclusive")
    res.data["mfd_gains"] = [g]
    out = BLOCKS["e2e-gains"].make(Results.holding(res))
    assert "+2.0% [-1.0%, +5.0%] inconclusive" in out
    g["speed_cmp"] = dict(g["speed_cmp"], gain=0.06, lo=0.031, hi=0.09, verdict="gain")
    assert "+6.0% [+3.1%, +9.0%] gain" in BLOCKS["e2e-gains"].make(Results.holding(res))


def test_e2e_dartree_block_sets_the_three_trees_side_by_side(tmp_path):
    """e2e-dartree: per budget, ddtree (product), mfd and dartree rows with tau, speedup, measured vs
    predicted acceptance, z and dead share, read from the rows (not typed); a run without dartree
    rows says so."""
    res = _e2e_result(True)
    plain = render(_readme(tmp_path, ["e2e-dartree"]).read_text(), tmp_path)
    assert plain[2] == ["e2e-dartree"]  # no results file yet: skipped
    res.save(tmp_path / "end_to_end.json")
    assert "no dartree rows" in render(_readme(tmp_path, ["e2e-dartree"]).read_text(), tmp_path)[0]
    for r in res.data["rows"]:
        r.update(accepted_mean=r["tau"] - 1, covered_mass_insample=r["tau"] - 1.05, pred_gap_z=0.5)
    res.data["rows"].append(dict(res.data["rows"][3], method="dartree", drafter="dartree", tau=4.75,
                                 accepted_mean=3.75, covered_mass_insample=3.5, pred_gap_z=-1.25,
                                 dead_share=0.125, speedup=1.2, speedup_passes=[1.1, 1.2, 1.3]))
    res.save(tmp_path / "end_to_end.json")
    new, changed, _ = render(_readme(tmp_path, ["e2e-dartree"]).read_text(), tmp_path)
    assert changed == ["e2e-dartree"]
    body = new.split("<!-- report:e2e-dartree -->")[1].split("<!-- /report:e2e-dartree -->")[0]
    lines = [ln for ln in body.splitlines() if ln.startswith("| 1 |")]
    assert [ln.split(" | ")[2] for ln in lines] == ["ddtree (product)", "mfd K = 4", "ddtree (product)",
                                                    "mfd K = 4", "dartree (Domino)"]
    assert lines[-1] == "| 1 | 64 | dartree (Domino) | 4.75 | 1.20x ± 0.10x | 3.75 | 3.50 | -1.2 | 12% |"
    # the summary: each method at its best budget (ddtree 16, mfd 64, dartree 64), from the rows
    summary = [ln for ln in body.splitlines() if ln.startswith("* T = 1")]
    rows = {(r["method"], r["budget"]): r for r in res.data["rows"]}
    vs_dd = comparison_text(compare_rows(rows["dartree", 64], rows["ddtree", 16])["speed_cmp"])
    vs_mfd = comparison_text(compare_rows(rows["dartree", 64], rows["mfd", 64])["speed_cmp"])
    assert summary == ["* T = 1, each at its best budget: ddtree (product) 1.50x ± 0.02x at N = 16 (tau 3.60), "
                       "mfd K = 4 1.41x ± 0.02x at N = 64 (tau 5.00), dartree (Domino) 1.20x ± 0.10x at N = 64 "
                       f"(tau 4.75). dartree vs ddtree (product): speed {vs_dd} (paired over prompts, one run); "
                       f"dartree vs mfd K = 4: speed {vs_mfd} (paired over prompts, one run)."]
    assert "Drafting cost" not in body  # no round profile in this result
    # with a round profile: c = (t_dartree - t_block) / ((L - 1) t_block) = (1.6 - 0.5) / (5 * 0.5) = 0.44
    res.config["block_size"] = 7
    table = dict(K=1, tree_sizes=[16, 64], tree_ms=[0.1, 0.1], walk_ms=[0.1, 0.1], commit_ms=[0.1, 0.1])
    res.data["round_profile"] = {"overhead": [dict(table, method="ddtree", draft_ms=[0.5, 0.6]),
                                              dict(table, method="dartree", draft_ms=[1.6, 2.0])]}
    res.save(tmp_path / "end_to_end.json")
    body = render(_readme(tmp_path, ["e2e-dartree"]).read_text(), tmp_path)[0]
    assert ("the Domino drafter's round 1.60 ms against the block drafter's 0.50 ms, i.e. c = 0.44 block "
            "passes per extra depth step over the block's 6 depths") in body


def test_generated_text_writes_plus_minus_one_way():
    """Tables, blocks and messages write a spread as "±", never "+-" (docstrings and comments may
    say what they like)."""
    import ast
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "mfd_theory"
    bad = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and re.search(r"\+-(?=[\s\d{%])", node.value):
                bad.append(f"{path.relative_to(root.parent)}:{node.lineno}: {node.value.strip()[:60]!r}")
    assert bad == []


def test_headline_says_in_words_what_the_replicated_runs_found():
    from mfd_theory.report.headline import in_words

    def cmp(g, lo, hi, v):
        return {"gain": g, "lo": lo, "hi": hi, "verdict": v}

    def side(method, drafter, n, scorer=None):
        return {"method": method, "drafter": drafter, "budget": n, "scorer": scorer}

    comps = [
        {"question": "against_product", "temperature": 0.0, "a": side("mfd", "mfd-k2", 16, "mixture"),
         "b": side("chain", "product", 7), "speed_cmp": cmp(0.05, 0.01, 0.09, "gain")},
        {"question": "scorer", "temperature": 0.0, "a": side("mfd", "mfd-k2", 16, "best_mode"),
         "b": side("mfd", "mfd-k2", 16, "mixture"), "speed_cmp": cmp(0.0, -0.02, 0.02, "equivalent")},
        {"question": "scorer", "temperature": 1.0, "a": side("mfd", "mfd-k2", 32, "best_mode"),
         "b": side("mfd", "mfd-k2", 32, "mixture"), "speed_cmp": cmp(-0.06, -0.1, -0.02, "loss")},
        {"question": "scorer", "temperature": 1.0, "a": side("mfd", "mfd-k4", 32, "best_mode"),
         "b": side("mfd", "mfd-k4", 32, "mixture"), "speed_cmp": cmp(0.01, -0.04, 0.06, "inconclusive")}]
    words = in_words({"replicated": {"runs": 3, "comparisons": comps}})
    assert words[0].startswith("**In words** (3 independently trained drafter sets")
    t0, t1 = words[1], words[2]
    assert t0.startswith("* T = 0: against the product drafter's chain (product): mfd (K = 2) N = 16 "
                         "+5.0% [+1.0%, +9.0%] gain")
    assert "so pick either: the two trees decode at speeds equivalent within the margin" in t0
    assert t1.startswith("* T = 1: best-mode against mixture tree: mfd best-mode (K = 2) N = 32 -6.0% [-10.0%, -2.0%] "
                         "loss; mfd best-mode (K = 4) N = 32 +1.0% [-4.0%, +6.0%] inconclusive; so pick the mixture "
                         "tree.")
    assert in_words({"replicated": None}) == [] and in_words({}) == []
    # greedy texts that end in one loop: the T = 0 sentence says so, the T = 1 one does not
    loop = [{"method": "ar", "temperature": 0.0, "tokens": [i] + [5, 6, 7] * 3} for i in range(3)]
    looped = in_words({"replicated": {"runs": 3, "comparisons": comps}, "per_prompt": loop})
    assert looped[1] == t0 + (" (Read T = 0 with care: 3 of 3 greedy texts end in the same loop, so every "
                                           "T = 0 cell measures how well a drafter predicts it.)")
    assert looped[2] == t1


def test_headline_adds_the_k8_runs_sentences_when_its_file_is_there(tmp_path):
    results = _headline_results(tmp_path)
    block = "<!-- report:headline -->\nold\n<!-- /report:headline -->\n"
    without = render(block, results)[0]
    assert "K = 8" not in without
    comp = {"question": "scorer", "temperature": 1.0,
            "a": {"method": "mfd", "drafter": "mfd-k8", "budget": 32, "scorer": "best_mode"},
            "b": {"method": "mfd", "drafter": "mfd-k8", "budget": 32, "scorer": "mixture"},
            "speed_cmp": {"gain": -0.05, "lo": -0.08, "hi": -0.02, "verdict": "loss"}}
    (results / "e2e_k8").mkdir()
    Result("e2e", {}, {"replicated": {"runs": 3, "comparisons": [comp]}}).save(results / "e2e_k8" / "end_to_end.json")
    text = render(block, results)[0]
    assert text.startswith(without.split("<!-- /report:headline -->")[0].rstrip("\n"))  # the rest unchanged
    tail = text.split("**In words, K = 8** (its own run, `mfd e2e --preset k8`", 1)[1]
    assert "3 independently trained drafter sets" in tail.splitlines()[0]
    assert ("* T = 1: best-mode against mixture tree: mfd best-mode (K = 8) N = 32 -5.0% [-8.0%, -2.0%] loss; "
            "so pick the mixture tree.") in tail
    # a K = 8 run without replicates adds nothing (a single run is no finding)
    Result("e2e", {}, {"replicated": None}).save(results / "e2e_k8" / "end_to_end.json")
    assert render(block, results)[0] == without


def test_the_e2e_table_says_when_greedy_texts_end_in_one_loop():
    from mfd_theory.report.e2e import greedy_loop_lines

    loop = [5, 6, 7, 8]
    ar = [{"method": "ar", "temperature": 0.0, "tokens": [1, 2] + loop * 3},
          {"method": "ar", "temperature": 0.0, "tokens": [9] + loop[2:] + loop * 2},
          {"method": "ar", "temperature": 0.0, "tokens": [1, 2, 3, 4, 10, 11]},
          {"method": "ar", "temperature": 1.0, "tokens": loop * 3},  # sampled: not a greedy text
          {"method": "ddtree", "temperature": 0.0, "tokens": loop * 3}]  # the same text as ar's: not counted again
    line = greedy_loop_lines({"per_prompt": ar})[1]
    assert "**2 of 3 end in a repeating loop** (at least 2 full periods; 1 distinct: 2 in one of period 4)" in line
    # tokens after each loop's first period: 14 - 2 - 4 and 11 - 1 - 4, of 14 + 11 + 6
    assert f"{100 * 14 / 31:.0f}% of all 3 texts' tokens" in line and "that loop" in line
    none = greedy_loop_lines({"per_prompt": [{"method": "ar", "temperature": 0.0, "tokens": [1, 2, 3]}]})
    assert none[1].endswith("none of the 1 ends in a repeating loop of 2 full periods or more.")
    assert greedy_loop_lines({}) == [] and greedy_loop_lines({"per_prompt": ar[3:]}) == []


def test_the_lossless_only_run_gets_its_own_block_with_each_checks_measured_time(tmp_path):
    """A run of the lossless check alone (``mfd real --stages prompts lossless``): no ceiling settings, the stage list, and beside
    each target the time its check took when it ran (a rerun that reads the cache takes seconds), and
    a differing output is named, not hidden."""
    rows = [dict(drafter="replay", method=m, prompt=0, batched=b, equal=not (m == "mfd" and b), tokens=8,
                 tau=2.0, seconds=1.0) for m in ("ar", "mfd") for b in (False, True)]
    ll = dict(n_prompts=1, new_tokens=8, budget=4, block=5, rows=rows, wall_s=600.0,
              walk=dict(draws=100, nodes=4, pvalue=0.5, cells=3))
    cfg = dict(stages=["prompts", "lossless"], prompts_per_domain=12)
    data = dict(prompts={"counts": {"code": {"eval": 3}}}, wall_s=6.0,
                targets={"t": dict(architecture="llama", n_parameters=2e6, wall_s=5.0, lossless=ll,
                                   provenance={"gguf_sha256": "ab" * 32})})
    (tmp_path / "real-default").mkdir()
    Result("real", config=cfg, data=data, seed=0).save(tmp_path / "real-default" / "real.json")
    text, changed, skipped = render("<!-- report:real-default -->\n<!-- /report:real-default -->\n", tmp_path)
    assert changed == ["real-default"] and skipped == []
    assert "The lossless check alone (stages prompts, lossless)" in text and "Ceiling settings" not in text
    assert "its check 10.0 min" in text and "Wall time 0.1 min" in text
    assert "**1 case differs**: replay mfd (batch)" in text
    assert BLOCK_FILES["real-default"] == BLOCK_FILES["real"]


def shipped_record(k1_tau=(1.5, 1.4, 1.6, 1.5), mix_tau=(1.55, 1.45, 1.6, 1.5), speedups=(0.4, 0.3)):
    """A small ``mfd tau`` record of two drafters (K = 1 and K = 4) on one set of 4 problems at N = 32,
    each with two timed problems: what make reproduce's drafter step writes."""
    from mfd_theory.results import Result

    def cell(method, scorer, per, anchor=0.4):
        return {"method": method, "scorer": scorer, "rounds": 100, "tokens": 150, "tau": sum(per) / len(per),
                "per_sequence_tau": list(per), "anchor_accepted": anchor}

    def timing(cells):
        return {"ar_s_per_token": 0.14, "speed_check": {"timed_prompts": 2, "median_predicted_over_measured": 1.02,
                                                        "worst_relative_error": 0.05},
                "cells": [{"method": m, "scorer": sc, "budget": 32, "round_s": 0.5, "tau": 1.4, "speedup": sp,
                           "full_set_tau": 1.5, "full_set_predicted_speedup": sp + 0.01} for (m, sc), sp in cells]}

    ones = (1.2, 1.1, 1.1, 1.2)
    k1 = {"drafter": "drafters/qwen-x-k1", "modes": 1, "sets": {"code-eval": {
        "budgets": {"32": {"budget": 32, "cells": [cell("chain", None, ones), cell("ddtree", None, k1_tau)]}},
        "timing": timing([(("chain", None), speedups[0]), (("ddtree", None), speedups[1])])}}}
    k4 = {"drafter": "results/run-k4/drafter", "modes": 4, "sets": {"code-eval": {
        "budgets": {"32": {"budget": 32, "cells": [cell("chain", None, ones), cell("mfd", "mixture", mix_tau),
                                                   cell("mfd", "best_mode", mix_tau),
                                                   cell("ddtree", None, mix_tau)]}},
        "timing": timing([(("mfd", "mixture"), speedups[1])])}}}
    data = {"target": "qwen-x", "dtype": "float32", "threads": 2, "wall_s": 600.0,
            "sets": {"code-eval": {"prompts": 4, "answer_tokens": 400, "answer_seconds": 30.0, "tau_seconds": 90.0,
                                   "tau_answer_tokens_per_s": 4.4}},
            "drafters": [k1, k4]}
    return Result("tau", {"budgets": [32], "timing_prompts": 2, "numerics": None, "threads": 2}, data,
                  provenance={"git_sha": "abcdef1234", "created": "2026-12-07T00:00:00",
                              "numerics": {"mode": "reproducible", "cpu": "Some CPU", "isa_flags": ["avx2"]}})


def _front_results() -> "Results":
    """The three files the front block reads, as small dicts: the shipped drafters' tau record, the
    real target's ceiling and lossless check, the chimera bound's check."""
    from mfd_theory.report import Results
    from mfd_theory.results import Result

    def cmp(gain, verdict, runs=(0.01, 0.03)):
        return {"gain": gain, "lo": gain - 0.2, "hi": gain + 0.2, "verdict": verdict, "model": "runs",
                "run_gains": list(runs), "margin": 0.03, "level": 0.95, "n_runs": len(runs), "n_prompts": 2}

    tab = {"n_prompts": 4, "trees": ["product", "mixture K=2", "mixture K=8", "oracle"], "dead": {"dead_share": [0.7, 0.05]},
           "by_budget": {"64": {"coverage": {"product": [5.0, 0.1], "mixture K=2": [5.5, 0.1], "mixture K=8": [6.4, 0.1],
                                             "oracle": [6.6, 0.1]},
                                "gain": {"mixture K=8": cmp(0.27, "inconclusive"), "oracle": cmp(0.31, "inconclusive")}}}}
    ll = {"rows": [{"equal": True}] * 20, "walk": {"pvalue": 0.62}}
    real = Result("real", {"dead_eps": 1e-3}, {"targets": {"qwen-x": {"ceiling": {"code": {"1": tab}}, "lossless": ll},
                                           "smol-y": {"lossless": {"rows": [{"equal": True}] * 20}}}})
    bound = Result("chimera_bound", {"m_max": 10}, {"verify": {"instances": 1_000_000, "violations": 0, "ties": 0}})
    return Results(None, ("shipped/tau.json", "real/real.json", "chimera_bound.json"),
                   {"shipped/tau.json": shipped_record(), "real/real.json": real, "chimera_bound.json": bound})


def test_the_front_block_answers_each_claim_in_a_short_row():
    import copy

    from mfd_theory.report import BLOCKS
    from mfd_theory.report.front import MAX_ANSWER

    results = _front_results()
    text = BLOCKS["front"].make(results)
    rows = [ln for ln in text.splitlines() if ln.startswith("| ")][1:]
    assert len(rows) == 7 and len(text) <= 2500
    answers = [r.split(" | ")[1] for r in rows]
    assert all(len(a) <= MAX_ANSWER and "[" not in a for a in answers)  # no intervals on the front page
    assert answers[0] == "holds: 0 violations in 1,000,000 random instances, m = 1..10"
    # a dead share, named as one: not set against the paper's chimera share as if the same measure
    assert answers[1] == ("70% of its nodes dead (P(s) <= 0.001), 4 prompts per domain; a dead share, not the paper's "
                          "chimera share (27-33%)")
    assert rows[1].startswith("| Product trees waste nodes (real Qwen target, the product tree of its own marginals")
    assert answers[2] == ("code T = 1 +27% (oracle +31%) over the product tree: inconclusive over prompts, one sampling "
                          "seed")
    assert answers[3] == ("holds: 40 of 40 greedy decodes equal HF `generate`; sampled walks fit the exact acceptance "
                          "(chi-square p = 0.62)")
    # the shipped drafters: tau of each (means of the per-problem tau), MFD against K = 1 paired over the problems
    assert rows[4].startswith("| The shipped drafters draft (real Qwen target, greedy tau, N = 32, all 4 HumanEval problems)")
    assert answers[4] == ("K = 1 DDTree 1.50; MFD K = 4 1.52 (mixture), 1.52 (best mode); EAGLE-3 on Qwen3-1.7B: 2.93, "
                          "AngelSlim")
    assert rows[5].startswith("| Trained MFD beats DDTree at the same N (real Qwen target, shipped K = 4 against K = 1, "
                              "one training run each)")
    assert re.fullmatch(r"tau mixture \+1\.\d%, \w+; best mode \+1\.\d%, \w+ \(these two drafters, paired over 4 problems; "
                        r"no retrain in the interval\)", answers[5])
    assert answers[6] == "no: 0.30-0.40x on 2 timed problems; on the whole set 0.31-0.41x (estimate)"
    # cells whose best mixture differs name their K each
    tab = results.loaded["real/real.json"].data["targets"]["qwen-x"]["ceiling"]["code"]["1"]
    prose = copy.deepcopy(tab)
    prose["by_budget"]["64"]["coverage"]["mixture K=2"] = [7.0, 0.1]
    prose["by_budget"]["64"]["gain"]["mixture K=2"] = prose["by_budget"]["64"]["gain"].pop("mixture K=8")
    results.loaded["real/real.json"].data["targets"]["qwen-x"]["ceiling"]["prose"] = {"1": prose}
    row = [ln for ln in BLOCKS["front"].make(results).splitlines() if ln.startswith("| A mixture")][0]
    assert "fitted K = best" in row and "code T = 1 K = 8 +27%" in row and "prose T = 1 K = 2 +27%" in row
    del results.loaded["real/real.json"].data["targets"]["qwen-x"]["ceiling"]["prose"]
    # what the rows say moves with the numbers: a violation, a differing decode, a faster tree, a better drafter
    results.loaded["chimera_bound.json"].data["verify"]["violations"] = 3
    results.loaded["real/real.json"].data["targets"]["smol-y"]["lossless"]["rows"][0] = {"equal": False}
    results.loaded["shipped/tau.json"] = shipped_record(k1_tau=(1.5,) * 4, mix_tau=(2.0,) * 4, speedups=(1.2, 0.3))
    rows = [ln for ln in BLOCKS["front"].make(results).splitlines() if ln.startswith("| ")][1:]
    assert rows[0].split(" | ")[1].startswith("fails: 3 violations")
    assert rows[3].split(" | ")[1].startswith("fails: 39 of 40 greedy decodes")
    assert rows[4].split(" | ")[1].startswith("K = 1 DDTree 1.50; MFD K = 4 2.00 (mixture)")
    assert rows[5].split(" | ")[1] == ("tau mixture +33.3%, gain; best mode +33.3%, gain (these two drafters, paired over 4 "
                                             "problems; no retrain in the interval)")
    assert rows[6].split(" | ")[1].startswith("1 of 3 trees: 0.30-1.20x on 2 timed problems")


def test_the_reach_table_calls_the_ceiling_a_prediction_only_when_told():
    """The e2e run's ceiling sees calibration prompts only (a prediction); the real study's sees the
    evaluated prompts too, so its column is named for what it is."""
    from mfd_theory.report.ceiling import reach_lines

    assert "| predicted tau gain |" in reach_lines([])[0]
    head = reach_lines([], "the ceiling's tau gain (same prompts)")[0]
    assert "| the ceiling's tau gain (same prompts) |" in head and "predicted" not in head


def _c3_cell(method, scorer, dead, chim, oracle, rounds):
    return {"method": method, "scorer": scorer, "eps": [1e-3, 1e-4], "rounds": rounds, "answers": 2, "nodes": 64.0,
            "covered": 0.5, "oracle_covered": 12.0, "dead_share": dead, "splice_share": chim[0],
            "chimera_share": chim, "oracle_dead_share": oracle, "per_answer": {}}


def test_the_c3_block_shows_each_cell_once_and_the_shared_search_cost_once():
    """real-c3: a row per drafter and cell with its shares as the record holds them (a share under a
    tenth of a percent keeps two decimals); the search, one for every drafter, costed once; a tau
    run that measured no chimeras is refused."""
    cost = {"roots": 10, "forwards": 400, "rows": 5000, "oracle_forwards": 390, "oracle_rows": 4900}

    def chim(cells):
        return {"budget": 64, "stride": 4, "p_temperature": 1.0, "answers": 2, "seconds": 600.0, "cost": cost,
                "cells": cells}

    k1 = {"drafter": "/x/drafters/d-k1", "modes": 1, "sets": {"he": {"chimeras": chim(
        [_c3_cell("ddtree", None, [0.9, 0.85], [0.25, 0.2], [0.3, 0.1], 7)])}}}
    k4 = {"drafter": "/x/drafters/d-mfd4", "modes": 4, "sets": {"he": {"chimeras": chim(
        [_c3_cell("mfd", "best_mode", [0.5, 0.4], [0.0004, 0.0], [0.3, 0.1], 9)])}}}
    res = Result("tau", {"threads": 2}, {"target": "t", "dtype": "float32", "threads": 2,
                                         "sets": {"he": {"prompts": 2}}, "drafters": [k1, k4]})
    text = BLOCKS["real-c3"].make(Results(None, ("c3/he8-s16/tau.json",), {"c3/he8-s16/tau.json": res}))
    rows = [ln for ln in text.splitlines() if ln.startswith("| d-")]
    assert rows == ["| d-k1 (K = 1) | he | DDTree | 7 | 64.0 | 0.50 | 90.0% / 85.0% | 25.0% / 20.0% | 30.0% / 10.0% | 12.0 |",
                    "| d-mfd4 (K = 4) | he | best-mode | 9 | 64.0 | 0.50 | 50.0% / 40.0% | 0.04% / 0.0% | 30.0% / 10.0% | 12.0 |"]
    assert "10 roots in 10.0 min (60 s a root)" in text and "390 of the 400 target forwards" in text
    del k1["sets"]["he"]["chimeras"], k4["sets"]["he"]["chimeras"]
    with pytest.raises(ValueError, match="measured no chimeras"):
        BLOCKS["real-c3"].make(Results(None, ("c3/he8-s16/tau.json",), {"c3/he8-s16/tau.json": res}))
