"""How the theory sweeps store their results, and how they are read back.

On disk a sweep's rows are *long* (one row per budget, so a table reads them without knowing the
grid); figures and summaries want *wide* per-budget lists. The converters live here, below the
commands that write the files and the figures and report that read them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CHIMERA_SHARE_MEANS", "HEADLINE_K", "MIXTURE_PER_BUDGET", "TARGET_MODES", "at_budget",
           "curve_grid", "drafter_key", "group_label", "headline_k", "long_cell", "setting_at_budget",
           "target_modes", "widen_cell", "widen_setting"]

# ----------------------------------------------------------------------------- chimera share
CHIMERA_SHARE_MEANS = ("nodes", "chimera_share", "chimera_share_std", "eps_chimera_share", "splice_share", "chimera_mass",
          "cov_product", "cov_mixture", "cov_oracle")


def widen_setting(row: dict[str, Any]) -> dict[str, Any]:
    """A summary row with its ``by_budget`` rows as lists over the budgets again (``budgets``,
    ``chimera_share``, ...)."""
    if not isinstance(row, dict) or "by_budget" not in row:
        raise ValueError("row: expected a stored chimera-share setting (long rows under by_budget)")
    out = {k: v for k, v in row.items() if k != "by_budget"}
    out["budgets"] = [r["budget"] for r in row["by_budget"]]
    out.update({k: [r[k] for r in row["by_budget"]] for k in CHIMERA_SHARE_MEANS})
    return out


def setting_at_budget(row: dict[str, Any], budget: int, key: str):
    """``key`` of a summary row at ``budget``."""
    return next(r[key] for r in row["by_budget"] if r["budget"] == budget)


# ----------------------------------------------------------------------------- mixture gain
MIXTURE_PER_BUDGET = ("coverage", "frac_oracle", "chimera_share")  # a drafter's values at the reported budgets


def drafter_key(K: int, assignment: str = "soft", source: str = "samples") -> str:
    """The name of a drafter's column in ``coverage_curves``: ``K=4,soft,samples``."""
    return f"K={K},{assignment},{source}"


def long_cell(cell: dict, budgets) -> dict:
    """A cell as :func:`mfd_theory.runs.theory.mixture_gain.run_cell` computes it (per-drafter arrays over ``budgets`` and the curve
    grid) in the stored long format (see the module docstring)."""
    budgets = [int(b) for b in budgets]
    out = {k: v for k, v in cell.items() if k not in ("oracle", "drafters", "curve_n", "sampling_repeats")}
    oc = cell["oracle"]["coverage"]
    out["oracle"] = {k: v for k, v in cell["oracle"].items() if k not in ("coverage", "curve")}
    out["drafters"] = [{k: v for k, v in d.items() if k not in (*MIXTURE_PER_BUDGET, "curve", "speedup_at")}
                       for d in cell["drafters"]]
    keys = [dict(K=d["K"], assignment=d["assignment"], source=d["source"]) for d in cell["drafters"]]
    out["by_budget"] = [dict(**k, budget=b, coverage=d["coverage"][i], oracle_coverage=oc[i],
                             frac_oracle=d["frac_oracle"][i], chimera_share=d["chimera_share"][i])
                        for k, d in zip(keys, cell["drafters"]) for i, b in enumerate(budgets)]
    out["speedup_at"] = [dict(**k, profile=pn, budget=b, speedup=v[i])
                         for k, d in zip(keys, cell["drafters"]) for pn, v in d["speedup_at"].items()
                         for i, b in enumerate(budgets)]
    out["coverage_curves"] = {"n": cell["curve_n"], "oracle": cell["oracle"]["curve"],
                              **{drafter_key(**k): d["curve"] for k, d in zip(keys, cell["drafters"])}}
    if "sampling_repeats" in cell:
        out["sampling_repeats"] = [dict(drafter=name, repeat=r, budget=b, frac_oracle=fr[i])
                                   for name, reps in cell["sampling_repeats"].items()
                                   for r, fr in enumerate(reps) for i, b in enumerate(budgets)]
    return out


