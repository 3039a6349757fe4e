"""Figures for the mixture_gain experiment: coverage and predicted speedup vs budget, the fraction
of the oracle's coverage vs the number of modes K, and the predicted MFD gain beside the paper's.

Every function takes the experiment's :class:`~mfd_theory.results.Result` (or its dict) and
returns a matplotlib Figure; curves are means over the cells of a family with F >= 2 futures.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mfd_theory.figures import PAGE_WIDTH_IN, panel_grid, reveal_overlaps, stamp_run

__all__ = [
    "PAPER_GAIN",
    "mixture_coverage_vs_budget",
    "mixture_frac_vs_K",
    "mixture_gain_bars",
    "mixture_gain_vs_confidence",
    "mixture_speedup_vs_budget",
]

#: MFD's reported gain over the best single-mode tree trained identically (docs/background.md).
PAPER_GAIN = (0.05, 0.08)

_STYLE = {
    "product": dict(color="tab:blue", label="product drafter (K=1, marginals)"),
    "mixture": dict(color="tab:red", label="fitted mixture (K={K})"),
    # wide and grey underneath: a curve that reaches the oracle shows as a line on a halo
    "oracle": dict(color="0.6", lw=5, alpha=0.6, zorder=1, label="oracle"),
}

#: relative gap below which the mixture's curve is said to coincide with the oracle's
_COINCIDE = 5e-3
#: percentage points within which another fit's predicted gain is soft EM's (not drawn again)
_SAME_POINTS = 1.0


def _parts(result) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config, data) with every cell widened back to per-drafter arrays over the budgets
    (:func:`~mfd_theory.layouts.widen_cell`; the file stores them in long rows)."""
    from mfd_theory.layouts import widen_cell

    config, data = (result.config, result.data) if hasattr(result, "data") else (result["config"], result["data"])
    if "cells" in data:
        data = {**data, "cells": [widen_cell(c) for c in data["cells"]]}
    return config, data


def _pick(cell, K, assignment="soft", source="samples"):
    for d in cell["drafters"]:
        if d["K"] == K and d["assignment"] == assignment and d["source"] == source:
            return d
    return None


def _multi(data, family):
    return [c for c in data["cells"] if c["family"] == family and c["F"] >= 2]


def _headline_K(data) -> int:
    fam = next(iter(data["summary"].values()))
    return int(fam.get("multi", fam.get("single"))["K"])


def _axes(n, height=3.0, sharey=False):
    """``n`` panels in rows of at most three, the figure at most the page's width."""
    return panel_grid(n, PAGE_WIDTH_IN / 3, height, sharey=sharey)


def _values(values, name: str) -> str:
    """``N 16..1024`` for a range of budgets, ``K 1,2,4`` for a few values: what a footer names."""
    values = [int(v) for v in values]
    if len(values) > 4:
        return f"{name} {values[0]}..{values[-1]}"
    return f"{name} {','.join(map(str, values))}"


def _best_n(config) -> str:
    """The budgets a best-budget figure chose among (every N up to the sweep's largest)."""
    return f"N <= {max(config['budgets'])}" if config.get("budgets") else "N"


def _mean_curves(cells, K):
    grid = np.asarray(cells[0]["curve_n"])
    prod = np.mean([_pick(c, 1)["curve"] for c in cells], axis=0)
    mix = np.mean([_pick(c, K)["curve"] for c in cells], axis=0)
    orc = np.mean([c["oracle"]["curve"] for c in cells], axis=0)
    return grid, prod, mix, orc


