"""What the benchmark commands print when they finish (``mfd bench batch``, ``decode``, ``draft``,
``gpu-check``): a summary of the result, as text for the terminal, from the result alone (the pages'
Markdown blocks of the same runs are :mod:`mfd_theory.report.bench`)."""

from __future__ import annotations

import statistics

from mfd_theory.layouts import target_modes
from mfd_theory.report._text import sorted_ints
from mfd_theory.report.bench import hybrid_table
from mfd_theory.results import Result

__all__ = ["bench_batch_text", "bench_decode_text", "bench_draft_text", "gpu_check_text"]


def bench_batch_text(result: Result) -> str:
    """``mfd bench batch``'s summary on the terminal."""
    d, c = result.data, result.config
    lines = [f"{d['model']}; drafter seeds {d['drafter_seeds']}; {d['eval_prompts']} held-out prompts (at least "
             f"{c['min_requests']} per B), {c['max_new_tokens']} new tokens each, {c['passes']} passes, {c['threads']} "
             f"thread(s); predictions from {d['calibration_prompts']} held-out prompts (never evaluated), written "
             f"before the evaluation ({d['predictions_file']}); times {d['times_s']['total']:.0f} s"
             + (f"; load {d['load_average']['start']:.1f} -> {d['load_average']['end']:.1f} on "
                f"{d['load_average']['cpus']} CPUs" if (d.get("load_average") or {}).get("end") is not None else ""),
             "B    method  policy        nodes  tok/s full  steady (pred, err)   tok/round  acc/req  rows/req  outside"]
    for r in d["rows"]:
        nodes = "auto" if r["policy"] == "auto" else str(r["nodes"])
        lines.append(f"{r['batch_size']:<4d} {r['method']:7s} {r['policy']:12s} {nodes:>6s} {r['full_tokens_per_s']:10.0f} "
                     f"{r['steady_tokens_per_s']:7.0f} ({r['predicted_tokens_per_s']:7.0f}, {100 * r['prediction_error']:+5.1f}%) "
                     f"{r['full_tokens_per_round']:9.2f} {r['accepted']:8.2f} {r['query_rows']:8.1f} "
                     f"{100 * r['overhead_share']:6.1f}%"
                     + (f"  chose {','.join(r['auto_choices'])}" if r["policy"] == "auto" else ""))
    s = d["checks"]["summary"]
    errs = [abs(r["prediction_error"]) for r in d["rows"]]
    lines += [
        f"prediction error of steady tokens/s: median {100 * float(statistics.median(errs)):.1f}%, worst {100 * max(errs):.1f}%",
        f"crossover (AR fastest from this B on): measured {d['measured_crossover']}, predicted {d['predicted_crossover']}",
        "shared policies against per-request at the same total, tokens per round over the whole decode (paired over "
        "drafter sets), and their best cell's whole-decode tok/s against the best per-request N's:",
    ]
    same = {(g["batch_size"], g["method"], g["policy"]): [] for g in d["checks"]["shared_accepts_at_least_per_request"]}
    for g in d["checks"]["shared_accepts_at_least_per_request"]:
        same[(g["batch_size"], g["method"], g["policy"])].append(f"N={g['nodes']} {_cmp_text(g['tokens_per_round'])}")
    for g in d["checks"]["shared_vs_best_per_request"]:
        lines.append(f"  B={g['batch_size']:<3d} {g['method']:7s} {g['policy']:12s} best {g['shared_nodes']} vs "
                     f"{g['per_request_nodes']}: tok/s {100 * g['gain']:+5.1f}% (request tok/s "
                     f"{_cmp_text(g['request_tokens_per_s'])}); same total: "
                     + "; ".join(same.get((g["batch_size"], g["method"], g["policy"]), [])))
    w = d.get("whole_decode")
    if w:
        lines.append(f"whole decode replayed from {w['prompts']} evaluated prompts' traces (replay = measured rounds for "
                     f"{100 * w['replay_matches_measured']['share']:.0f}% of request decodes): same rounds / start "
                     "shift / tokens per round over the whole decode, against per_request:")
        for r in w["rows"]:
            lines.append(f"  {r['method']:7s} B={r['batch_size']:<3d} N={r['nodes']:<3d} " + "  ".join(
                f"{pol} {100 * r[pol]['same_rounds']:+.1f}%/{100 * r[pol]['shift']:+.1f}%/{_cmp_text(r[pol]['full'])}"
                for pol in ("global", "proportional", "oracle")))
    lines += [
        f"a shared policy >= 5% over the best per-request N at some B >= 4: {s['shared_5pct_somewhere_b4']} "
        f"(best {100 * s['best_shared_gain_b4']:+.1f}%)",
        f"auto within 3% (or the pass-to-pass spread) of the best measured at every B: {s['auto_within_3pct_everywhere']} "
        f"(worst gap {100 * s['worst_auto_gap']:+.1f}%, pass-to-pass spread there {100 * s['worst_auto_gap_spread']:.1f}%); "
        f"never a loss against the best per-request N: "
        f"{s['auto_never_loses_to_best_per_request']}",
        f"largest share outside the forwards at B = 16: {100 * s['overhead_at_16_max']:.1f}% "
        f"(target <= {100 * s['overhead_target']:.0f}%)",
        f"GPU, PREDICTED from the packaged {d['gpu_profile']} table (an assumption; cost = f(total rows)):",
    ]
    for r in d["gpu_predicted"]:
        lines.append(f"  {r['method']:7s} B={r['batch_size']:<3d} best {r['policy']:12s} {r['nodes']:5d}: "
                     f"{r['tokens_per_s']:8.0f} tok/s vs AR {r['ar_tokens_per_s']:8.0f} (best per-request "
                     f"{r['best_per_request_tokens_per_s']:.0f}, best global {r['best_global_tokens_per_s']:.0f})")
    return "\n".join(lines)


