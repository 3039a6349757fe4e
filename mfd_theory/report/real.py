"""The report block of ``mfd real`` (``real/real.json``, docs/real-targets.md): per shipped target,
the lossless check and the target's own ceiling (``mfd ceiling``'s tables), and the headline's
rows for the real targets.

:func:`real` is a block (``block(results) -> str``, :mod:`.inputs`).
"""

from __future__ import annotations

from mfd_theory.report._text import mean_se
from mfd_theory.report.ceiling import ceiling_lines, tree_label
from mfd_theory.report.inputs import Results
from mfd_theory.formatting import comparison_text

__all__ = ["best_mixture", "headline_rows", "real"]

#: the paper's share of dead (chimera) nodes in a 64-node product tree
PAPER_DEAD = "27-33%"


def _lossless_line(name: str, ll: dict) -> str:
    rows = ll.get("rows", [])
    single = [r for r in rows if not r["batched"]]
    batched = [r for r in rows if r["batched"]]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    bad = sorted({f"{r['drafter']} {r['method']}{' (batch)' if r['batched'] else ''}" for r in rows if not r["equal"]})
    taus = {m: [r["tau"] for r in single if r["method"] == m and r["drafter"] == "replay"] for m in methods}
    tau_txt = ", ".join(f"{m} {sum(v) / len(v):.2f}" for m, v in taus.items() if v)
    w = ll.get("walk") or {}
    walk = (f"; at T = 1, {w['draws']:,} walks of one verified {w['nodes']}-node tree against the exact outcome "
            f"probabilities: chi-square p = {w['pvalue']:.3f} over {w['cells']} cells") if w else ""
    rt = ll.get("random_tokens", ll["new_tokens"])
    random_txt = f" (its decodes {rt} new tokens: its trees are rejected at the root)" if rt < ll["new_tokens"] else ""
    verdict = "**every output equal**" if not bad else (f"**{len(bad)} case{'s' if len(bad) > 1 else ''} "
                                                                 f"differ{'' if len(bad) > 1 else 's'}**: {', '.join(bad)}")
    return (f"- `{name}`: greedy output of {', '.join(methods)} against HF `generate` on {ll['n_prompts']} prompts x "
            f"{ll['new_tokens']} new tokens at N = {ll['budget']}, {len(single)} single decodes and {len(batched)} "
            f"requests decoded as one batch, with a replay drafter (tau {tau_txt}) and a random DFlash drafter"
            f"{random_txt}: {verdict}{walk}.")


def _summary_lines(name: str, pooled: dict, n: str = "64") -> list[str]:
    lines = ["| data set | T | prompts | product | " + " | ".join(
        tree_label(t) for t in _trees(pooled) if t not in ("product", "oracle")) + " | oracle | oracle vs product | "
             "dead share (exact) | dead share (sample counts) | total correlation |"]
    lines.append("|---|---|---|---|" + "---|" * (len(_trees(pooled)) - 2) + "---|---|---|---|---|")
    for ds, by_t in pooled.items():
        for tk, tab in by_t.items():
            b = tab["by_budget"].get(n)
            if b is None:
                continue
            cov = b["coverage"]
            d = tab["dead"]
            lines.append(f"| {ds} | {tk} | {tab['n_prompts']} | {mean_se(cov['product'])} | "
                         + " | ".join(mean_se(cov[t]) for t in _trees(pooled) if t not in ("product", "oracle"))
                         + f" | {mean_se(cov['oracle'])} | {comparison_text(b['gain'].get('oracle'))} | "
                         f"{mean_se([100 * (x or 0) for x in d['dead_share']], '{:.0f}')}% | "
                         f"{mean_se([100 * (x or 0) for x in d.get('count_dead_share', [0, 0])], '{:.0f}')}% | "
                         f"{mean_se(tab['tc'])} |")
    return lines


def _trees(pooled: dict) -> list[str]:
    for by_t in pooled.values():
        for tab in by_t.values():
            return tab["trees"]
    return []


