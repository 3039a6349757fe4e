"""docs/design.md's "## Layout" section against the tree: every module and folder of the package is
named there, and every path named there exists.

The section's first fenced block is a tree listing: one name a line (a folder ends with ``/``, a
file has an extension), nesting by indentation, then its description. A description that runs on
is indented to where it started (or further), so names inside it are not entries.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "mfd_theory"

#: a listed name: a folder (``llm/``) or a file with an extension (``trees.py``, ``docs/results.md``)
_NAME = re.compile(r"[\w.-]+(?:/[\w.-]+)*(?:/|\.\w+)")


def layout_block(markdown: str) -> str:
    """The first fenced block under the page's ``## Layout`` heading (before the next ``## ``)."""
    m = re.search(r"^## Layout[ \t]*\n(.*?)(?=^## |\Z)", markdown, re.S | re.M)
    if not m:
        raise ValueError("markdown: no '## Layout' section")
    block = re.search(r"^```[^\n]*\n(.*?)^```", m.group(1), re.S | re.M)
    if not block:
        raise ValueError("markdown: the '## Layout' section has no fenced block")
    return block.group(1)


def layout_paths(text: str) -> set[str]:
    """Every path the ``## Layout`` listing of ``text`` (a Markdown page) names, relative to the
    repository root; a folder's path ends with ``/``."""
    paths: set[str] = set()
    folders: list[tuple[int, str]] = []  # (indent, path) of the open folders, outermost first
    run_on_from: int | None = None  # the column where the last entry's description started
    for line in layout_block(text).splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if run_on_from is not None and indent >= run_on_from:
            continue  # the last entry's description, run on
        name = line.split()[0]
        if not _NAME.fullmatch(name):
            continue
        while folders and folders[-1][0] >= indent:
            folders.pop()
        path = (folders[-1][1] if folders else "") + name
        paths.add(path)
        if name.endswith("/"):
            folders.append((indent, path))
        rest = line[indent + len(name):]
        run_on_from = indent + len(name) + len(rest) - len(rest.lstrip()) if rest.strip() else None
    return paths


def package_tree() -> set[str]:
    """Every module and folder under the package (folder paths end with ``/``). A package's
    ``__init__.py`` is left out: naming its folder names it."""
    out = {PACKAGE + "/"}
    for p in (ROOT / PACKAGE).rglob("*"):
        rel = p.relative_to(ROOT)
        if any(part == "__pycache__" or part.startswith(".") for part in rel.parts):
            continue
        if p.is_dir():
            out.add(rel.as_posix() + "/")
        elif p.suffix == ".py" and p.name != "__init__.py":
            out.add(rel.as_posix())
    return out


def test_layout_paths_reads_a_tree_listing():
    page = "\n".join([
        "# Design", "", "## Layout", "", "```",
        "pkg/",
        "  a.py          first module",
        "  sub/          a folder",
        "    b.py        nested; its description runs on",
        "                c.py in the run-on text is no entry",
        "  e.py          back on the first level",
        "docs/x.md       a file at the root",
        "tests/",
        "```", "", "## Next", "", "```", "other.py   not in the layout section", "```", ""])
    assert layout_paths(page) == {"pkg/", "pkg/a.py", "pkg/sub/", "pkg/sub/b.py", "pkg/e.py", "docs/x.md", "tests/"}
    with pytest.raises(ValueError, match="## Layout"):
        layout_paths("# Design\n\n## How it works\n")


def test_package_tree_lists_modules_and_folders():
    tree = package_tree()
    assert {"mfd_theory/", "mfd_theory/trees.py", "mfd_theory/llm/", "mfd_theory/commands/"} <= tree
    assert not any("__pycache__" in p or p.endswith("__init__.py") for p in tree)


def test_layout_section_matches_the_tree():
    named = layout_paths((ROOT / "docs" / "design.md").read_text(encoding="utf-8"))
    absent = sorted(p for p in named if not ((ROOT / p).is_dir() if p.endswith("/") else (ROOT / p).is_file()))
    unnamed = sorted(package_tree() - named)
    assert not absent, f"docs/design.md's layout names paths that do not exist: {absent}"
    assert not unnamed, f"docs/design.md's layout does not name: {unnamed}"
