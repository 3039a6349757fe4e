"""Small text helpers shared by the report (:mod:`mfd_theory.report`) and the tables the evaluation
prints (:mod:`mfd_theory.llm.measure.evaluate`), the one that turns a module docstring into a command's
``--help`` description, and the commands' argument parser (its usage error in one line). They sit
below both so that neither imports the other."""

from __future__ import annotations

import argparse
import math
import re

__all__ = ["OneLineParser", "comparison_text", "help_summary", "is_best_budget", "method_label", "plain_text", "speed_gain_text",
           "stored_number", "tau_gain_text"]


def plain_text(text: str) -> str:
    """``text`` without the reStructuredText markup docstrings use: ````x```` and ``:role:`x```
    become x, ``**x**`` becomes x, and runs of whitespace (line breaks included) one space."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    return " ".join(text.split())


def help_summary(doc: str | None) -> str:
    """A command's ``--help`` description from its module docstring: the whole first paragraph
    (not its first line, which may stop mid-sentence), in plain text, ending with a full stop."""
    para = (doc or "").strip().split("\n\n")[0]
    text = plain_text(para)
    return text if not text or text.endswith((".", "?", "!")) else text + "."


def stored_number(v) -> float | None:
    """A stored number, or None for a missing one (null, NaN, or anything that is not a number)."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return None if math.isnan(v) else float(v)
    return None


def method_label(method: str, scorer: str | None = None) -> str:
    """A method as tables name it: "mfd" for the mixture tree (the default scorer), "mfd best-mode"
    for the best-mode tree; every other method by its name (it has no scorer)."""
    return f"{method} best-mode" if scorer == "best_mode" else str(method)


def is_best_budget(g: dict) -> bool:
    """A gain entry that compares each method at its best budget (``best_budget is True``)."""
    return g.get("best_budget") is True


def comparison_text(c: dict | None) -> str:
    """A stored comparison (``mfd_theory.stats.Comparison.to_dict``) as ``+4.1% [+1.2%, +7.0%] gain``;
    "-" when there is none."""
    if not c:
        return "-"
    return f"{100 * c['gain']:+.1f}% [{100 * c['lo']:+.1f}%, {100 * c['hi']:+.1f}%] {c['verdict']}"


def speed_gain_text(g: dict) -> str:
    """A gain entry's speed comparison (paired over prompts), as :func:`comparison_text` writes it."""
    return comparison_text(g.get("speed_cmp"))


def tau_gain_text(g: dict) -> str:
    """A gain entry's tau comparison (paired over prompts), as :func:`comparison_text` writes it."""
    return comparison_text(g.get("tau_cmp"))


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage error is one line on stderr, naming the flag and the problem
    (exit status 2); the usage itself is printed by ``--help`` only."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