def real(results: Results) -> str:
    """``mfd real`` (``real/real.json``): the prompt sets, then per target the lossless check, a summary of
    its ceiling at N = 64 and the full ceiling tables."""
    d, c = results.main.data, results.main.config
    man = d.get("prompts") or {}
    if "ceiling" in c.get("stages", ("ceiling",)):
        lines = [f"Prompt sets: {_prompt_text(man)}; evaluated here: the first {c['prompts_per_domain']} per domain "
                 f"after a shuffle with seed 0. Ceiling settings: block L = {c['block_length']}, {c['samples']} "
                 f"sampled paths per prompt and temperature to fit on (as many to check), K = "
                 f"{', '.join(map(str, c['modes']))}, scorers {', '.join(c['scorers'])}; dead: P(s) <= "
                 f"{c['dead_eps']:g} at N = {c['dead_at']} (the paper: {PAPER_DEAD} of a 64-node tree). "
                 f"Wall time {d['wall_s'] / 60:.1f} min."]
    else:  # a run of the lossless check alone (``--stages prompts lossless``)
        lines = [f"The lossless check alone (stages {', '.join(c['stages'])}), on the first evaluation prompts of "
                 f"each domain after a shuffle with seed 0 (prompt sets: {_prompt_text(man)}). Wall time "
                 f"{d['wall_s'] / 60:.1f} min (a rerun reads each target's cached check; the time beside a target is its "
                 f"check's own, as measured when it ran)."]
    for name, t in d.get("targets", {}).items():
        prov = t.get("provenance") or {}
        took = f"{t.get('wall_s', 0) / 60:.1f} min"
        if "ceiling" not in c.get("stages", ("ceiling",)) and (t.get("lossless") or {}).get("wall_s") is not None:
            took = f"its check {t['lossless']['wall_s'] / 60:.1f} min"  # as measured, also when read from its cache
        lines += ["", f"**{name}** ({t.get('architecture')}, {t.get('n_parameters', 0) / 1e6:.0f} M parameters, "
                      f"GGUF sha256 `{str(prov.get('gguf_sha256'))[:16]}`, {took})", ""]
        if t.get("lossless"):
            lines += [_lossless_line(name, t["lossless"]), ""]
        pooled = t.get("ceiling")
        if pooled:
            lines += ["Coverage at N = 64 (expected accepted tokens per round, mean ± s.e. over prompts; the oracle's "
                      "gain over the product tree paired over prompts, prompts-only interval, Bonferroni over the "
                      "full table below):", "", *_summary_lines(name, pooled), "",
                      "<details><summary>Full ceiling tables</summary>", "",
                      *ceiling_lines(pooled, c["dead_eps"]), "", "</details>"]
    return "\n".join(lines)


def _prompt_text(man: dict) -> str:
    counts = man.get("counts") or {}
    if not counts:
        return "(no manifest)"
    parts = []
    for dom, by_split in counts.items():
        parts.append(f"{dom} " + ", ".join(f"{split} {n}" for split, n in by_split.items()))
    return "; ".join(parts)


def headline_rows(data: dict, link: str) -> list[str]:
    """The headline's rows for the real targets: per target and domain at T = 1 and 0.7, the oracle's and
    the best fitted mixture's gain over the product tree at N = 64, and the dead share."""
    rows = []
    for name, t in data.get("targets", {}).items():
        pooled = t.get("ceiling") or {}
        parts = []
        for ds, by_t in pooled.items():
            for tk, tab in by_t.items():
                b = tab["by_budget"].get("64")
                if not b:
                    continue
                best = best_mixture(tab, b)
                txt = f"{ds} T = {tk}: oracle {_short(b['gain'].get('oracle'))}"
                if best:
                    txt += f", {tree_label(best)} mixture {_short(b['gain'].get(best))}"
                txt += f", dead {100 * tab['dead']['dead_share'][0]:.0f}%"
                parts.append(txt)
        if parts:
            rows.append(f"| Real target `{name}`: how much more than the product tree of its own marginals do its "
                        f"oracle tree and a fitted mixture cover at N = 64, and how much of the product tree is dead "
                        f"(paper: {PAPER_DEAD})? | " + "; ".join(parts) + f" | {link} |")
        ll = t.get("lossless")
        if ll:
            n_bad = sum(not r["equal"] for r in ll["rows"])
            rows.append(f"| Real target `{name}`: is decoding lossless (greedy output of every method, one request "
                        f"and batched, against HF `generate`)? | {len(ll['rows'])} decodes, **{n_bad} differ**"
                        + (f"; T = 1 walk chi-square p = {ll['walk']['pvalue']:.2f}" if ll.get("walk") else "")
                        + f" | {link} |")
    return rows


def best_mixture(tab: dict, by_budget: dict) -> str | None:
    """The fitted mixture tree (``mixture K=...``) of one ceiling table that covers the most at the
    budget whose entry is ``by_budget``; None when the table has none."""
    mix = [k for k in tab["trees"] if k.startswith("mixture K=")]
    return max(mix, key=lambda k: by_budget["coverage"][k][0]) if mix else None


def _short(c: dict | None) -> str:
    if not c:
        return "-"
    def pct(x: float) -> str:  # a few prompts give intervals too wide to print as numbers
        return f"{100 * x:+.0f}" if x < 10 else ">+999"

    return f"{100 * c['gain']:+.0f}% [{pct(c['lo'])}, {pct(c['hi'])}] {c['verdict']}"
