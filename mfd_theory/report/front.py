"""The front page's headline (README.md, block ``front``): at most eight rows, one per claim or
question, each answer the verdict and its number in a short sentence, no intervals (they are in
the full tables the rows link to, by anchor).

Read from ``mfd real-drafters`` (``real-drafters/real_drafters.json``, the main file), ``mfd real``
(``real/real.json``: the real target's own ceiling and the lossless check) and the chimera bound's
check (``chimera_bound.json``): the three that ``make reproduce`` writes.

:func:`front` is a block (``block(results) -> str``, :mod:`.inputs`).
"""

from __future__ import annotations

from mfd_theory.report._text import span
from mfd_theory.report.ceiling import tree_label
from mfd_theory.report.inputs import Results
from mfd_theory.report.real import PAPER_DEAD, best_mixture
from mfd_theory.report.real_drafters import WALK_Z, _to_decide, verdicts_of

__all__ = ["FRONT_FILES", "front", "MAX_ANSWER"]

#: the files the front block reads besides real-drafters/real_drafters.json
FRONT_FILES = ("real/real.json", "chimera_bound.json")
#: the longest answer a row may give (characters); the block refuses to write a longer one
MAX_ANSWER = 150

DRAFTERS = "docs/real-targets.md#mfd-real-drafters"
REAL = "docs/real-targets.md#mfd-real"
BOUND = "docs/results.md#chimera-bound"


def _verdicts(vs: list[dict], question: str, key: str) -> list[tuple[dict, dict]]:
    """(verdict, comparison) of ``question`` for the mixture tree (or a method with no scorer)."""
    return [(v, v[key]) for v in vs if v.get("question") == question and v.get(key)
            and v["a"].get("scorer") in ("mixture", None)]


def _pct_span(cs: list[dict]) -> str:
    """``+0% to +3%`` over the comparisons' gains (one number when both ends print alike)."""
    lo, hi = (f"{100 * g:+.0f}%" for g in (min(c["gain"] for c in cs), max(c["gain"] for c in cs)))
    return lo if lo == hi else f"{lo} to {hi}"


def _verdict_words(pairs: list[tuple[dict, dict]]) -> str:
    """``inconclusive in all 4 cells`` or ``a loss on prose at T = 1, inconclusive elsewhere``."""
    words = [c["verdict"] for _, c in pairs]
    common = max(sorted(set(words), key=lambda w: (w != "inconclusive", w)), key=words.count)  # ties: inconclusive
    if len(set(words)) == 1:
        return f"{common} in all {len(words)} cells"
    odd = [f"a {c['verdict']} on {v['dataset']} at T = {v['temperature']:g}" if c["verdict"] in ("gain", "loss")
           else f"{c['verdict']} on {v['dataset']} at T = {v['temperature']:g}"
           for v, c in pairs if c["verdict"] != common]
    return f"{', '.join(odd)}; {common} elsewhere"


def _row(claim: str, answer: str, link: str, where: str) -> str:
    if len(answer) > MAX_ANSWER:
        raise ValueError(f"front block: the answer to '{claim}' has {len(answer)} characters (at most {MAX_ANSWER})")
    return f"| {claim} | {answer} | [{where}]({link}) |"


def front(results: Results) -> str:
    """At most eight rows: the walk check (accepted tokens = each round's own tree's expected acceptance, a
    correctness check of the decoder, true for any drafter),
    the chimera bound, the real target's dead share and own ceiling, losslessness, trained MFD
    against DDTree at the same N, speed against the product drafter's faster method, and speed
    against plain decoding."""
    d = results.main.data
    vs = verdicts_of(d, results.main.config)
    runs = d.get("runs") or []
    n_seeds = len(runs)
    real = results["real/real.json"].data
    qwen = (real.get("targets") or {}).get(d.get("target")) or {}
    lines = ["| claim (target) | what the last run found | full table |", "|---|---|---|"]

    # C1 as what it is: each T > 0 tree cell's accepted tokens against its own trees' exact expected acceptance,
    # a check of the decoder's walk (it holds for any drafter)
    c1 = [r for run in runs for r in run["rows"]
          if float(r["temperature"]) > 0 and r["method"] != "ar" and r.get("pred_gap_z") is not None]
    zs = [r["pred_gap_z"] for r in c1]
    if zs:
        temps = "/".join(f"{t:g}" for t in sorted({float(r["temperature"]) for r in c1}))
        far = sum(abs(z) > WALK_Z for z in zs)
        head = "passes" if far == 0 else f"fails in {far} of {len(zs)} cells"
        lines.append(_row(f"The decoder's walk is exact: accepted tokens = its own trees' expected acceptance (a "
                          f"correctness check, true for any drafter; real Qwen target, T = {temps})",
                          f"{head}: |z| <= {max(map(abs, zs)):.1f} in {len(zs) - far} of {len(zs)} cells x seeds; "
                          f"sum of z^2 {sum(z * z for z in zs):.1f} (cells coupled: one sampled text)", DRAFTERS,
                          "C1 table"))
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
        lines.append(_row("Product trees splice futures (real Qwen target, the product tree of its own marginals, "
                          "N = 64)", f"{span(dead, '{:.0f}', '%')} of its nodes dead, against the paper's {PAPER_DEAD} "
                          f"({'/'.join(map(str, n_p))} prompts per domain)", REAL, "mfd real"))
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
    same = _verdicts(vs, "same_n", "tau_cmp")
    if same:
        need = sorted({_to_decide(c) for _, c in same if c["verdict"] == "inconclusive"},
                      key=lambda s: (s.startswith(">"), len(s), s))
        decide = "" if not need else (f" ({need[0]}{'' if len(need) == 1 else ' to ' + need[-1]} seeds would decide "
                                      "with 80% power)")
        k_of = {r["drafter"]: r.get("K") for run in runs for r in run["rows"]}
        ks = "/".join(str(k) for k in sorted({k_of.get(v["a"]["drafter"]) for v, _ in same} - {None})) or "?"
        lines.append(_row(f"Trained MFD beats DDTree at the same N (real Qwen target, K = {ks}, {n_seeds} seeds)",
                          f"tau {_pct_span([c for _, c in same])}: {_verdict_words(same)}{decide}", DRAFTERS,
                          "same-N table"))
    fast = _verdicts([x for x in vs if x["a"].get("method") == "mfd"], "against_product", "speed_cmp")
    if fast:
        against = "/".join(dict.fromkeys(v["b"]["method"] for v, _ in fast))
        lines.append(_row(f"... and decodes faster than the product drafter's {against} (its faster method, chosen "
                          "before decoding)",
                          f"speed {_pct_span([c for _, c in fast])}: {_verdict_words(fast)} (this run's timing)",
                          DRAFTERS,
                          "verdicts"))
    tc = [r for run in runs for r in run["rows"] if r["method"] != "ar" and r.get("speedup") is not None]
    if tc:
        sp = [r["speedup"] for r in tc]
        best_tau = max(r["tau"] for r in tc if float(r["temperature"]) == 0) if any(
            float(r["temperature"]) == 0 for r in tc) else max(r["tau"] for r in tc)
        faster = sum(s > 1 for s in sp)
        lines.append(_row("Speculative decoding beats plain decoding (real Qwen target, this CPU)",
                          f"{'no' if faster == 0 else f'{faster} of {len(sp)} cells'}: speedups "
                          f"{min(sp):.2f}-{max(sp):.2f}x; best tau {best_tau:.2f} (EAGLE-3 on Qwen3-1.7B: 2.93)",
                          DRAFTERS, "per-seed cells"))
    return "\n".join(lines)
