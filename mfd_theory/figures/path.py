"""Figures for the path_gain experiment: coverage vs budget of product, mixture and path-dependent
trees, and the best predicted speedup of each vs the path drafter's per-depth step cost.

Every function takes the experiment's :class:`~mfd_theory.results.Result` (or its dict) and
returns a matplotlib Figure; curves are means over a summary row's cells (one family, one F or m).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mfd_theory.figures import PAGE_WIDTH_IN, panel_grid, stamp_run

__all__ = ["path_coverage_vs_budget", "path_speedup_vs_step_cost"]

_COLORS = {"product": "tab:blue", "mixture": "tab:red", "path": "tab:green", "oracle": "black"}


def _parts(result) -> tuple[dict[str, Any], dict[str, Any]]:
    if hasattr(result, "data"):
        return result.config, result.data
    return result["config"], result["data"]


def _rows(config, data, groups):
    """Summary rows to draw: every family's row with the most futures (or the given labels)."""
    rows = data["summary"]
    if groups:
        return [e for e in rows if (e["family"], e["group"]) in set(map(tuple, groups))]
    last: dict[str, dict] = {}
    for e in rows:
        last[e["family"]] = e  # rows come in the sweep's order, F / m increasing
    return list(last.values())


def _axes(n, height=3.0):
    """``n`` panels in rows of at most three, the figure at most the page's width."""
    return panel_grid(n, PAGE_WIDTH_IN / 3, height)


def _groups(rows) -> str:
    """The summary rows drawn, for the footer: ``two_futures m=8, branching F=8, ...``."""
    return ", ".join(f"{e['family']} {e['group']}" for e in rows)


def path_coverage_vs_budget(result, groups=None):
    """Coverage C(T_N) vs N: product, mixture (largest K), path trees per memory r (full depth),
    oracle. One panel per family (its largest F, or the (family, group) pairs in ``groups``)."""
    from mfd_theory.layouts import group_label

    config, data = _parts(result)
    rows = _rows(config, data, groups)
    K = max(config["Ks"])
    full = min(max(config["depth_caps"]), config["L"])
    mems = list(config["memories"])
    import matplotlib.pyplot as plt

    fig, axes = _axes(len(rows), height=3.1)
    shades = plt.cm.Greens(np.linspace(0.45, 0.95, len(mems)))
    for ax, e in zip(axes, rows):
        cells = [c for c in data["cells"] if c["family"] == e["family"] and group_label(c) == e["group"]]
        grid = np.asarray(cells[0]["coverage_curves"]["n"])

        def mean(name):
            return np.mean([c["coverage_curves"][name] for c in cells], axis=0)

        orc = mean("oracle")
        # the oracle wide and grey underneath: a curve that reaches it shows as a line on a halo
        ax.plot(grid, orc, color="0.6", lw=5, alpha=0.6, zorder=1, label="oracle")
        ax.plot(grid, mean("product"), color=_COLORS["product"], label="product (marginals)")
        on_oracle = []
        curves = [(f"mixture K={K}", f"mixture K={K} (fitted)", _COLORS["mixture"], "K")]
        curves += [(f"path r={r} D={full}", f"path, memory r={r}", g, f"r={r}") for r, g in zip(mems, shades)]
        for key, label, color, short in curves:
            y = mean(key)
            ax.plot(grid, y, color=color, lw=1.2, label=label)
            if np.allclose(y, orc, rtol=5e-3):
                on_oracle.append("mixture" if short == "K" else short)
        ax.set_xscale("log", base=2)
        # which curves reach the oracle: under the title, above the axes, where it covers no curve
        rs = [x[2:] for x in on_oracle if x.startswith("r=")]  # "r=1,2,4": short enough for a third of the page
        named = [x for x in on_oracle if not x.startswith("r=")] + ([f"r={','.join(rs)}"] if rs else [])
        reached = "on the oracle (within 0.5%): " + (", ".join(named) if named else "none")
        ax.set_title(f"{e['family']} ({e['group']})\n{reached}", fontsize=8)
        ax.set_xlabel("budget N", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[::3]:  # the first panel of each row
        ax.set_ylabel("coverage (expected accepted)", fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    ncol = min(len(labels), 4)
    fig.tight_layout(rect=(0, 0, 1, 1 - (0.2 + 0.2 * -(-len(labels) // ncol)) / fig.get_figheight()))
    fig.legend(handles, labels, loc="upper center", ncol=ncol, fontsize=8, bbox_to_anchor=(0.5, 1.0), frameon=False)
    n = grid if len(rows) else []
    stamp_run(fig, result, f"K {K} (mixture) and K 1 (product), path memory r {','.join(map(str, mems))} at depth "
                           f"{full}, N {int(n[0])}..{int(n[-1])}; {_groups(rows)}" if len(n) else None)
    return fig


def path_speedup_vs_step_cost(result, profile: str | None = None, groups=None):
    """Best predicted speedup vs the path drafter's cost per extra depth (in block passes): the
    block drafters pay one pass whatever the depth (flat lines), the path tree pays per depth."""
    config, data = _parts(result)
    profile = profile or config["profiles"][0]
    rows = _rows(config, data, groups)
    K = max(config["Ks"])
    assumed = data.get("profiles", {}).get(profile, {}).get("assumption", True)
    fig, axes = _axes(len(rows), height=3.1)
    for ax, e in zip(axes, rows):
        sp = e["speed"][profile]
        c = np.array([x["step_cost"] for x in sp])
        for key, label in (("product", "product"), ("mixture", f"mixture K={K}"), ("path", "path (best r, depth)")):
            ax.plot(c, [x["speedup"][key] for x in sp], marker="o", ms=3, color=_COLORS[key], label=label)
        ax.set_xscale("log")
        ax.set_title(f"{e['family']} ({e['group']})", fontsize=9)
        ax.set_xlabel("step cost per extra depth\n(block passes)", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[::3]:
        ax.set_ylabel(f"best predicted speedup\n({profile}{', ASSUMED' if assumed else ''})", fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()))
    fig.legend(handles, labels, loc="upper center", ncol=3, fontsize=8, bbox_to_anchor=(0.5, 1.0), frameon=False)
    costs = sorted({x["step_cost"] for e in rows for x in e["speed"][profile]})
    stamp_run(fig, result, f"step cost {','.join(f'{c:g}' for c in costs)}; each tree at its best N <= "
                           f"{max(config['budgets'])} (path: best r and depth, mixture: K {K}), "
                           f"profile {profile}; {_groups(rows)}")
    return fig
