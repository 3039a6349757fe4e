"""The headline block (docs/results.md, its first section; the README states one verdict per claim from it): a few numbers from several results files (the real pretrained
targets' ceiling and lossless check first, then the chimera bound's check, DDTree against MFD end to end, the out-of-sample prediction error, the natural-text
ceiling), each row naming the block with the full table.

:func:`headline` is a block (``block(results) -> str``, :mod:`.inputs`) that reads three files.
"""

from __future__ import annotations

from mfd_theory.report._text import method_label, value_with_spread
from mfd_theory.report.e2e import cell_text, gain_pair, greedy_loops
from mfd_theory.report.inputs import Results
from mfd_theory.report.intervals import floored_entries
from mfd_theory.report.real import headline_rows
from mfd_theory.formatting import comparison_text, is_best_budget, speed_gain_text, stored_number
from mfd_theory.results import Result

__all__ = ["HEADLINE_FILES", "headline", "in_words"]

#: the results files the headline needs besides end_to_end.json
HEADLINE_FILES = ("chimera_bound.json",)
#: read when present: the natural-text row is left out without it (a run that stopped before
#: its real-text step still has its replicated findings to state)
NATURAL = "natural/natural.json"
#: read when present: the real pretrained targets (``mfd real``), whose rows come first
REAL = "real/real.json"
#: read when present: the K = 8 run (``mfd e2e --preset k8``, the released drafters' K), whose
#: replicated findings get sentences of their own under the default run's
K8 = "e2e_k8/end_to_end.json"


def headline(results: Results) -> str:
    """The README's headline table: a few numbers from several results files (the chimera bound's
    check, the end-to-end DDTree vs MFD comparison, the out-of-sample prediction error, the natural
    text's ceiling), each with where the full table is."""
    lines = ["| question | the last run's answer | full table |", "|---|---|---|"]
    if _present(results, REAL):
        lines += headline_rows(results[REAL].data, "[`real`](real-targets.md#mfd-real)")
    cb = results["chimera_bound.json"]
    v, c = cb.data["verify"], cb.config
    lines.append(f"| Does every product-ranked tree that holds two futures disagreeing in m positions hold at least "
                 f"2^(m-1) - 1 chimeras? | {v['instances']:,} random instances, m = 1..{c['m_max']}: "
                 f"**{v['violations']} violations** ({v['ties']} exact ties set aside) | "
                 "[`chimera-bound`](#chimera-bound) |")
    e2e = results["end_to_end.json"]
    lines += _e2e_rows(e2e)
    pr = e2e.data.get("prediction") or {}
    if pr.get("n_cells"):
        tau, sp = pr.get("tau") or {}, pr.get("speedup") or {}
        lines.append(f"| How well are tau and speedup predicted before decoding, from calibration prompts only "
                     f"(same run, {pr['n_cells']} cells)? | tau: median \\|error\\| {100 * tau['median_abs_error']:.1f}%, "
                     f"worst {100 * tau['worst_abs_error']:.1f}%; speedup: median {100 * sp['median_abs_error']:.1f}%, "
                     f"worst {100 * sp['worst_abs_error']:.1f}% | [`prediction-check`](#prediction-check) |")
    have = _present(results, NATURAL)
    ceil = (results[NATURAL].data.get("ceiling") or {}) if have else {}
    parts = []
    for dom, by_t in ceil.items():
        e = by_t.get("1") or {}
        if not e:
            continue
        n = max(e["by_budget"], key=int)
        g = e["by_budget"][n]["gain"].get("oracle")
        if g:
            parts.append(f"{dom} {comparison_text(g)} at N = {n}")
    if parts:
        lines.append("| On natural text (Python's standard library) at T = 1, how much more does the target's own "
                     "oracle tree cover than the product tree of its own marginals (the room any drafter has over "
                     "a perfect product drafter)? | " + "; ".join(parts) + " | [`natural`](#natural) |")
    words = in_words(e2e.data)
    if _present(results, K8):
        k8 = in_words(results[K8].data, title="**In words, K = 8** (its own run, `mfd e2e --preset k8`, on the same "
                                              "target, product drafters and evaluated prompts; ")
        words += ([""] + k8) if k8 else []
    return "\n".join(lines + ([""] + words if words else []))


def _present(results: Results, name: str) -> bool:
    """Whether the optional results file ``name`` is loaded or on disk."""
    return name in results.loaded or (results.path(name) is not None and results.path(name).is_file())


def _speed(c: dict) -> str:
    return f"{cell_text(c['a'])} {comparison_text(c.get('speed_cmp'))}"


def _pick(verdicts: list[str]) -> str:
    """The scorer a user should pick from the best-mode-vs-mixture verdicts of one temperature."""
    if verdicts and all(v == "equivalent" for v in verdicts):
        return "either: the two trees decode at speeds equivalent within the margin"
    if "gain" in verdicts and "loss" not in verdicts:
        return "the best-mode tree"
    if "loss" in verdicts and "gain" not in verdicts:
        return "the mixture tree"
    if "gain" in verdicts:
        return "it depends on K (a gain at one, a loss at another)"
    return "no scorer measured better (inconclusive: the interval is wider than the margin)"


