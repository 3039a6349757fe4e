"""Report blocks of the benchmarks (docs/benchmarks.md): tree building, EM fitting, the decoding
split with its verify and GDN profiles, the drafting round's cost by context and modes, and
batched decoding against its prediction.

Each block is ``block(results) -> str`` (:mod:`.inputs`); what each benchmark measures is in docs/benchmarks.md.
"""

from __future__ import annotations

import os
import statistics

from mfd_theory.layouts import target_modes
from mfd_theory.report._text import sorted_ints, span
from mfd_theory.report.inputs import Results
from mfd_theory.results import Result

__all__ = ["bench_batch", "bench_decode", "bench_draft", "bench_fit", "bench_trees", "hybrid_table", "trees_markdown"]


def bench_trees(results: Results) -> str:
    return trees_markdown(results.main)


def bench_fit(results: Results) -> str:
    r, c = results.main.data, results.main.config
    return (f"EM on {c['n']:,} samples, L = {c['L']}, V = {c['V']:,}, K = {c['K']}, {c['n_restarts']} restarts: "
            f"soft EM {r['fit_soft_s']:.2f} s, winner-take-all {r['fit_hard_s']:.2f} s; one numba EM iteration "
            f"{1e3 * r['numba_iter_s']:.0f} ms vs {1e3 * r['numpy_iter_s']:.0f} ms in NumPy "
            f"(first call, numba compile: {r['compile_s']:.1f} s).")


# ------------------------------------------------------------------------------ decoding


def bench_decode(results: Results) -> str:
    """The decoding split per method; then the verify-latency profile (attention target) or the
    GDN tree-verification profile (hybrid target, ``--arch qwen3_5``)."""
    d, c = results.main.data, results.main.config
    lines = [f"{d['model']} on {d['device']}, budget {c['budget']}, block {c['block_size']}, K = {c['num_modes']}:",
             "", "| method | tokens/s | draft | tree + mask | verify | walk | commit | outside the two forwards |",
             "|---|---|---|---|---|---|---|---|"]
    for m, r in d["methods"].items():
        s = r["time_split_s"]
        tot = sum(s[k] for k in ("draft", "tree", "verify", "walk", "commit")) or 1.0
        pct = [f"{100 * s[k] / tot:.1f}%" for k in ("draft", "tree", "verify", "walk", "commit")]
        if m == "ar":
            pct[0] = "-"
        lines.append(f"| {m} | {r['tokens_per_s']:.1f} | " + " | ".join(pct) + f" | {100 * r['overhead_share']:.1f}% |")
    p = d.get("verify_profile")
    if p:
        lines += ["", "Verify latency (ms) by tree size N: " + ", ".join(
            f"{n}: {t:.1f}" for n, t in zip(p["tree_sizes"], p["verify_ms"])) + f"; an AR step {p['t_target_ms']:.1f} ms."]
    if d.get("hybrid_profile"):
        lines += _gdn_profile(d["hybrid_profile"], c)
    warnings = d.get("timing_warnings") or []
    if warnings:  # the run said its timing was disturbed: the block says so too
        lines += ["", "**This run's timing was disturbed** (the times above do not measure the methods alone): "
                  + "; ".join(warnings) + "."]
    return "\n".join(lines)


