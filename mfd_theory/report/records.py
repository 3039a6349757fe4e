"""The committed records: the results files every report block and tracked figure is made from.

``results/`` is not committed (it also holds checkpoints, caches and features); the small JSON
files the pages are rendered from are, under :data:`RECORDS` (``records/results/``, the same
relative layout as ``results/``: ``records/results/core_table.json``,
``records/results/real/real.json``). ``mfd report`` renders from there by default and
``mfd report --check`` checks the pages and figures against them; ``mfd report --record results``
copies a run's files in first, refusing any that is not fit to be a record (:func:`record_problems`:
over :data:`MAX_BYTES`, no commit, or made from a dirty tree).

:data:`FIGURES` names each tracked figure's input and drawing function; :func:`draw_figure` draws one
(the same call the notebook or command makes) and :func:`same_pixels` compares two PNGs.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any, NamedTuple

from mfd_theory.report.registry import BLOCKS

__all__ = ["FIGURES", "MAX_BYTES", "RECORDS", "Figure", "draw_figure", "figure_notes", "record_files",
           "record_problems", "same_pixels", "save_records", "strip_unrecorded_note", "unrecorded_note"]

#: where the committed records lie, relative to the repository root
RECORDS = "records/results"
#: the largest file a record may be (bytes): records are text, never checkpoints, caches or features.
#: The largest record, mixture_gain.json (every cell of the sweep, which its figures draw), is 5.4 MB
#: of indented JSON, about 0.55 MB as git stores it (zlib)
MAX_BYTES = 8_000_000
_NOTE_START = "> **No committed record:**"


class Figure(NamedTuple):
    """A tracked figure: drawn by ``mfd_theory.figures.<module>.<function>(result, **kwargs)`` from
    the results file ``file`` (relative to the results directory), as its notebook or command draws it."""

    file: str
    draw: str  # "module:function" under mfd_theory.figures
    kwargs: tuple[tuple[str, Any], ...] = ()


_BUDGET = (("budget", 64),)  # the budget the paper quotes (notebooks 02, 03)
_PROFILE = (("profile", "h100_qwen3-8b"),)  # the cost profile of notebooks 03 and 05

#: tracked figure (relative to the repository root) -> what it is drawn from and how
FIGURES: dict[str, Figure] = {
    "paper_figs/coverage_vs_budget.png": Figure("core_table.json", "core:coverage_vs_budget"),
    "paper_figs/chimera_bound.png": Figure("chimera_bound.json", "chimeras:bound_figure"),
    "paper_figs/chimera_share.png": Figure("chimera_share.json", "chimeras:share_figure", _BUDGET),
    "paper_figs/chimera_share_settings.png": Figure("chimera_share.json", "chimeras:share_settings_figure", _BUDGET),
    "paper_figs/mixture_coverage_vs_budget.png": Figure("mixture_gain.json", "mixture:mixture_coverage_vs_budget"),
    "paper_figs/mixture_frac_vs_K.png": Figure("mixture_gain.json", "mixture:mixture_frac_vs_K", _BUDGET),
    "paper_figs/mixture_speedup_vs_budget.png": Figure("mixture_gain.json", "mixture:mixture_speedup_vs_budget",
                                                       _PROFILE),
    "paper_figs/mixture_gain.png": Figure("mixture_gain.json", "mixture:mixture_gain_bars", _PROFILE),
    "paper_figs/mixture_gain_vs_confidence.png": Figure("mixture_gain.json", "mixture:mixture_gain_vs_confidence",
                                                        _PROFILE),
    "paper_figs/path_coverage_vs_budget.png": Figure("path_gain.json", "path:path_coverage_vs_budget"),
    "paper_figs/path_speedup_vs_step_cost.png": Figure("path_gain.json", "path:path_speedup_vs_step_cost", _PROFILE),
    "paper_figs/batch_throughput.png": Figure("bench_batch.json", "batch:batch_throughput"),
    "paper_figs/batch_throughput_hybrid.png": Figure("bench_batch_qwen3_5.json", "batch:batch_throughput"),
    "paper_figs/e2e_tau_vs_budget.png": Figure("end_to_end.json", "e2e:tau_vs_budget"),
    "paper_figs/e2e_predicted_vs_measured.png": Figure("end_to_end.json", "e2e:predicted_vs_measured"),
    "paper_figs/e2e_dead_share.png": Figure("end_to_end.json", "e2e:dead_share"),
    "paper_figs/e2e_loss_curves.png": Figure("end_to_end.json", "e2e:loss_curves"),
    "paper_figs/e2e_hybrid_tau_vs_budget.png": Figure("hybrid/end_to_end.json", "e2e:tau_vs_budget"),
    "paper_figs/real_ceiling.png": Figure("real/real.json", "real:real_ceiling_figure"),
    "paper_figs/real_drafters_gains.png": Figure("real-drafters/real_drafters.json", "real:real_drafters_gains_figure"),
}


def record_files() -> list[str]:
    """Every results file (relative to the results directory) a block or a tracked figure reads,
    sorted: what ``mfd report --record`` copies when a run has it."""
    return sorted({f for b in BLOCKS.values() for f in b.files} | {f.file for f in FIGURES.values()})


def record_problems(path: str | Path) -> list[str]:
    """Why the results file ``path`` cannot be a record ([] when it can): larger than
    :data:`MAX_BYTES`, not a result's JSON, no commit in its provenance, or made from a dirty tree
    (its git sha ends in '+dirty': the code that made it is in no commit)."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_BYTES:
        return [f"{path}: {size:,} bytes, over the {MAX_BYTES:,}-byte cap on a record (records are small JSON, "
                "never checkpoints, caches or features)"]
    try:
        sha = (json.loads(path.read_text(encoding="utf-8")).get("provenance") or {}).get("git_sha")
    except (ValueError, AttributeError) as exc:
        return [f"{path}: not a result's JSON ({exc})"]
    if not sha:
        return [f"{path}: no git sha in its provenance (made outside a git checkout): it names no code"]
    if "+dirty" in str(sha):
        return [f"{path}: made from a dirty tree (git sha {sha}): commit the code, rerun, then record"]
    return []


