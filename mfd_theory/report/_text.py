"""Number and spread formatting shared by the report's blocks.

A timing measured over several passes prints as mean ± standard deviation over the passes; one
pass prints "(1 pass)". Comparisons between methods are paired over prompts (mfd_theory.stats).
"""

from __future__ import annotations

import math

from mfd_theory.formatting import stored_number

__all__ = ["mean_se", "method_label", "signed_pct", "sorted_ints", "span", "value_with_spread"]


def _passes(row: dict, key: str) -> list[float] | None:
    p = row.get(f"{key}_passes")
    if isinstance(p, list) and len(p) > 1 and all(stored_number(x) is not None for x in p):
        return [float(x) for x in p]
    return None


def _std(row: dict, key: str) -> float | None:
    p = _passes(row, key)
    if p is not None:
        m = sum(p) / len(p)
        return math.sqrt(sum((x - m) ** 2 for x in p) / (len(p) - 1))
    return stored_number(row.get(f"{key}_std"))


def value_with_spread(row: dict, key: str, fmt: str = "{:.2f}", suffix: str = "") -> str:
    """``1.84x ± 0.03x`` when the row has a spread for ``key``, else ``1.84x (1 pass)``."""
    v = stored_number(row.get(key))
    if v is None:
        return "-"
    s = _std(row, key)
    if s is None:
        return f"{fmt.format(v)}{suffix} (1 pass)"
    return f"{fmt.format(v)}{suffix} ± {fmt.format(s)}{suffix}"


def sorted_ints(text: str) -> list[int]:
    """The distinct integers of a comma-separated option as a run stored it (checked when the run
    was configured), in increasing order."""
    return sorted({int(x) for x in text.split(",") if x.strip()})


def signed_pct(v) -> str:
    """A relative error or gain as ``+1.2%``; ``-`` for a missing value."""
    return "-" if stored_number(v) is None else f"{100 * v:+.1f}%"


def span(vals, fmt: str = "{:.2f}", suffix: str = "") -> str:
    """``a-b`` over ``vals`` (one value when both ends print alike)."""
    lo, hi = fmt.format(min(vals)), fmt.format(max(vals))
    return f"{lo}{suffix}" if lo == hi else f"{lo}-{hi}{suffix}"


def mean_se(v, fmt: str = "{:.2f}") -> str:
    """[mean, se] as "mean ± se" (or the mean alone)."""
    if not v or v[0] is None:
        return "-"
    return fmt.format(v[0]) + ("" if len(v) < 2 or v[1] is None else " ± " + fmt.replace("+", "").format(v[1]))


def row_scorer(r: dict) -> str | None:
    """A row's mfd scorer ("mixture" for an mfd row written before rows carried one); None for
    every other method."""
    return (r.get("scorer") or "mixture") if r.get("method") == "mfd" else None


def method_label(r: dict) -> str:
    """How a table names an evaluated row's method and drafter: ``mfd K = 4``, ``mfd best-mode K = 4``,
    ``mfd K = 8 (wta)`` (a winner-take-all drafter), ``ddtree (product)``."""
    if r["method"] == "chain":
        return f"chain ({r['drafter']}), N = L = {r['budget']}"
    if r["method"] == "mfd":
        wta = " (wta)" if str(r.get("drafter", "")).removesuffix("/per-round").endswith("-wta") else ""
        return ("mfd best-mode" if row_scorer(r) == "best_mode" else "mfd") + f" K = {r.get('K', '?')}{wta}"
    if r["method"] == "dartree":
        return "dartree (Domino)"
    if r["drafter"] == "product":
        return "ddtree (product)"
    return f"ddtree on K = {r.get('K', '?')} marginals"
