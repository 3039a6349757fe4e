"""Report blocks of an end-to-end run (``end_to_end.json`` of ``mfd e2e``): the tau / speedup
table, MFD's gains over the product drafter, Hugging Face's assisted decoding, DARTree beside
DDTree and MFD, and the same table with its summary for the hybrid target's run.

Each block is ``block(results) -> str`` (:mod:`.inputs`); what the numbers mean is in docs/results.md.
"""

from __future__ import annotations

from mfd_theory.report._text import method_label, row_scorer, value_with_spread
from mfd_theory.report.inputs import Results
from mfd_theory.report.intervals import floored_entries
from mfd_theory.cycles import cycle_summary
from mfd_theory.formatting import comparison_text, is_best_budget, speed_gain_text, stored_number, tau_gain_text
from mfd_theory.stats import compare_rows
from mfd_theory.results import Result

__all__ = ["e2e", "e2e_dartree", "e2e_gains", "e2e_hf", "e2e_hybrid", "gain_pair", "greedy_loop_lines", "greedy_loops"]

#: the order of methods within a temperature in the e2e table
_ORDER = {"chain": 0, "ddtree": 1, "mfd": 2, "dartree": 3}


def e2e(results: Results) -> str:
    """tau and speedup per (temperature, method, drafter) across the budgets, the dead-node share,
    and the in-sample test of the theorem."""
    d, c = results.main.data, results.main.config
    rows = [r for r in d["rows"] if r["method"] != "ar"]
    budgets = sorted({r["budget"] for r in rows if r["method"] != "chain"})
    n_dead = 64 if 64 in budgets else budgets[-1]
    n_steps = [r["n_steps"] for r in rows if isinstance(r.get("n_steps"), int)]
    passes = {len(r["speedup_passes"]) for r in rows if isinstance(r.get("speedup_passes"), list)}
    lines = [
        f"{c['eval_prompts']} held-out prompts x {c['max_new_tokens']} new tokens; {min(n_steps)}-{max(n_steps)} "
        f"rounds (target calls) per cell; "
        + (f"{'/'.join(map(str, sorted(passes)))} timing passes, speedup as mean ± std over passes."
           if passes else "one timing pass (no spread measured: every speedup is marked (1 pass))."),
        "",
        "tau (speedup vs AR):",
        "",
        "| T | method (drafter) | " + " | ".join(f"N = {b}" for b in budgets) + f" | dead share N = {n_dead} |",
        "|---|---|" + "---|" * len(budgets) + "---|",
    ]
    lines += _table_rows(rows, budgets, n_dead)
    lines += greedy_loop_lines(d)
    lines += _insample_check(d.get("prediction_check") or {})
    return "\n".join(lines)


def greedy_loops(d: dict) -> dict | None:
    """:func:`mfd_theory.cycles.cycle_summary` over the greedy texts of an e2e run's per-prompt
    records (ar's at T = 0, which every T = 0 row reproduces); None without them."""
    texts = [r["tokens"] for r in d.get("per_prompt") or []
             if r.get("method") == "ar" and r.get("temperature") == 0 and r.get("tokens")]
    return cycle_summary(texts) if texts else None


def greedy_loop_lines(d: dict) -> list[str]:
    """Whether the greedy texts end in a loop (:func:`greedy_loops`); nothing without them."""
    s = greedy_loops(d)
    if s is None:
        return []
    n = s["texts"]
    if not s["in_cycle"]:
        return ["", f"Greedy texts (ar at T = 0, the text every T = 0 row reproduces): none of the {n} ends in a "
                    f"repeating loop of {s['min_repeats']} full periods or more."]
    loops = ", ".join(f"{c['texts']} in one of period {c['period']}" for c in s["cycles"])
    return ["", f"Greedy texts (ar at T = 0, the text every T = 0 row reproduces): **{s['in_cycle']} of {n} end in a "
                f"repeating loop** (at least {s['min_repeats']} full periods; {s['distinct_cycles']} distinct: {loops}); "
                f"{100 * s['repeated_share']:.0f}% of all {n} texts' tokens lie after a loop's first period, where "
                "copying the loop predicts them. So the T = 0 rows measure how well each drafter predicts "
                + ("that loop" if s["distinct_cycles"] == 1 else "those loops")
                + ", and their prompts are not independent texts: a T = 0 interval paired over prompts counts one "
                "loop once per prompt and is narrower than what it knows. The T = 0 findings are the replicated "
                "comparisons (runs as the unit); T = 1 texts are sampled and differ per prompt."]


