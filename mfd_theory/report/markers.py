"""The marked blocks of a Markdown page, regenerated from the results directory.

A page holds ``<!-- report:NAME -->`` ... ``<!-- /report:NAME -->``; :func:`render` rewrites the
text between the markers from the block's results files (:data:`.registry.BLOCKS`), and
:func:`check_layout` checks that each block sits in the file ``report_files.BLOCK_FILES`` names.
"""

from __future__ import annotations

import re
from pathlib import Path

from mfd_theory.report.inputs import Results
from mfd_theory.report.records import strip_unrecorded_note, unrecorded_note
from mfd_theory.report.registry import BLOCKS
from mfd_theory.report_files import BLOCK_FILES

__all__ = ["BLOCK_RE", "check_layout", "render"]

BLOCK_RE = re.compile(r"<!-- report:(?P<name>[a-z0-9-]+) -->\n(?P<body>.*?)<!-- /report:(?P=name) -->", re.S)


def render(text: str, results_dir: str | Path, source: str = "readme",
           mark_unrecorded: bool = False) -> tuple[str, list[str], list[str]]:
    """(new text, names of blocks that changed, names skipped for want of a results file).

    A skipped block keeps its text; with ``mark_unrecorded`` that text is put under
    :func:`~.records.unrecorded_note` (the page says its numbers have no record), and the block
    counts as changed when the note was not there already. ``source`` names the text in error
    messages (an unknown block, a block without its closing marker)."""
    names = [m.group("name") for m in BLOCK_RE.finditer(text)]
    unknown = sorted(set(names) - set(BLOCKS))
    if unknown:
        raise ValueError(f"{source}: unknown report block(s) {unknown}; known: {sorted(BLOCKS)}")
    opened = re.findall(r"<!-- report:([a-z0-9-]+) -->", text)
    if sorted(opened) != sorted(names):
        raise ValueError(f"{source}: report block(s) without a closing marker: {sorted(set(opened) - set(names))}")
    changed: list[str] = []
    skipped: list[str] = []
    results = Results(results_dir)  # one cache for every block of the text

    def replace(m: re.Match) -> str:
        name = m.group("name")
        block = BLOCKS[name]
        inputs = results.reading(block.files)
        missing = inputs.missing()
        if missing:
            skipped.append(name)
            if not mark_unrecorded:
                return m.group(0)
            body = unrecorded_note(missing) + "\n" + strip_unrecorded_note(m.group("body"))
        else:
            body = block.make(inputs).rstrip("\n") + "\n"
        if body != m.group("body"):
            changed.append(name)
        return f"<!-- report:{name} -->\n{body}<!-- /report:{name} -->"

    return BLOCK_RE.sub(replace, text), changed, skipped


def check_layout(texts: dict[str, str]) -> None:
    """Every block sits in the file :data:`BLOCK_FILES` names for it, once, and nowhere else
    (``texts``: repository-relative file name -> its text); ValueError naming the file otherwise."""
    for fname, text in texts.items():
        found = [m.group("name") for m in BLOCK_RE.finditer(text)]
        want = sorted(n for n, f in BLOCK_FILES.items() if f == fname)
        twice = sorted({n for n in found if found.count(n) > 1})
        if twice:
            raise ValueError(f"{fname}: block(s) {twice} appear more than once")
        stray = sorted(n for n in found if BLOCK_FILES.get(n, fname) != fname)
        if stray:
            raise ValueError(f"{fname}: block(s) {stray} belong in "
                             + ", ".join(sorted({BLOCK_FILES[n] for n in stray})) + " (report_files.BLOCK_FILES)")
        missing = sorted(set(want) - set(found))
        if missing:
            raise ValueError(f"{fname}: block(s) {missing} are missing (report_files.BLOCK_FILES puts them there)")
