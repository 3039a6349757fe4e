"""Figures for the chimera bound and the chimera share (results of the two chimera experiments).

Each function takes a :class:`~mfd_theory.results.Result` (or its dict / data dict) and returns a
matplotlib Figure; matplotlib is imported lazily, and the backend is left to the caller (a
notebook's inline one, Agg under the CLI and the tests).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["bound_figure", "share_figure", "share_settings_figure"]

FAMILY_COLORS = {
    "two_futures": "#1f77b4",
    "branching": "#2ca02c",
    "shifted": "#d62728",
    "noisy_futures": "#9467bd",
    "zipf_futures": "#ff7f0e",
}


def _data(res: Any) -> dict[str, Any]:
    if hasattr(res, "data"):
        return _wide(res.data)
    if isinstance(res, dict) and "data" in res and isinstance(res["data"], dict):
        return _wide(res["data"])
    if isinstance(res, dict):
        return _wide(res)
    raise ValueError(f"res: expected a Result or a dict, got {type(res).__name__}")


def _wide(data: dict[str, Any]) -> dict[str, Any]:
    """A chimera-share result's settings with their per-budget rows as lists (what the panels
    draw; :func:`~mfd_theory.layouts.widen_setting`); other results unchanged."""
    if not isinstance(data.get("settings"), list):
        return data
    from mfd_theory.layouts import widen_setting

    return {**data, "settings": [widen_setting(r) for r in data["settings"]]}


def _plt():
    import matplotlib.pyplot as plt

    return plt


def bound_figure(res: Any):
    """Three panels, two a row: (a) the tightness table, (b) what ties do, (c) F = 3, 4 futures
    (with (b)'s key beside it).

    (a) full-length chimeras vs m: the bound 2^(m-1) - 1, observed minimum and maximum over the
    random instances, and 2^m - 2; (b) share of tied instances that fall below the bound when
    ties favour the futures (only instances with Q(a) = Q(b) can; other ties are harmless); (c) for futures that differ at every disagreement position, the
    minimum number of chimeras as a share of all splices, F = 2 (the bound), 3 and 4.
    """
    d = _data(res)
    plt = _plt()
    from mfd_theory.figures import PAGE_WIDTH_IN

    fig, grid = plt.subplots(2, 2, figsize=(PAGE_WIDTH_IN, 8.2))
    axes, key = [grid[0, 0], grid[0, 1], grid[1, 0]], grid[1, 1]
    table = d["verify"]["table"]
    m = np.array([r["m"] for r in table])
    bound = np.array([r["bound"] for r in table])
    lo = np.array([r["min"] for r in table], dtype=float)
    hi = np.array([r["max"] for r in table], dtype=float)
    ax = axes[0]
    ax.plot(m, bound, "k-", lw=2, label=r"bound $2^{m-1}-1$")
    ax.plot(m, lo, "o", color="#1f77b4", ms=7, mfc="none", label="observed min")
    ax.plot(m, hi, "s", color="#d62728", ms=6, mfc="none", label="observed max")
    ax.plot(m, 2.0 ** m - 2, "k--", lw=1, label=r"all splices $2^m-2$")
    # symlog: linear through 0..1, so m = 1's count of 0 sits at 0 rather than off a log axis
    ax.set_yscale("symlog", linthresh=1)
    ax.set_ylim(bottom=0)
    ax.set_xticks(m)
    ax.set_xlabel("m (positions where the two futures disagree)")
    ax.set_ylabel("full-length chimeras\nin the smallest product tree")
    v = d["verify"]
    ax.set_title(f"(a) {v['instances']:,} instances, {v['violations']} violations", fontsize=10)
    ax.legend(fontsize=8)

    ax = axes[1]
    tt = d["ties"]["table"]
    tm = np.array([r["m"] for r in tt])
    tied = np.array([r["ties"] for r in tt], dtype=float)  # Q(a) = Q(b): outside the theorem
    other = np.array([r.get("other_ties", 0) for r in tt], dtype=float)  # harmless ties
    below = np.array([r.get("tie_violations", 0) for r in tt], dtype=float)
    inst = np.array([r["instances"] for r in tt], dtype=float) + tied  # every instance drawn
    # side by side, so no bar hides another (for m >= 4 every Q(a) = Q(b) instance falls below the bound:
    # the red bar as tall as the grey one beside it)
    ax.bar(tm - 0.27, other / np.maximum(inst, 1), width=0.27, color="#bcbd22",
           label="(b) other ties, Q(a) != Q(b): never below the bound")
    ax.bar(tm, tied / np.maximum(inst, 1), width=0.27, color="#7f7f7f", label="(b) Q(a) = Q(b): the futures tie")
    ax.bar(tm + 0.27, below / np.maximum(inst, 1), width=0.27, color="#d62728",
           label="(b) of the Q(a) = Q(b) ones, below the bound\n(ties broken for the futures)")
    ax.set_xticks(tm)
    ax.set_xlabel("m (positions where the two futures disagree)")
    ax.set_ylabel("share of instances")
    tie_grid = d["ties"]["config"].get("grid")
    ax.set_title(f"(b) ties: marginals on the grid 1..{tie_grid}", fontsize=10)
    ax.set_ylim(0, 1)  # a share; the key is beside (c), off the bars

    ax = axes[2]
    mm = np.arange(2, int(m.max()) + 1)
    ax.plot(mm, [(2 ** (k - 1) - 1) / max(2 ** k - 2, 1) for k in mm], "k-", label="F = 2 (proven)")
    for F, color in ((3, "#2ca02c"), (4, "#9467bd")):
        lab = "|".join(str(f) for f in range(F))
        rows = [r for r in d.get("multi_future", [])
                if r["F"] == F and list(r["pattern"]) == [lab] and r["splices"] > 0]
        rows.sort(key=lambda r: r["columns"])
        if not rows:
            continue
        x = [r["columns"] for r in rows]
        y = [r["observed_min"] / max(r["splices"], 1) for r in rows]
        proven = [r["proven"] for r in rows]
        ax.plot(x, y, "-", color=color, label=f"F = {F}, all positions distinct")
        ax.plot([a for a, p in zip(x, proven) if p], [b for b, p in zip(y, proven) if p], "o", color=color)
        ax.plot([a for a, p in zip(x, proven) if not p], [b for b, p in zip(y, proven) if not p], "o",
                color=color, mfc="none")
    ax.set_xlabel("m (positions where the futures disagree)")
    ax.set_ylabel("minimum chimeras / all splices")
    n_rows = len(d.get("multi_future", []))
    n_proven = sum(r["proven"] for r in d.get("multi_future", []))
    ax.set_title(f"(c) F futures: {n_proven} of {n_rows} patterns exact", fontsize=10)
    ax.set_ylim(0, 0.6)
    shown = [int(x) for ln in ax.lines[1:] for x in ln.get_xdata()]
    ax.set_xlim(1.6, max(shown + [3]) + 0.4)  # the data's range (the F = 2 line spans it)
    ax.set_xticks(range(2, max(shown + [3]) + 1))
    ax.plot([], [], "o", color="0.3", label="filled: exact minimum (computer-assisted)")
    ax.plot([], [], "o", color="0.3", mfc="none", label="hollow: least found by search")
    ax.legend(fontsize=8, loc="lower left")
    key.axis("off")
    key.legend(*axes[1].get_legend_handles_labels(), fontsize=9, loc="center", frameon=False)
    fig.tight_layout()
    from mfd_theory.figures import stamp_run

    stamp_run(fig, res)
    return fig


#: one marker per family, so lines stay apart where colours are hard to tell
FAMILY_MARKERS = {"two_futures": "o", "branching": "s", "shifted": "^", "noisy_futures": "D", "zipf_futures": "v"}

#: what the short names in the per-setting labels mean (written on the figure)
ABBREVIATIONS = (
    "F: number of futures (modes of the target)",
    "m: positions where the two futures disagree (two_futures)",
    "b: position where the futures branch (branching, zipf) or one is shifted (shifted)",
    "T: temperature of each future's token distribution (noisy_futures)",
    "noise: mass each position spreads uniformly over the vocabulary",
    "medusa / dflash: zipf_futures confidence per position (Medusa's head accuracies / a constant 0.85)",
    "N: tree budget (nodes); chimera share = chimeras / nodes of the product tree",
)


def _label(row: dict[str, Any]) -> str:
    kw = {k: v for k, v in row["kwargs"].items() if k not in ("L", "V")}
    short = {"temperature": "T", "branch_at": "b", "shift_at": "b", "accuracies": ""}
    return ", ".join(f"{short.get(k, k)}{'=' if short.get(k, k) else ''}{v}" for k, v in kw.items())


def share_figure(res: Any, budget: int = 64):
    """The chimera share at a glance: (a) share vs N, one small panel per family (median over the
    family's settings, band from the first to the third quartile, the paper's 27-33% at N = 64),
    and (c) coverage of the product tree (and of the mixture with the exact modes) relative to
    the oracle vs N. Every setting's own share is in :func:`share_settings_figure` (b)."""
    d = _data(res)
    plt = _plt()
    from mfd_theory.figures import stamp_run

    rows = d["settings"]
    paper = tuple(d.get("paper_range", (0.27, 0.33)))
    budgets = rows[0]["budgets"]
    fams = _families(rows)
    from mfd_theory.figures import MAX_PANELS_PER_ROW, PAGE_WIDTH_IN

    n_rows = -(-len(fams) // MAX_PANELS_PER_ROW)  # the families' panels, three a row
    height = 2.4 * n_rows + 4.2
    fig = plt.figure(figsize=(PAGE_WIDTH_IN, height))
    outer = fig.add_gridspec(2, 1, height_ratios=[2.4 * n_rows, 3.0], hspace=0.3)
    _family_panels(fig, outer[0], rows, fams, budgets, paper)
    _coverage_panel(fig.add_subplot(outer[1], gid="share-coverage"), rows, fams, budgets)
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.75 / height, bottom=0.55 / height)
    stamp_run(fig, res)
    return fig


def share_settings_figure(res: Any, budget: int = 64):
    """(b) every setting's chimera share at N = ``budget`` as a bar with its value written at its
    end (a share of 0 too), against the paper's 27-33%, with the abbreviations of its labels
    defined below it."""
    d = _data(res)
    plt = _plt()
    from mfd_theory.figures import stamp_run

    rows = d["settings"]
    paper = tuple(d.get("paper_range", (0.27, 0.33)))
    fig = plt.figure(figsize=(8.5, 0.25 * len(rows) + 3.2))
    _settings_panel(fig, fig.add_gridspec(1, 1)[0], rows, rows[0]["budgets"], budget, paper)
    fig.subplots_adjust(left=0.33, right=0.97, top=1 - 0.5 / fig.get_figheight(), bottom=2.0 / fig.get_figheight())
    stamp_run(fig, res)
    return fig


def _families(rows) -> list[str]:
    fams = [f for f in FAMILY_COLORS if any(r["family"] == f for r in rows)]
    return fams + sorted({r["family"] for r in rows} - set(fams))


def _family_panels(fig, spec, rows: list[dict[str, Any]], fams: list[str], budgets: list[int],
                   paper: tuple[float, float]) -> None:
    """Panel (a): one small axes per family in ``spec``, side by side on one y scale, with what
    their marks mean written above them (no floating key)."""
    lo, hi = paper
    cols = min(len(fams), 3)
    small = spec.subgridspec(-(-len(fams) // cols), cols, wspace=0.12, hspace=0.75)
    first = None
    for i, fam in enumerate(fams):
        ax = fig.add_subplot(small[i // cols, i % cols], sharex=first, sharey=first, gid="share-family")
        first = first or ax
        color = FAMILY_COLORS.get(fam, "k")
        fr = np.array([r["chimera_share"] for r in rows if r["family"] == fam])  # [settings, budgets]
        q1, med, q3 = np.percentile(fr, [25, 50, 75], axis=0)  # [budgets] each
        ax.fill_between(budgets, q1, q3, color=color, alpha=0.25, lw=0, label="middle half of its settings")
        ax.plot(budgets, med, "-", marker=FAMILY_MARKERS.get(fam, "o"), color=color, ms=3, lw=1.5,
                label="median over its settings")
        ax.errorbar([64], [(lo + hi) / 2], yerr=[[(hi - lo) / 2]], fmt="D", color="k", ms=4, capsize=3,
                    label=f"paper: {100 * lo:.0f}-{100 * hi:.0f}% at N = 64", zorder=5)
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1)
        ax.set_title(f"{fam}\n({len(fr)} settings)", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ax.set_xlabel("N (tree budget)", fontsize=9)
        if i % cols:
            ax.tick_params(labelleft=False)
        else:
            ax.set_ylabel("chimera share", fontsize=9)
    first.annotate("(a) chimera share vs budget, one panel per family; line: median over its settings;\nband: "
                   f"their middle half; black diamond: the paper's {100 * lo:.0f}-{100 * hi:.0f}% at N = 64 "
                   "(each setting at N = 64: chimera_share_settings.png)",
                   (0, 1.3), xycoords="axes fraction", fontsize=9, ha="left", va="bottom")


def _coverage_panel(ax, rows: list[dict[str, Any]], fams: list[str], budgets: list[int]) -> None:
    """Panel (c): per family, the product tree's and the exact mixture's coverage over the oracle's."""
    from mfd_theory.figures import reveal_overlaps

    ratios = {}
    for fam in fams:
        fr = [r for r in rows if r["family"] == fam]
        orc = np.mean([r["cov_oracle"] for r in fr], axis=0)
        ratios[fam] = (np.mean([r["cov_product"] for r in fr], axis=0) / orc,
                       np.mean([r["cov_mixture"] for r in fr], axis=0) / orc)
        ax.plot(budgets, ratios[fam][0], "-", marker=FAMILY_MARKERS.get(fam, "o"), ms=4,
                color=FAMILY_COLORS.get(fam, "k"), label=f"{fam}: product")
    mix = np.array([m for _, m in ratios.values()])
    if np.allclose(mix, mix[0]):  # one line stands for every family (with exact modes: all 1)
        ax.plot(budgets, mix[0], "k:", lw=1.5, label="mixture with exact modes (every family)")
        if np.allclose(mix, 1.0):
            ax.text(0.02, 0.93, "mixture = oracle for every family and N", transform=ax.transAxes, ha="left",
                    va="top", fontsize=8, color="0.25")
    else:
        lines = [ax.plot(budgets, m, ":", color=FAMILY_COLORS.get(fam, "k"), label=f"{fam}: mixture")[0]
                 for fam, (_, m) in ratios.items()]
        reveal_overlaps(ax, lines, note_loc=(0.98, 0.8))
    reveal_overlaps(ax, [ln for ln in ax.lines if ln.get_label().endswith(": product")], note_loc=(0.02, 0.98))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (tree budget)")
    ax.set_ylabel("coverage / oracle coverage")
    ax.set_title("(c) product tree (solid) vs mixture with the exact modes (dotted)", fontsize=10)
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right", ncol=2)


def _settings_panel(fig, spec, rows: list[dict[str, Any]], budgets: list[int], budget: int,
                    paper: tuple[float, float]) -> None:
    """Panel (b): every setting's share at ``budget`` (the middle budget when it was not run) as a
    bar against the paper's range, with the labels' abbreviations below."""
    lo, hi = paper
    ax = fig.add_subplot(spec, gid="share-settings")
    at = budgets.index(budget) if budget in budgets else len(budgets) // 2
    shares = [r["chimera_share"][at] for r in rows]
    ys = np.arange(len(rows))
    ax.barh(ys, shares, color=[FAMILY_COLORS.get(r["family"], "k") for r in rows], alpha=0.8)
    for y, v in zip(ys, shares):  # every value written, a 0 too (a setting with no bar still reads)
        ax.text(v + 0.01, y, f"{100 * v:.0f}%", va="center", ha="left", fontsize=8, color="0.2")
    ax.axvspan(lo, hi, color="k", alpha=0.12)
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{r['family']}  {_label(r)}" for r in rows], fontsize=9)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, 1.08)
    ax.set_xticks(np.linspace(0, 1, 6))
    from matplotlib.ticker import PercentFormatter

    ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))  # as the values on the bars
    ax.set_xlabel(f"chimera share of the product tree at N = {budgets[at]}")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"(b) every setting at N = {budgets[at]}; shaded: the paper's {100 * lo:.0f}-{100 * hi:.0f}%",
                 fontsize=10)
    ax.annotate("Labels:\n" + "\n".join(ABBREVIATIONS), (-0.45, 0), xycoords="axes fraction", xytext=(0, -40),
                textcoords="offset points", fontsize=8, va="top", ha="left", gid="share-abbreviations")
