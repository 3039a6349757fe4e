"""The front page's headline (README.md, block ``front``): at most eight rows, one per claim or
question, each answer the verdict and its number in a short sentence, no intervals (they are in
the full tables the rows link to, by anchor).

Read from the shipped drafters' evaluation (``shipped/tau.json``, ``mfd tau --preset reproduce``: the
main file), ``mfd real`` (``real/real.json``: the real target's own ceiling and the lossless check)
and the chimera bound's check (``chimera_bound.json``): the three that ``make reproduce`` writes.

:func:`front` is a block (``block(results) -> str``, :mod:`.inputs`).
"""

from __future__ import annotations

from mfd_theory.report._text import span
from mfd_theory.report.ceiling import tree_label
from mfd_theory.report.inputs import Results
from mfd_theory.report.real import PAPER_DEAD, best_mixture
from mfd_theory.report.shipped import summary

__all__ = ["EAGLE3", "FRONT_FILES", "front", "MAX_ANSWER"]

#: the files the front block reads besides shipped/tau.json
FRONT_FILES = ("real/real.json", "chimera_bound.json")
#: the longest answer a row may give (characters); the block refuses to write a longer one
MAX_ANSWER = 150
#: the field's figure beside the shipped drafters' tau: EAGLE-3 on Qwen3-1.7B, greedy tau on HumanEval
#: as AngelSlim's benchmark table reports it (a second AngelSlim benchmark lists 2.20)
EAGLE3 = "EAGLE-3 on Qwen3-1.7B: 2.93, AngelSlim"

SHIPPED = "docs/real-targets.md#the-shipped-drafters-on-all-of-humaneval-make-reproduce"
REAL = "docs/real-targets.md#mfd-real"
BOUND = "docs/results.md#chimera-bound"


def _row(claim: str, answer: str, link: str, where: str) -> str:
    if len(answer) > MAX_ANSWER:
        raise ValueError(f"front block: the answer to '{claim}' has {len(answer)} characters (at most {MAX_ANSWER})")
    return f"| {claim} | {answer} | [{where}]({link}) |"


def _speeds(vals: list[float]) -> str:
    return f"{min(vals):.2f}-{max(vals):.2f}x" if f"{min(vals):.2f}" != f"{max(vals):.2f}" else f"{vals[0]:.2f}x"