def _table_rows(rows: list[dict], budgets: list[int], n_dead: int) -> list[str]:
    """One line per (temperature, method, drafter): tau (speedup) at each budget, a chain in the
    first column (its N is its block length), then the dead share at ``n_dead``."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["temperature"], r["method"], r["drafter"], row_scorer(r) or ""), []).append(r)

    def sort_key(k):
        temp, method, drafter, scorer = k
        return (temp, drafter != "product", _ORDER.get(method, 9), drafter, scorer == "best_mode")

    def cell(r):
        sp = value_with_spread(r, "speedup", suffix="x")
        sp = sp[:-len(" (1 pass)")] + ", 1 pass" if sp.endswith(" (1 pass)") else sp
        return f"{r['tau']:.2f} ({sp})"

    lines = []
    for key in sorted(groups, key=sort_key):
        rs = {r["budget"]: r for r in groups[key]}
        first = next(iter(rs.values()))
        if key[1] == "chain":
            cells = [cell(first)] + [""] * (len(budgets) - 1)
            dead = first.get("dead_share")
        else:
            cells = [cell(rs[b]) if b in rs else "" for b in budgets]
            dead = rs[n_dead].get("dead_share") if n_dead in rs else None
        dead_s = f"{100 * dead:.0f}%" if stored_number(dead) is not None else "-"
        lines.append(f"| {key[0]:g} | {method_label(first)} | " + " | ".join(cells) + f" | {dead_s} |")
    return lines


def _insample_check(pc: dict) -> list[str]:
    """The paragraph on measured vs covered acceptance (``prediction_check`` of the run)."""
    if not pc.get("n_rows"):
        return []
    return ["", f"In-sample test of the theorem (accepted = covered mass, each round's tree against that round's "
                f"own verify logits; not a forecast), T > 0 over {pc['n_rows']} rows: z = (measured - covered) "
                f"/ standard error has mean {pc['mean_z']:+.2f}, max |z| {pc['max_abs_z']:.2f}, "
                f"{100 * pc['share_abs_z_below_2']:.0f}% within ±2, sum z^2 = {pc['sum_z2']:.1f}. The rows share "
                f"each prompt's sampling seed, so their z's are correlated and that sum is no chi-square over "
                f"rows"
                + (f"; pooled per prompt instead (independent clusters), all rows' gaps give z = "
                   f"{pc['clustered']['z']:+.2f} over {pc['clustered']['prompts']} prompts." if pc.get("clustered")
                   else ".")]


def e2e_summary(res: Result) -> list[str]:
    """Bullets under an e2e table: greedy losslessness, then per temperature AR's rate, the fastest
    cell, and each MFD drafter against the product drafter at each one's best budget (tau gain;
    speed gain with the evaluator's verdict)."""
    d = res.data
    rows = d["rows"]
    k_of = {r["drafter"]: r.get("K", 0) for r in rows}
    out = []
    greedy = [r for r in rows if r["method"] != "ar" and r["temperature"] == 0 and r.get("matches_ar") is not None]
    if greedy:
        same = sum(bool(r["matches_ar"]) for r in greedy)
        out.append(f"Greedy (T = 0): {same} of {len(greedy)} rows equal ar's output token for token.")
    for temp in sorted({r["temperature"] for r in rows}):
        at = [r for r in rows if r["temperature"] == temp]
        ar = [r for r in at if r["method"] == "ar"]
        spec = [r for r in at if r["method"] != "ar" and stored_number(r.get("speedup")) is not None]
        parts = []
        if ar:
            parts.append(f"ar {value_with_spread(ar[0], 'tokens_per_s', '{:.0f}', ' tokens/s')}")
        if spec:
            fast = max(spec, key=lambda r: r["speedup"])
            parts.append(f"fastest {method_label(fast)}"
                         + (f" at N = {fast['budget']}" if fast["method"] != "chain" else "")
                         + f": {value_with_spread(fast, 'speedup', suffix='x')}")
        best = sorted((g for g in d.get("mfd_gains") or []
                       if g["temperature"] == temp and g["method"] == "mfd" and is_best_budget(g)),
                      key=lambda g: k_of.get(g["drafter"], 0))
        vs = [f"mfd{' best-mode' if g.get('scorer') == 'best_mode' else ''} K = {k_of.get(g['drafter'], '?')} tau {g['tau']:.2f} ({100 * g['tau_gain']:+.1f}%) and "
              f"speed {speed_gain_text(g)}" for g in best]
        if parts or vs:
            out.append(f"T = {temp:g}: " + "; ".join(parts) + "." + (
                f" Against the product drafter at each one's best budget (product tau {best[0]['single_tau']:.2f}): "
                + "; ".join(vs) + "." if vs else ""))
    return out


