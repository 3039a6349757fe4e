"""Figures for the mixture_gain experiment: coverage and predicted speedup vs budget, the fraction
of the oracle's coverage vs the number of modes K, and the predicted MFD gain beside the paper's.

Every function takes the experiment's :class:`~mfd_theory.results.Result` (or its dict) and
returns a matplotlib Figure; curves are means over the cells of a family with F >= 2 futures.
"""

from __future__ import annotations

from typing import Any

import numpy as np

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
    "oracle": dict(color="black", ls="--", label="oracle"),
}


def _parts(result) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config, data) with every cell widened back to per-drafter arrays over the budgets
    (:func:`~mfd_theory.experiments.mixture_gain.widen_cell`; the file stores them in long rows)."""
    from mfd_theory.experiments.mixture_gain import widen_cell

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


def _axes(n, height=3.0):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, height), squeeze=False)
    return fig, axes[0]


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
    fig, axes = _axes(len(families))
    for ax, fam in zip(axes, families):
        cells = _multi(data, fam)
        if not cells:
            ax.set_visible(False)
            continue
        grid, prod, mix, orc = _mean_curves(cells, K)
        ax.plot(grid, transform(mix, grid), color=_STYLE["mixture"]["color"],
                label=_STYLE["mixture"]["label"].format(K=K))
        ax.plot(grid, transform(prod, grid), **_STYLE["product"])
        ax.plot(grid, transform(orc, grid), **_STYLE["oracle"])  # last, dashed: visible where the mixture meets it
        ax.set_xscale("log", base=2)
        ax.set_title(f"{fam} (F>=2, {len(cells)} targets)" if with_counts else fam, fontsize=9)
        ax.set_xlabel("budget N (nodes)")
    axes[0].set_ylabel(ylabel)
    axes[0].legend(fontsize=7, loc="lower right")
    return fig


def mixture_coverage_vs_budget(result, families=None):
    """Coverage C(T_N) (expected accepted tokens) vs budget N, one panel per family."""
    config, data = _parts(result)
    fig = _curves_by_family(config, data, families, lambda c, n: c, "coverage = E[accepted tokens]", True)
    fig.tight_layout()
    return fig


def mixture_speedup_vs_budget(result, profile: str | None = None, families=None):
    """Predicted speedup (1 + C(T_N)) t_target / (t_draft + t_verify(N)) vs N, per family."""
    from mfd_theory.speedup import LatencyProfile, speedup

    config, data = _parts(result)
    profile = profile or config["profiles"][0]
    prof = LatencyProfile.from_dict(data["profiles"][profile])
    fig = _curves_by_family(config, data, families, lambda c, n: speedup(c, n, prof), "predicted speedup", False)
    fig.suptitle(f"latency profile: {prof.label}", fontsize=9)
    fig.tight_layout()
    return fig


def mixture_frac_vs_K(result, budget: int = 64, families=None):
    """Fraction of the oracle's coverage at one budget vs K, one line per F (misspecification:
    K < F, K = F, K > F, and F = 1 where K > 1 must not lose to the product)."""
    config, data = _parts(result)
    families = list(families or config["families"])
    i = list(config["budgets"]).index(budget)
    Ks = list(config["Ks"])
    fig, axes = _axes(len(families))
    for ax, fam in zip(axes, families):
        cells = [c for c in data["cells"] if c["family"] == fam]
        keys = sorted({(c["F"], c["m"] or 0) for c in cells})
        for F, m in keys:
            sel = [c for c in cells if c["F"] == F and (c["m"] or 0) == m]
            fr = [np.mean([_pick(c, K)["frac_oracle"][i] for c in sel]) for K in Ks]
            ax.plot(Ks, fr, marker="o", label=f"F={F}" + (f", m={m}" if m else ""))
        ax.set_xscale("log", base=2)
        ax.set_xticks(Ks, [str(k) for k in Ks])
        ax.set_title(fam, fontsize=9)
        ax.set_xlabel("drafter modes K")
        ax.legend(fontsize=6)
    axes[0].set_ylabel(f"C(T) / C(oracle) at N={budget}")
    fig.tight_layout()
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
    width = 0.8 / len(variants)
    for j, (key, label) in enumerate(variants):
        vals = [100 * data["summary"][f]["multi"].get(key, {}).get("predicted_gain", {}).get(profile, np.nan)
                for f in fams]
        ax.bar(np.arange(len(fams)) + (j - 1) * width, vals, width, label=label)
    ax.axhspan(100 * PAPER_GAIN[0], 100 * PAPER_GAIN[1], color="gold", alpha=0.4,
               label="paper: +5-8% (real Qwen3 targets)")
    ax.set_yscale("symlog", linthresh=10)
    # symlog's default locator leaves about three ticks; name the levels a reader compares with
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ymax = max([v for j in range(len(variants)) for v in ax.containers[j].datavalues if np.isfinite(v)] + [10])
    ax.set_ylim(min(0, ax.get_ylim()[0]), ymax * 1.3)
    ticks = [t for t in (-10, -5, 0, 2, 5, 8, 10, 20, 50, 100, 200, 500) if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:+g}%" if v else "0"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.grid(axis="y", alpha=0.3)
    ax.set_xticks(np.arange(len(fams)), fams, rotation=20, fontsize=8)
    ax.set_ylabel("predicted speed gain over product")
    prof_label = data["profiles"][profile]
    ax.set_title(f"profile {profile} ({'ASSUMED' if prof_label['assumption'] else 'measured'})", fontsize=9)
    # outside the axes, so no bar is hidden
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.set_size_inches(8.5, 3.4)
    fig.tight_layout()
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
        return fig
    c = [r["confidence"] for r in rows]
    gain = [100 * r["predicted_gain"][profile] for r in rows]
    ax.plot(c, gain, marker="o", color=_STYLE["mixture"]["color"], label="fitted mixture vs product")
    for x, y, r in zip(c, gain, rows):
        ax.annotate(f"{r['product_best'][profile]['tau']:.1f}", (x, y), fontsize=7, ha="right",
                    textcoords="offset points", xytext=(-4, 4))
    ax.plot([], [], " ", label="numbers: tau of the product tree\nat its best budget")
    ax.margins(x=0.12, y=0.15)  # room for the first and last numbers
    ax.axhspan(100 * PAPER_GAIN[0], 100 * PAPER_GAIN[1], color="gold", alpha=0.4,
               label="paper: +5-8% (real Qwen3 targets)")
    ax.set_xlabel("per-position confidence c of each future")
    ax.set_ylabel("predicted speed gain (%)")
    assumed = data["profiles"][profile]["assumption"]
    ax.set_title(f"zipf_futures, F={','.join(map(str, config['confidence_Fs']))}; "
                 f"profile {profile} ({'ASSUMED' if assumed else 'measured'})", fontsize=8)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig
