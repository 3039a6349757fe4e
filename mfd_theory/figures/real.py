"""Figures of the real targets (``mfd real``): what trees could cover on a real target's own
distribution, against the tree budget."""

from __future__ import annotations

from mfd_theory.figures import reveal_overlaps, stamp_run

__all__ = ["real_ceiling_figure"]


def _trees(tab: dict) -> list[tuple[str, dict]]:
    """The curves of one ceiling table: the product tree, the mixture trees (mixture scorer) of each
    fitted K, and the oracle, each with its style."""
    mix = sorted((t for t in tab["trees"] if t.startswith("mixture K=")), key=lambda t: int(t.split("=")[1]))
    out = [("product", dict(color="C0", marker="s", ms=3, lw=1.5, zorder=3, label="product tree (K = 1)"))]
    for i, t in enumerate(mix):
        out.append((t, dict(color=f"C{2 + i}", marker="o", ms=3, lw=1.2, zorder=3, label=f"mixture tree K = {t.split('=')[1]}")))
    out.append(("oracle", dict(color="0.6", lw=5, alpha=0.6, zorder=1, label="oracle (best tree of N nodes)")))
    return out


def real_ceiling_figure(result, target: str | None = None):
    """Per data set and temperature of ``mfd real``'s ceiling on ``target`` (the run's first by
    default): the expected accepted draft tokens per round of the product tree of the target's own
    marginals, of the fitted K-mode mixtures' trees and of the oracle tree, against the budget N
    (mean over prompts, bars: one standard error), with the product tree's dead share at the run's
    ``dead_at`` in each title."""
    import matplotlib.pyplot as plt

    data = result.data if hasattr(result, "data") else result["data"]
    cfg = result.config if hasattr(result, "config") else result["config"]
    targets = data.get("targets") or {}
    if not targets:
        raise ValueError("result: holds no target (run mfd real with the ceiling stage)")
    name = target or next(iter(targets))
    if name not in targets or not targets[name].get("ceiling"):
        raise ValueError(f"target: {name} has no ceiling in this result (targets: {', '.join(targets)})")
    pooled = targets[name]["ceiling"]
    panels = [(ds, tk, tab) for ds, by_t in pooled.items() for tk, tab in by_t.items()]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 3.6), squeeze=False, sharey=False)
    for ax, (ds, tk, tab) in zip(axes[0], panels):
        budgets = sorted(int(n) for n in tab["by_budget"])
        lines = []
        for tree, style in _trees(tab):
            cov = [tab["by_budget"][str(n)]["coverage"].get(tree) for n in budgets]
            if any(c is None for c in cov):
                continue
            means = [c[0] for c in cov]
            errs = [c[1] or 0.0 for c in cov]
            line = ax.errorbar(budgets, means, yerr=errs, capsize=2, **style)
            lines.append(line.lines[0])
        reveal_overlaps(ax, lines, note_loc=(0.98, 0.02))
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [str(n) for n in budgets])
        ax.set_xlabel("tree budget N (nodes)")
        dead = tab["dead"]["dead_share"][0]
        ax.set_title(f"{ds}, T = {tk} ({tab['n_prompts']} prompts)\nproduct tree dead at N = {cfg['dead_at']}: "
                     f"{100 * (dead or 0):.0f}%", fontsize=9)
    axes[0][0].set_ylabel("expected accepted draft tokens per round")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.suptitle(f"{name}: what a tree over its own distribution covers (block L = {cfg['block_length']})",
                 fontsize=10, y=0.99)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=len(labels), fontsize=8,
               frameon=False)
    stamp_run(fig, result)
    return fig
