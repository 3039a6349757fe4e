"""``mfd report``: rewrite the result blocks of docs/ from ``results/*.json``.

By default every file of ``report_files.BLOCK_FILES`` is rewritten; ``--check`` compares without
writing. A block whose results file is missing is left as it is and named; when every block is
skipped the command exits with status 2 naming the missing files.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from mfd_theory.configs.options import Checked, Command, file_option, opt
from mfd_theory.report.markers import BLOCK_RE, check_layout, render
from mfd_theory.report.registry import block_inputs
from mfd_theory.report_files import report_files
from mfd_theory.results import atomic_write_text

__all__ = ["ROOT", "ReportConfig", "main"]

ROOT = Path(__file__).resolve().parents[3]


@dataclasses.dataclass(frozen=True)
class ReportConfig(Checked):
    """What ``mfd report`` reads and rewrites."""

    results: str = opt("results", "directory holding the results files")
    file: str = opt("", "rewrite (or check) this Markdown file only ('': every file that holds a block: "
                        + ", ".join(report_files()) + ")")
    check: bool = opt(False, "write nothing; exit 1 when a block differs from what the results give, 2 when no "
                             "block could be checked for want of results")


CLI = Command("report", "mfd_theory.commands.report", ReportConfig, __doc__, out=False, extras=(
    file_option("out", "with --file: write the rewritten file here instead of over it"),), examples=(
    "mfd report  # rewrite every result block of docs/ from results/",
    "mfd report --check  # compare only: exit 1 when a block differs from what results/ gives",
    "mfd report --file docs/results.md --out /tmp/results.md  # one page, written elsewhere",
))


def _pages(config: ReportConfig, out: str) -> dict[str, Path]:
    """The Markdown files to rewrite or check (name -> path), after checking the arguments."""
    if out and not config.file:
        raise ValueError("--out: needs --file (one Markdown file to rewrite)")
    if config.file:
        paths = {config.file: Path(config.file)}
        if not paths[config.file].is_file():
            raise ValueError(f"--file: no file at {config.file}")
    else:
        paths = {name: ROOT / name for name in report_files()}
        absent = [name for name, p in paths.items() if not p.is_file()]
        if absent:
            raise ValueError(f"no file at {', '.join(absent)} under {ROOT} (the files report_files.BLOCK_FILES names)")
    if not Path(config.results).is_dir():
        raise ValueError(f"--results: no directory at {config.results}")
    return paths


def main(argv=None) -> int:
    return CLI.main(argv, _report)


def _report(config: ReportConfig, opts) -> int:
    paths = _pages(config, opts.out)
    results = Path(config.results)
    texts = {name: p.read_text(encoding="utf-8") for name, p in paths.items()}
    if not config.file:
        check_layout(texts)  # a ValueError (a block in the wrong file) exits 2 through the CLI
    rendered = {name: render(text, results, name) for name, text in texts.items()}

    total = changed = 0
    skipped: list[tuple[str, str]] = []
    for name, (_, ch, sk) in rendered.items():
        total += len(BLOCK_RE.findall(texts[name]))
        changed += len(ch)
        skipped += [(name, b) for b in sk]
        for block in sk:
            missing = [str(results / f) for f in block_inputs(block) if not (results / f).is_file()]
            print(f"skipped block {block} ({name}): no {', '.join(missing)}")
        if config.check:
            for block in ch:
                print(f"out of date: block {block} ({name}) differs from "
                      + ", ".join(str(results / f) for f in block_inputs(block)))
    if total and len(skipped) == total:
        missing = sorted({f for _, b in skipped for f in block_inputs(b) if not (results / f).is_file()})
        print(f"mfd report: error: none of the {total} report block(s) could be "
              f"{'checked' if config.check else 'rewritten'}: every one needs a results file missing from "
              f"{results}/ ({', '.join(missing)}); run the experiments first (mfd reproduce)", file=sys.stderr)
        return 2
    done = total - len(skipped)
    skip_text = f"; {len(skipped)} skipped for missing results (listed above)" if skipped else ""
    if config.check:
        print(f"checked {done} of {total} report block(s) against {results}/: {done - changed} match, "
              f"{changed} out of date{skip_text}")
        return 1 if changed else 0
    for name, (new, ch, _) in rendered.items():
        out = Path(opts.out) if opts.out else paths[name]
        if new != texts[name] or out != paths[name]:
            atomic_write_text(out, new)
            print(f"wrote {out} ({len(ch)} block(s) changed: {', '.join(ch) or 'none'})")
    print(f"regenerated {done} of {total} report block(s) from {results}/: {changed} changed{skip_text}")
    return 0
