"""Figures of the theory core: coverage against tree budget."""

from __future__ import annotations


def budget_curve(data: dict, tree: str, key: str) -> tuple[list[int], list[float]]:
    """(budgets, values) of one tree's ``key`` (coverage, dead_share) from a ``core_table`` result's
    long ``by_budget`` rows (or, in a result written before them, ``<key>_by_budget`` lists)."""
    if "by_budget" in data:
        mine = [r for r in data["by_budget"] if r["tree"] == tree]
        return [r["budget"] for r in mine], [r[key] for r in mine]
    return list(data["budgets"]), list(data[f"{key}_by_budget"][tree])


def coverage_vs_budget(result):
    """Expected accepted tokens C(T_N) against N for each tree family of a ``core_table`` result."""
    import matplotlib.pyplot as plt

    data = result.data if hasattr(result, "data") else result["data"]
    cfg = result.config if hasattr(result, "config") else result["config"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    styles = {"oracle": "k--", "mixture": "C2-o", "product": "C0-s"}
    for name, style in styles.items():
        ax.plot(*budget_curve(data, name, "coverage"), style, ms=3, label=name)
        ax2.plot(*budget_curve(data, name, "dead_share"), style, ms=3, label=name)
    ax.axhline(data["chain"]["coverage"], color="C3", lw=1, label=f"chain (N = {cfg['L']})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tree budget N (nodes)")
    ax.set_ylabel("coverage C(T) = E[accepted draft tokens]")
    ax.set_title(f"{cfg['n_futures']}-future target, L = {cfg['L']}, V = {cfg['V']}")
    ax.legend()
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("tree budget N (nodes)")
    ax2.set_ylabel(f"share of nodes with P(s) <= {cfg['eps']:g}")
    # dead is not chimera: the oracle's dead nodes are unlikely continuations of real futures,
    # only the product tree spends nodes on splices (the table's "dead splices" column)
    ax2.set_title("dead share (P(s) <= eps; chimeras only in the product tree)", fontsize=10)
    ax2.set_ylim(0, 1)
    fig.tight_layout()
    return fig