def save_records(results: str | Path, records: str | Path) -> list[str]:
    """Copy every file of :func:`record_files` that ``results`` holds into ``records`` (same
    relative path), after checking them all: a ValueError naming each unfit file (one line each)
    and nothing copied when any is unfit, or when ``results`` holds none. Returns the files copied."""
    from mfd_theory.results import atomic_write_bytes

    results, records = Path(results), Path(records)
    if results.resolve() == records.resolve():
        raise ValueError(f"--record: {results} is the records directory itself (give a run's results directory)")
    found = [f for f in record_files() if (results / f).is_file()]
    if not found:
        raise ValueError(f"--record: no results file a block or figure reads under {results}/ "
                         f"(one of {', '.join(record_files()[:4])}, ...)")
    problems = [p for f in found for p in record_problems(results / f)]
    if problems:
        raise ValueError("--record: refused, nothing copied:\n  " + "\n  ".join(problems))
    for f in found:
        atomic_write_bytes(records / f, (results / f).read_bytes())
    return found


def unrecorded_note(files: list[str] | tuple[str, ...]) -> str:
    """The line an unrecorded block starts with: its numbers cannot be recomputed from a committed
    record (``files``: the block's inputs the records lack). ``mfd report`` writes it above the
    block's old text; ``mfd report --check`` passes such a block only when its page says so."""
    names = ", ".join(f"`{f}`" for f in files)
    return (f"{_NOTE_START} the numbers below come from an earlier run whose results were not kept "
            f"(no {names} under `{RECORDS}/`); `mfd report --check` cannot recompute them.\n")


def strip_unrecorded_note(body: str) -> str:
    """``body`` without the :func:`unrecorded_note` it starts with (and the blank line after it)."""
    if body.startswith(_NOTE_START):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body[1:] if body.startswith("\n") else body
    return body


_IMAGE = re.compile(r"!\[[^\]]*\]\((?:\.\./)?(paper_figs/[\w.-]+\.png)\)")
_FIGURE_NOTE_START = "> **No committed record for the figure above**"


def figure_notes(text: str, results: str | Path) -> str:
    """``text`` (a Markdown page) with a note under each line that shows a tracked figure whose
    results file is not under ``results`` (its numbers cannot be redrawn by ``mfd report --check``),
    and no such note under any other line. ``mfd report`` writes what this returns; ``--check``
    fails on a page that differs from it."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        shown = [f for f in _IMAGE.findall(line) if f in FIGURES]
        if not shown:
            continue
        if i + 1 < len(lines) and lines[i] == "" and lines[i + 1].startswith(_FIGURE_NOTE_START):
            i += 2  # the old note, rewritten below when still true
        missing = [f for f in shown if not (Path(results) / FIGURES[f].file).is_file()]
        if missing:
            inputs = ", ".join(f"`{FIGURES[f].file}`" for f in missing)
            out += ["", f"{_FIGURE_NOTE_START} ({', '.join(missing)}: no {inputs} under `{RECORDS}/`): "
                        "`mfd report --check` cannot redraw it; its footer names the run and commit it was drawn from."]
    return "\n".join(out)


def draw_figure(name: str, results: str | Path):
    """The figure ``name`` (a key of :data:`FIGURES`) drawn from its file under ``results``."""
    from mfd_theory.results import Result

    fig = FIGURES[name]
    module, function = fig.draw.split(":")
    draw = getattr(importlib.import_module(f"mfd_theory.figures.{module}"), function)
    return draw(Result.load(Path(results) / fig.file), **dict(fig.kwargs))


def same_pixels(a: str | Path, b: str | Path) -> bool:
    """Whether two PNG files hold the same image (size and every pixel; their compression may differ)."""
    import matplotlib.image as mpimg
    import numpy as np

    if Path(a).read_bytes() == Path(b).read_bytes():
        return True
    x, y = mpimg.imread(a), mpimg.imread(b)
    return x.shape == y.shape and bool(np.array_equal(x, y))
