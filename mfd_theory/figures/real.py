"""Figures of the real targets: what trees could cover on a real target's own distribution,
against the tree budget (``mfd real``), and the trained drafters' gains with their intervals
(``mfd real-drafters``)."""

from __future__ import annotations

from mfd_theory.figures import PAGE_WIDTH_IN, panel_grid, reveal_overlaps, stamp_run

__all__ = ["real_ceiling_figure", "real_drafters_gains_figure"]


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
    fig, axes = panel_grid(len(panels), 3.2, 3.6)  # three a row at most
    for ax, (ds, tk, tab) in zip(axes, panels):
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
    for ax in axes[::3]:  # the first panel of each row
        ax.set_ylabel("expected accepted draft tokens\nper round")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.suptitle(f"{name}: what a tree over its own distribution covers (block L = {cfg['block_length']})",
                 fontsize=10, y=0.99)
    rows = -(-len(panels) // 3)
    fig.tight_layout(rect=(0, 0.35 / fig.get_figheight(), 1, 1 - 0.2 / rows))
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=len(labels), fontsize=8,
               frameon=False)
    stamp_run(fig, result)
    return fig


#: the questions the gains figure draws, in its order, with their colours
_GAIN_QUESTIONS = {"against_product": ("against the product drafter's faster method", "C0"),
                   "same_n": ("against the product drafter's DDTree of the same N", "C3")}


def real_drafters_gains_figure(result):
    """``mfd real-drafters``'s replicated verdicts as a forest plot: per compared cell (data set,
    temperature, MFD tree) the tau gain (left) and the speed gain (right) over the product
    drafter, with their intervals over the seeds (Bonferroni-adjusted as in the report), for the
    questions against the product drafter's faster method and against its DDTree tree of the same
    N; the shaded band is the margin of equivalence."""
    import matplotlib.pyplot as plt

    data = result.data if hasattr(result, "data") else result["data"]
    verdicts = [v for v in data.get("verdicts") or [] if v.get("question") in _GAIN_QUESTIONS
                and v.get("tau_cmp") and v.get("speed_cmp")]
    if not verdicts:
        raise ValueError("result: holds no replicated verdict against the product drafter (run mfd real-drafters "
                         "with 2 seeds or more)")
    verdicts.sort(key=lambda v: (list(_GAIN_QUESTIONS).index(v["question"]), v["dataset"], v["temperature"],
                                 v["a"].get("scorer") or ""))
    labels = []
    for v in verdicts:
        a = v["a"]
        tree = {"best_mode": "best-mode", "mixture": "mixture"}.get(a.get("scorer"), a["method"])
        labels.append(f"{v['dataset']}, T = {v['temperature']:g}: {a['drafter']} {tree} N = {a['budget']}")
    ys = list(range(len(verdicts)))[::-1]
    fig, axes = plt.subplots(1, 2, figsize=(PAGE_WIDTH_IN, 0.42 * len(verdicts) + 2.1), sharey=True, squeeze=False)
    for ax, key, title in zip(axes[0], ("tau_cmp", "speed_cmp"), ("tau gain (accepted tokens per round)",
                                                                  "speed gain (tokens per second)")):
        margin = verdicts[0][key]["margin"]
        ax.axvspan(-100 * margin, 100 * margin, color="0.88", zorder=0)
        ax.axvline(0, color="0.4", lw=0.8, zorder=1)
        for q, (words, colour) in _GAIN_QUESTIONS.items():
            pts = [(y, v[key]) for y, v in zip(ys, verdicts) if v["question"] == q]
            if not pts:
                continue
            g = [100 * c["gain"] for _, c in pts]
            err = [[100 * (c["gain"] - c["lo"]) for _, c in pts], [100 * (c["hi"] - c["gain"]) for _, c in pts]]
            ax.errorbar(g, [y for y, _ in pts], xerr=err, fmt="o", ms=4, capsize=3, color=colour, zorder=3,
                        label=words)
        ax.set_xlabel("% over the product drafter")
        ax.set_title(title, fontsize=9)
    axes[0][0].set_yticks(ys, labels, fontsize=8)
    first = verdicts[0]["tau_cmp"]
    fig.suptitle(f"{data.get('target')}: trained MFD drafters against the product drafter,\n"
                 f"{first['n_runs']} seeds x {first['n_prompts']} prompts (intervals at level {first['level']:.3f}; "
                 f"band: ±{100 * first['margin']:.0f}%)", fontsize=9, y=0.995)
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.08, 1, 0.96))
    fig.legend(handles, names, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=len(names), fontsize=8,
               frameon=False)
    stamp_run(fig, result)
    return fig