def e2e_hybrid(results: Results) -> str:
    """The e2e table of a run on another target (the hybrid's own results file), with its summary."""
    return e2e(results) + "\n\n" + "\n".join(f"* {line}" for line in e2e_summary(results.main))


def _find(rows, temp, method, drafter, budget, scorer=None):
    """The row of (temperature, method, drafter, N) and, for mfd, ``scorer`` (default the mixture)."""
    want = row_scorer({"method": method, "scorer": scorer})
    for r in rows:
        if (r["temperature"], r["method"], r["drafter"], r["budget"]) == (temp, method, drafter, budget) \
                and row_scorer(r) == want:
            return r
    return None


def gain_pair(rows: list[dict], g: dict) -> tuple[dict, dict, str]:
    """(this method's row, the product drafter's row, the N label) that a gain entry compares."""
    if is_best_budget(g):
        n_mine, n_base = g["budget"], g["single_budget"]
        base_method = None
        for r in rows:  # the best single-mode row may be chain or ddtree
            if (r["temperature"] == g["temperature"] and r["drafter"] == "product"
                    and r["budget"] == n_base and stored_number(r.get("speedup")) == stored_number(g["single_speedup"])):
                base_method = r["method"]
        a = _find(rows, g["temperature"], g["method"], g["drafter"], n_mine, g.get("scorer")) or g
        b = _find(rows, g["temperature"], base_method, "product", n_base) if base_method else None
        b = b or {"speedup": g["single_speedup"], "speedup_std": g.get("single_speedup_std")}
        return a, b, f"best ({n_mine} vs {n_base})"
    a = _find(rows, g["temperature"], g["method"], g["drafter"], g["budget"], g.get("scorer")) or g
    b = _find(rows, g["temperature"], "ddtree", "product", g["budget"]) or {"speedup": g["single_speedup"]}
    return a, b, str(g["budget"])


def e2e_gains(results: Results) -> str:
    """MFD against the identically trained product drafter of this one run, paired over prompts,
    per budget and at each method's best budget."""
    d = results.main.data
    rows, gains = d["rows"], d.get("mfd_gains") or []
    lines = ["One run (replicated comparisons: the e2e-replicated block). N = best (a vs b): each side at its "
             "fastest measured budget (a: this method's, b: the best product-drafter tree's, chain or ddtree), "
             "picked on this run's own timings (in sample). Gains are paired over the run's prompts (the log ratio of the two methods' tau, and of each prompt's own decode speed); intervals are prompts-only (one trained run: a retrained drafter can land outside them), Bonferroni-adjusted over each table's entries; words: docs/statistics.md.", "",
             "| T | method (drafter) | N | tau | product tau | tau gain | speedup | product speedup | speed gain |",
             "|---|---|---|---|---|---|---|---|---|"]
    for g in gains:
        a, b, n_text = gain_pair(rows, g)
        lines.append(
            f"| {g['temperature']:g} | {method_label(a) if 'method' in a else g['method']} | {n_text} | {g['tau']:.2f} | "
            f"{g['single_tau']:.2f} | {tau_gain_text(g)} | {value_with_spread(a, 'speedup', suffix='x')} | "
            f"{value_with_spread(b, 'speedup', suffix='x')} | {speed_gain_text(g)} |")
    return "\n".join(lines)


def e2e_hf(results: Results) -> str:
    """Hugging Face's assisted decoding beside our own AR."""
    d = results.main.data
    hf = d.get("hf_assisted") or []
    ar = [r for r in d["rows"] if r["method"] == "ar"]
    lines = ["| T | Hugging Face method | tokens/s | speedup vs HF's own AR |", "|---|---|---|---|"]
    for r in hf:
        lines.append(f"| {r['temperature']:g} | {r['method']} | {value_with_spread(r, 'tokens_per_s', '{:.0f}')} | "
                     f"{value_with_spread(r, 'speedup', suffix='x')} |")
    for r in ar:
        lines.append(f"| {r['temperature']:g} | (ours) ar | {value_with_spread(r, 'tokens_per_s', '{:.0f}')} | 1.00x |")
    return "\n".join(lines)