def _curves_by_family(config, data, families, transform, ylabel, with_counts):
    """One panel per family: product, mixture and oracle curves of ``transform(coverage, N)``."""
    families = list(families or config["families"])
    K = _headline_K(data)
    fig, axes = _axes(len(families), height=2.9)
    grid = []
    for ax, fam in zip(axes, families):
        cells = _multi(data, fam)
        if not cells:
            ax.set_visible(False)
            continue
        grid, prod, mix, orc = _mean_curves(cells, K)
        lo = ax.plot(grid, transform(orc, grid), **_STYLE["oracle"])[0]
        lm = ax.plot(grid, transform(mix, grid), color=_STYLE["mixture"]["color"], lw=1.5, zorder=3,
                     label=_STYLE["mixture"]["label"].format(K=K))[0]
        ax.plot(grid, transform(prod, grid), lw=1.5, zorder=2, **_STYLE["product"])
        notes = reveal_overlaps(ax, [lo, lm], tol=_COINCIDE, note_loc=(0.02, 0.98))
        if notes:  # the note names the lines; the panel's corner is small
            ax.texts[-1].set_text(f"mixture = oracle\n(within {100 * _COINCIDE:g}%)")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{fam}\n(F>=2, mean of {len(cells)} targets)" if with_counts else fam, fontsize=9)
        ax.set_xlabel("budget N (nodes)", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[::3]:  # the first panel of each row
        ax.set_ylabel(ylabel, fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=3, fontsize=8, bbox_to_anchor=(0.5, 1.0), frameon=False)
    drawn = f"K 1 (product) and K {K} (fitted mixture, soft EM) vs the oracle, F >= 2 cells, {_values(grid, 'N')}"
    return fig, drawn


def mixture_coverage_vs_budget(result, families=None):
    """Coverage C(T_N) (expected accepted tokens) vs budget N, one panel per family."""
    config, data = _parts(result)
    fig, drawn = _curves_by_family(config, data, families, lambda c, n: c, "coverage = E[accepted tokens]", True)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    stamp_run(fig, result, drawn)
    return fig


def mixture_speedup_vs_budget(result, profile: str | None = None, families=None):
    """Predicted speedup (1 + C(T_N)) t_target / (t_draft + t_verify(N)) vs N, per family."""
    from mfd_theory.speedup import LatencyProfile, speedup

    config, data = _parts(result)
    profile = profile or config["profiles"][0]
    prof = LatencyProfile.from_dict(data["profiles"][profile])
    fig, drawn = _curves_by_family(config, data, families, lambda c, n: speedup(c, n, prof), "predicted speedup",
                                   False)
    fig.text(0.005, 1.0, f"latency profile: {prof.label}", fontsize=9, ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    stamp_run(fig, result, f"{drawn}, profile {profile}")
    return fig


def mixture_frac_vs_K(result, budget: int = 64, families=None):
    """Fraction of the oracle's coverage at one budget vs K, one line per F (misspecification:
    K < F, K = F, K > F, and F = 1 where K > 1 must not lose to the product)."""
    config, data = _parts(result)
    families = list(families or config["families"])
    i = list(config["budgets"]).index(budget)
    Ks = list(config["Ks"])
    fig, axes = _axes(len(families), height=3.1, sharey=True)  # one y range: the panels are compared
    for ax, fam in zip(axes, families):
        cells = [c for c in data["cells"] if c["family"] == fam]
        keys = sorted({(c["F"], c["m"] or 0) for c in cells})
        lines = []
        for F, m in keys:
            sel = [c for c in cells if c["F"] == F and (c["m"] or 0) == m]
            fr = [np.mean([_pick(c, K)["frac_oracle"][i] for c in sel]) for K in Ks]
            lines += ax.plot(Ks, fr, marker="o", label=f"F={F}" + (f", m={m}" if m else ""))
        reveal_overlaps(ax, lines, tol=1e-3, note_loc=(0.98, 0.02))
        ax.set_xscale("log", base=2)
        ax.set_xticks(Ks, [str(k) for k in Ks])
        ax.set_title(fam, fontsize=10)
        ax.set_xlabel("drafter modes K", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="center right")
    for ax in axes[::3]:
        ax.set_ylabel(f"C(T) / C(oracle) at N={budget}", fontsize=9)
    fig.tight_layout()
    stamp_run(fig, result, f"{_values(Ks, 'K')} (fitted by soft EM; K 1: the product), every F, N {budget}")
    return fig


def mixture_gain_bars(result, profile: str | None = None):
    """Predicted speed gain of the best-budget mixture tree over the best-budget product tree,
    per family (soft EM, winner-take-all, exact fit), beside the paper's +5-8%."""
    config, data = _parts(result)
    profile = profile or config["profiles"][0]
    fams = [f for f in config["families"] if "multi" in data["summary"][f]]
    fig, (ax,) = _axes(1, height=3.2)
    fig.set_size_inches(6.5, 3.2)
    variants = [("mixture", "soft EM"), ("mixture_hard", "winner-take-all"), ("mixture_exact", "exact fit")]

    def gains(key):
        return [100 * data["summary"][f]["multi"].get(key, {}).get("predicted_gain", {}).get(profile, np.nan)
                for f in fams]

    # a fit that gives soft EM's gain (within a point) at every family is named, not drawn again
    soft = np.array(gains("mixture"), float)
    same = [label for key, label in variants[1:]
            if np.isfinite(gains(key)).any() and np.allclose(gains(key), soft, atol=_SAME_POINTS, equal_nan=True)]
    drawn = [(k, lab) for k, lab in variants if lab not in same and np.isfinite(gains(k)).any()]
    width = 0.8 / len(drawn)
    for j, (key, label) in enumerate(drawn):
        ax.bar(np.arange(len(fams)) + (j - (len(drawn) - 1) / 2) * width, gains(key), width, label=label)
    ax.axhspan(100 * PAPER_GAIN[0], 100 * PAPER_GAIN[1], color="gold", alpha=0.5, zorder=0,
               label="paper: +5-8% (real Qwen3 targets)")
    # a linear axis from 0, so bar lengths compare; each bar's value is written on it
    from matplotlib.ticker import FuncFormatter

    vals_all = [v for c in ax.containers for v in c.datavalues if np.isfinite(v)]
    for c in ax.containers:
        ax.bar_label(c, labels=[f"{v:+.1f}%" if np.isfinite(v) else "n/a" for v in c.datavalues], fontsize=8,
                     padding=2, rotation=90)
    top = max(vals_all + [100 * PAPER_GAIN[1]])
    bottom = min(vals_all + [0.0])
    ax.set_ylim(bottom * 1.3 if bottom < 0 else 0, top * 1.3)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:+g}%" if v else "0"))
    ax.axhline(0, color="k", lw=0.8)
    ax.grid(axis="y", alpha=0.3)
    ax.set_xticks(np.arange(len(fams)), fams, rotation=20, fontsize=8)
    ax.set_ylabel("predicted speed gain over product")
    ax.set_xlabel("family (F >= 2 cells; best budget of each tree)", fontsize=8)
    prof_label = data["profiles"][profile]
    ax.set_title(f"profile {profile} ({'ASSUMED' if prof_label['assumption'] else 'measured'})", fontsize=9)
    if same:
        ax.plot([], [], " ", label=f"{' and '.join(same)}: within {_SAME_POINTS:g} point\nof soft EM everywhere "
                                     "(not drawn)")
    # outside the axes, so no bar is hidden
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.set_size_inches(8.5, 3.6)
    fig.tight_layout()
    K = next((data["summary"][f]["multi"]["K"] for f in fams if "K" in data["summary"][f]["multi"]), None)
    fits = f"K {K} (each fit)" if K is not None else "the fitted mixtures"
    stamp_run(fig, result, f"K 1 (product) vs {fits}, F >= 2 cells, each tree at its best "
                           f"{_best_n(config)}, profile {profile}")
    return fig


def mixture_gain_vs_confidence(result, profile: str | None = None):
    """Predicted gain (K-mode mixture over product, best budget each) vs the target's per-position
    confidence c (zipf_futures, constant c), beside the paper's +5-8%; the product tree's tau
    (tokens per step at its best budget) is written at each point."""
    config, data = _parts(result)
    profile = profile or config["profiles"][0]
    rows = data.get("confidence_summary") or []
    fig, (ax,) = _axes(1, height=3.2)
    fig.set_size_inches(5.4, 3.6)
    if not rows:
        ax.text(0.5, 0.5, "no confidence sweep in this result", ha="center", transform=ax.transAxes)
        stamp_run(fig, result)
        return fig
    c = [r["confidence"] for r in rows]
    gain = [100 * r["predicted_gain"][profile] for r in rows]
    ax.plot(c, gain, marker="o", color=_STYLE["mixture"]["color"], label="fitted mixture vs product")
    for x, y, r in zip(c, gain, rows):
        ax.annotate(f"{r['product_best'][profile]['tau']:.1f}", (x, y), fontsize=8, ha="right",
                    textcoords="offset points", xytext=(-4, 4))
    ax.plot([], [], " ", label="numbers: tau of the product tree\nat its best budget")
    ax.margins(x=0.12, y=0.15)  # room for the first and last numbers
    ax.axhspan(100 * PAPER_GAIN[0], 100 * PAPER_GAIN[1], color="gold", alpha=0.4,
               label="paper: +5-8% (real Qwen3 targets)")
    ax.set_xlabel("per-position confidence c of each future")
    ax.set_ylabel("predicted speed gain (%)")
    assumed = data["profiles"][profile]["assumption"]
    n = rows[0].get("n_cells")
    ax.set_title(f"zipf_futures: each point the mean over F = {', '.join(map(str, config['confidence_Fs']))} and "
                 f"the seeds{f' ({n} targets)' if n else ''}\nprofile {profile} ({'ASSUMED' if assumed else 'measured'})",
                 fontsize=8)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    stamp_run(fig, result, f"zipf_futures confidence sweep, c {','.join(f'{v:g}' for v in c)}, "
                           f"F {','.join(map(str, config['confidence_Fs']))}, K 1 (product) vs K {_headline_K(data)}, "
                           f"each tree at its best {_best_n(config)}, profile {profile}")
    return fig
