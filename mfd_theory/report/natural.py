"""The report block of ``mfd natural`` (``natural/natural.json``, docs/results.md): the corpus and
the target, the target-only ceiling (``mfd ceiling``'s tables), the pipeline's tau / speedup on
held-out code and prose, and the answer per domain.

:func:`natural` is a block (``block(results) -> str``, :mod:`.inputs`); ``mfd natural`` prints it too.
"""

from __future__ import annotations

from mfd_theory.report._text import value_with_spread
from mfd_theory.report.ceiling import ceiling_lines, tree_label
from mfd_theory.report.checks import prediction_summary
from mfd_theory.report.inputs import Results
from mfd_theory.formatting import method_label as fmethod_label
from mfd_theory.formatting import comparison_text, speed_gain_text, stored_number, tau_gain_text

__all__ = ["natural"]


def natural(results: Results) -> str:
    """``mfd natural`` (``natural/natural.json``): the corpus, the target, the target-only ceiling,
    and the pipeline's tau / speedup on held-out code and prose."""
    d, c = results.main.data, results.main.config
    ceil, e2e = d.get("ceiling", {}), d.get("e2e", {})
    lines = _setup(d)
    if ceil:
        lines += _ceiling(ceil, c)
    lines += _end_to_end(e2e)
    answer = _answer(ceil, e2e)
    if answer:
        lines += ["", "**The answer, per domain** (from the numbers above):", "", *answer]
    return "\n".join(lines)


def _setup(d: dict) -> list[str]:
    """The corpus, the trained target, the machine's costs and the wall time of each step."""
    prov, tgt = d.get("provenance", {}), d.get("target", {})
    nu, nh, ch = prov.get("n_units", {}), prov.get("n_heldout", {}), prov.get("chars", {})
    lines = [f"Corpus: Python {prov.get('python_version')} standard library, {nu.get('code')} modules + "
             f"{nu.get('prose')} documentation topics ({nh.get('code')} + {nh.get('prose')} held out, by module); "
             f"training text {ch.get('train', {}).get('code', 0) / 1e6:.1f} MB code + "
             f"{ch.get('train', {}).get('prose', 0) / 1e6:.2f} MB prose; text sha256 "
             f"`{str(prov.get('text_sha256'))[:16]}`"
             + (" (a subset of units)" if prov.get("subset") else "") + "."]
    ppl = tgt.get("perplexity", {})
    if tgt:
        a = tgt.get("arch", {})
        lines.append(f"Target: Qwen3 {a.get('num_layers')} layers x {a.get('hidden_size')}, "
                     f"{tgt.get('params', 0) / 1e6:.1f} M parameters, vocabulary {prov.get('vocab_size')}, "
                     f"{tgt.get('train', {}).get('steps')} steps in {tgt.get('train_seconds', 0) / 60:.1f} min on "
                     f"{tgt.get('threads')} thread{'' if tgt.get('threads') == 1 else 's'}"
                     + (f" (resumed from step {tgt['resumed_from_step']}; the time is that of the last segment)"
                        if tgt.get("resumed_from_step") else "")
                     + f" (loss {tgt.get('loss_first', 0):.2f} -> {tgt.get('loss_last', 0):.2f}); "
                     "held-out perplexity: " + ", ".join(
                         f"{dom} {v['perplexity']:.1f}" for dom, v in ppl.items()) + ".")
    cost = d.get("e2e", {}).get("cost") or {}
    if cost:
        vo = cost.get("verify_over_draft") or {}
        lines.append(f"Cost on this machine (eval's round profile): one target token {cost['t_target_ms']:.1f} ms, "
                     f"one drafting pass (K = 1) {cost['t_draft_ms']:.1f} ms (ratio {cost['target_over_draft']:.1f}); "
                     "verify / draft: " + ", ".join(f"N = {n}: {v:.1f}" for n, v in vo.items()) + ".")
    secs = d.get("seconds") or {}
    if secs:
        lines.append("Wall time per step: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in secs.items() if v)
                     + f"; total {d.get('total_seconds', 0) / 60:.1f} min.")
    return lines


def _ceiling(ceil: dict, c: dict) -> list[str]:
    """The ceiling's three tables (:func:`~mfd_theory.report.ceiling.ceiling_lines`) under
    what they measure and what they bound."""
    first = next(iter(next(iter(ceil.values())).values()))
    lines = ["", f"**Ceiling, from the target alone** (`mfd ceiling`'s measurement, docs/ceiling.md; L = "
                 f"{first['L']}, {first['samples']} paths sampled per prompt and temperature to fit on and as many "
                 f"again to check, {first['n_prompts']} held-out prompts per domain). Three trees per prompt: the "
                 "product tree ranks the target's own per-position marginals (the mean of its exact conditionals "
                 "along the sampled paths: what a perfect DFlash drafter would put in DDTree's tree); a K-mode tree "
                 "ranks a K-mode mixture fitted to those conditionals (what a K-mode MFD drafter could rank, as far "
                 "as the fit finds its modes); the oracle tree is the target's exact top-N prefixes. The oracle's "
                 "gain bounds what any drafter could add over the product tree of the target's own marginals "
                 "at that temperature; it is not a bound over every product drafter (one whose marginals differ "
                 "from the target's can rank a better tree), and it says nothing about T = 0, where every tree is "
                 "the greedy chain.", "", *ceiling_lines(ceil, c.get("dead_eps"))]
    return lines


