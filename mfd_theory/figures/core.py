"""Figures of the theory core: coverage against tree budget."""

from __future__ import annotations

from mfd_theory.figures import PAGE_WIDTH_IN, reveal_overlaps, stamp_run

# the oracle is drawn wide and grey underneath, so a tree that reaches it shows as a line on a halo
_STYLES = {
    "oracle": dict(color="0.6", lw=5, alpha=0.6, zorder=1, label="oracle"),
    "mixture": dict(color="C2", marker="o", ms=3, lw=1.5, zorder=3, label="mixture"),
    "product": dict(color="C0", marker="s", ms=3, lw=1.5, zorder=3, label="product"),
}


def budget_curve(data: dict, tree: str, key: str) -> tuple[list[int], list[float]]:
    """(budgets, values) of one tree's ``key`` (coverage, dead_share) from a ``core_table`` result's
    long ``by_budget`` rows (or, in a result written before them, ``<key>_by_budget`` lists)."""
    if "by_budget" in data:
        mine = [r for r in data["by_budget"] if r["tree"] == tree]
        return [r["budget"] for r in mine], [r[key] for r in mine]
    return list(data["budgets"]), list(data[f"{key}_by_budget"][tree])


def coverage_vs_budget(result):
    """Expected accepted tokens C(T_N) against N for each tree family of a ``core_table`` result
    (left), and the share of each tree's nodes the target gives P(s) <= eps (right)."""
    import matplotlib.pyplot as plt

    data = result.data if hasattr(result, "data") else result["data"]
    cfg = result.config if hasattr(result, "config") else result["config"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(PAGE_WIDTH_IN, 4))
    for a, key in ((ax, "coverage"), (ax2, "dead_share")):
        lines = [a.plot(*budget_curve(data, name, key), **style)[0] for name, style in _STYLES.items()]
        reveal_overlaps(a, lines, note_loc=(0.98, 0.02) if a is ax else (0.02, 0.98))
        a.set_xscale("log", base=2)
        a.set_xlabel("tree budget N (nodes)")
    ax.axhline(data["chain"]["coverage"], color="C3", lw=1, ls=":", label=f"chain (N = {cfg['L']})")
    ax.set_ylabel("coverage C(T) = E[accepted draft tokens]")
    ax.set_title(f"coverage: {cfg['n_futures']}-future target, L = {cfg['L']}, V = {cfg['V']}", fontsize=10)
    ax2.set_ylabel(f"share of nodes with P(s) <= {cfg['eps']:g}")
    # dead is not chimera: the oracle's dead nodes are unlikely continuations of real futures,
    # only the product tree spends nodes on splices (the table's "dead splices" column)
    ax2.set_title("dead share (P(s) <= eps; chimeras only in the product tree)", fontsize=10)
    ax2.set_ylim(0, 1)
    # one legend for both panels, above them: it covers no curve (the figure also heads the README)
    handles, labels = ax.get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 1.0), ncol=len(labels), fontsize=9,
               frameon=False)
    stamp_run(fig, result)
    return fig