def e2e_dartree(results: Results) -> str:
    """DARTree (Domino drafter, path-corrected tree grown depth by depth) beside DDTree (the product
    drafter's product tree) and MFD (each MFD drafter's mixture tree), all trained on the same data
    and steps: per temperature and budget, tau, speedup, predicted vs measured accepted length and
    the dead-node share."""
    res = results.main
    rows = [r for r in res.data["rows"] if (r["method"], r["drafter"]) == ("dartree", "dartree")
            or (r["method"], r["drafter"]) == ("ddtree", "product") or r["method"] == "mfd"]
    if not any(r["method"] == "dartree" for r in rows):
        return "(this run has no dartree rows: rerun `mfd e2e` with the Domino drafter enabled)"
    order = {"ddtree": 0, "mfd": 1, "dartree": 2}
    rows.sort(key=lambda r: (r["temperature"], r["budget"], order[r["method"]], r["drafter"]))
    lines = ["| T | N | method (drafter) | tau | speedup | accepted: measured | predicted | z | dead share |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        z = stored_number(r.get("pred_gap_z"))
        dead = stored_number(r.get("dead_share"))
        pred = stored_number(r.get("covered_mass_insample"))
        lines.append(f"| {r['temperature']:g} | {r['budget']} | {method_label(r)} | {r['tau']:.2f} | "
                     f"{value_with_spread(r, 'speedup', suffix='x')} | {r['accepted_mean']:.2f} | "
                     f"{'-' if pred is None else f'{pred:.2f}'} | {'-' if z is None else f'{z:+.1f}'} | "
                     f"{'-' if dead is None else f'{100 * dead:.0f}%'} |")
    lines += ["", *_dartree_best(rows), *_domino_cost(res)]
    return "\n".join(lines)


def _dartree_best(rows: list[dict]) -> list[str]:
    """Per temperature, each method at its best measured budget, and dartree's speed against the others."""
    out = []
    for temp in sorted({r["temperature"] for r in rows}):
        best = {}
        for r in rows:
            if r["temperature"] == temp and stored_number(r.get("speedup")) is not None:
                key = "mfd" if r["method"] == "mfd" else r["method"]
                if key not in best or r["speedup"] > best[key]["speedup"]:
                    best[key] = r
        if "dartree" not in best:
            continue
        dt = best["dartree"]
        parts = [f"{method_label(r)} {value_with_spread(r, 'speedup', suffix='x')} at N = {r['budget']} "
                 f"(tau {r['tau']:.2f})" for r in (best.get("ddtree"), best.get("mfd"), dt) if r is not None]
        vs = "; ".join(f"dartree vs {method_label(best[k])}: speed "
                       f"{comparison_text(compare_rows(dt, best[k])['speed_cmp'])} (paired over prompts, one run)"
                       for k in ("ddtree", "mfd") if k in best)
        out.append(f"* T = {temp:g}, each at its best budget: " + ", ".join(parts) + f". {vs}.")
    return out


def _domino_cost(res: Result) -> list[str]:
    """What one depth step of the Domino drafter costs, in block passes (``c`` of ``mfd path-gain``),
    from the run's round profile; nothing when the run has no profile of both drafters."""
    prof = res.data.get("round_profile") or {}
    tables = {(t["method"], t["K"]): t for t in prof.get("overhead", [])}
    dom, block = tables.get(("dartree", 1)), tables.get(("ddtree", 1))
    L = int(res.config.get("block_size", 0)) - 1
    if not (dom and block and dom.get("draft_ms") and block.get("draft_ms") and L >= 2):
        return []
    n = min(set(dom["tree_sizes"]) & set(block["tree_sizes"]), default=None)
    if n is None:
        return []
    t_dom = dom["draft_ms"][dom["tree_sizes"].index(n)]
    t_block = block["draft_ms"][block["tree_sizes"].index(n)]
    c = (t_dom - t_block) / ((L - 1) * t_block)
    return [f"* Drafting cost (round profile, N = {n}): the Domino drafter's round {t_dom:.2f} ms against "
            f"the block drafter's {t_block:.2f} ms, i.e. c = {c:.2f} block passes per extra depth step "
            f"over the block's {L} depths (`mfd path-gain`'s drafting cost 1 + c (depth - 1))."]


# ------------------------------------------------------------------------------------ replicated runs
def cell_text(c: dict) -> str:
    """A replicated comparison's side: ``mfd best-mode (K = 4) N = 32``, ``chain (product)``."""
    label = str(c["drafter"])
    wta = label.endswith("-wta")
    name = {"product": "product", "dartree": "Domino"}.get(label, label.removesuffix("-wta").replace("mfd-k", "K = "))
    method = "mfd best-mode" if c["method"] == "mfd" and c.get("scorer") == "best_mode" else c["method"]
    return (f"{method} ({name}{', wta' if wta else ''})" + ("" if c["method"] == "chain" else f" N = {c['budget']}"))


def replicated_lines(d: dict, config: dict | None = None) -> list[str]:
    """One line per comparison of a run's ``replicated`` section, in words with the interval (tau's
    floored by its resolution over ``config``'s new tokens per prompt)."""
    rep = d.get("replicated") or {}
    out = []
    for c in floored_entries(rep.get("comparisons"), config):
        out.append(f"T = {c['temperature']:g}, {cell_text(c['a'])} against {cell_text(c['b'])}: tau "
                   f"{comparison_text(c.get('tau_cmp'))}, speed {comparison_text(c.get('speed_cmp'))}")
    return out


def e2e_replicated(results: Results) -> str:
    """The comparisons stated as findings, over independently trained drafter sets (runs): each
    method at the budget the theory chose before decoding, paired over prompts, runs as the unit;
    one table per question."""
    d = results.main.data
    rep = d.get("replicated")
    if not rep:
        return "This run has no replicated comparisons (--replicates 1): every comparison in it is a single run."
    lines = [f"{rep['runs']} runs (drafter seeds {', '.join(map(str, rep['drafter_seeds']))}); held fixed: "
             f"{rep['held_fixed']}. Each method at the budget the theory chose from the first run's calibration, "
             "before any evaluated prompt was decoded; the product side is the product drafter's chain or DDTree "
             f"tree, whichever the theory predicted faster. Gains: {rep['rule']}; margin of equivalence ±3%."]
    questions = rep.get("questions") or {"against_product": "MFD and DARTree against the product drafter"}
    for q, title in questions.items():
        comps = [c for c in floored_entries(rep["comparisons"], results.main.config)
                 if c.get("question", "against_product") == q]
        if not comps:
            continue
        lines += ["", f"**{title[0].upper() + title[1:]}**:", "",
                  "| T | method | against | tau per run (method / other) | tau gain | speedup per run (method / other) "
                  "| speed gain |", "|---|---|---|---|---|---|---|"]
        for c in comps:
            taus = "; ".join(f"{a:.2f} / {b:.2f}" for a, b in c["tau_runs"])
            sps = "; ".join("-" if a is None or b is None else f"{a:.2f}x / {b:.2f}x" for a, b in c["speedup_runs"])
            lines.append(f"| {c['temperature']:g} | {cell_text(c['a'])} | {cell_text(c['b'])} | {taus} | "
                         f"{comparison_text(c.get('tau_cmp'))} | {sps} | {comparison_text(c.get('speed_cmp'))} |")
    return "\n".join(lines)


def e2e_ceiling(results: Results) -> str:
    """How much of the target-only ceiling the trained drafters reach: the ceiling's predicted tau
    gain of a perfect K-mode (or path) drafter over a perfect product drafter beside the measured
    gain of each trained drafter over the trained product drafter, at T = 1."""
    from mfd_theory.report.ceiling import reach_lines

    d = results.main.data
    ceiling, rows = d.get("ceiling"), d.get("ceiling_reach") or []
    if not ceiling:
        return "This run measured no ceiling (--ceiling-prompts 0, or no T = 1 among its temperatures)."
    n = len(ceiling.get("prompts", []))
    opts = ceiling.get("options", {})
    lines = [f"The target-only ceiling on {n} calibration prompts (held out, never evaluated), T = 1, "
             f"{opts.get('samples')} sampled paths per prompt to fit the K-mode mixtures on and as many to check them "
             f"({ceiling.get('wall_s', 0):.0f} s). Predicted: the ceiling tree's tau over the target-marginal product "
             "tree's (tau = 1 + coverage), paired over the ceiling's prompts; measured: the trained drafter's tau over "
             "ddtree on the trained product drafter, paired over the evaluated prompts (runs 1: the main run at each "
             "grid budget, a prompts-only interval; runs > 1: the replicated comparison, each drafter at the budget "
             "the theory chose, runs as the unit). Reached: measured / predicted, the measured interval over the "
             "predicted point. The oracle bounds the Domino drafter.", ""]
    return "\n".join(lines + reach_lines(rows))
