"""The report block of ``mfd own-target`` (docs/own-target.md): its evaluation, and a line on the
distilled data and the drafters' training read from the files the pipeline wrote beside eval.json.

:func:`own_target` is a block (``block(results) -> str``, :mod:`.inputs`); ``mfd own-target``
prints :func:`own_target_summary` of the run it just made.
"""

from __future__ import annotations

import json
from pathlib import Path

from mfd_theory.report._text import value_with_spread
from mfd_theory.report.checks import check_summary, prediction_summary
from mfd_theory.report.inputs import Results
from mfd_theory.formatting import is_best_budget, speed_gain_text, stored_number, tau_gain_text
from mfd_theory.results import Result

__all__ = ["own_target", "own_target_summary"]


def own_target(results: Results) -> str:
    """``mfd own-target``'s evaluation (``OUT/eval/eval.json``): every row but ar's, and the MFD vs
    product gains; when eval.json lies on disk also a line on the distilled data and the drafters'
    training, read from the files the commands wrote beside it (``OUT/data/manifest.json``,
    ``OUT/<drafter>/loss_curve.json``) and the step times in ``OUT/steps.json``."""
    d, c = results.main.data, results.main.config
    rows = [r for r in d["rows"] if r["method"] != "ar"]
    by_dataset = len(dict.fromkeys(r.get("dataset") for r in rows)) > 1
    source = results.main_path
    lines = []
    if source is not None:
        line = _pipeline_line(source.parent.parent, d)
        if line:
            lines += [line, ""]
    lines += _rows_table(rows, c, by_dataset)
    greedy = [r for r in rows if r.get("matches_ar") is not None]
    if greedy:
        bad = [r for r in greedy if not r["matches_ar"]]
        lines += ["", f"Greedy rows whose tokens equal ar's on every prompt: {len(greedy) - len(bad)} of "
                      f"{len(greedy)}."]
    line = prediction_summary(d.get("prediction"), "`predictions.json`, from the calibration prompts and the "
                                                   "round profile, written before the first evaluated prompt")
    if line:
        lines += ["", line]
    chk = d.get("speedup_check") or {}
    if chk.get("n_rows"):
        lines += ["", "In sample (not a prediction): the same cost model with the evaluated rounds' own coverage "
                      "against the measured speedup:", "", *check_summary(chk)]
    lines += _gains_table(d, rows, by_dataset)
    return "\n".join(lines)


def own_target_summary(path: str | Path) -> str | None:
    """:func:`own_target` of the eval.json at ``path``, or None when there is none."""
    path = Path(path)
    return own_target(Results.holding(Result.load(path), path)) if path.is_file() else None


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _pipeline_line(root: Path, d: dict) -> str | None:
    """distill / train-drafter / eval in one line, from the files under the run's folder ``root``."""
    times = ((_read_json(root / "steps.json") or {}).get("steps")) or {}

    def took(step, fmt=" ({:.0f} s)"):
        t = stored_number((times.get(step) or {}).get("seconds"))
        return fmt.format(t) if t is not None else ""

    parts = []
    man = _read_json(root / "data" / "manifest.json")
    if man:
        parts.append(f"distill: {man['n_sequences']} sequences, {man['n_response_tokens']:,} response tokens in "
                     f"{len(man['shards'])} shard(s){took('distill')}")
    trained = []
    for label, info in (d.get("drafters") or {}).items():
        curve = _read_json(root / label / "loss_curve.json")
        if curve:
            trained.append(f"K = {info.get('K', '?')} loss {curve[0]['loss']:.2f} -> {curve[-1]['loss']:.2f} "
                           f"over {len(curve)} steps{took(label)}")
    if trained:
        parts.append("train-drafter: " + ", ".join(trained))
    if took("eval"):
        parts.append(f"eval: {took('eval', '{:.0f} s')}")
    return "; ".join(parts) + "." if parts else None


def _drafter_name(r: dict) -> str:
    return "-" if r["method"] == "ar" else f"K = {r.get('K', '?')}"


def _rows_table(rows: list[dict], c: dict, by_dataset: bool) -> list[str]:
    """Every evaluated row: tau, speedup, the speedup predicted before decoding, greedy = ar."""
    ds_head, ds_rule = ("| data set ", "|---") if by_dataset else ("", "")
    n_prompts = max((r.get("n_prompts") or 0 for r in rows), default=0)
    passes = {len(r["speedup_passes"]) for r in rows if isinstance(r.get("speedup_passes"), list)}
    lines = [f"{n_prompts} held-out prompts x {c.get('max_new_tokens')} new tokens; speedup: mean ± std over "
             + (f"{'/'.join(map(str, sorted(passes)))} timing passes." if passes else "one timing pass (1 pass)."),
             "", ds_head + "| T | method | drafter | N | tau | speedup | predicted before decoding | = ar |",
             ds_rule + "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        same = "" if r.get("matches_ar") is None else ("yes" if r["matches_ar"] else "NO")
        tau, pred = stored_number(r.get("tau")), stored_number(r.get("predicted_speedup"))
        lines.append((f"| {r.get('dataset')} " if by_dataset else "")
                     + f"| {r['temperature']:g} | {r['method']} | {_drafter_name(r)} | {r['budget']} | "
                     f"{'-' if tau is None else f'{tau:.2f}'} | {value_with_spread(r, 'speedup')} | "
                     f"{'-' if pred is None else f'{pred:.2f}'} | {same} |")
    return lines


def _gains_table(d: dict, rows: list[dict], by_dataset: bool) -> list[str]:
    """Each K > 1 drafter against the K = 1 drafter's ddtree at the same budget."""
    gains = [g for g in d.get("mfd_gains") or [] if not is_best_budget(g)]
    if not gains:
        return []
    ds_head, ds_rule = ("| data set ", "|---") if by_dataset else ("", "")
    lines = ["", "Each K > 1 drafter (mfd, and ddtree on its marginals) against the K = 1 drafter's ddtree at "
                 "the same budget. Gains are paired over the run's prompts (the log ratio of the two methods' tau, and of each prompt's own decode speed); intervals are prompts-only (one trained run: a retrained drafter can land outside them), Bonferroni-adjusted over each table's entries; words: docs/statistics.md.", "",
             ds_head + "| T | method (drafter) | N | tau gain | speed gain |",
             ds_rule + "|---|---|---|---|---|"]
    for g in gains:
        K = next((r.get("K") for r in rows if r["drafter"] == g["drafter"]), "?")
        what = {"mfd": f"mfd (K = {K})", "ddtree": f"ddtree on K = {K} marginals"}.get(
            g["method"], f"{g['method']} (K = {K})")
        lines.append((f"| {g.get('dataset')} " if by_dataset else "")
                     + f"| {g['temperature']:g} | {what} | {g['budget']} | {tau_gain_text(g)} | {speed_gain_text(g)} |")
    return lines
