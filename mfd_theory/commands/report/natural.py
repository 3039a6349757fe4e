"""The report block of ``mfd natural`` (``natural/natural.json``, docs/results.md): the corpus and
the target, the target-only ceiling, the effective futures, the pipeline's tau / speedup on
held-out code and prose, and the answer per domain.

:func:`natural` is a block (``block(results) -> str``, :mod:`.inputs`); ``mfd natural`` prints it too.
"""

from __future__ import annotations

from mfd_theory.commands.report._text import mean_se, value_with_spread
from mfd_theory.commands.report.checks import prediction_summary
from mfd_theory.commands.report.inputs import Results
from mfd_theory.formatting import speed_gain_text, stored_number, tau_gain_text

__all__ = ["natural"]


def natural(results: Results) -> str:
    """``mfd natural`` (``natural/natural.json``): the corpus, the target, the target-only ceiling,
    the effective futures, and the pipeline's tau / speedup on held-out code and prose."""
    d, c = results.main.data, results.main.config
    ceil, e2e = d.get("ceiling", {}), d.get("e2e", {})
    lines = _setup(d)
    if ceil:
        lines += _ceiling(ceil, c) + _futures(ceil, c)
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
    """The target's product and oracle trees' expected acceptance per domain and budget, and the
    product tree's dead nodes."""
    L = c.get("block_size", 16) - 1
    lines = ["", f"**Ceiling, from the target alone** (L = {L}, T = 1; mean ± s.e. over held-out prompts): "
                 "expected accepted tokens per round of the target's best product tree (its sampled "
                 "per-position marginals, DDTree's ranking) and of its oracle tree (exact top-N prefixes, "
                 "best-first with target forwards); MC: the same from independent samples.", "",
             "| domain | N | product | oracle | oracle / product | MC product | MC oracle |",
             "|---|---|---|---|---|---|---|"]
    for dom, v in ceil.items():
        for n, b in v["by_budget"].items():
            lines.append(f"| {dom} | {n} | {mean_se(b['product'])} | {mean_se(b['oracle'])} | "
                         f"{mean_se(b['oracle_over_product'], '{:.3f}')} | {mean_se(b['mc_product'])} | "
                         f"{mean_se(b['mc_oracle'])} |")
    lines += [""] + [f"* {dom}: at N = {v['dead_at']} the product tree's dead share (P(s) <= {c.get('dead_eps')}) "
                     f"is {100 * v['dead']['dead_share'][0]:.1f}% ± {100 * (v['dead']['dead_share'][1] or 0):.1f}%, "
                     f"dead splices (dead and the prefix of no sampled continuation) "
                     f"{100 * v['dead']['dead_splice_share'][0]:.1f}%; all dead nodes of a tree together hold "
                     f"{v['dead']['dead_mass_lost'][0]:.4f} of the target's mass on average "
                     f"({v['n_prompts']} prompts)."
                     for dom, v in ceil.items()]
    return lines


def _futures(ceil: dict, c: dict) -> list[str]:
    """The held-out gain of K-mode mixtures over one mode, per domain and block length."""
    ks = c.get("futures_modes", [])[1:]
    lines = ["", "**Effective futures**: K-mode mixtures fitted by EM to the first half of each prompt's sampled "
                 "blocks, cut to their first l tokens; held-out log-likelihood gain over K = 1 (nats per block, "
                 "second half) and modes with weight >= 0.05.", "",
             "| domain | l | " + " | ".join(f"K = {k}" for k in ks) + " |",
             "|---|---|" + "---|" * (len(c.get("futures_modes", [])) - 1)]
    for dom, v in ceil.items():
        for ln, row in v["futures"].items():
            cells = [f"{mean_se(row[str(k)]['gain_over_k1'], '{:+.2f}')} ({row[str(k)]['modes_with_weight'][0]:.1f})"
                     for k in ks]
            lines.append(f"| {dom} | {ln} | " + " | ".join(cells) + " |")
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
        lines.append(f"| {r.get('dataset')} | {r['temperature']:g} | {r['method']} | {dr} | {r['budget']} | "
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
                f"mfd (K = {g['K']})" if g["method"] == "mfd" else f"ddtree on K = {g['K']} marginals")
            lines.append(f"| {g['dataset']} | {g['temperature']:g} | {what} | {g['budget']} vs {g['single_budget']} "
                         f"| {tau_gain_text(g)} | {speed_gain_text(g)} |")
    reach = e2e.get("ceiling_reach") or []
    if reach:
        lines += ["", "Share of the ceiling reached at T = 1 (accepted tokens per round, bonus excluded, over the "
                      "target's oracle / product coverage at the same N; the ceiling is measured at the prompt, "
                      "the decode over the whole answer, so this is indicative): " + "; ".join(
                          f"{r['dataset']} {r['method']} "
                          f"({'dartree' if 'dartree' in r['drafter'] else 'K = ' + str(r['K'])}) N = {r['budget']}: "
                          f"{100 * r['of_oracle']:.0f}% / {100 * (r['of_product'] or 0):.0f}%" for r in reach) + "."]
    return lines


def _answer(ceil: dict, e2e: dict) -> list[str]:
    """One bullet per domain: the ceiling's room, the futures, and what the trained drafters did."""
    out = []
    for dom, v in ceil.items():
        parts = []
        bb = v["by_budget"]
        n = max(bb, key=int)
        r = bb[n]["oracle_over_product"][0]
        if r is not None:
            parts.append(f"the target's oracle tree covers {100 * (r - 1):+.1f}% more than its best product tree at "
                         f"N = {n} (the most any mixture or path drafter could gain in accepted tokens)")
        fut = v.get("futures") or {}
        if fut:
            parts.append(_best_mixture(fut))
        for g in e2e.get("best_budget") or []:
            if g["dataset"] != dom or g["method"] not in ("mfd", "dartree"):
                continue
            what = "dartree" if g["method"] == "dartree" else f"mfd K = {g['K']}"
            parts.append(f"T = {g['temperature']:g} {what} vs ddtree K = 1, each at its best budget: tau "
                         f"{tau_gain_text(g)}, speed {speed_gain_text(g)}")
        if parts:
            out.append(f"* {dom}: " + "; ".join(parts) + ".")
    return out


def _best_mixture(fut: dict) -> str:
    """What the effective futures say at the longest block length: the best K, or that none beats K = 1."""
    ln = max(fut, key=int)
    best_k = max(fut[ln], key=lambda k: fut[ln][k]["gain_over_k1"][0] or 0)
    g = fut[ln][best_k]["gain_over_k1"][0]
    if best_k == "1":
        k2 = min((k for k in fut[ln] if k != "1"), key=int, default=None)
        return (f"no mixture of K > 1 modes fitted to sampled {ln}-token blocks beats one mode on held-out blocks"
                + (f" (K = {k2}: {fut[ln][k2]['gain_over_k1'][0]:+.2f} nats per block)" if k2 else ""))
    return f"the best mixture of sampled {ln}-token blocks is K = {best_k} ({g:+.2f} nats per block over K = 1)"
