"""``mfd <command> --help`` reads as plain, finished text, and every option shows its default.

The rules, checked on the printed help of every command in ``COMMANDS`` and ``BENCHES``:

* no backtick anywhere (neither reStructuredText's ````x```` nor Markdown's ```x```);
* the description under the usage line is a finished sentence: it ends with ".", "?" or "!";
* every option but ``-h`` ends with its default in parentheses, ``(default: ...)``, and the
  phrase before it does not stop on a word that needs a continuation ("the", "of", "and", ...),
  the mark of a help string cut mid-sentence.
"""

from __future__ import annotations

import re

import pytest

from mfd_theory.cli import BENCHES, COMMANDS, main

CASES = [[c] for c in COMMANDS] + [["bench", b] for b in BENCHES]

#: words a phrase cannot end on (articles, prepositions, conjunctions)
DANGLING = {"a", "an", "the", "of", "and", "or", "nor", "to", "in", "at", "for", "with", "by", "from", "on", "per",
            "vs", "than", "that", "which", "when", "whose", "is", "are", "as", "into", "over", "under", "but"}


def _help(argv: list[str], capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "2000")  # one line per option: argparse wraps at the terminal width
    capsys.readouterr()
    assert main(argv + ["--help"]) == 0
    return capsys.readouterr().out


def parse_help(text: str) -> tuple[str, dict[str, str]]:
    """(description, {option invocation: help text}) of an argparse help page."""
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("usage:"))
    while i < len(lines) and lines[i].strip():  # the usage block, possibly wrapped
        i += 1
    desc, opts_at = [], None
    for k in range(i, len(lines)):
        if re.match(r"^(options|optional arguments|positional arguments):", lines[k]):
            opts_at = k
            break
        desc.append(lines[k].strip())
    options: dict[str, str] = {}
    current = None
    for ln in lines[(opts_at or len(lines)) + 1:]:
        m = re.match(r"^  (-\S.*?)(?: {2,}(.*))?$", ln)
        if m:
            current = m.group(1)
            options[current] = (m.group(2) or "").strip()
        elif current and ln.startswith("   "):
            options[current] = (options[current] + " " + ln.strip()).strip()
    return " ".join(x for x in desc if x), options


def help_problems(text: str) -> list[str]:
    """Every rule the help page ``text`` breaks, one line each (empty: none)."""
    problems = []
    for ln in text.splitlines():
        if "`" in ln:
            problems.append(f"markup: {ln.strip()}")
    desc, options = parse_help(text)
    if not desc.endswith((".", "?", "!")):
        problems.append(f"description not a finished sentence: {desc!r}")
    for inv, h in options.items():
        if inv.startswith("-h"):
            continue
        m = re.search(r"^(.*)\(default: [^()]*(?:\([^()]*\)[^()]*)*\)$", h)
        if not m:
            problems.append(f"{inv}: no (default: ...) at the end: {h!r}")
            continue
        words = re.findall(r"[A-Za-z0-9']+", m.group(1))
        if not words:
            problems.append(f"{inv}: no help text before its default")
        elif words[-1].lower() in DANGLING or m.group(1).rstrip().endswith((",", ";", ":", "-")):
            problems.append(f"{inv}: help stops mid-phrase: {h!r}")
    return problems


@pytest.mark.parametrize("argv", CASES, ids=" ".join)
def test_help_is_plain_finished_text_with_defaults(argv, capsys, monkeypatch):
    text = _help(argv, capsys, monkeypatch)
    assert parse_help(text)[1], text  # the parser found the options (the rules below are not vacuous)
    assert help_problems(text) == []


def test_the_rules_catch_what_they_are_for():
    page = ("usage: mfd demo [-h] [--a A]\n\nThe first line of a docstring that\n\noptions:\n"
            "  -h, --help  show this help message and exit\n"
            "  --a A       a value of the (default: 1)\n"
            "  --b B       uses ``x`` (default: 2)\n"
            "  --c         a flag\n"
            "  --d D       fine (default: 3)\n")
    found = help_problems(page)
    assert any(p.startswith("description") for p in found)
    assert any(p.startswith("--a A: help stops mid-phrase") for p in found)
    assert any(p.startswith("markup:") and "--b" in p for p in found)
    assert any(p.startswith("--c: no (default") for p in found)
    assert not any("--d" in p for p in found)


@pytest.mark.parametrize("argv", CASES, ids=" ".join)
def test_help_ends_with_examples_that_use_its_own_options(argv, capsys, monkeypatch):
    """Every help page ends with an "examples:" block; each example is a command line of this very
    command whose options are all on the page."""
    text = _help(argv, capsys, monkeypatch)
    assert "\nexamples:\n" in text, text[-400:]
    examples = [ln.strip() for ln in text.split("\nexamples:\n", 1)[1].splitlines() if ln.strip()]
    _, options = parse_help(text)
    known = {w for inv in options for w in re.findall(r"--[a-z0-9-]+", inv)}
    prog = "mfd " + " ".join(argv)
    assert len(examples) >= 2
    for ex in examples:
        line = ex.split("  # ")[0]
        assert line.startswith(prog) or f"mfd_theory.cli {' '.join(argv)}" in line, ex
        assert "  # " in ex, ex  # each says what it does
        line = line.split(" -m mfd_theory.cli ")[-1]  # under torchrun: the options after the module
        used = set(re.findall(r"(?<!\S)--[a-z0-9-]+", line.split(">")[0]))
        assert used <= known, (ex, used - known)


def test_top_help_says_what_mfd_does_and_what_each_benchmark_measures(capsys, monkeypatch):
    text = _help([], capsys, monkeypatch)
    desc, _ = parse_help(text)
    assert "Multi-Future Drafting" in desc and desc.endswith(".")
    for name, (_, _, what) in BENCHES.items():
        assert f"mfd bench {name}" in text and what in text, name
    bench = _help(["bench"], capsys, monkeypatch)
    assert all(f"mfd bench {name}" in bench for name in BENCHES)


def test_reproduce_help_gives_its_run_time_and_what_it_rewrites(capsys, monkeypatch):
    desc, _ = parse_help(_help(["reproduce"], capsys, monkeypatch))
    assert re.search(r"\d+ minutes", desc) and "docs/" in desc and "README.md" not in desc  # the front page is hand-written
