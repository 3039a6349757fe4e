"""``mfd report``: rewrite the result blocks of docs/ and the tracked figures from the committed
records (``records/results/``, or the results directory ``--results`` names).

By default every file of ``report_files.BLOCK_FILES`` is rewritten, and every tracked figure whose
input is there is redrawn into ``paper_figs/``; ``--check`` compares without writing (each figure
redrawn into a temporary folder) and fails on any difference. A block whose input is missing keeps
its text under a note that its numbers have no committed record; ``--check`` fails on such a block
whose page does not say so. ``--record results`` first copies a run's files into the records,
refusing any over 8 MB or made from a dirty tree. With no input for any block the command exits
with status 2 naming the missing files.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

from mfd_theory.configs.options import Checked, Command, file_option, opt
from mfd_theory.report.markers import BLOCK_RE, check_layout, render
from mfd_theory.report.records import (FIGURES, MAX_BYTES, RECORDS, figure_notes, record_files, record_problems,
                                       save_records)
from mfd_theory.report.registry import block_inputs
from mfd_theory.report_files import report_files
from mfd_theory.results import atomic_write_text

__all__ = ["ROOT", "ReportConfig", "main"]

ROOT = Path(__file__).resolve().parents[3]


@dataclasses.dataclass(frozen=True)
class ReportConfig(Checked):
    """What ``mfd report`` reads and rewrites."""

    results: str = opt(RECORDS, "directory holding the results files (the committed records by default)")
    file: str = opt("", "rewrite (or check) this Markdown file only, and no figure ('': every file that holds a "
                        "block: " + ", ".join(report_files()) + ")")
    check: bool = opt(False, "write nothing; exit 1 when a block or figure differs from what the results give, or "
                             "a block without its results does not say so; 2 when no block could be checked")
    record: str = opt("", "first copy the files the blocks and figures read from this run's results directory "
                          f"(e.g. results) into --results, refusing any over {MAX_BYTES // 10**6} MB or made "
                          "from a dirty tree ('': copy nothing)")
    figures: bool = opt(True, "also redraw (with --check: redraw and compare) the tracked figures whose results "
                              "file is there")


CLI = Command("report", "mfd_theory.commands.report", ReportConfig, __doc__, out=False, extras=(
    file_option("out", "with --file: write the rewritten file here instead of over it"),), examples=(
    f"mfd report  # rewrite every result block of docs/ and the tracked figures from {RECORDS}/",
    "mfd report --check  # compare only: exit 1 naming each block or figure that differs from the records",
    "mfd report --record results  # copy a run's results into the records, then rewrite from them",
    "mfd report --results results --file docs/results.md --out /tmp/results.md  # a run's numbers, written elsewhere",
))


def _pages(config: ReportConfig, out: str) -> dict[str, Path]:
    """The Markdown files to rewrite or check (name -> path), after checking the arguments."""
    if out and not config.file:
        raise ValueError("--out: needs --file (one Markdown file to rewrite)")
    if config.record and config.check:
        raise ValueError("--record: writes the records; not with --check (which writes nothing)")
    if config.file:
        paths = {config.file: Path(config.file)}
        if not paths[config.file].is_file():
            raise ValueError(f"--file: no file at {config.file}")
    else:
        paths = {name: ROOT / name for name in report_files()}
        absent = [name for name, p in paths.items() if not p.is_file()]
        if absent:
            raise ValueError(f"no file at {', '.join(absent)} under {ROOT} (the files report_files.BLOCK_FILES names)")
    if config.record and not Path(config.record).is_dir():
        raise ValueError(f"--record: no directory at {config.record}")
    if not config.record and not Path(config.results).is_dir():
        raise ValueError(f"--results: no directory at {config.results}")
    return paths


def main(argv=None) -> int:
    return CLI.main(argv, _report)


def _report(config: ReportConfig, opts) -> int:
    paths = _pages(config, opts.out)
    results = Path(config.results)
    if config.record:
        copied = save_records(config.record, results)  # a ValueError (nothing copied) exits 2 through the CLI
        print(f"recorded {len(copied)} file(s) from {config.record}/ into {results}/: {', '.join(copied)}")
    texts = {name: p.read_text(encoding="utf-8") for name, p in paths.items()}
    if not config.file:
        check_layout(texts)  # a ValueError (a block in the wrong file) exits 2 through the CLI
    rendered = {name: render(text, results, name, mark_unrecorded=True) for name, text in texts.items()}
    # a page that shows a figure without a record says so under it
    noted = {name: figure_notes(new, results) for name, (new, _, _) in rendered.items()}
    notes_changed = [name for name, (new, _, _) in rendered.items() if noted[name] != new]
    rendered = {name: (noted[name], ch, sk) for name, (_, ch, sk) in rendered.items()}

    total = changed = unmarked = 0
    skipped: list[tuple[str, str]] = []
    for name, (_, ch, sk) in rendered.items():
        total += len(BLOCK_RE.findall(texts[name]))
        skipped += [(name, b) for b in sk]
        for block in sk:
            missing = [str(results / f) for f in block_inputs(block) if not (results / f).is_file()]
            said = "" if block in ch else ", as the page says"
            print(f"unrecorded block {block} ({name}): no {', '.join(missing)}{said}")
        for block in ch:
            if block in sk:
                unmarked += 1
            else:
                changed += 1
            if config.check:
                print(f"out of date: block {block} ({name}) " + (
                    "has no record and the page does not say so (mfd report adds the note)" if block in sk else
                    "differs from " + ", ".join(str(results / f) for f in block_inputs(block))))
    if total and len(skipped) == total:
        missing = sorted({f for _, b in skipped for f in block_inputs(b) if not (results / f).is_file()})
        print(f"mfd report: error: none of the {total} report block(s) could be "
              f"{'checked' if config.check else 'rewritten'}: every one needs a results file missing from "
              f"{results}/ ({', '.join(missing)}); run the experiments first (mfd reproduce)", file=sys.stderr)
        return 2
    done = total - len(skipped)
    skip_text = (f"; {len(skipped)} unrecorded ({len(skipped) - unmarked} saying so, listed above)"
                 if skipped else "")
    figs = _figures(config, results) if config.figures and not config.file else 0
    if config.check:
        # the committed records must each be fit to be one (a run's own results/ may be from a dirty tree)
        committed = results.resolve() == (ROOT / RECORDS).resolve()
        refused = [p for f in record_files() if committed and (results / f).is_file()
                   for p in record_problems(results / f)]
        for p in refused:
            print(f"refused record {p}")
        print(f"checked {done} of {total} report block(s) against {results}/: {done - changed} match, "
              f"{changed} out of date{skip_text}" + (f"; {len(refused)} record(s) refused" if refused else ""))
        for name in notes_changed:
            print(f"out of date: {name} shows a figure without a record and does not say so under it, or says so "
                  "under one that has a record (mfd report rewrites the note)")
        return 1 if changed + unmarked + figs + len(refused) + len(notes_changed) else 0
    for name, (new, ch, _) in rendered.items():
        out = Path(opts.out) if opts.out else paths[name]
        if new != texts[name] or out != paths[name]:
            atomic_write_text(out, new)
            notes = "; its figure notes rewritten" if name in notes_changed else ""
            print(f"wrote {out} ({len(ch)} block(s) changed: {', '.join(ch) or 'none'}{notes})")
    print(f"regenerated {done} of {total} report block(s) from {results}/: {changed + unmarked} changed{skip_text}")
    return 1 if figs else 0


def _figures(config: ReportConfig, results: Path) -> int:
    """Redraw every tracked figure whose results file is under ``results``: into ``paper_figs/``,
    or with ``--check`` into a temporary folder, compared pixel by pixel with the tracked one.
    A figure whose result was made from a dirty tree is refused. Returns the failures."""
    from mfd_theory.figures import save_figure
    from mfd_theory.report.records import draw_figure, same_pixels

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    differ = refused = drawn = 0
    unrecorded = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fig in FIGURES.items():
            source = results / fig.file
            if not source.is_file():
                unrecorded.append(name)
                continue
            problems = record_problems(source)
            if problems:
                refused += 1
                print(f"refused figure {name}: " + "; ".join(problems))
                continue
            out = Path(tmp) / Path(name).name if config.check else ROOT / name
            figure = draw_figure(name, results)
            save_figure(figure, out)
            plt.close(figure)
            drawn += 1
            if config.check and not ((ROOT / name).is_file() and same_pixels(out, ROOT / name)):
                differ += 1
                print(f"out of date: figure {name} differs from what {source} draws (here with matplotlib "
                      f"{matplotlib.__version__}; the tracked figures are drawn with constraints.txt's)")
    if unrecorded:
        print(f"unrecorded figure(s) (no results file under {results}/): {', '.join(unrecorded)}")
    verb = "checked" if config.check else "redrew"
    print(f"{verb} {drawn} of {len(FIGURES)} tracked figure(s) from {results}/"
          + (f": {drawn - differ} match, {differ} differ" if config.check else "")
          + (f"; {refused} refused (made from a dirty tree)" if refused else ""))
    return differ + refused