def _cmp_text(c: dict | None) -> str:
    if not c:
        return "-"
    return (f"{100 * c['gain']:+.1f}% [{100 * c['lo']:+.1f}%, {100 * c['hi']:+.1f}%] {c['verdict']} "
            f"({c['n_runs']} runs x {c['n_prompts']} requests)")


def bench_decode_text(result: Result) -> str:
    """``mfd bench decode``'s summary on the terminal."""
    d = result.data
    lines = [f"device {d['device']}, target {d['model']}, budget {result.config['budget']}, "
             f"block {result.config['block_size']}, K {result.config['num_modes']}",
             f"{'method':8s} {'tok/s':>8s} {'speedup':>8s} {'tau':>6s} {'acc':>6s} {'pred':>6s} {'N':>6s} "
             f"{'draft':>7s} {'tree':>7s} {'verify':>7s} {'walk':>7s} {'commit':>7s} {'outside':>8s}"]
    for m, r in d["methods"].items():
        s = r["time_split_s"]
        tot = sum(s[k] for k in ("draft", "tree", "verify", "walk", "commit")) or 1.0
        pct = {k: 100 * s[k] / tot for k in s}
        lines.append(f"{m:8s} {r['tokens_per_s']:8.1f} {r['speedup_vs_ar']:8.2f} {r['tau']:6.2f} "
                     f"{r['mean_accepted']:6.2f} {r['mean_predicted']:6.2f} {r['mean_tree_size']:6.1f} "
                     f"{pct['draft']:6.1f}% {pct['tree']:6.1f}% {pct['verify']:6.1f}% {pct['walk']:6.1f}% "
                     f"{pct['commit']:6.1f}% {100 * r['overhead_share']:7.1f}%")
    if "verify_profile" in d:
        p = d["verify_profile"]
        lines.append(f"AR target step {p['t_target_ms']:.2f} ms, draft {p['t_draft_ms']:.2f} ms; verify ms by N: "
                     + ", ".join(f"{n}:{t:.2f}" for n, t in zip(p["tree_sizes"], p["verify_ms"])))
    if "hybrid_profile" in d:
        lines.append(hybrid_table(d["hybrid_profile"]))
    warnings = [f"warning: disturbed timing: {w}" for w in d.get("timing_warnings") or []]
    if warnings:  # first, so the table below is read with them in mind
        warnings.append("warning: the times below do not measure the methods alone; rerun on a quiet machine "
                        "(or with --threads 1 beside other work)")
        lines = warnings + lines
    for m in ("ddtree", "mfd"):
        lines.append(f"outside the two forwards at N = {result.config['budget']} ({m}): "
                     f"{100 * d['methods'][m]['overhead_share']:.1f}% of a round (target < 10%)")
    return "\n".join(lines)