def front(results: Results) -> str:
    """At most eight rows: the chimera bound, the real target's dead share and own ceiling,
    losslessness, the shipped drafters' tau on all of HumanEval (beside EAGLE-3's), the MFD drafter
    against the K = 1 drafter's DDTree at the same N, and speed against plain decoding."""
    shipped = summary(results.main.data)
    real = results["real/real.json"].data
    qwen = (real.get("targets") or {}).get(results.main.data.get("target")) or {}
    lines = ["| claim (target) | what the last run found | full table |", "|---|---|---|"]

    cb = results["chimera_bound.json"]
    v, c = cb.data["verify"], cb.config
    lines.append(_row("At least 2^(m-1) - 1 chimeras in a product tree holding two futures (synthetic)",
                      f"{'holds' if v['violations'] == 0 else 'fails'}: {v['violations']} violations in "
                      f"{v['instances']:,} random instances, m = 1..{c['m_max']}", BOUND, "chimera-bound"))

    pooled = qwen.get("ceiling") or {}
    cells = [(ds, tk, tab) for ds, by_t in pooled.items() for tk, tab in by_t.items() if tab["by_budget"].get("64")]
    if cells:
        dead = [100 * tab["dead"]["dead_share"][0] for _, _, tab in cells]
        n_p = sorted({tab["n_prompts"] for _, _, tab in cells})
        # a dead share (P(s) <= eps) of the target's own marginals' tree: named as such, since the
        # paper's figure beside it counts chimeras in a trained drafter's tree over decoding
        lines.append(_row("Product trees waste nodes (real Qwen target, the product tree of its own marginals, "
                          "N = 64)", f"{span(dead, '{:.0f}', '%')} of its nodes dead (P(s) <= "
                          f"{results['real/real.json'].config['dead_eps']:g}), {'/'.join(map(str, n_p))} prompts per domain; a dead "
                          f"share, not the paper's chimera share ({PAPER_DEAD})", REAL, "mfd real"))
        parts, words, ks = [], set(), []
        for ds, tk, tab in cells:
            b = tab["by_budget"]["64"]
            best = best_mixture(tab, b)
            if best is None or not b["gain"].get(best) or not b["gain"].get("oracle"):
                continue
            g, o = b["gain"][best], b["gain"]["oracle"]
            words.add(g["verdict"])
            ks.append(tree_label(best).split()[-1])
            parts.append((ds, tk, f"{100 * g['gain']:+.0f}% (oracle {100 * o['gain']:+.0f}%)"))
        if parts:  # the best K of each cell, named once when every cell has the same
            one = len(set(ks)) == 1
            text = "; ".join(f"{ds} T = {tk}{'' if one else f' K = {k}'} {g}" for (ds, tk, g), k in zip(parts, ks))
            lines.append(_row(f"A mixture covers what the product misses (real Qwen target, its own samples, "
                              f"fitted K = {ks[0] if one else 'best'}, N = 64)", text + " over the product tree: "
                              f"{'/'.join(sorted(words))} over prompts, one sampling seed", REAL, "mfd real"))
    checks = [(name, t["lossless"]) for name, t in (real.get("targets") or {}).items() if t.get("lossless")]
    if checks:
        total = sum(len(ll["rows"]) for _, ll in checks)
        bad = sum(not r["equal"] for _, ll in checks for r in ll["rows"])
        walks = [f"{ll['walk']['pvalue']:.2f}" for _, ll in checks if ll.get("walk")]
        lines.append(_row(f"Lossless decoding ({' and '.join(n.split('-')[0] for n, _ in checks)} targets)",
                          f"{'holds' if bad == 0 else 'fails'}: {total - bad} of {total} greedy decodes equal HF "
                          f"`generate`" + (f"; sampled walks fit the exact acceptance (chi-square p = {', '.join(walks)})"
                                           if walks else ""),
                          REAL, "mfd real"))
    for set_name, by_budget in shipped.items():
        budget, b = next(iter(by_budget.items()))  # the first budget the run measured
        k1 = next((r for r in b["rows"] if r["modes"] == 1), None)
        mfd = next((r for r in b["rows"] if r["modes"] > 1), None)
        if k1 is None or mfd is None or "DDTree" not in k1["cells"]:
            continue
        where = f"{b['prompts']} {'HumanEval problems' if set_name.startswith('code') else set_name + ' prompts'}"
        mix, best = (mfd["cells"].get(c, {}).get("tau") for c in ("MFD mixture", "MFD best-mode"))
        lines.append(_row(f"The shipped drafters draft (real Qwen target, greedy tau, N = {budget}, all {where})",
                          f"K = 1 DDTree {k1['cells']['DDTree']['tau']:.2f}; MFD K = {mfd['modes']} "
                          f"{mix:.2f} (mixture), {best:.2f} (best mode); {EAGLE3}", SHIPPED, "shipped drafters"))
        qs = [q for q in b["questions"] if "K = 1" in q["question"]]
        if qs:
            gains = "; ".join(f"{'mixture' if 'mixture' in q['question'] else 'best mode'} {100 * q['gain']:+.1f}%, "
                              f"{q['verdict']}" for q in qs)
            lines.append(_row(f"Trained MFD beats DDTree at the same N (real Qwen target, shipped K = {mfd['modes']} "
                              f"against K = 1, one training run each)",
                              f"tau {gains} (these two drafters, paired over {qs[0]['problems']} problems; no retrain "
                              "in the interval)", SHIPPED, "shipped drafters"))
        timed = [c for t in b["timing"] for c in t["cells"] if c.get("speedup") is not None]
        if timed:
            sp = [c["speedup"] for c in timed]
            full = [c["full_set_speedup"] for c in timed if c.get("full_set_speedup") is not None]
            n_t = max(int(t.get("timed_prompts") or 0) for t in b["timing"])
            faster = sum(x > 1 for x in sp)
            lines.append(_row("Speculative decoding beats plain decoding (real Qwen target, this CPU)",
                              f"{'no' if faster == 0 else f'{faster} of {len(sp)} trees'}: {_speeds(sp)} on {n_t} "
                              f"timed problem{'' if n_t == 1 else 's'}" + (f"; on the whole set {_speeds(full)} (estimate)" if full else ""),
                              SHIPPED, "shipped drafters"))
        break  # one prompt set on the front page: the first (HumanEval)
    return "\n".join(lines)
