"""The ceiling's tables as Markdown: what ``mfd ceiling`` prints, the ceiling part of the natural
block, and the table of how much of the ceiling trained drafters reach
(:func:`mfd_theory.ceiling_stats.ceiling_reach`'s rows)."""

from __future__ import annotations

from mfd_theory.report._text import mean_se
from mfd_theory.formatting import comparison_text

__all__ = ["ceiling_lines", "reach_lines", "tree_label"]


def tree_label(name: str) -> str:
    """``mixture K=2`` -> ``K = 2``; ``product``, ``oracle`` unchanged (one scorer: no need to name it)."""
    if name.startswith("mixture K="):
        return f"K = {name.split('=')[1]}"
    return name.replace("K=", "K = ")


def _cells(pooled: dict):
    for ds, by_t in pooled.items():
        for tk, tab in by_t.items():
            yield ds, tk, tab


def ceiling_lines(pooled: dict, eps: float | None = None) -> list[str]:
    """Three tables from :func:`mfd_theory.ceiling_stats.pool_ceiling`'s output: coverage per tree,
    each tree's gain over the product tree (paired over prompts), and the block's structure."""
    cells = list(_cells(pooled))
    if not cells:
        return ["(no prompts measured)"]
    trees = cells[0][2]["trees"]
    others = [t for t in trees if t != "product"]
    lines = ["Coverage, expected accepted tokens per round (bonus excluded) = the target mass of the tree's "
             "first N nodes, exact given the tree (mean ± s.e. over prompts); MC: the same from fresh samples.", "",
             "| data set | T | N | " + " | ".join(map(tree_label, trees)) + " | MC product | MC oracle |",
             "|---|---|---|" + "---|" * (len(trees) + 2)]
    for ds, tk, tab in cells:
        for n, b in tab["by_budget"].items():
            lines.append(f"| {ds} | {tk} | {n} | " + " | ".join(mean_se(b["coverage"][t]) for t in trees)
                         + f" | {mean_se(b['mc']['product'])} | {mean_se(b['mc']['oracle'])} |")
    lines += ["", "Gain in coverage over the product tree of the target's own marginals, paired over prompts "
                  "(the geometric mean ratio minus one; prompts-only interval, Bonferroni over the table; "
                  "words: docs/statistics.md):", "",
              "| data set | T | N | " + " | ".join(map(tree_label, others)) + " |",
              "|---|---|---|" + "---|" * len(others)]
    for ds, tk, tab in cells:
        for n, b in tab["by_budget"].items():
            lines.append(f"| {ds} | {tk} | {n} | " + " | ".join(comparison_text(b["gain"].get(t)) for t in others)
                         + " |")
    ks = sorted({k for _, _, tab in cells for k in tab["heldout_gain"]}, key=int)
    dead_eps = f" (P(s) <= {eps:g})" if eps is not None else ""
    sizes = sorted({tab.get("dead_at") for _, _, tab in cells} - {None})
    dead_size = f"at N = {', '.join(map(str, sizes))}" if sizes else "at its largest size"
    lines += ["", "The block's structure: total correlation (sum of per-position entropies minus the block entropy, "
                  "nats per block: what any coupling of the positions could recover), each K's held-out "
                  "log-likelihood gain over K = 1 (nats per block) and the share of the total correlation it "
                  f"captures; the product tree's dead share{dead_eps} and dead splices (dead and the prefix of no "
                  f"sampled path) {dead_size}.", "",
              "| data set | T | prompts | total correlation | block entropy | "
              + " | ".join(f"K = {k} gain (share)" for k in ks) + " | dead share | dead splices |",
              "|---|---|---|---|---|" + "---|" * len(ks) + "---|---|"]
    for ds, tk, tab in cells:
        kc = []
        for k in ks:
            g, s = tab["heldout_gain"].get(k), tab["tc_share"].get(k)
            kc.append(f"{mean_se(g, '{:+.2f}')} ({'-' if s is None else f'{100 * s:.0f}%'})")
        d = tab["dead"]
        lines.append(f"| {ds} | {tk} | {tab['n_prompts']} | {mean_se(tab['tc'])} | {mean_se(tab['h_block'])} | "
                     + " | ".join(kc) + f" | {mean_se([100 * (x or 0) for x in d['dead_share']], '{:.0f}')}% "
                     f"| {mean_se([100 * (x or 0) for x in d['dead_splice_share']], '{:.0f}')}% |")
    return lines


def reach_lines(rows: list[dict], ceiling_column: str = "predicted tau gain") -> list[str]:
    """:func:`mfd_theory.ceiling_stats.ceiling_reach`'s rows as a table: per drafter, the ceiling's
    tau gain, the measured one, and the fraction reached. ``ceiling_column``: the heading of the
    ceiling's gain, a "prediction" only where the ceiling saw none of the evaluated prompts."""
    lines = [f"| data set | T | N | drafter | runs | ceiling | {ceiling_column} | measured tau gain | reached |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        n = str(r["budget"]) + (f" (product {r['base_budget']})" if r.get("base_budget", r["budget"]) != r["budget"]
                                else "")
        drafter = r.get("drafter", "-") + (" best-mode" if r.get("K") and r.get("scorer") == "best_mode" else "")
        pred = comparison_text(r.get("predicted"))
        meas = f"{100 * r['gain']:+.1f}% [{100 * r['lo']:+.1f}%, {100 * r['hi']:+.1f}%]"
        if r.get("reach") is None:
            reach = r.get("why", "-")
        else:
            reach = f"{100 * r['reach']:.0f}% [{100 * r['reach_lo']:.0f}%, {100 * r['reach_hi']:.0f}%]"
        lines.append(f"| {r.get('dataset')} | {r['temperature']:g} | {n} | {drafter} | {r.get('runs', 1)} | "
                     f"{tree_label(r['ceiling'])} | {pred} | {meas} | {reach} |")
    return lines