def in_words(d: dict, title: str = "**In words** (") -> list[str]:
    """The replicated comparisons in sentences, per temperature: MFD's (and DARTree's) speed
    against the product drafter, and which scorer an MFD user should pick; nothing without
    replicates (a single run is no finding). ``title``: the first line's opening."""
    rep = d.get("replicated") or {}
    comps = rep.get("comparisons") or []
    if not comps:
        return []
    out = [f"{title}{rep['runs']} independently trained drafter sets; speed gains paired over the evaluated "
           "prompts, each run one observation, 95% intervals Bonferroni-adjusted per question and temperature; "
           "gain / loss when the interval excludes 0, equivalent when it lies within ±3%, else inconclusive):"]
    for temp in sorted({c["temperature"] for c in comps}):
        at = [c for c in comps if c["temperature"] == temp]
        vs = [c for c in at if c.get("question", "against_product") == "against_product"]
        sc = [c for c in at if c.get("question") == "scorer"]
        obj = [c for c in at if c.get("question") == "objective"]
        parts = []
        if vs:
            parts.append(f"against the product drafter's {cell_text(vs[0]['b'])}: " + "; ".join(map(_speed, vs)))
        if sc:
            verdicts = [(c.get("speed_cmp") or {}).get("verdict", "inconclusive") for c in sc]
            parts.append("best-mode against mixture tree: " + "; ".join(map(_speed, sc))
                         + f"; so pick {_pick(verdicts)}")
        if obj:
            parts.append("winner-take-all against mixture training: " + "; ".join(map(_speed, obj)))
        out.append(f"* T = {temp:g}: " + ". ".join(parts) + "." + (_loop_note(d) if temp == 0 else ""))
    return out


def _loop_note(d: dict) -> str:
    """A warning for the T = 0 sentence when the run's greedy texts end in a shared loop."""
    s = greedy_loops(d)
    if s is None or not s["in_cycle"]:
        return ""
    return (f" (Read T = 0 with care: {s['in_cycle']} of {s['texts']} greedy texts end in "
            + ("the same loop" if s["distinct_cycles"] == 1 else f"{s['distinct_cycles']} loops")
            + ", so every T = 0 cell measures how well a drafter predicts "
            + ("it" if s["distinct_cycles"] == 1 else "them") + ".)")


_HEADLINE_QUESTIONS = {
    "against_product": "MFD and DARTree against the product drafter ({base})",
    "scorer": "which tree an MFD drafter should use: the best-mode tree against the mixture tree",
    "objective": "the winner-take-all training objective against the mixture objective",
}


def own_target_name(cfg: dict) -> str:
    """How the headline names an e2e run's target: what it is, with its size."""
    arch = "Qwen3.5 hybrid" if cfg.get("target_arch") == "qwen3_5" else "Qwen3"
    size = (f"{cfg['target_layers']} layers x {cfg['target_hidden']}, " if "target_layers" in cfg else "")
    return f"the package's own {arch} target ({size}trained here)"


def _e2e_rows(res: Result) -> list[str]:
    """Per question and temperature, the comparisons over the replicated runs (the e2e-replicated
    block); a run without replicates gives its single-run best-budget comparison, labelled as one
    run."""
    what = own_target_name(res.config or {})
    rep = res.data.get("replicated") or {}
    comps = floored_entries(rep.get("comparisons"), res.config)
    if not comps:
        return _single_run_rows(res)
    out = []
    for q, title in _HEADLINE_QUESTIONS.items():
        for temp in sorted({c["temperature"] for c in comps}):
            at = [c for c in comps if c["temperature"] == temp and c.get("question", "against_product") == q]
            if not at:
                continue
            parts = [f"{cell_text(c['a'])}: tau {comparison_text(c.get('tau_cmp'))}, speed "
                     f"{comparison_text(c.get('speed_cmp'))}" for c in at]
            out.append(f"| End to end, {what} on CPU, T = {temp:g}, over {rep['runs']} independently trained "
                       f"drafter sets, each method at the budget the theory chose before decoding: "
                       + title.format(base=cell_text(at[0]["b"])) + " | " + "; ".join(parts)
                       + " | [`e2e-replicated`](#e2e-replicated) |")
    return out


def _single_run_rows(res: Result) -> list[str]:
    """Per temperature, the fastest MFD drafter against the product drafter, each at its fastest
    budget in this one run (in sample), with the paired comparison of the e2e-gains block."""
    d = res.data
    rows = d["rows"]
    out = []
    for temp in sorted({r["temperature"] for r in rows}):
        best = [g for g in d.get("mfd_gains") or []
                if g["temperature"] == temp and g["method"] == "mfd" and is_best_budget(g)]
        pairs = [gain_pair(rows, g) + (g,) for g in best]
        pairs = [p for p in pairs if stored_number(p[0].get("speedup")) is not None and "method" in p[1]]
        if not pairs:
            continue
        a, b, _, g = max(pairs, key=lambda p: p[0]["speedup"])

        def at(r):
            return method_label(r) + ("" if r["method"] == "chain" else f" N = {r['budget']}")

        out.append(f"| End to end, {own_target_name(res.config or {})} on CPU, T = {temp:g}, one trained run: the product drafter "
                   f"against MFD, each at its fastest budget in this run | {at(b)}: tau {b['tau']:.2f}, "
                   f"{value_with_spread(b, 'speedup', suffix='x')}; {at(a)}: tau {a['tau']:.2f}, "
                   f"{value_with_spread(a, 'speedup', suffix='x')}; speed: {speed_gain_text(g)} (one run) | "
                   "[`e2e`](#e2e) and [`e2e-gains`](#e2e-gains) |")
    return out