def _end_to_end(e2e: dict) -> list[str]:
    """The pipeline's rows, its out-of-sample prediction, each method at its best budget against
    DDTree on the K = 1 drafter, and the share of the ceiling reached."""
    rows = [r for r in e2e.get("rows", []) if r["method"] != "ar"]
    if not rows:
        return []
    ec = e2e.get("config", {})
    lines = ["", f"**End to end** (`mfd distill` / `train-drafter` / `eval`; {ec.get('max_prompts')} held-out "
                 f"prompts per domain x {ec.get('max_new_tokens')} new tokens, {ec.get('passes')} timing passes; "
                 "speedup mean ± std over passes):", "",
             "| domain | T | method | drafter | N | tau | speedup | dead share |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        dr = "dartree" if "dartree" in r["drafter"] else f"K = {r['K']}"
        ds = stored_number(r.get("dead_share"))
        lines.append(f"| {r.get('dataset')} | {r['temperature']:g} | {fmethod_label(r['method'], r.get('scorer'))} | "
                     f"{dr} | {r['budget']} | "
                     f"{r['tau']:.2f} | {value_with_spread(r, 'speedup')} | "
                     f"{'-' if ds is None else f'{100 * ds:.0f}%'} |")
    line = prediction_summary(e2e.get("prediction"), f"`mfd eval`'s calibration: the first "
                              f"{ec.get('calibration_count')} held-out prompts of each domain, held back and "
                              "never evaluated")
    if line:
        lines += ["", line]
    comps = e2e.get("best_budget") or []
    if comps:
        lines += ["", "Each method at its fastest budget against DDTree on the K = 1 drafter at its fastest "
                      "(budgets picked on this run's own timings). Gains are paired over the run's prompts (the log ratio of the two methods' tau, and of each prompt's own decode speed); intervals are prompts-only (one trained run: a retrained drafter can land outside them), Bonferroni-adjusted over each table's entries; words: docs/statistics.md.",
                  "", "| domain | T | method | N vs N | tau gain | speed gain |", "|---|---|---|---|---|---|"]
        for g in comps:
            what = "dartree" if g["method"] == "dartree" else (
                f"{fmethod_label('mfd', g.get('scorer'))} (K = {g['K']})" if g["method"] == "mfd"
                else f"ddtree on K = {g['K']} marginals")
            lines.append(f"| {g['dataset']} | {g['temperature']:g} | {what} | {g['budget']} vs {g['single_budget']} "
                         f"| {tau_gain_text(g)} | {speed_gain_text(g)} |")
    reach = e2e.get("ceiling_reach") or []
    if reach:
        lines += ["", "Share of the ceiling reached at T = 1 (accepted tokens per round, bonus excluded, over the "
                      "target's oracle / product coverage at the same N; the ceiling is measured at the prompt, "
                      "the decode over the whole answer, so this is indicative): " + "; ".join(
                          f"{r['dataset']} {fmethod_label(r['method'], r.get('scorer'))} "
                          f"({'dartree' if 'dartree' in r['drafter'] else 'K = ' + str(r['K'])}) N = {r['budget']}: "
                          f"{100 * r['of_oracle']:.0f}% / {100 * (r['of_product'] or 0):.0f}%" for r in reach) + "."]
    gain_reach = e2e.get("gain_reach") or []
    if gain_reach:
        from mfd_theory.report.ceiling import reach_lines

        lines += ["", "The ceiling's predicted tau gain (a perfect K-mode drafter's tree over the target-marginal "
                      "product tree, paired over the ceiling's prompts) beside each trained drafter's measured tau "
                      "gain over ddtree on the K = 1 drafter at the same N (one trained run: a prompts-only "
                      "interval), T = 1:", "", *reach_lines(gain_reach)]
    return lines


def _answer(ceil: dict, e2e: dict) -> list[str]:
    """One bullet per domain: per temperature, the ceiling's room at the largest budget and the
    best K-mode tree's share of it and of the total correlation; then what the trained drafters did."""
    out = []
    for dom, by_t in ceil.items():
        parts = []
        for tk, tab in by_t.items():
            n = max(tab["by_budget"], key=int)
            gains = tab["by_budget"][n]["gain"]
            if not gains.get("oracle"):
                continue
            text = (f"at T = {tk} and N = {n}, the target's oracle tree against the product tree of its own "
                    f"marginals: {comparison_text(gains['oracle'])} in coverage")
            modes = [t for t in tab["trees"] if t not in ("product", "oracle") and gains.get(t)]
            if modes:
                best = max(modes, key=lambda t: gains[t]["gain"])
                text += f", the best fitted K-mode tree ({tree_label(best)}) {comparison_text(gains[best])}"
            held = {k: v for k, v in tab["heldout_gain"].items() if v[0] is not None}
            if held and tab["tc"][0]:
                k = max(held, key=lambda k: held[k][0])
                text += (f"; of the block's total correlation, {tab['tc'][0]:.1f} nats, the best K-mode fit (K = {k}) "
                         f"recovers {held[k][0]:+.2f} on held-out paths ({100 * held[k][0] / tab['tc'][0]:+.0f}%)")
            parts.append(text)
        for g in e2e.get("best_budget") or []:
            if g["dataset"] != dom or g["method"] not in ("mfd", "dartree"):
                continue
            what = "dartree" if g["method"] == "dartree" else f"{fmethod_label('mfd', g.get('scorer'))} K = {g['K']}"
            parts.append(f"T = {g['temperature']:g} {what} vs ddtree K = 1, each at its best budget: tau "
                         f"{tau_gain_text(g)}, speed {speed_gain_text(g)}")
        if parts:
            out.append(f"* {dom}: " + "; ".join(parts) + ".")
    return out