def bench_draft_text(result: Result) -> str:
    """``mfd bench draft``'s summary on the terminal."""
    d, c = result.data, result.config
    lines = [f"target {d['model']} (width {d['width']}), {c['draft_layers']} draft layer(s), block {c['block_size']}, "
             f"{c['new_rows']} new context rows per round, {c['threads']} thread(s), {len(d['repeats'])} repeats"]
    keys = list(d["repeats"][0]["draft_ms"])
    lines.append("drafting round ms (fastest of the rounds; one column per repeat):")
    for key in keys:
        lines.append(f"  {key:24s} " + " ".join(f"{r['draft_ms'][key]:8.2f}" for r in d["repeats"]))
    for key in d["repeats"][0]["attention_ms"]:
        lines.append(f"  {'SDPA alone ' + key:24s} " + " ".join(f"{r['attention_ms'][key]:8.2f}" for r in d["repeats"]))
    for t in d["repeats"][0]["verify_ms"]:
        lines.append(f"  verify N={c['verify_nodes']} T={t} in place: "
                     + " ".join(f"{r['verify_ms'][t]:8.2f}" for r in d["repeats"])
                     + "   concatenating: " + " ".join(f"{r['verify_concat_ms'][t]:8.2f}" for r in d["repeats"])
                     + "   of which cache concatenation: " + " ".join(f"{r['cache_cat_ms'][t]:6.2f}" for r in d["repeats"])
                     + "   kv head repeat: " + " ".join(f"{r['kv_repeat_ms'][t]:6.2f}" for r in d["repeats"]))
    lines.append("ratios (min / median / max over repeats):")
    modes, contexts = sorted_ints(c["modes"]), sorted_ints(c["contexts"])
    tk = target_modes(modes)
    for key, vals in d["ratios"].items():
        note = ""
        if key.startswith(("before:", "after:", "folded:")):
            body = key.split(": ", 1)[1]
            note = "target <= 3" if body.startswith("K=1 ") else "target <= 2.5" if body.startswith(f"K={tk} ") else ""
        lines.append(f"  {key:42s} {min(vals):6.2f} {statistics.median(vals):6.2f} {max(vals):6.2f}  {note}")
    hi = contexts[-1]
    if len(modes) > 1:  # the cost of every K at the longest context, side by side (medians)
        for path in ("after", "folded", "before"):
            cells = [f"K = {k}: {statistics.median(d['ratios'][f'{path}: K={k} T={hi} / K=1 T={hi}']):.2f}"
                     for k in modes if k > 1]
            lines.append(f"  {path} / K = 1 at T = {hi} (median): " + ", ".join(cells))
    return "\n".join(lines)


def gpu_check_text(result: Result) -> str:
    """``mfd bench gpu-check``'s summary on the terminal."""
    d, c = result.data, result.config
    lines = [f"gpu-check on {d['device']} ({d['shape']} shape, {c['dtype']})"]
    counts: dict[str, int] = {}
    for r in d["greedy"]:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        if r["status"] != "equal":
            lines.append(f"  {r['status']}: prompt {r['prompt']} {r['drafter']} {r['method']} first diff at "
                         f"{r['first_diff']} (HF top-two gap {r['gap']})")
    lines.append("greedy equality vs HF generate: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    p = d["round_profile"]
    lines.append(f"round profile: AR round {p['t_target_ms']:.2f} ms; verify ms by N: "
                 + ", ".join(f"{n}:{t:.2f}" for n, t in zip(p["tree_sizes"], p["verify_ms"])))
    lines.append("  drafting pass ms by K: " + ", ".join(f"{k}:{t:.2f}" for k, t in zip(p["draft_modes"], p["draft_ms"]))
                 + f"; sampling draw {p['draw_ms']:.3f} ms")
    for o in p.get("overhead") or []:
        lines.append(f"  {o['method']} (K = {o['K']}) tree + walk + commit ms by N: "
                     + ", ".join(f"{n}:{a + b + e:.2f}" for n, a, b, e in
                                 zip(o["tree_sizes"], o["tree_ms"], o["walk_ms"], o["commit_ms"])))
    lines.append("drafting round ms by context: " + ", ".join(f"{k} {v:.2f}" for k, v in d["draft_ms"].items()))
    lines.append(f"round profile written to {d['latency_profile']}")
    ce = d.get("ceiling")
    if ce:
        cov = ce["coverage"]
        n = str(max(map(int, cov["oracle"])))
        lines.append(f"ceiling (one prompt, L = {ce['L']}, N = {n}, T = 1): oracle {cov['oracle'][n]:.3f}, product "
                     f"{cov['product'][n]:.3f}, K = 2 {cov['mixture K=2'][n]:.3f}; {ce['forwards']} tree forwards "
                     f"({ce['forward_rows']} rows) in {ce['seconds']['oracle'] + ce['seconds']['trees']:.1f} s, "
                     f"sampling {ce['seconds']['sample']:.1f} s")
    if d["e2e"]:
        lines.append(f"e2e micro: results in {d['e2e']['out']}")
    el = d.get("elapsed_s") or {}
    lines.append("elapsed: " + ", ".join(f"{k} {v:.1f} s" for k, v in el.items())
                 + f"; total {d['total_s']:.1f} s of the {d['time_budget_s']:.0f} s budget"
                 + ("" if d["within_budget"] else " (OVER BUDGET: lower --tree-sizes, --profile-prompts or "
                                                  "--profile-layers)"))
    return "\n".join(lines)
