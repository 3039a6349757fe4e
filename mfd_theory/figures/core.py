"""Figures of the theory core: coverage against tree budget."""

from __future__ import annotations


def coverage_vs_budget(result):
    """Expected accepted tokens C(T_N) against N for each tree family of a ``core_table`` result."""
    import matplotlib.pyplot as plt

    data = result.data if hasattr(result, "data") else result["data"]
    cfg = result.config if hasattr(result, "config") else result["config"]
    budgets = data["budgets"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    styles = {"oracle": "k--", "mixture": "C2-o", "product": "C0-s"}
    for name, style in styles.items():
        ax.plot(budgets, data["coverage_by_budget"][name], style, ms=3, label=name)
        ax2.plot(budgets, data["dead_share_by_budget"][name], style, ms=3, label=name)
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