def widen_cell(cell: dict) -> dict:
    """The inverse of :func:`long_cell`: per-drafter lists over the reported budgets (``coverage``,
    ``frac_oracle``, ``chimera_share``, ``speedup_at``), ``curve`` and ``curve_n``, and the oracle's
    ``coverage`` and ``curve``."""
    if not isinstance(cell, dict) or "by_budget" not in cell:
        raise ValueError("cell: expected a stored mixture-gain cell (long rows under by_budget)")
    out = {k: v for k, v in cell.items() if k not in ("by_budget", "speedup_at", "coverage_curves")}
    curves = cell["coverage_curves"]
    out["curve_n"] = curves["n"]
    budgets = list(dict.fromkeys(r["budget"] for r in cell["by_budget"]))
    first = [r for r in cell["by_budget"] if r["budget"] == budgets[0]][0]
    out["oracle"] = {**cell["oracle"], "curve": curves["oracle"],
                     "coverage": [r["oracle_coverage"] for r in cell["by_budget"] if _same_drafter(r, first)]}
    out["drafters"] = []
    for d in cell["drafters"]:
        mine = [r for r in cell["by_budget"] if _same_drafter(r, d)]
        sp = [r for r in cell["speedup_at"] if _same_drafter(r, d)]
        out["drafters"].append({
            **d, **{key: [r[key] for r in mine] for key in MIXTURE_PER_BUDGET},
            "curve": curves[drafter_key(d["K"], d["assignment"], d["source"])],
            "speedup_at": {pn: [r["speedup"] for r in sp if r["profile"] == pn]
                           for pn in dict.fromkeys(r["profile"] for r in sp)},
        })
    if "sampling_repeats" in cell:
        reps: dict[str, list] = {}
        for r in cell["sampling_repeats"]:
            rows = reps.setdefault(r["drafter"], [])
            if r["repeat"] == len(rows):
                rows.append([])
            rows[r["repeat"]].append(r["frac_oracle"])
        out["sampling_repeats"] = reps
    return out


def _same_drafter(row: dict, drafter: dict) -> bool:
    return (row["K"], row["assignment"], row["source"]) == (drafter["K"], drafter["assignment"], drafter["source"])


# ----------------------------------------------------------------------------- path gain
def group_label(cell: dict) -> str:
    return f"m={cell['m']}" if cell["family"] == "two_futures" else f"F={cell['F']}"


HEADLINE_K = 4  # the summary's "mixture" column: a fixed K, as a trained MFD drafter has


def headline_k(Ks) -> int:
    """The K of the summary's "mixture" column: HEADLINE_K when the sweep fits it, else the
    largest K it fits (so a sweep over other K still gets a full summary)."""
    return HEADLINE_K if HEADLINE_K in Ks else max(Ks)


def at_budget(rows: list[dict], budget: int, key: str, drafter: str | None = None):
    """``key`` of the ``by_budget`` row at ``budget`` (and of ``drafter``, when the rows name one)."""
    for r in rows:
        if r["budget"] == budget and (drafter is None or r.get("drafter") == drafter):
            return r[key]
    raise KeyError(f"no {key} at budget {budget}" + (f" for {drafter}" if drafter else ""))


#: the K whose drafting cost at the longest context carries the ratio target (<= 2.5 x K = 1)
TARGET_MODES = 4


def target_modes(modes: list[int]) -> int:
    """The K whose ratio to K = 1 the target is for: ``TARGET_MODES`` if timed, else the largest K."""
    return TARGET_MODES if TARGET_MODES in modes else max(modes)


def curve_grid(max_n: int) -> np.ndarray:
    """Budgets at which whole coverage curves are stored: every N to 32, then every 8 to 256,
    then every 32 (enough to draw curves and pick a fixed budget without storing every N)."""
    grid = np.concatenate([np.arange(1, 33), np.arange(40, 257, 8), np.arange(288, max_n + 1, 32)])
    return np.unique(np.append(grid[grid <= max_n], max_n)).astype(np.int64)
