"""Report blocks that check the speedup model against an evaluation: the in-sample speedup check
(the measured round cost model with the rounds' own acceptance) and the out-of-sample prediction
(tau, speedup and the budget choice, predicted from calibration prompts before decoding).

Each block is ``block(results) -> str`` (:mod:`.inputs`); the method is in docs/results.md.
"""

from __future__ import annotations

from mfd_theory.report._text import method_label, signed_pct, value_with_spread
from mfd_theory.report.inputs import Results
from mfd_theory.formatting import stored_number

__all__ = ["check_summary", "prediction_check", "prediction_summary", "speedup_check"]


def _worst(w: dict) -> str:
    return f"{w['method']} ({w['drafter']}) N = {w['budget']} at T = {w['temperature']:g}"


def check_summary(chk: dict) -> list[str]:
    """The speedup check's verdicts (``evaluate.speedup_check``): relative error of the predicted
    speedups against the targets, and whether the predicted best budget is the measured best."""
    th, tau = chk.get("theory", {}), chk.get("tau", {})
    lines = [f"* Relative error |predicted / measured - 1| over {th['n']} rows: median "
             f"{100 * th['median_rel_error']:.1f}%, worst {100 * th['worst_rel_error']:.1f}% "
             f"({_worst(th['worst_row'])}); {th['within_spread']} of {th['n']} within the measured spread. "
             f"Target median <= 5%: {'met' if th['median_rel_error'] <= 0.05 else 'missed'}."
             + ("" if stored_number(chk.get("median_rel_spread")) is None else
                f" For scale, the measured speedups' own pass-to-pass spread (std / mean) has median "
                f"{100 * chk['median_rel_spread']:.1f}%.")]
    if tau:
        lines.append(f"* With the measured acceptance (the cost model's error alone): median "
                     f"{100 * tau['median_rel_error']:.1f}%, worst {100 * tau['worst_rel_error']:.1f}% "
                     f"({_worst(tau['worst_row'])}).")
    picks = chk.get("best_budget") or []
    if picks:
        hits, share = chk["best_budget_hits"], chk["best_budget_hits"] / len(picks)
        missed = [p for p in picks if not p["hit"]]
        lines.append(f"* Best budget per (temperature, drafter, method): the predicted best is the measured best "
                     f"or within the measured spread of it in {hits} of {len(picks)} ({100 * share:.0f}%; "
                     f"exactly the measured best in {chk['best_budget_exact']}). Target >= 80%: "
                     f"{'met' if share >= 0.8 else 'missed'}."
                     + ("" if not missed else " Missed: " + "; ".join(
                         f"{p['method']} ({p['drafter']}) T = {p['temperature']:g}: predicted N = "
                         f"{p['predicted_budget']} ({p['predicted_budget_speedup']:.2f}x measured), best N = "
                         f"{p['measured_budget']} ({p['best_speedup']:.2f}x)" for p in missed) + "."))
    return lines


def prediction_summary(pr: dict | None, source: str) -> str | None:
    """One line on a run's out-of-sample check (``llm.predict.prediction_check``): tau and speedup
    errors, and the budget regrets when there are any."""
    if not pr or not pr.get("n_cells"):
        return None
    tau, sp = pr.get("tau") or {}, pr.get("speedup") or {}
    regret = "" if pr.get("mean_regret_theory") is None else (
        f"; mean budget regret: theory {100 * pr['mean_regret_theory']:+.1f}%, smallest budget "
        f"{100 * pr['mean_regret_smallest']:+.1f}%, fastest on calibration "
        f"{100 * pr['mean_regret_calibration_best']:+.1f}%")
    return (f"Predicted before decoding ({source}), {pr['n_cells']} cells: tau median |error| "
            f"{100 * tau.get('median_abs_error', 0):.1f}%, worst {100 * tau.get('worst_abs_error', 0):.1f}%; speedup "
            f"median {100 * sp.get('median_abs_error', 0):.1f}%, worst {100 * sp.get('worst_abs_error', 0):.1f}%"
            f"{regret}.")


# ------------------------------------------------------------------------------ speedup check


