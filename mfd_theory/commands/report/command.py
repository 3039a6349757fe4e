"""``mfd report``: rewrite the result blocks of the README and docs/ from ``results/*.json``.

By default every file of ``report_files.BLOCK_FILES`` is rewritten; ``--check`` compares without
writing. A block whose results file is missing is left as it is and named; when every block is
skipped the command exits with status 2 naming the missing files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mfd_theory.commands.report.markers import BLOCK_RE, check_layout, render
from mfd_theory.commands.report.registry import block_inputs
from mfd_theory.report_files import report_files
from mfd_theory.results import atomic_write_text

__all__ = ["ROOT", "main"]

ROOT = Path(__file__).resolve().parents[3]


def _parser() -> argparse.ArgumentParser:
    from mfd_theory.formatting import help_summary

    parser = argparse.ArgumentParser(prog="mfd report", description=help_summary(__doc__))
    parser.add_argument("--results", default="results", metavar="DIR",
                        help="directory holding the results files (default: results)")
    parser.add_argument("--file", default="", metavar="PATH",
                        help="rewrite (or check) this Markdown file only (default: every file that holds a "
                             f"block: {', '.join(report_files())})")
    parser.add_argument("--out", default="", metavar="PATH",
                        help="with --file: write the rewritten file here instead of over it (default: over --file)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a block differs from what the results give, 2 when no block "
                             "could be checked for want of results (default: off)")
    return parser


def _pages(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, Path]:
    """The Markdown files to rewrite or check (name -> path), after checking the arguments."""
    if args.out and not args.file:
        parser.error("--out: needs --file (one Markdown file to rewrite)")
    if args.file:
        paths = {args.file: Path(args.file)}
        if not paths[args.file].is_file():
            parser.error(f"--file: no file at {args.file}")
    else:
        paths = {name: ROOT / name for name in report_files()}
        absent = [name for name, p in paths.items() if not p.is_file()]
        if absent:
            parser.error(f"no file at {', '.join(absent)} under {ROOT} (the files report_files.BLOCK_FILES names)")
    if not Path(args.results).is_dir():
        parser.error(f"--results: no directory at {args.results}")
    if args.out:
        from mfd_theory.validation import check_out_file

        try:
            check_out_file(args.out, "--out")
        except ValueError as exc:
            parser.error(str(exc))
    return paths


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    paths = _pages(args, parser)
    results = Path(args.results)
    texts = {name: p.read_text(encoding="utf-8") for name, p in paths.items()}
    if not args.file:
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
        if args.check:
            for block in ch:
                print(f"out of date: block {block} ({name}) differs from "
                      + ", ".join(str(results / f) for f in block_inputs(block)))
    if total and len(skipped) == total:
        missing = sorted({f for _, b in skipped for f in block_inputs(b) if not (results / f).is_file()})
        print(f"mfd report: error: none of the {total} report block(s) could be "
              f"{'checked' if args.check else 'rewritten'}: every one needs a results file missing from "
              f"{results}/ ({', '.join(missing)}); run the experiments first (mfd reproduce)", file=sys.stderr)
        return 2
    done = total - len(skipped)
    skip_text = f"; {len(skipped)} skipped for missing results (listed above)" if skipped else ""
    if args.check:
        print(f"checked {done} of {total} report block(s) against {results}/: {done - changed} match, "
              f"{changed} out of date{skip_text}")
        return 1 if changed else 0
    for name, (new, ch, _) in rendered.items():
        out = Path(args.out) if args.out else paths[name]
        if new != texts[name] or out != paths[name]:
            atomic_write_text(out, new)
            print(f"wrote {out} ({len(ch)} block(s) changed: {', '.join(ch) or 'none'})")
    print(f"regenerated {done} of {total} report block(s) from {results}/: {changed} changed{skip_text}")
    return 0