def _gdn_profile(prof: dict, c: dict) -> list[str]:
    """The hybrid target's GDN tree-verification profile and the sentence that reads it."""

    rows = prof["rows"]
    ref = next((r for r in rows if r["N"] == c["budget"]), rows[len(rows) // 2])
    trees = [r for r in rows if r["N"] > 1] or rows
    return ["", f"GDN profile (medians of {c['profile_repeats']} interleaved repeats after a "
                f"{c['prompt_len']}-token prompt, times in ms):", "", hybrid_table(prof), "",
            f"The GDN layers' tree pass over N = {ref['N']} nodes costs {ref['gdn_tree_over_chain']:.2f}x their "
            f"chain pass over {ref['N']} tokens ({span([r['gdn_tree_over_chain'] for r in trees], suffix='x')} "
            f"for N = {trees[0]['N']} to {trees[-1]['N']}); the GDN layers take "
            f"{span([100 * r['gdn_share'] for r in rows], '{:.0f}', '%')} of the hybrid's verify, which costs "
            f"{span([r['hybrid_over_attention'] for r in rows], suffix='x')} the attention target's; verify + "
            f"commit at N = {ref['N']}: replay {ref['round_replay_ms']:.1f} ms, select "
            f"{ref['round_select_ms']:.1f} ms"
            + (f", path {ref['round_path_ms']:.1f} ms." if "round_path_ms" in ref else ".")]


# ------------------------------------------------------------------------------ drafting round


def bench_draft(results: Results) -> str:
    """``mfd bench draft`` at one preset shape: drafting-round ms before / after per (K, T) as the
    span over repeats, the two ratio targets as min / median / max, then the arithmetic floor and
    the target's verify path."""

    d, c = results.main.data, results.main.config
    reps = d["repeats"]
    modes, contexts = sorted_ints(c["modes"]), sorted_ints(c["contexts"])
    lo, hi, kmax = contexts[0], contexts[-1], modes[-1]
    ratios = d["ratios"]

    def three(key):
        return _min_median_max(ratios[key])

    load = d.get("load_avg_1min")
    load_s = (f"1-minute load average {load[0]:.1f} at the start and {load[-1]:.1f} at the end on "
              f"{d.get('cpu_count', '?')} cores" if load else "machine load not recorded")
    lines = [f"`{c.get('shape', c.get('preset'))}` shape, target {d['model']} (width {d['width']}); {c['draft_layers']} draft layer(s), "
             f"block {c['block_size']}, {c['new_rows']} new context rows per round, fastest of {c['rounds']} rounds "
             f"per cell, {len(reps)} repeats in one run, {c['threads']} thread(s); {load_s}. Times in ms, a cell is "
             "the span over repeats; ratios are min / median / max over repeats:",
             "", "| round | before | folded | after |", "|---|---|---|---|"]

    def cell(path, k, t):  # "folded" exists for K > 1 only
        vals = [r["draft_ms"].get(f"{path},K={k},T={t}") for r in reps]
        return span(vals) if None not in vals else "-"

    for k in modes:
        for t in contexts:
            lines.append(f"| K = {k}, T = {t} | " + " | ".join(cell(p, k, t) for p in ("before", "folded", "after")) + " |")
    lines.append(f"| K = 1: T = {hi} / T = {lo} (target <= 3) | {three(f'before: K=1 T={hi} / K=1 T={lo}')} | - | "
                 f"{three(f'after: K=1 T={hi} / K=1 T={lo}')} |")
    tk = target_modes(modes)
    for k in (k for k in modes if k > 1):  # every K's cost at the longest context, beside K = 1
        note = " (target <= 2.5)" if k == tk else ""
        lines.append(f"| T = {hi}: K = {k} / K = 1{note} | "
                     + " | ".join(three(f"{p}: K={k} T={hi} / K=1 T={hi}") if f"{p}: K={k} T={hi} / K=1 T={hi}" in ratios
                                  else "-" for p in ("before", "folded", "after")) + " |")
    lines += ["", _verify_path(d, c, contexts, kmax)]
    return "\n".join(lines)


def _min_median_max(values) -> str:
    v = sorted(values)
    return f"{v[0]:.2f} / {statistics.median(v):.2f} / {v[-1]:.2f}"


def _verify_path(d: dict, c: dict, contexts: list[int], kmax: int) -> str:
    """The paragraph under the drafting table: SDPA calls alone, then the target's verify and
    commit with the in-place cache and with HF's concatenating one, and where its time goes."""
    reps, ratios = d["repeats"], d["ratios"]
    lo, hi = contexts[0], contexts[-1]

    def three(key):
        return _min_median_max(ratios[key])

    def per_t(key):  # keyed by T: ints in a fresh result, strings once read back from JSON
        return {t: [r[key].get(t, r[key].get(str(t))) for r in reps] for t in contexts}

    def at_each_t(ms):
        return ", ".join(f"{span(ms[t])} ms at T = {t}" for t in contexts)

    ver, cat, concat, repeat = per_t("verify_ms"), per_t("cache_cat_ms"), per_t("verify_concat_ms"), per_t("kv_repeat_ms")
    share = span([100 * x for x in ratios[f"verify: cache copy share at T={hi}"]], "{:.1f}", "%")
    repeat_share = span([100 * x for x in ratios[f"verify: kv head repeat share at T={hi}"]], "{:.1f}", "%")
    return (f"SDPA calls alone, K = {kmax} / K = 1 at T = {hi}: "
            f"{three(f'attention alone: K={kmax} T={hi} / K=1 T={hi}')} (one call per mode)"
            + (f", {three(f'folded attention alone: K={kmax} T={hi} / K=1 T={hi}')} (folded, masked)"
               if kmax > 1 else "")
            + f". Verify of an N = {c['verify_nodes']} tree plus commit with `TargetModel`'s in-place cache: "
            + at_each_t(ver) + f" (T = {hi} / T = {lo}: {three(f'verify: T={hi} / T={lo}')})"
            + "; with HF's concatenating `DynamicCache`: " + at_each_t(concat)
            + f" (concatenating / in place at T = {hi}: {three(f'verify: concatenating / in-place cache at T={hi}')})"
            + "; the cache concatenation `DynamicCache.update` does per forward: " + at_each_t(cat)
            + f" ({share} of the verify at T = {hi})."
            + " The key/value head repeat HF's SDPA path does per forward for a GQA target given a mask "
              "(`repeat_kv`): " + at_each_t(repeat) + f" ({repeat_share} of the verify at T = {hi}).")


# ------------------------------------------------------------------------------ batched decoding

#: (method, policy, column title) of the batch table, in column order
_BATCH_SERIES = [("ar", "off", "AR"), ("chain", "per_request", "chain"), ("ddtree", "per_request", "DDTree per request"),
                 ("ddtree", "global", "DDTree global"), ("ddtree", "proportional", "DDTree proportional"),
                 ("ddtree", "auto", "DDTree auto"), ("mfd", "per_request", "MFD per request"),
                 ("mfd", "global", "MFD global"), ("mfd", "proportional", "MFD proportional"), ("mfd", "auto", "MFD auto")]


def bench_batch(results: Results) -> str:
    """``mfd bench batch``: per batch size, the best measured cell of each (method, policy) over the
    whole decode, then the paired, replicated comparisons of the shared policies and of auto, the
    prediction error, the crossover, the issue's targets and the GPU prediction (labelled)."""
    d, c = results.main.data, results.main.config
    rows = d["rows"]
    lines = [f"{d['model']}; {len(d['drafter_seeds'])} drafter sets (seeds {', '.join(map(str, d['drafter_seeds']))}); "
             f"{d['eval_prompts']} held-out prompts (at least {c['min_requests']} per B, in batches of B), "
             f"{c['max_new_tokens']} new tokens each, {c['passes']} passes, {c['threads']} thread(s); predictions from "
             f"{d['calibration_prompts']} held-out prompts (never evaluated), written before the evaluation; "
             f"{d['times_s']['total'] / 60:.0f} min{_load_text(d)}. Whole-decode tokens/s (every round, the batch's tail included; mean "
             "over drafter sets), tokens per request-round over the whole decode, and N (per request; shared "
             "policies: the round's total):", "",
             "| B | " + " | ".join(lbl for _, _, lbl in _BATCH_SERIES) + " |", "|---" * (len(_BATCH_SERIES) + 1) + "|"]
    for b in sorted({r["batch_size"] for r in rows}):
        lines.append(f"| {b} | " + " | ".join(_batch_cell(rows, b, m, pol) for m, pol, _ in _BATCH_SERIES) + " |")
    lines += ["", *_batch_findings(d)]
    return "\n".join(lines)


def _batch_cell(rows: list[dict], b: int, method: str, policy: str) -> str:
    """The fastest measured cell of (method, policy) at batch size ``b`` over the whole decode."""
    cand = [r for r in rows if r["batch_size"] == b and r["method"] == method and r["policy"] == policy]
    if not cand:
        return "-"
    r = max(cand, key=lambda r: r["full_tokens_per_s"])
    n = "" if policy in ("off", "auto") else f" N={r['nodes']}"
    tpr = "" if policy == "off" else f", {r['full_tokens_per_round']:.2f}/round"
    return f"{r['full_tokens_per_s']:.0f}{tpr}{n}"


def _cmp(c: dict | None) -> str:
    return "-" if not c else f"{100 * c['gain']:+.1f}% [{100 * c['lo']:+.1f}, {100 * c['hi']:+.1f}] {c['verdict']}"


def _batch_findings(d: dict) -> list[str]:
    """The bullets under the batch table."""
    rows, ch, pc = d["rows"], d["checks"], d["predicted_crossover"]
    s = ch["summary"]
    errs = sorted(abs(r["prediction_error"]) for r in rows)
    med = errs[len(errs) // 2] if len(errs) % 2 else 0.5 * (errs[len(errs) // 2 - 1] + errs[len(errs) // 2])
    shared = {}
    for g in ch["shared_vs_best_per_request"]:
        shared.setdefault((g["method"], g["policy"]), []).append(
            f"{g['batch_size']}: {100 * g['gain']:+.1f}% (request tok/s {_cmp(g['request_tokens_per_s'])})")
    name = {"ddtree": "DDTree", "mfd": "MFD"}
    return [*_whole_decode_lines(d.get("whole_decode"), name),
        "- best shared cell against the best per-request N, whole-decode tokens/s (and each request's tokens/s, "
        "paired over the drafter sets, Bonferroni over the table), by B:",
        *[f"  - {name[m]} {pol}: " + "; ".join(v) for (m, pol), v in shared.items()],
        f"- a shared policy beats the best per-request N by >= 5% of whole-decode tokens/s at some B >= 4: "
        f"**{'yes' if s['shared_5pct_somewhere_b4'] else 'no'}** (best {100 * s['best_shared_gain_b4']:+.1f}%)",
        f"- auto within 3% (or the pass-to-pass spread) of the best measured configuration at every B: "
        f"**{'yes' if s['auto_within_3pct_everywhere'] else 'no'}** (worst {100 * s['worst_auto_gap']:+.1f}%, the "
        f"pass-to-pass spread there {100 * s.get('worst_auto_gap_spread', float('nan')):.1f}%); "
        f"auto never a loss against the best per-request N (paired request tokens/s): "
        f"**{'yes' if s['auto_never_loses_to_best_per_request'] else 'no'}**",
        f"- share of a round outside the two forwards at B = 16, worst cell: {100 * s['overhead_at_16_max']:.1f}% "
        f"(target <= {100 * s['overhead_target']:.0f}%)",
        f"- predicted vs measured steady tokens/s over all {len(rows)} cells: median error {100 * med:.1f}%, "
        f"worst {100 * errs[-1]:.1f}%",
        "- the batch size from which batched AR is the fastest configuration at every larger B: "
        + "; ".join(f"{what} {'B = ' + str(v) if v is not None else 'none (speculation pays at the largest B)'}"
                    for what, v in (("measured", d["measured_crossover"]), ("predicted for DDTree", pc.get("ddtree")),
                                    ("predicted for MFD", pc.get("mfd")))),
        f"- PREDICTED, not measured, for a GPU from the packaged `{d['gpu_profile']}` table (an assumption; a "
        "forward costed by its total rows): best policy / AR throughput at B = "
        + ", ".join(f"{r['batch_size']}: {r['tokens_per_s'] / r['ar_tokens_per_s']:.2f}x ({r['policy']})"
                    for r in d["gpu_predicted"] if r["method"] == "mfd") + " (MFD)",
    ]


def _whole_decode_lines(w: dict | None, name: dict) -> list[str]:
    """The bullets on why a shared budget pays less over the whole decode (the bench's replay of
    the evaluated prompts' traces), at the middle budget."""
    if not w or not w.get("rows"):
        return []
    budgets = sorted({r["nodes"] for r in w["rows"]})
    n = budgets[len(budgets) // 2]
    lines = [f"- the whole decode, replayed from the greedy traces of {w['prompts']} evaluated prompts (every drafter "
             f"set; replay equals the measured rounds for {100 * w['replay_matches_measured']['share']:.0f}% of "
             f"{w['replay_matches_measured']['requests']} request decodes), N = {n}, by B: the policy's accepted "
             "tokens on per-request's own rounds / per-request's there; per-request's accepted tokens on the policy's "
             "rounds / on its own (where its rounds start); tokens per request-round over the whole decode "
             "against per-request, paired over the drafter sets:"]
    for m in ("ddtree", "mfd"):
        for pol in ("global", "proportional", "oracle"):
            parts = [f"{r['batch_size']}: {100 * r[pol]['same_rounds']:+.1f}% / {100 * r[pol]['shift']:+.1f}% / "
                     f"{_cmp(r[pol]['full'])}" for r in w["rows"] if r["method"] == m and r["nodes"] == n]
            if parts:
                lines.append(f"  - {name[m]} {pol}: " + "; ".join(parts))
    return lines


def _load_text(d: dict) -> str:
    """The run's machine load (start and end), when it recorded it."""
    la = d.get("load_average") or {}
    if la.get("start") is None or la.get("end") is None:
        return ""
    return f", machine load {la['start']:.1f} at the start and {la['end']:.1f} at the end on {la.get('cpus')} CPUs"


# ------------------------------------------------------------------ the benchmarks' own tables


def _median(xs) -> float:
    return float(statistics.median(xs))


def trees_markdown(result: Result) -> str:
    d = result.data
    ms = lambda xs: f"{_median(xs) * 1e3:.2f}"  # noqa: E731
    us = lambda xs: f"{_median(xs) * 1e6:.1f}"  # noqa: E731
    lines = [
        f"Load average at the end of the run: {d.get('load_avg')} (cores: {os.cpu_count()}).",
        "",
        "Dense input (float32 [K, L, V]); times in ms, median; ratio < 1 means the builder is faster.",
        "",
        "| K | N | builder | build | argpartition | max | build/argpartition | build/max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in d["dense"]:
        lines.append(
            f"| {r['K']} | {r['N']} | {r['builder']} | {ms(r['build_s'])} | {ms(r['argpartition_s'])} "
            f"| {ms(r['max_s'])} | {r['build_over_argpartition']:.2f} | {r['build_over_max']:.2f} |"
        )
    lines += [
        "",
        "Top-k candidate input (sorted, as torch.topk hands it over) vs the plain heapq lattice;",
        "times in microseconds. 'kernel' is the builder itself on validated lists; 'call' adds the public",
        "wrapper (validation, a float64 copy, the tree object).",
        "",
        "| N | k | kernel | call | heapq twin | heapq/kernel | heapq/call | same scores |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in d["candidates"]:
        lines.append(
            f"| {r['N']} | {r['k']} | {us(r['kernel_s'])} | {us(r['build_s'])} | {us(r['heapq_s'])} "
            f"| {r['heapq_over_kernel']:.1f}x | {r['heapq_over_build']:.1f}x | {r['scores_agree']} |"
        )
    mc = d["monte_carlo"]
    lines += [
        "",
        f"Monte Carlo: simulate_acceptance, N = {mc['N']}, L = {result.config['L']}, "
        f"K = {mc['K']} target, {mc['walks']:,} walks: {_median(mc['time_s']):.3f} s, "
        f"{mc['walks_per_s']:,.0f} walks/s including the per-call setup of "
        f"{_median(mc['setup_s']) * 1e3:.1f} ms, {mc['walks_per_s_after_setup']:,.0f} walks/s after it "
        f"(mean accepted {mc['mean_accepted']:.3f}).",
    ]
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    for t in d.get("targets", []):
        lines.append(f"| {t['what']} | {t['value']:,.2f} | {'yes' if t['met'] else 'NO'} |")
    for n in d.get("notes", []):
        lines.append(f"NOTE: {n}")
    return "\n".join(lines)


def hybrid_table(prof: dict) -> str:
    """The hybrid profile as a markdown table (times are medians in ms)."""
    sb = prof["state_bytes"]
    lines = [f"hybrid layers {''.join('G' if t == 'linear_attention' else 'A' for t in prof['layer_types'])} "
             f"(G = Gated DeltaNet, A = attention); GDN state per sequence {sb['per_snapshot'] / 2 ** 10:.0f} KiB",
             "", "| N | depth | attention verify | hybrid verify | hybrid / attention | GDN in tree pass | GDN share | "
             "GDN in chain pass | GDN tree / chain | replay: commit, verify + commit | "
             "select: verify, commit, verify + commit | path: verify, commit, verify + commit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in prof["rows"]:
        lines.append(f"| {r['N']} | {r['depth']} | {r['attention_ms']:.2f} | {r['replay_ms']:.2f} | "
                     f"{r['hybrid_over_attention']:.2f}x | {r['gdn_tree_ms']:.2f} | {100 * r['gdn_share']:.0f}% | "
                     f"{r['gdn_chain_ms']:.2f} | {r['gdn_tree_over_chain']:.2f}x | {r['commit_replay_ms']:.2f}, "
                     f"{r['round_replay_ms']:.2f} | {r['select_ms']:.2f}, {r['commit_select_ms']:.2f}, "
                     f"{r['round_select_ms']:.2f} |" + (f" {r['path_ms']:.2f}, {r['commit_path_ms']:.2f}, "
                                                        f"{r['round_path_ms']:.2f} |" if "path_ms" in r else " - |"))
    big = prof.get("state_bytes_27b")
    if big:
        mib = 2 ** 20
        lines += ["", f"Qwen3.5-27B-shaped stack ({big['gdn_layers']} GDN layers): recurrent state "
                      f"{big['recurrent_per_layer'] / mib:.1f} MiB per layer, {big['per_snapshot'] / mib:.1f} MiB "
                      f"per node with conv windows; per round at N = 64: select keeps 65 snapshots = "
                      f"{65 * big['per_snapshot'] / 2 ** 30:.2f} GiB, replay keeps 65 input rows per GDN layer = "
                      f"{65 * big['gdn_layers'] * big['input_row_per_layer'] / mib:.1f} MiB (bf16)"
                      + (f", path keeps 65 rows of key, delta and decay per GDN layer = "
                         f"{65 * big['gdn_layers'] * big['path_row_per_layer'] / mib:.1f} MiB"
                         if "path_row_per_layer" in big else "")]
    return "\n".join(lines)