def speedup_check(results: Results) -> str:
    """Predicted vs measured speedup per row (``mfd e2e``'s ``round_profile`` and
    ``speedup_check``): the measured round cost model, the table, the error summary against the
    targets (median |error| <= 5%, best budget right in >= 80% of groups) and the per-term check."""
    d, c = results.main.data, results.main.config
    prof, chk = d.get("round_profile"), d.get("speedup_check")
    if not prof or not chk or not chk.get("n_rows"):
        return "No round profile in these results (run `mfd e2e` with `--profile-prompts` > 0)."
    lines = [_cost_model(prof, d, c)]
    lines += ["", "In-sample consistency, not a prediction: both columns take acceptance from the evaluated rounds "
                  "themselves (the covered mass of each round's own tree under that round's verify logits, and the "
                  "measured tau), so their error is the round cost model's. The out-of-sample prediction is the "
                  "next block.", "",
              "| T | method (drafter) | N | measured speedup | cost model, in-sample coverage | error | "
              "cost model, measured tau | error |", "|---|---|---|---|---|---|---|---|"]
    for r in d["rows"]:
        if r["method"] == "ar" or stored_number(r.get("speedup_from_insample_coverage")) is None:
            continue
        lines.append(f"| {r['temperature']:g} | {method_label(r)} | {r['budget']} | "
                     f"{value_with_spread(r, 'speedup', suffix='x')} | {r['speedup_from_insample_coverage']:.2f}x | "
                     f"{signed_pct(r['speedup_from_insample_coverage'] / r['speedup'] - 1)} | "
                     f"{stored_number(r.get('speedup_from_measured_tau')) or 0:.2f}x | "
                     f"{signed_pct((r.get('speedup_from_measured_tau') or 0) / r['speedup'] - 1)} |")
    lines += ["", *check_summary(chk), *_terms(chk)]
    return "\n".join(lines)


def _cost_model(prof: dict, d: dict, c: dict) -> str:
    """The round cost model measured before decoding, and whether the context length matters."""
    draft = ", ".join(f"K = {k}: {t:.2f}" for k, t in zip(prof.get("draft_modes", []), prof.get("draft_ms", [])))
    verify = ", ".join(f"{n}: {t:.2f}" for n, t in zip(prof["tree_sizes"], prof["verify_ms"]))
    text = (f"Round cost model measured before decoding ({c.get('profile_prompts')} calibration prompt(s) x "
            f"{c.get('max_new_tokens')} tokens per cell, {d.get('timings_s', {}).get('round_profile', 0):.0f} s): "
            f"AR round {prof['t_target_ms']:.2f} ms, sampled draw {prof.get('draw_ms', 0):.3f} ms; drafting (ms) "
            f"{draft}; verify (ms) by N {verify}.")
    probe = prof.get("context_probe")
    if probe:
        ratios = [b / a for a, b in zip(probe["verify_ms"][0], probe["verify_ms"][-1]) if a > 0]
        lo, hi = probe["contexts"][0], probe["contexts"][-1]
        matters = any(abs(r - 1) > 0.05 for r in ratios)
        text += (f" Context: verify at {hi} tokens of context takes "
                 + ", ".join(f"{r:.2f}x" for r in ratios)
                 + f" (N = {', '.join(map(str, probe['tree_sizes']))}) its time at {lo} tokens: "
                 + ("context length matters here (beyond ±5%); the profile's rounds span the run's contexts."
                    if matters else "context length does not matter at this size (within ±5%)."))
    return text


def _terms(chk: dict) -> list[str]:
    """Which term of a round's time is off: measured vs predicted per term, and the AR round's drift."""
    terms = chk.get("terms")
    if not terms:
        return []
    lines = ["", "Which term is off: one round's time by term, mean over the rows (ms; measured in the "
                 "first timing pass, predicted by the profile):", "",
             "| term | measured | predicted | measured / predicted | share of the summed term errors |",
             "|---|---|---|---|---|"]
    for k, t in terms.items():
        ratio = "-" if stored_number(t.get("measured_over_predicted")) is None else f"{t['measured_over_predicted']:.2f}"
        lines.append(f"| {k} | {t['measured_ms']:.3f} | {t['predicted_ms']:.3f} | {ratio} | "
                     f"{100 * t['abs_error_share']:.0f}% |")
    top = max(terms, key=lambda k: terms[k]["abs_error_share"])
    lines += ["", f"The largest share of the error is in {top} ({100 * terms[top]['abs_error_share']:.0f}%)."]
    ar = chk.get("ar_round") or []
    if ar:
        drift = any(abs(a["measured_over_predicted"] - 1) > 0.1 for a in ar)
        lines[-1] += (" The AR round measured in the run took " + ", ".join(
            f"{a['measured_over_predicted']:.2f}x (T = {a['temperature']:g})" for a in ar)
            + " the profile's: " + ("the machine's load changed between the profile and the run, so every "
                                   "term drifted with it, which no cost model measured beforehand foresees."
                                   if drift else "the machine's state held between the profile and the run."))
    return lines


# ------------------------------------------------------------------------------ out-of-sample prediction


def prediction_check(results: Results) -> str:
    """The out-of-sample check (``llm.predict``): every cell's tau and speedup predicted before
    decoding from calibration prompts only, against what the evaluation measured, with the
    targets, and the budget choice's regret next to two naive rules."""
    d, c = results.main.data, results.main.config
    chk = d.get("prediction") or {}
    if not chk.get("n_cells"):
        return "No out-of-sample predictions in these results (run with `--profile-prompts` > 0)."
    n_cal, n_eval = len(d.get("calibration_prompts") or []), len(d.get("evaluation_prompts") or [])
    where = {"heldout": "held-out prompts never evaluated", "train": "prompts of the training split"}.get(
        ((d.get("calibration_prompts") or [{}])[0]).get("dataset"), "prompts")
    lead = (f"Predicted before decoding from {n_cal} calibration {where} (disjoint from the "
            f"{n_eval} evaluated prompts, checked by token hash), {c.get('max_new_tokens')} tokens each; "
            f"`predictions.json` was written before the first evaluated prompt was decoded "
            f"(calibration {d.get('timings_s', {}).get('calibration', 0):.0f} s, round profile "
            f"{d.get('timings_s', {}).get('round_profile', 0):.0f} s).")
    lines = [lead, "", "| T | method (drafter) | N (per round: cap) | predicted tau (± s.e.) | measured tau | error | predicted speedup "
             "[95% from acceptance] | measured speedup | error |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [_prediction_row(x) for x in chk["cells"]]
    lines.append("")
    lines += _prediction_verdicts(chk, d)
    lines += _regret_table(chk)
    return "\n".join(lines)


def _prediction_row(x: dict) -> str:
    """One cell of the prediction table: predicted and measured tau and speedup, and their errors."""
    label = method_label(x) + ("" if x.get("on_grid") else (", per round" if x.get("per_round_budget") else
                                                            ", chosen N"))
    if x.get("per_round_budget") and stored_number(x.get("mean_tree_size")) is not None:
        label += f" (mean {x['mean_tree_size']:.1f}, predicted {x.get('predicted_mean_tree_size') or 0:.1f})"
    se = x.get("predicted_tau_se")
    sp = "-" if stored_number(x.get("predicted_speedup")) is None else (
        f"{x['predicted_speedup']:.2f}x [{x['predicted_speedup_lo']:.2f}, {x['predicted_speedup_hi']:.2f}]")
    meas = "-" if stored_number(x.get("speedup")) is None else (
        f"{x['speedup']:.2f}x" + ("" if stored_number(x.get("speedup_std")) is None else f" ± {x['speedup_std']:.2f}x"))
    return (f"| {x['temperature']:g} | {label} | {x['budget']} | {x['predicted_tau']:.2f}"
            + ("" if se is None else f" ± {se:.2f}") + f" | {x['tau']:.2f} | {signed_pct(x['tau_error'])} | "
            f"{sp} | {meas} | {signed_pct(x['speedup_error'])} |")


def _prediction_verdicts(chk: dict, d: dict) -> list[str]:
    """The tau and speedup errors against their targets, and the T = 0 sanity line."""
    tau, sp = chk.get("tau") or {}, chk.get("speedup") or {}

    def by_t(e):
        return "; ".join(f"T = {t}: median {100 * v['median_abs_error']:.1f}%, worst {100 * v['worst_abs_error']:.1f}%"
                         + ("" if v.get("mean_signed_error") is None else
                            f", signed {100 * v['mean_signed_error']:+.1f}% ({v['too_high']} of {v['n']} too high)")
                         for t, v in (e.get("by_temperature") or {}).items())

    def by_tn(e):
        cells = e.get("by_temperature_budget") or []
        return "; ".join(f"T = {c['temperature']:g}, N = {c['budget']}: {100 * c['mean_signed_error']:+.1f}% "
                         f"({c['too_high']}/{c['n']} high)" for c in cells)

    lines = []
    if tau:
        lines.append(f"* **tau**: median |error| {100 * tau['median_abs_error']:.1f}%, worst "
                     f"{100 * tau['worst_abs_error']:.1f}% ({_worst(tau['worst'])}), mean signed "
                     f"{100 * tau['mean_signed_error']:+.1f}% ({by_t(tau)}). Target median <= 3%: "
                     f"{'met' if tau['median_abs_error'] <= 0.03 else 'missed'}. The measured tau lies within 2 "
                     f"standard errors of the prediction in {chk['tau_within_2se']} of {chk['tau_with_se']} cells "
                     "(the interval holds the calibration prompts' noise and the evaluated prompts' own).")
        if by_tn(tau):
            lines.append(f"* tau's mean signed error by T and N (tree methods): {by_tn(tau)}.")
    if sp:
        med, wst = sp["median_abs_error"] <= 0.05, sp["worst_abs_error"] <= 0.12
        lines.append(f"* **speedup**: median |error| {100 * sp['median_abs_error']:.1f}%, worst "
                     f"{100 * sp['worst_abs_error']:.1f}% ({_worst(sp['worst'])}), mean signed "
                     f"{100 * sp['mean_signed_error']:+.1f}% ({by_t(sp)}). Target median <= 5%: "
                     f"{'met' if med else 'missed'}; worst <= 12%: {'met' if wst else 'missed'}.")
        ar = (d.get("speedup_check") or {}).get("ar_round") or []
        if ar:
            lines[-1] += (" The AR round (every speedup's numerator) measured in the run took "
                          + ", ".join(f"{a['measured_over_predicted']:.2f}x (T = {a['temperature']:g})" for a in ar)
                          + " the profile's; an error of that size passes straight into every predicted speedup.")
        insample = ((d.get("speedup_check") or {}).get("tau") or {})
        if insample:
            lines[-1] += (f" For scale, the same cost model fed the *measured* tau (in sample, the cost model's error "
                          f"alone) misses by median {100 * insample['median_rel_error']:.1f}%, worst "
                          f"{100 * insample['worst_rel_error']:.1f}%"
                          + "".join(f"; T = {t}: median {100 * v['median_abs_error']:.1f}%, signed "
                                    f"{100 * v['mean_signed_error']:+.1f}%"
                                    for t, v in (insample.get("by_temperature") or {}).items()) + ".")
    lines.append(f"* At T = 0, {chk['t0_cells_differing']} of {chk['t0_cells']} cells have a predicted tau "
                 "different from the measured one (a number computed from the measurement would equal it in all).")
    return lines


def _regret_table(chk: dict) -> list[str]:
    """The budget chosen before decoding, scored by its regret, beside two naive rules, every rule
    choosing among the same grid budgets and scored on timing passes that did not pick the best."""
    reg = chk.get("budget_regret") or []
    if not reg:
        return []
    shown = [e for e in reg if e.get("reported")]
    hot = [e for e in shown if e["temperature"] > 0]
    timed = ("" if not hot else " (timed sampled at T > 0)" if all(e.get("calibration_timed") == "sampled" for e in hot)
             else " (timed greedy, at every T: its sampled decodes were not used in this record)")
    lines = ["", "Budget choice before decoding, scored by its regret. Every rule chooses among the grid's "
                 "budgets: theory, the grid budget with the highest predicted speedup under the calibrated "
                 "coverage; naive rules, always the smallest budget, and the budget whose calibration decodes "
                 f"(the round profile's) ran fastest{timed}. The best budget is the fastest on the first timing pass; "
                 "every rule is scored on the other passes (regret = best's speedup / the rule's - 1 there; "
                 "negative: the rule beat the first pass's pick), so the best cell's luck on the pass that "
                 "picked it is not counted against the rules."]
    skipped = [e for e in reg if not e.get("reported")]
    if skipped:
        lines += ["", f"Not scored ({len(skipped)} of {len(reg)}): " + "; ".join(
            f"T = {e['temperature']:g} {method_label(e)}: {e['why']}" for e in skipped[:4])
            + ("; ..." if len(skipped) > 4 else "") + "."]
    if not shown:
        return lines
    lines += ["", "| T | method (drafter) | best (first pass) | theory | smallest | fastest on calibration |",
              "|---|---|---|---|---|---|"]

    def one(e, rule):
        x = e[rule]
        return "-" if x["regret"] is None else f"N = {x['budget']}: {100 * x['regret']:+.1f}%"

    for e in shown:
        lines.append(f"| {e['temperature']:g} | {method_label(e)} | N = {e['best_budget']} ({e['best_speedup']:.2f}x) | "
                     f"{one(e, 'theory')} | {one(e, 'smallest')} | {one(e, 'calibration_best')} |")
    means = {r: chk.get(f"mean_regret_{r}") for r in ("theory", "smallest", "calibration_best")}
    names = {"theory": "theory", "smallest": "smallest budget", "calibration_best": "fastest on calibration"}
    known = {r: v for r, v in means.items() if v is not None}
    if not known:
        return lines
    best_rule = min(known, key=known.get)
    t = means["theory"]
    met = t is not None and t <= 0.02 and all(t <= v for r, v in known.items())
    lines += ["", "Mean regret: " + ", ".join(f"{names[r]} {100 * v:+.1f}%" for r, v in known.items())
              + f". Lowest: {names[best_rule]}. Target (theory <= 2% and no worse than either naive rule): "
              + ("met." if met else "missed.")]
    return lines
