"""``mfd report``: rewrite the result blocks of the README and docs/ from ``results/*.json``.

The Markdown files hold marked blocks::

    <!-- report:NAME -->
    ... generated text ...
    <!-- /report:NAME -->

and each NAME in :data:`BLOCKS` is regenerated from its results file(s), so the numbers the pages
state are the numbers the last run wrote. Each block lives in one named file
(:data:`mfd_theory.report_files.BLOCK_FILES`); by default every one of those files is rewritten,
and ``--check`` compares them all without writing. A block whose results file is missing is left
as it is and named; the command says how many blocks it checked and how many it skipped, and
when every block was skipped (no results at all) it exits with status 2 naming the missing files.

Timing comparisons carry their run-to-run spread: a row with several timing passes
(``speedup_passes`` / ``*_std`` fields) prints mean +- standard deviation over the passes, and a
difference within the spread reads "no measurable difference" rather than a sign. Rows from older
results without those fields print "(1 pass)".
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Callable

from mfd_theory.formatting import is_best_budget, stored_number, speed_gain_text, tau_gain_text
from mfd_theory.report_files import BLOCK_FILES, report_files
from mfd_theory.results import Result, atomic_write_text

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["BLOCKS", "BLOCK_FILES", "main", "render", "gain_with_spread", "value_with_spread", "own_target_block",
           "own_target_summary", "speed_gain_text", "tau_gain_text", "natural_block", "headline_block",
           "block_inputs"]

_BLOCK_RE = re.compile(r"<!-- report:(?P<name>[a-z0-9-]+) -->\n(?P<body>.*?)<!-- /report:(?P=name) -->", re.S)


# ------------------------------------------------------------------------------ spreads


def _passes(row: dict, key: str) -> list[float] | None:
    p = row.get(f"{key}_passes")
    if isinstance(p, list) and len(p) > 1 and all(stored_number(x) is not None for x in p):
        return [float(x) for x in p]
    return None


def _std(row: dict, key: str) -> float | None:
    p = _passes(row, key)
    if p is not None:
        m = sum(p) / len(p)
        return math.sqrt(sum((x - m) ** 2 for x in p) / (len(p) - 1))
    return stored_number(row.get(f"{key}_std"))


def value_with_spread(row: dict, key: str, fmt: str = "{:.2f}", suffix: str = "") -> str:
    """``1.84x +- 0.03x`` when the row has a spread for ``key``, else ``1.84x (1 pass)``."""
    v = stored_number(row.get(key))
    if v is None:
        return "-"
    s = _std(row, key)
    if s is None:
        return f"{fmt.format(v)}{suffix} (1 pass)"
    return f"{fmt.format(v)}{suffix} ± {fmt.format(s)}{suffix}"


def gain_with_spread(a: dict, b: dict, key: str = "speedup") -> str:
    """a's ``key`` over b's, minus one, in percent, with its spread over timing passes.

    The spread combines the two rows' standard deviations over passes to first order
    (ratio * sqrt((s_a / a)^2 + (s_b / b)^2)); passes are not treated as paired, which would
    hide load changes that hit one method's pass and not the other's. A difference no larger
    than the spread reads "no measurable difference".
    """
    va, vb = stored_number(a.get(key)), stored_number(b.get(key))
    if va is None or vb is None or vb == 0:
        return "-"
    gain = va / vb - 1
    sa, sb = _std(a, key), _std(b, key)
    if sa is None or sb is None:
        return f"{100 * gain:+.1f}% (1 pass)"
    spread = (va / vb) * math.sqrt((sa / va) ** 2 + (sb / vb) ** 2)
    text = f"{100 * gain:+.1f}% ± {100 * spread:.1f}%"
    if abs(gain) <= spread:
        text += " (no measurable difference)"
    return text


# ------------------------------------------------------------------------------ blocks


def core_block(res: Result) -> str:
    from mfd_theory.commands.core_table import format_table

    return format_table(res)


def chimera_bound_block(res: Result) -> str:
    d, c = res.data, res.config
    v, t, xc = d["verify"], d["ties"], d.get("cross_check", {})
    tie_below = sum(r.get("tie_violations", 0) for r in t["table"])
    lines = [
        f"{v['instances']:,} random instances checked (m = 1..{c['m_max']}, L up to {c['L_max']}, V up to "
        f"{c['V_max']}; {100 * c['near_tie_frac']:.0f}% re-weighted so the futures nearly tie): "
        f"**{v['violations']} violations**; {v['ties']} with Q(a) = Q(b) set aside (the one case the theorem "
        f"leaves open), {v.get('other_ties', 0):,} with other ties checked; {v['rate_per_s']:,.0f} instances/s "
        f"({v['seconds']:.1f} s for all of them on this machine).",
        "",
        f"Marginals on the integer grid 1..{c['grid']} (ties common): {t['instances'] + t['ties']:,} instances; "
        f"{t['ties']:,} have Q(a) = Q(b), and {tie_below:,} of those fall below the bound when ties are broken "
        f"in the futures' favour; of the other {t['instances']:,}, {t.get('other_ties', 0):,} have other ties "
        f"and {t['violations']:,} fall below the bound.",
    ]
    if xc:
        lines += ["", f"Count from scores vs chimeras of an explicit `product_tree`: {xc['count_agrees']}/"
                      f"{xc['instances']} agree ({xc['same_tree']}/{xc['instances']} trees identical to the "
                      "smallest tree holding both futures)."]
    multi = d.get("multi_future") or []
    if multi:
        n_proven = sum(bool(r["proven"]) for r in multi)
        n_witness = sum(bool(r.get("witness_checked")) for r in multi)
        lines += ["", f"F = 3 and 4 futures: {len(multi)} disagreement patterns; a witness tree built and counted "
                      f"for {n_witness}; minimum exact (computer-assisted) for {n_proven}."]
    lines += ["", "| m | bound 2^(m-1)-1 | observed min | observed max | `tight_instance` | `worst_instance` (2^m-2) |",
              "|---|---|---|---|---|---|"]
    for row, con in zip(v["table"], d.get("constructed", [])):
        lines.append(f"| {row['m']} | {row['bound']} | {row['min']} | {row['max']} | "
                     f"{con['tight']['full_length_splices']} | {con['worst']['full_length_splices']} |")
    return "\n".join(lines)


def _setting(row: dict) -> str:
    kw = {k: v for k, v in row["kwargs"].items() if k not in ("L", "V")}
    return ", ".join(f"{k} = {v}" for k, v in kw.items())


def chimera_share_block(res: Result) -> str:
    from mfd_theory.layouts import widen_setting

    d, c = res.data, res.config
    budgets = list(c["budgets"])
    at = budgets.index(64) if 64 in budgets else len(budgets) // 2
    lo, hi = d.get("paper_range", (0.27, 0.33))
    rows = [widen_setting(r) for r in d["settings"]]
    inside = sum(lo <= r["chimera_share"][at] <= hi for r in rows)
    lines = [
        f"{len(rows)} settings x {c['n_seeds']} seeds, L = {c['L']}; share of chimeras in a {budgets[at]}-node "
        f"product tree (mean ± std over seeds); {inside} of {len(rows)} settings fall inside "
        f"{100 * lo:.0f}-{100 * hi:.0f}%.",
        "",
        f"| family | setting | chimera share N={budgets[at]} | P(s) <= eps share | splice share | "
        f"product / oracle coverage | chimera share N={budgets[-1]} |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = r["cov_product"][at] / r["cov_oracle"][at] if r["cov_oracle"][at] > 0 else float("nan")
        std = r.get("chimera_share_std")
        share = f"{100 * r['chimera_share'][at]:.1f}%" + (f" ± {100 * std[at]:.1f}" if std else "")
        lines.append(f"| {r['family']} | {_setting(r)} | {share} | {100 * r['eps_chimera_share'][at]:.1f}% | "
                     f"{100 * r['splice_share'][at]:.1f}% | {ratio:.2f} | {100 * r['chimera_share'][-1]:.1f}% |")
    return "\n".join(lines)


def mixture_gain_block(res: Result) -> str:
    from mfd_theory.commands.mixture_gain import at_budget, format_summary, headline_k

    lines = [format_summary(res)]
    s, cfg = res.data["summary"], res.config
    HEADLINE_K = headline_k(cfg["Ks"])
    profile = cfg["profiles"][0]
    budgets = list(cfg["budgets"])
    b64 = 64 if 64 in budgets else budgets[0]
    notes = []
    for fam, e in s.items():
        noise = e.get("single", {}).get("sampling_noise")
        if noise:
            notes.append(f"{fam}, F = 1 (one future): K = {HEADLINE_K} minus product = "
                         f"{100 * at_budget(noise, b64, 'mixture_minus_product_mean'):+.3f} points of the oracle's "
                         f"coverage at N = {b64} (worst draw "
                         f"{100 * at_budget(noise, b64, 'mixture_minus_product_worst'):+.3f}); sampling noise of "
                         f"the product's fraction: {100 * at_budget(noise, b64, 'product_frac_std'):.3f} points")
        m = e.get("multi", {})
        bc = m.get("budget_choice", {}).get(profile, {})
        if "mixture" in bc:
            b = bc["mixture"]
            notes.append(f"{fam}: per-step budget {b['per_step_speedup']:.2f}x vs best fixed budget "
                         f"(N = {b['fixed_budget']}) {b['fixed_speedup']:.2f}x (K = {HEADLINE_K}, {profile})")
        if "sequoia" in m and "product" in m:
            notes.append(f"{fam}: Sequoia's positional model predicts {m['sequoia'][profile]:.2f}x; the product "
                         f"tree at its best budget {m['product']['best_speedup'][profile]:.2f}x ({profile})")
    if notes:
        lines += [""] + [f"* {n}" for n in notes]
    return "\n".join(lines)


def path_gain_block(res: Result) -> str:
    from mfd_theory.commands.path_gain import break_even, format_summary

    cfg = res.config
    profile = cfg["profiles"][0]
    lines = [format_summary(res, budget=64, profile=profile), ""]
    wins = [(f, g, c) for f, g, c in break_even(res, profile) if c is not None]
    costs = ", ".join(f"{c:g}" for c in cfg["step_costs"])
    if wins:
        lines.append(f"Path trees win ({profile}, step costs swept: {costs}) for: "
                     + "; ".join(f"{f} {g} up to c = {c:g}" for f, g, c in wins) + ".")
    else:
        lines.append(f"Path trees win for no family at any swept step cost ({costs}; {profile}).")
    others = [p for p in cfg["profiles"][1:]]
    for p in others:
        w = [(f, g, c) for f, g, c in break_even(res, p) if c is not None]
        lines.append(f"Under {p}: " + ("; ".join(f"{f} {g} up to c = {c:g}" for f, g, c in w) if w else "never") + ".")
    return "\n".join(lines)


def _label(r: dict) -> str:
    if r["method"] == "chain":
        return f"chain ({r['drafter']}), N = L = {r['budget']}"
    if r["method"] == "mfd":
        return f"mfd K = {r.get('K', '?')}"
    if r["method"] == "dartree":
        return "dartree (Domino)"
    if r["drafter"] == "product":
        return "ddtree (product)"
    return f"ddtree on K = {r.get('K', '?')} marginals"


def e2e_block(res: Result) -> str:
    d, c = res.data, res.config
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
    order = {"chain": 0, "ddtree": 1, "mfd": 2, "dartree": 3}
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["temperature"], r["method"], r["drafter"]), []).append(r)

    def sort_key(k):
        temp, method, drafter = k
        return (temp, drafter != "product", order.get(method, 9), drafter)

    def cell(r):
        sp = value_with_spread(r, "speedup", suffix="x")
        sp = sp[:-len(" (1 pass)")] + ", 1 pass" if sp.endswith(" (1 pass)") else sp
        return f"{r['tau']:.2f} ({sp})"

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
        lines.append(f"| {key[0]:g} | {_label(first)} | " + " | ".join(cells) + f" | {dead_s} |")
    pc = d.get("prediction_check") or {}
    if pc.get("n_rows"):
        lines += ["", f"In-sample test of the theorem (accepted = covered mass, each round's tree against that round's "
                      f"own verify logits; not a forecast), T > 0 over {pc['n_rows']} rows: z = (measured - covered) "
                      f"/ standard error has mean {pc['mean_z']:+.2f}, max |z| {pc['max_abs_z']:.2f}, "
                      f"{100 * pc['share_abs_z_below_2']:.0f}% within ±2, sum z^2 = {pc['sum_z2']:.1f}. The rows share "
                      f"each prompt's sampling seed, so their z's are correlated and that sum is no chi-square over "
                      f"rows"
                      + (f"; pooled per prompt instead (independent clusters), all rows' gaps give z = "
                         f"{pc['clustered']['z']:+.2f} over {pc['clustered']['prompts']} prompts." if pc.get("clustered")
                         else ".")]
    return "\n".join(lines)


def e2e_summary(res: Result) -> list[str]:
    """Bullets under an e2e table: greedy losslessness, then per temperature AR's rate, the fastest
    cell, and each MFD drafter against the product drafter at each one's best budget (tau gain;
    speed gain with its spread over timing passes)."""
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
            parts.append(f"fastest {_label(fast)}" + (f" at N = {fast['budget']}" if fast["method"] != "chain" else "")
                         + f": {value_with_spread(fast, 'speedup', suffix='x')}")
        best = sorted((g for g in d.get("mfd_gains") or []
                       if g["temperature"] == temp and g["method"] == "mfd" and is_best_budget(g)),
                      key=lambda g: k_of.get(g["drafter"], 0))
        vs = []
        for g in best:
            a, b, _ = _gain_pair(rows, g)
            vs.append(f"mfd K = {k_of.get(g['drafter'], '?')} tau {g['tau']:.2f} ({100 * g['tau_gain']:+.1f}%) and "
                      f"speed {_speed_gain(g, a, b)}")
        if parts or vs:
            out.append(f"T = {temp:g}: " + "; ".join(parts) + "." + (
                f" Against the product drafter at each one's best budget (product tau {best[0]['single_tau']:.2f}): "
                + "; ".join(vs) + "." if vs else ""))
    return out


def e2e_hybrid_block(res: Result) -> str:
    """The e2e table of a run on another target (the hybrid's own results file), with its summary."""
    return e2e_block(res) + "\n\n" + "\n".join(f"* {line}" for line in e2e_summary(res))


def _find(rows, temp, method, drafter, budget):
    for r in rows:
        if (r["temperature"], r["method"], r["drafter"], r["budget"]) == (temp, method, drafter, budget):
            return r
    return None


def _gain_pair(rows: list[dict], g: dict) -> tuple[dict, dict, str]:
    """(this method's row, the product drafter's row, the N label) that a gain entry compares."""
    if is_best_budget(g):
        n_mine = g["budget"] if isinstance(g["budget"], int) else g.get("best_budget")
        n_base = g.get("single_best_budget", g.get("single_budget"))  # older / newer field name
        base_method = None
        for r in rows:  # the best single-mode row may be chain or ddtree
            if (r["temperature"] == g["temperature"] and r["drafter"] == "product"
                    and r["budget"] == n_base and stored_number(r.get("speedup")) == stored_number(g["single_speedup"])):
                base_method = r["method"]
        a = _find(rows, g["temperature"], g["method"], g["drafter"], n_mine) or g
        b = _find(rows, g["temperature"], base_method, "product", n_base) if base_method else None
        b = b or {"speedup": g["single_speedup"], "speedup_std": g.get("single_speedup_std")}
        return a, b, f"best ({n_mine} vs {n_base})"
    a = _find(rows, g["temperature"], g["method"], g["drafter"], g["budget"]) or g
    b = _find(rows, g["temperature"], "ddtree", "product", g["budget"]) or {"speedup": g["single_speedup"]}
    return a, b, str(g["budget"])


def _speed_gain(g: dict, a: dict, b: dict) -> str:
    """The speed gain of a stored gain entry with the verdict the evaluator gave it (the 95%
    interval of its per-pass gains, as ``mfd eval`` prints it); older files without a verdict fall
    back to the two rows' spreads."""
    return speed_gain_text(g) if "speedup_verdict" in g else gain_with_spread(a, b)


def e2e_gains_block(res: Result) -> str:
    """MFD against the identically trained product drafter: tau gain with its z, speed gain with
    its spread over timing passes, per budget and at each method's best budget."""
    d = res.data
    rows, gains = d["rows"], d.get("mfd_gains") or []
    lines = ["N = best (a vs b): each side at its fastest budget (a: this method's, b: the best product-drafter "
             "tree's, chain or ddtree); tau there is each side's highest tau at any budget. z: the tau difference over "
             "its standard error.", "",
             "| T | method (drafter) | N | tau | product tau | tau gain (z) | speedup | product speedup | speed gain |",
             "|---|---|---|---|---|---|---|---|---|"]
    for g in gains:
        a, b, n_text = _gain_pair(rows, g)
        z = stored_number(g.get("tau_diff_z"))
        lines.append(
            f"| {g['temperature']:g} | {_label(a) if 'method' in a else g['method']} | {n_text} | {g['tau']:.2f} | "
            f"{g['single_tau']:.2f} | {100 * g['tau_gain']:+.1f}%" + (f" ({z:.1f})" if z is not None else "")
            + f" | {value_with_spread(a, 'speedup', suffix='x')} | {value_with_spread(b, 'speedup', suffix='x')} | "
            f"{_speed_gain(g, a, b)} |")
    return "\n".join(lines)


def e2e_dartree_block(res: Result) -> str:
    """DARTree (Domino drafter, path-corrected tree grown depth by depth) beside DDTree (the product
    drafter's product tree) and MFD (each MFD drafter's mixture tree), all trained on the same data
    and steps: per temperature and budget, tau, speedup, predicted vs measured accepted length and
    the dead-node share."""
    d = res.data
    rows = [r for r in d["rows"] if (r["method"], r["drafter"]) == ("dartree", "dartree")
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
        lines.append(f"| {r['temperature']:g} | {r['budget']} | {_label(r)} | {r['tau']:.2f} | "
                     f"{value_with_spread(r, 'speedup', suffix='x')} | {r['accepted_mean']:.2f} | "
                     f"{'-' if pred is None else f'{pred:.2f}'} | {'-' if z is None else f'{z:+.1f}'} | "
                     f"{'-' if dead is None else f'{100 * dead:.0f}%'} |")
    lines += ["", *_dartree_summary(res, rows)]
    return "\n".join(lines)


def _dartree_summary(res: Result, rows: list[dict]) -> list[str]:
    """Per temperature, each method at its best measured budget; and what one depth step of the
    Domino drafter costs, in block passes (``c`` of ``mfd path-gain``), from the run's round profile."""
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
        parts = [f"{_label(r)} {value_with_spread(r, 'speedup', suffix='x')} at N = {r['budget']} (tau {r['tau']:.2f})"
                 for r in (best.get("ddtree"), best.get("mfd"), dt) if r is not None]
        vs = "; ".join(f"dartree vs {_label(best[k])}: {gain_with_spread(dt, best[k])}"
                       for k in ("ddtree", "mfd") if k in best)
        out.append(f"* T = {temp:g}, each at its best budget: " + ", ".join(parts) + f". {vs}.")
    prof = res.data.get("round_profile") or {}
    tables = {(t["method"], t["K"]): t for t in prof.get("overhead", [])}
    dom, block = tables.get(("dartree", 1)), tables.get(("ddtree", 1))
    L = int(res.config.get("block_size", 0)) - 1
    if dom and block and dom.get("draft_ms") and block.get("draft_ms") and L >= 2:
        n = min(set(dom["tree_sizes"]) & set(block["tree_sizes"]), default=None)
        if n is not None:
            t_dom = dom["draft_ms"][dom["tree_sizes"].index(n)]
            t_block = block["draft_ms"][block["tree_sizes"].index(n)]
            c = (t_dom - t_block) / ((L - 1) * t_block)
            out.append(f"* Drafting cost (round profile, N = {n}): the Domino drafter's round {t_dom:.2f} ms against "
                       f"the block drafter's {t_block:.2f} ms, i.e. c = {c:.2f} block passes per extra depth step "
                       f"over the block's {L} depths (`mfd path-gain`'s drafting cost 1 + c (depth - 1)).")
    return out


def _pct(v) -> str:
    return "-" if stored_number(v) is None else f"{100 * v:+.1f}%"


def _check_summary(chk: dict) -> list[str]:
    """The speedup check's verdicts (``evaluate.speedup_check``): relative error of the predicted
    speedups against the targets, and whether the predicted best budget is the measured best."""
    th, tau = chk.get("theory", {}), chk.get("tau", {})

    def worst(w):
        return f"{w['method']} ({w['drafter']}) N = {w['budget']} at T = {w['temperature']:g}"

    lines = [f"* Relative error |predicted / measured - 1| over {th['n']} rows: median "
             f"{100 * th['median_rel_error']:.1f}%, worst {100 * th['worst_rel_error']:.1f}% "
             f"({worst(th['worst_row'])}); {th['within_spread']} of {th['n']} within the measured spread. "
             f"Target median <= 5%: {'met' if th['median_rel_error'] <= 0.05 else 'missed'}."
             + ("" if stored_number(chk.get("median_rel_spread")) is None else
                f" For scale, the measured speedups' own pass-to-pass spread (std / mean) has median "
                f"{100 * chk['median_rel_spread']:.1f}%.")]
    if tau:
        lines.append(f"* With the measured acceptance (the cost model's error alone): median "
                     f"{100 * tau['median_rel_error']:.1f}%, worst {100 * tau['worst_rel_error']:.1f}% "
                     f"({worst(tau['worst_row'])}).")
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


def speedup_check_block(res: Result) -> str:
    """Predicted vs measured speedup per row (``mfd e2e``'s ``round_profile`` and
    ``speedup_check``): the measured round cost model, the table, the error summary against the
    targets (median |error| <= 5%, best budget right in >= 80% of groups) and the per-term check."""
    d, c = res.data, res.config
    prof, chk = d.get("round_profile"), d.get("speedup_check")
    if not prof or not chk or not chk.get("n_rows"):
        return "No round profile in these results (run `mfd e2e` with `--profile-prompts` > 0)."
    draft = ", ".join(f"K = {k}: {t:.2f}" for k, t in zip(prof.get("draft_modes", []), prof.get("draft_ms", [])))
    verify = ", ".join(f"{n}: {t:.2f}" for n, t in zip(prof["tree_sizes"], prof["verify_ms"]))
    lines = [f"Round cost model measured before decoding ({c.get('profile_prompts')} calibration prompt(s) x "
             f"{c.get('max_new_tokens')} tokens per cell, {d.get('timings_s', {}).get('round_profile', 0):.0f} s): "
             f"AR round {prof['t_target_ms']:.2f} ms, sampled draw {prof.get('draw_ms', 0):.3f} ms; drafting (ms) "
             f"{draft}; verify (ms) by N {verify}."]
    probe = prof.get("context_probe")
    if probe:
        ratios = [b / a for a, b in zip(probe["verify_ms"][0], probe["verify_ms"][-1]) if a > 0]
        lo, hi = probe["contexts"][0], probe["contexts"][-1]
        matters = any(abs(r - 1) > 0.05 for r in ratios)
        lines[0] += (f" Context: verify at {hi} tokens of context takes "
                     + ", ".join(f"{r:.2f}x" for r in ratios)
                     + f" (N = {', '.join(map(str, probe['tree_sizes']))}) its time at {lo} tokens: "
                     + ("context length matters here (beyond ±5%); the profile's rounds span the run's contexts."
                        if matters else "context length does not matter at this size (within ±5%)."))
    lines += ["", "In-sample consistency, not a prediction: both columns take acceptance from the evaluated rounds "
                  "themselves (the covered mass of each round's own tree under that round's verify logits, and the "
                  "measured tau), so their error is the round cost model's. The out-of-sample prediction is the "
                  "next block.", "",
              "| T | method (drafter) | N | measured speedup | cost model, in-sample coverage | error | "
              "cost model, measured tau | error |", "|---|---|---|---|---|---|---|---|"]
    for r in d["rows"]:
        if r["method"] == "ar" or stored_number(r.get("speedup_from_insample_coverage")) is None:
            continue
        lines.append(f"| {r['temperature']:g} | {_label(r)} | {r['budget']} | "
                     f"{value_with_spread(r, 'speedup', suffix='x')} | {r['speedup_from_insample_coverage']:.2f}x | "
                     f"{_pct(r['speedup_from_insample_coverage'] / r['speedup'] - 1)} | "
                     f"{stored_number(r.get('speedup_from_measured_tau')) or 0:.2f}x | "
                     f"{_pct((r.get('speedup_from_measured_tau') or 0) / r['speedup'] - 1)} |")
    lines += ["", *_check_summary(chk)]
    terms = chk.get("terms")
    if terms:
        lines += ["", "Which term is off: one round's time by term, mean over the rows (ms; measured in the "
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
    return "\n".join(lines)


def _err(v) -> str:
    return "-" if stored_number(v) is None else f"{100 * v:+.1f}%"


def prediction_check_block(res: Result) -> str:
    """The out-of-sample check (``llm.predict``): every cell's tau and speedup predicted before
    decoding from calibration prompts only, against what the evaluation measured, with the
    targets, and the budget choice's regret next to two naive rules."""
    d, c = res.data, res.config
    chk = d.get("prediction") or {}
    if not chk.get("n_cells"):
        return "No out-of-sample predictions in these results (run with `--profile-prompts` > 0)."
    n_cal, n_eval = len(d.get("calibration_prompts") or []), len(d.get("evaluation_prompts") or [])
    lead = (f"Predicted before decoding from {n_cal} calibration prompts of the training split (disjoint from the "
            f"{n_eval} evaluated prompts, checked by token hash), {c.get('max_new_tokens')} tokens each; "
            f"`predictions.json` was written before the first evaluated prompt was decoded "
            f"(calibration {d.get('timings_s', {}).get('calibration', 0):.0f} s, round profile "
            f"{d.get('timings_s', {}).get('round_profile', 0):.0f} s).")
    lines = [lead, "", "| T | method (drafter) | N (per round: cap) | predicted tau (± s.e.) | measured tau | error | predicted speedup "
             "[95% from acceptance] | measured speedup | error |", "|---|---|---|---|---|---|---|---|---|"]
    for x in chk["cells"]:
        label = _label(x) + ("" if x.get("on_grid") else (", per round" if x.get("per_round_budget") else
                                                          ", chosen N"))
        if x.get("per_round_budget") and stored_number(x.get("mean_tree_size")) is not None:
            label += f" (mean {x['mean_tree_size']:.1f}, predicted {x.get('predicted_mean_tree_size') or 0:.1f})"
        se = x.get("predicted_tau_se")
        sp = "-" if stored_number(x.get("predicted_speedup")) is None else (
            f"{x['predicted_speedup']:.2f}x [{x['predicted_speedup_lo']:.2f}, {x['predicted_speedup_hi']:.2f}]")
        meas = "-" if stored_number(x.get("speedup")) is None else (
            f"{x['speedup']:.2f}x" + ("" if stored_number(x.get("speedup_std")) is None else f" ± {x['speedup_std']:.2f}x"))
        lines.append(f"| {x['temperature']:g} | {label} | {x['budget']} | {x['predicted_tau']:.2f}"
                     + ("" if se is None else f" ± {se:.2f}") + f" | {x['tau']:.2f} | {_err(x['tau_error'])} | "
                     f"{sp} | {meas} | {_err(x['speedup_error'])} |")
    lines.append("")
    tau, sp = chk.get("tau") or {}, chk.get("speedup") or {}

    def worst(w):
        return f"{w['method']} ({w['drafter']}) N = {w['budget']} at T = {w['temperature']:g}"

    def by_t(e):
        return "; ".join(f"T = {t}: median {100 * v['median_abs_error']:.1f}%, worst {100 * v['worst_abs_error']:.1f}%"
                         for t, v in (e.get("by_temperature") or {}).items())

    if tau:
        lines.append(f"* **tau**: median |error| {100 * tau['median_abs_error']:.1f}%, worst "
                     f"{100 * tau['worst_abs_error']:.1f}% ({worst(tau['worst'])}), mean signed "
                     f"{100 * tau['mean_signed_error']:+.1f}% ({by_t(tau)}). Target median <= 3%: "
                     f"{'met' if tau['median_abs_error'] <= 0.03 else 'missed'}. The measured tau lies within 2 "
                     f"standard errors of the prediction in {chk['tau_within_2se']} of {chk['tau_with_se']} cells.")
    if sp:
        med, wst = sp["median_abs_error"] <= 0.05, sp["worst_abs_error"] <= 0.12
        lines.append(f"* **speedup**: median |error| {100 * sp['median_abs_error']:.1f}%, worst "
                     f"{100 * sp['worst_abs_error']:.1f}% ({worst(sp['worst'])}), mean signed "
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
                          f"{100 * insample['worst_rel_error']:.1f}%.")
    lines.append(f"* At T = 0, {chk['t0_cells_differing']} of {chk['t0_cells']} cells have a predicted tau "
                 "different from the measured one (a number computed from the measurement would equal it in all).")
    reg = chk.get("budget_regret") or []
    if reg:
        lines += ["", "Budget choice before decoding, scored by its regret: measured speedup at the best budget of the "
                      "grid / measured speedup at the chosen budget - 1 (0 = the best; negative = an off-grid choice "
                      "beat the grid). Theory: the N in [1, largest budget] with the highest predicted speedup under "
                      "the calibrated coverage; naive rules: always the smallest budget, and the budget whose "
                      "calibration decodes (greedy, the round profile's) ran fastest.", "",
                  "| T | method (drafter) | best on the grid | theory | smallest | fastest on calibration |",
                  "|---|---|---|---|---|---|"]

        def one(e, rule):
            x = e[rule]
            return "-" if x["regret"] is None else f"N = {x['budget']}: {100 * x['regret']:+.1f}%"

        k_of = {(r["method"], r["drafter"]): r.get("K") for r in d.get("rows") or []}
        for e in reg:
            e = {**e, "K": e.get("K", k_of.get((e["method"], e["drafter"])))}
            lines.append(f"| {e['temperature']:g} | {_label(e)} | N = {e['best_budget']} ({e['best_speedup']:.2f}x) | "
                         f"{one(e, 'theory')} | {one(e, 'smallest')} | {one(e, 'calibration_best')} |")
        means = {r: chk.get(f"mean_regret_{r}") for r in ("theory", "smallest", "calibration_best")}
        names = {"theory": "theory", "smallest": "smallest budget", "calibration_best": "fastest on calibration"}
        known = {r: v for r, v in means.items() if v is not None}
        best_rule = min(known, key=known.get)
        t = means["theory"]
        met = t is not None and t <= 0.02 and all(t <= v for r, v in known.items())
        lines += ["", "Mean regret: " + ", ".join(f"{names[r]} {100 * v:+.1f}%" for r, v in known.items())
                  + f". Lowest: {names[best_rule]}. Target (theory <= 2% and no worse than either naive rule): "
                  + ("met." if met else "missed.")]
    return "\n".join(lines)


def e2e_hf_block(res: Result) -> str:
    d = res.data
    hf = d.get("hf_assisted") or []
    ar = [r for r in d["rows"] if r["method"] == "ar"]
    lines = ["| T | Hugging Face method | tokens/s | speedup vs HF's own AR |", "|---|---|---|---|"]
    for r in hf:
        lines.append(f"| {r['temperature']:g} | {r['method']} | {value_with_spread(r, 'tokens_per_s', '{:.0f}')} | "
                     f"{value_with_spread(r, 'speedup', suffix='x')} |")
    for r in ar:
        lines.append(f"| {r['temperature']:g} | (ours) ar | {value_with_spread(r, 'tokens_per_s', '{:.0f}')} | 1.00x |")
    return "\n".join(lines)


def bench_trees_block(res: Result) -> str:
    from mfd_theory.commands.bench_trees import markdown

    return markdown(res)


def bench_fit_block(res: Result) -> str:
    r, c = res.data, res.config
    return (f"EM on {c['n']:,} samples, L = {c['L']}, V = {c['V']:,}, K = {c['K']}, {c['n_restarts']} restarts: "
            f"soft EM {r['fit_soft_s']:.2f} s, winner-take-all {r['fit_hard_s']:.2f} s; one numba EM iteration "
            f"{1e3 * r['numba_iter_s']:.0f} ms vs {1e3 * r['numpy_iter_s']:.0f} ms in NumPy "
            f"(first call, numba compile: {r['compile_s']:.1f} s).")


def _span(vals, fmt: str = "{:.2f}", suffix: str = "") -> str:
    """``a-b`` over ``vals`` (one value when both ends print alike)."""
    lo, hi = fmt.format(min(vals)), fmt.format(max(vals))
    return f"{lo}{suffix}" if lo == hi else f"{lo}-{hi}{suffix}"


def bench_decode_block(res: Result) -> str:
    """The decoding split per method; then the verify-latency profile (attention target) or the
    GDN tree-verification profile (hybrid target, ``--arch qwen3_5``)."""
    from mfd_theory.commands.bench_decode import hybrid_table

    d, c = res.data, res.config
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
    prof = d.get("hybrid_profile")
    if prof:
        rows = prof["rows"]
        ref = next((r for r in rows if r["N"] == c["budget"]), rows[len(rows) // 2])
        trees = [r for r in rows if r["N"] > 1] or rows
        lines += ["", f"GDN profile (medians of {c['profile_repeats']} interleaved repeats after a "
                      f"{c['prompt_len']}-token prompt, times in ms):", "", hybrid_table(prof), "",
                  f"The GDN layers' tree pass over N = {ref['N']} nodes costs {ref['gdn_tree_over_chain']:.2f}x their "
                  f"chain pass over {ref['N']} tokens ({_span([r['gdn_tree_over_chain'] for r in trees], suffix='x')} "
                  f"for N = {trees[0]['N']} to {trees[-1]['N']}); the GDN layers take "
                  f"{_span([100 * r['gdn_share'] for r in rows], '{:.0f}', '%')} of the hybrid's verify, which costs "
                  f"{_span([r['hybrid_over_attention'] for r in rows], suffix='x')} the attention target's; verify + "
                  f"commit at N = {ref['N']}: replay {ref['round_replay_ms']:.1f} ms, select "
                  f"{ref['round_select_ms']:.1f} ms."]
    return "\n".join(lines)


def bench_draft_block(res: Result) -> str:
    """``mfd bench draft`` at one preset shape: drafting-round ms before / after per (K, T) as the
    span over repeats, the two ratio targets as min / median / max, then the arithmetic floor and
    the target's verify path."""
    d, c = res.data, res.config
    reps = d["repeats"]
    modes = sorted({int(x) for x in c["modes"].split(",") if x.strip()})
    contexts = sorted({int(x) for x in c["contexts"].split(",") if x.strip()})
    lo, hi, kmax = contexts[0], contexts[-1], modes[-1]
    ratios = d["ratios"]

    def three(key):
        v = sorted(ratios[key])
        return f"{v[0]:.2f} / {statistics.median(v):.2f} / {v[-1]:.2f}"

    load = d.get("load_avg_1min")
    load_s = (f"1-minute load average {load[0]:.1f} at the start and {load[-1]:.1f} at the end on "
              f"{d.get('cpu_count', '?')} cores" if load else "machine load not recorded")
    lines = [f"`{c['preset']}` shape, target {d['model']} (width {d['width']}); {c['draft_layers']} draft layer(s), "
             f"block {c['block_size']}, {c['new_rows']} new context rows per round, fastest of {c['rounds']} rounds "
             f"per cell, {len(reps)} repeats in one run, {c['threads']} thread(s); {load_s}. Times in ms, a cell is "
             "the span over repeats; ratios are min / median / max over repeats:",
             "", "| round | before | folded | after |", "|---|---|---|---|"]

    def cell(path, k, t):  # "folded" exists for K > 1 only (and not in files written before it)
        vals = [r["draft_ms"].get(f"{path},K={k},T={t}") for r in reps]
        return _span(vals) if None not in vals else "-"

    for k in modes:
        for t in contexts:
            lines.append(f"| K = {k}, T = {t} | " + " | ".join(cell(p, k, t) for p in ("before", "folded", "after")) + " |")
    lines.append(f"| K = 1: T = {hi} / T = {lo} (target <= 3) | {three(f'before: K=1 T={hi} / K=1 T={lo}')} | - | "
                 f"{three(f'after: K=1 T={hi} / K=1 T={lo}')} |")
    if kmax > 1:
        fold_key = f"folded: K={kmax} T={hi} / K=1 T={hi}"
        lines.append(f"| T = {hi}: K = {kmax} / K = 1 (target <= 2.5) | "
                     f"{three(f'before: K={kmax} T={hi} / K=1 T={hi}')} | "
                     f"{three(fold_key) if fold_key in ratios else '-'} | {three(f'after: K={kmax} T={hi} / K=1 T={hi}')} |")
    # keyed by T: ints in a fresh result, strings once read back from JSON
    ver = {t: [r["verify_ms"].get(t, r["verify_ms"].get(str(t))) for r in reps] for t in contexts}
    cat = {t: [r["cache_cat_ms"].get(t, r["cache_cat_ms"].get(str(t))) for r in reps] for t in contexts}
    share = _span([100 * x for x in ratios[f"verify: cache copy share at T={hi}"]], "{:.1f}", "%")
    concat_key = f"verify: concatenating / in-place cache at T={hi}"
    concat = ""
    if concat_key in ratios:  # files written before the in-place cache timed HF's cache only
        cv = {t: [r["verify_concat_ms"].get(t, r["verify_concat_ms"].get(str(t))) for r in reps] for t in contexts}
        concat = ("; with HF's concatenating `DynamicCache`: " + ", ".join(f"{_span(cv[t])} ms at T = {t}" for t in contexts)
                  + f" (concatenating / in place at T = {hi}: {three(concat_key)})")
    repeat_key = f"verify: kv head repeat share at T={hi}"
    repeat = ""
    if repeat_key in ratios:  # files written before it was timed have no kv head repeat
        rep_ms = {t: [r["kv_repeat_ms"].get(t, r["kv_repeat_ms"].get(str(t))) for r in reps] for t in contexts}
        repeat = (" The key/value head repeat HF's SDPA path does per forward for a GQA target given a mask "
                  "(`repeat_kv`): " + ", ".join(f"{_span(rep_ms[t])} ms at T = {t}" for t in contexts)
                  + f" ({_span([100 * x for x in ratios[repeat_key]], '{:.1f}', '%')} of the verify at T = {hi}).")
    fold_sdpa = f"folded attention alone: K={kmax} T={hi} / K=1 T={hi}"
    lines += ["", f"SDPA calls alone, K = {kmax} / K = 1 at T = {hi}: "
                  f"{three(f'attention alone: K={kmax} T={hi} / K=1 T={hi}')} (one call per mode)"
              + (f", {three(fold_sdpa)} (folded, masked)" if fold_sdpa in ratios else "")
              + f". Verify of an N = {c['verify_nodes']} tree plus commit"
              + (" with `TargetModel`'s in-place cache" if concat else "") + ": "
              + ", ".join(f"{_span(ver[t])} ms at T = {t}" for t in contexts)
              + f" (T = {hi} / T = {lo}: {three(f'verify: T={hi} / T={lo}')})" + concat
              + "; the cache concatenation `DynamicCache.update` does per forward: "
              + ", ".join(f"{_span(cat[t])} ms at T = {t}" for t in contexts)
              + f" ({share} of the verify at T = {hi})." + repeat]
    return "\n".join(lines)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _drafter_name(r: dict) -> str:
    return "-" if r["method"] == "ar" else f"K = {r.get('K', '?')}"


def _prediction_summary(pr: dict | None, source: str) -> str | None:
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


def own_target_block(res: Result, source: Path | None = None) -> str:
    """``mfd own-target``'s evaluation (``OUT/eval/eval.json``): every row but ar's, and the MFD vs
    product gains; with ``source`` (where eval.json lies) also a line on the distilled data and the
    drafters' training, read from the files the commands wrote beside it (``OUT/data/manifest.json``,
    ``OUT/<drafter>/loss_curve.json``) and the step times in ``OUT/steps.json``."""
    d, c = res.data, res.config
    rows = [r for r in d["rows"] if r["method"] != "ar"]
    datasets = list(dict.fromkeys(r.get("dataset") for r in rows))
    ds_head, ds_rule = ("| data set ", "|---") if len(datasets) > 1 else ("", "")
    n_prompts = max((r.get("n_prompts") or 0 for r in rows), default=0)
    passes = {len(r["speedup_passes"]) for r in rows if isinstance(r.get("speedup_passes"), list)}
    lines = []
    if source is not None:
        root = Path(source).parent.parent
        times = ((_read_json(root / "steps.json") or {}).get("steps")) or {}

        def took(step, fmt=" ({:.0f} s)"):
            t = stored_number((times.get(step) or {}).get("seconds"))
            return fmt.format(t) if t is not None else ""

        parts = []
        man = _read_json(root / "data" / "manifest.json")
        if man:
            parts.append(f"distill: {man['n_sequences']} sequences, {man['n_response_tokens']:,} response tokens in "
                         f"{len(man['shards'])} shard(s){took('distill')}")
        trained = []
        for label, info in (d.get("drafters") or {}).items():
            curve = _read_json(root / label / "loss_curve.json")
            if curve:
                trained.append(f"K = {info.get('K', '?')} loss {curve[0]['loss']:.2f} -> {curve[-1]['loss']:.2f} "
                               f"over {len(curve)} steps{took(label)}")
        if trained:
            parts.append("train-drafter: " + ", ".join(trained))
        if took("eval"):
            parts.append(f"eval: {took('eval', '{:.0f} s')}")
        if parts:
            lines += ["; ".join(parts) + ".", ""]
    lines += [f"{n_prompts} held-out prompts x {c.get('max_new_tokens')} new tokens; speedup: mean ± std over "
              + (f"{'/'.join(map(str, sorted(passes)))} timing passes." if passes else "one timing pass (1 pass)."),
              "", ds_head + "| T | method | drafter | N | tau | speedup | predicted before decoding | = ar |",
              ds_rule + "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        same = "" if r.get("matches_ar") is None else ("yes" if r["matches_ar"] else "NO")
        tau, pred = stored_number(r.get("tau")), stored_number(r.get("predicted_speedup"))
        lines.append((f"| {r.get('dataset')} " if ds_head else "")
                     + f"| {r['temperature']:g} | {r['method']} | {_drafter_name(r)} | {r['budget']} | "
                     f"{'-' if tau is None else f'{tau:.2f}'} | {value_with_spread(r, 'speedup')} | "
                     f"{'-' if pred is None else f'{pred:.2f}'} | {same} |")
    greedy = [r for r in rows if r.get("matches_ar") is not None]
    if greedy:
        bad = [r for r in greedy if not r["matches_ar"]]
        lines += ["", f"Greedy rows whose tokens equal ar's on every prompt: {len(greedy) - len(bad)} of "
                      f"{len(greedy)}."]
    line = _prediction_summary(d.get("prediction"), "`predictions.json`, from the calibration prompts and the "
                                                   "round profile, written before the first evaluated prompt")
    if line:
        lines += ["", line]
    chk = d.get("speedup_check") or {}
    if chk.get("n_rows"):
        lines += ["", "In sample (not a prediction): the same cost model with the evaluated rounds' own coverage "
                      "against the measured speedup:", "", *_check_summary(chk)]
    gains = [g for g in d.get("mfd_gains") or [] if not is_best_budget(g)]
    if gains:
        lines += ["", "Each K > 1 drafter (mfd, and ddtree on its marginals) against the K = 1 drafter's ddtree at "
                      "the same budget (tau gain with z = difference / standard error; speed gain with the 95% "
                      "interval of its pass-to-pass spread):", "",
                  ds_head + "| T | method (drafter) | N | tau gain (z) | speed gain |",
                  ds_rule + "|---|---|---|---|---|"]
        for g in gains:
            z = stored_number(g.get("tau_diff_z"))
            K = next((r.get("K") for r in rows if r["drafter"] == g["drafter"]), "?")
            what = {"mfd": f"mfd (K = {K})", "ddtree": f"ddtree on K = {K} marginals"}.get(
                g["method"], f"{g['method']} (K = {K})")
            lines.append((f"| {g.get('dataset')} " if ds_head else "")
                         + f"| {g['temperature']:g} | {what} | {g['budget']} | {tau_gain_text(g)}"
                         + (f" ({z:+.1f})" if z is not None else "") + f" | {speed_gain_text(g)} |")
    return "\n".join(lines)


def own_target_summary(path: str | Path) -> str | None:
    """:func:`own_target_block` of the eval.json at ``path``, or None when there is none."""
    path = Path(path)
    return own_target_block(Result.load(path), path) if path.is_file() else None


def _ms(v, fmt="{:.2f}") -> str:
    """[mean, se] as "mean ± se" (or the mean alone)."""
    if not v or v[0] is None:
        return "-"
    return fmt.format(v[0]) + ("" if len(v) < 2 or v[1] is None else " ± " + fmt.replace("+", "").format(v[1]))


def natural_block(res: Result) -> str:
    """``mfd natural`` (``natural/natural.json``): the corpus, the target, the target-only ceiling,
    the effective futures, and the pipeline's tau / speedup on held-out code and prose."""
    d, c = res.data, res.config
    prov, tgt, ceil, e2e = d.get("provenance", {}), d.get("target", {}), d.get("ceiling", {}), d.get("e2e", {})
    lines = []
    nu, nh, ch = prov.get("n_units", {}), prov.get("n_heldout", {}), prov.get("chars", {})
    lines.append(f"Corpus: Python {prov.get('python_version')} standard library, {nu.get('code')} modules + "
                 f"{nu.get('prose')} documentation topics ({nh.get('code')} + {nh.get('prose')} held out, by module); "
                 f"training text {ch.get('train', {}).get('code', 0) / 1e6:.1f} MB code + "
                 f"{ch.get('train', {}).get('prose', 0) / 1e6:.2f} MB prose; text sha256 "
                 f"`{str(prov.get('text_sha256'))[:16]}`"
                 + (" (a subset of units)" if prov.get("subset") else "") + ".")
    ppl = tgt.get("perplexity", {})
    if tgt:
        a = tgt.get("arch", {})
        lines.append(f"Target: Qwen3 {a.get('num_layers')} layers x {a.get('hidden_size')}, "
                     f"{tgt.get('params', 0) / 1e6:.1f} M parameters, vocabulary {prov.get('vocab_size')}, "
                     f"{tgt.get('train', {}).get('steps')} steps in {tgt.get('train_seconds', 0) / 60:.1f} min on "
                     f"{tgt.get('threads')} thread{'' if tgt.get('threads') == 1 else 's'}"
                     + (f" (resumed from step {tgt['resumed_from_step']}; the time is that of the last segment)"
                        if tgt.get("resumed_from_step") else "") + f" (loss {tgt.get('loss_first', 0):.2f} -> {tgt.get('loss_last', 0):.2f}); "
                     "held-out perplexity: " + ", ".join(
                         f"{dom} {v['perplexity']:.1f}" for dom, v in ppl.items()) + ".")
    cost = e2e.get("cost") or {}
    if cost:
        vo = cost.get("verify_over_draft") or {}
        lines.append(f"Cost on this machine (eval's round profile): one target token {cost['t_target_ms']:.1f} ms, "
                     f"one drafting pass (K = 1) {cost['t_draft_ms']:.1f} ms (ratio {cost['target_over_draft']:.1f}); "
                     "verify / draft: " + ", ".join(f"N = {n}: {v:.1f}" for n, v in vo.items()) + ".")
    secs = d.get("seconds") or {}
    if secs:
        lines.append("Wall time per step: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in secs.items() if v)
                     + f"; total {d.get('total_seconds', 0) / 60:.1f} min.")
    if ceil:
        L = c.get("block_size", 16) - 1
        lines += ["", f"**Ceiling, from the target alone** (L = {L}, T = 1; mean ± s.e. over held-out prompts): "
                      "expected accepted tokens per round of the target's best product tree (its sampled "
                      "per-position marginals, DDTree's ranking) and of its oracle tree (exact top-N prefixes, "
                      "best-first with target forwards); MC: the same from independent samples.", "",
                  "| domain | N | product | oracle | oracle / product | MC product | MC oracle |",
                  "|---|---|---|---|---|---|---|"]
        for dom, v in ceil.items():
            for n, b in v["by_budget"].items():
                lines.append(f"| {dom} | {n} | {_ms(b['product'])} | {_ms(b['oracle'])} | "
                             f"{_ms(b['oracle_over_product'], '{:.3f}')} | {_ms(b['mc_product'])} | {_ms(b['mc_oracle'])} |")
        lines += [""] + [f"* {dom}: at N = {v['dead_at']} the product tree's dead share (P(s) <= {c.get('dead_eps')}) "
                         f"is {100 * v['dead']['dead_share'][0]:.1f}% ± {100 * (v['dead']['dead_share'][1] or 0):.1f}%, "
                         f"dead splices (dead and the prefix of no sampled continuation) "
                         f"{100 * v['dead']['dead_splice_share'][0]:.1f}%; all dead nodes of a tree together hold "
                         f"{v['dead']['dead_mass_lost'][0]:.4f} of the target's mass on average "
                         f"({v['n_prompts']} prompts)."
                         for dom, v in ceil.items()]
        lines += ["", "**Effective futures**: K-mode mixtures fitted by EM to the first half of each prompt's sampled "
                      "blocks, cut to their first l tokens; held-out log-likelihood gain over K = 1 (nats per block, "
                      "second half) and modes with weight >= 0.05.", "",
                  "| domain | l | " + " | ".join(f"K = {k}" for k in c.get("futures_modes", [])[1:]) + " |",
                  "|---|---|" + "---|" * (len(c.get("futures_modes", [])) - 1)]
        for dom, v in ceil.items():
            for ln, row in v["futures"].items():
                cells = [f"{_ms(row[str(k)]['gain_over_k1'], '{:+.2f}')} ({row[str(k)]['modes_with_weight'][0]:.1f})"
                         for k in c.get("futures_modes", [])[1:]]
                lines.append(f"| {dom} | {ln} | " + " | ".join(cells) + " |")
    rows = [r for r in e2e.get("rows", []) if r["method"] != "ar"]
    if rows:
        ec = e2e.get("config", {})
        lines += ["", f"**End to end** (`mfd distill` / `train-drafter` / `eval`; {ec.get('max_prompts')} held-out "
                      f"prompts per domain x {ec.get('max_new_tokens')} new tokens, {ec.get('passes')} timing passes; "
                      "speedup mean ± std over passes):", "",
                  "| domain | T | method | drafter | N | tau | speedup | dead share |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            dr = "dartree" if "dartree" in r["drafter"] else f"K = {r['K']}"
            ds = stored_number(r.get("dead_share"))
            lines.append(f"| {r.get('dataset')} | {r['temperature']:g} | {r['method']} | {dr} | {r['budget']} | "
                         f"{r['tau']:.2f} | {value_with_spread(r, 'speedup')} | "
                         f"{'-' if ds is None else f'{100 * ds:.0f}%'} |")
        line = _prediction_summary(e2e.get("prediction"), f"`mfd eval`'s calibration: the first "
                                   f"{ec.get('calibration_count')} held-out prompts of each domain, held back and "
                                   "never evaluated")
        if line:
            lines += ["", line]
        comps = e2e.get("best_budget") or []
        if comps:
            lines += ["", "Each method at its fastest budget against DDTree on the K = 1 drafter at its fastest "
                          "(tau: |z| < 2 is no measurable difference; speed: the 95% interval of the per-pass gains):",
                      "", "| domain | T | method | N vs N | tau gain (z) | speed gain |", "|---|---|---|---|---|---|"]
            for g in comps:
                what = "dartree" if g["method"] == "dartree" else (
                    f"mfd (K = {g['K']})" if g["method"] == "mfd" else f"ddtree on K = {g['K']} marginals")
                z = stored_number(g.get("tau_diff_z"))
                lines.append(f"| {g['dataset']} | {g['temperature']:g} | {what} | {g['budget']} vs {g['single_budget']} "
                             f"| {tau_gain_text(g)}" + (f" ({z:+.1f})" if z is not None else "")
                             + f" | {speed_gain_text(g)} |")
        reach = e2e.get("ceiling_reach") or []
        if reach:
            lines += ["", "Share of the ceiling reached at T = 1 (accepted tokens per round, bonus excluded, over the "
                          "target's oracle / product coverage at the same N; the ceiling is measured at the prompt, "
                          "the decode over the whole answer, so this is indicative): " + "; ".join(
                              f"{r['dataset']} {r['method']} "
                              f"({'dartree' if 'dartree' in r['drafter'] else 'K = ' + str(r['K'])}) N = {r['budget']}: "
                              f"{100 * r['of_oracle']:.0f}% / {100 * (r['of_product'] or 0):.0f}%" for r in reach) + "."]
    answer = _natural_answer(ceil, e2e)
    if answer:
        lines += ["", "**The answer, per domain** (from the numbers above):", "", *answer]
    return "\n".join(lines)


def _natural_answer(ceil: dict, e2e: dict) -> list[str]:
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
            ln = max(fut, key=int)
            best_k = max(fut[ln], key=lambda k: fut[ln][k]["gain_over_k1"][0] or 0)
            g = fut[ln][best_k]["gain_over_k1"][0]
            if best_k == "1":
                k2 = min((k for k in fut[ln] if k != "1"), key=int, default=None)
                parts.append(f"no mixture of K > 1 modes fitted to sampled {ln}-token blocks beats one mode on "
                             "held-out blocks" + (f" (K = {k2}: {fut[ln][k2]['gain_over_k1'][0]:+.2f} nats per block)"
                                                  if k2 else ""))
            else:
                parts.append(f"the best mixture of sampled {ln}-token blocks is K = {best_k} "
                             f"({g:+.2f} nats per block over K = 1)")
        for g in e2e.get("best_budget") or []:
            if g["dataset"] != dom or g["method"] not in ("mfd", "dartree"):
                continue
            what = "dartree" if g["method"] == "dartree" else f"mfd K = {g['K']}"
            parts.append(f"T = {g['temperature']:g} {what} vs ddtree K = 1, each at its best budget: tau "
                         f"{tau_gain_text(g)}, speed {speed_gain_text(g)}")
        if parts:
            out.append(f"* {dom}: " + "; ".join(parts) + ".")
    return out


def _headline_e2e(res: Result) -> list[str]:
    """Per temperature, the fastest MFD drafter against the product drafter, each at its fastest
    budget, with the evaluator's verdict on the speed difference (as in the e2e-gains block)."""
    d = res.data
    rows = d["rows"]
    out = []
    for temp in sorted({r["temperature"] for r in rows}):
        best = [g for g in d.get("mfd_gains") or []
                if g["temperature"] == temp and g["method"] == "mfd" and is_best_budget(g)]
        pairs = [_gain_pair(rows, g) + (g,) for g in best]
        pairs = [p for p in pairs if stored_number(p[0].get("speedup")) is not None and "method" in p[1]]
        if not pairs:
            continue
        a, b, _, g = max(pairs, key=lambda p: p[0]["speedup"])

        def at(r):
            return _label(r) + ("" if r["method"] == "chain" else f" N = {r['budget']}")

        out.append(f"| End to end, small Qwen3 target on CPU, T = {temp:g}: the product drafter (DDTree's tree, or "
                   f"the chain where that is faster) against MFD, each at its fastest budget | {at(b)}: tau "
                   f"{b['tau']:.2f}, {value_with_spread(b, 'speedup', suffix='x')}; {at(a)}: tau {a['tau']:.2f}, "
                   f"{value_with_spread(a, 'speedup', suffix='x')}; speed: {_speed_gain(g, a, b)} | "
                   "[results](docs/results.md), `e2e` and `e2e-gains` |")
    return out


def headline_block(results: dict[str, Result]) -> str:
    """The README's headline table: a few numbers from several results files (the chimera bound's
    check, the end-to-end DDTree vs MFD comparison, the out-of-sample prediction error, the natural
    text's ceiling), each with where the full table is."""
    lines = ["| question | the last run's answer | full table |", "|---|---|---|"]
    cb = results["chimera_bound.json"]
    v, c = cb.data["verify"], cb.config
    lines.append(f"| Does every product-ranked tree that holds two futures disagreeing in m positions hold at least "
                 f"2^(m-1) - 1 chimeras? | {v['instances']:,} random instances, m = 1..{c['m_max']}: "
                 f"**{v['violations']} violations** ({v['ties']} exact ties set aside) | "
                 "[results](docs/results.md), `chimera-bound` |")
    e2e = results["end_to_end.json"]
    lines += _headline_e2e(e2e)
    pr = e2e.data.get("prediction") or {}
    if pr.get("n_cells"):
        tau, sp = pr.get("tau") or {}, pr.get("speedup") or {}
        lines.append(f"| How well are tau and speedup predicted before decoding, from calibration prompts only "
                     f"(same run, {pr['n_cells']} cells)? | tau: median \\|error\\| {100 * tau['median_abs_error']:.1f}%, "
                     f"worst {100 * tau['worst_abs_error']:.1f}%; speedup: median {100 * sp['median_abs_error']:.1f}%, "
                     f"worst {100 * sp['worst_abs_error']:.1f}% | [results](docs/results.md), `prediction-check` |")
    ceil = results["natural/natural.json"].data.get("ceiling") or {}
    parts = []
    for dom, e in ceil.items():
        n = max(e["by_budget"], key=int)
        r = e["by_budget"][n]["oracle_over_product"][0]
        if r is not None:
            parts.append(f"{dom} {100 * (r - 1):+.1f}% at N = {n}")
    if parts:
        lines.append("| On natural text (Python's standard library), how much more can any drafter cover than the "
                     "best product tree? The target's own oracle tree over its best product tree | "
                     + "; ".join(parts) + " | [results](docs/results.md), `natural` |")
    return "\n".join(lines)


def bench_batch_block(res: Result) -> str:
    """``mfd bench batch``: per batch size, the best measured cell of each (method, policy) with
    the throughput predicted for it before the run, then the prediction error, the crossover, the
    issue's targets and the GPU prediction (labelled as such)."""
    d, c = res.data, res.config
    rows = d["rows"]
    sizes = sorted({r["batch_size"] for r in rows})
    series = [("ar", "off", "AR"), ("chain", "per_request", "chain"), ("ddtree", "per_request", "DDTree per request"),
              ("ddtree", "global", "DDTree global"), ("ddtree", "auto", "DDTree auto"),
              ("mfd", "per_request", "MFD per request"), ("mfd", "global", "MFD global"), ("mfd", "auto", "MFD auto")]
    lines = [f"{d['model']}; {d['eval_prompts']} held-out prompts (the first B per batch), {c['max_new_tokens']} new "
             f"tokens each, {c['passes']} passes, {c['threads']} thread(s); predictions from "
             f"{d['calibration_prompts']} training-split prompts, written before the evaluation. Steady tokens/s "
             "(rounds holding all B requests), predicted in brackets; N per request (global: the round's total); "
             "acc = draft tokens accepted per request per round:", "",
             "| B | " + " | ".join(lbl for _, _, lbl in series) + " |", "|---" * (len(series) + 1) + "|"]
    for b in sizes:
        cells = []
        for m, pol, _ in series:
            cand = [r for r in rows if r["batch_size"] == b and r["method"] == m and r["policy"] == pol]
            if not cand:
                cells.append("-")
                continue
            r = max(cand, key=lambda r: r["steady_tokens_per_s"])
            n = "" if pol in ("off", "auto") else f" N={r['nodes']}"
            acc = "" if pol == "off" else f", acc {r['accepted']:.2f}"
            cells.append(f"{r['steady_tokens_per_s']:.0f} ({r['predicted_tokens_per_s']:.0f}){n}{acc}")
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    s = d["checks"]["summary"]
    errs = sorted(abs(r["prediction_error"]) for r in rows)
    med = errs[len(errs) // 2] if len(errs) % 2 else 0.5 * (errs[len(errs) // 2 - 1] + errs[len(errs) // 2])
    pc = d["predicted_crossover"]
    lines += [
        "",
        f"- predicted vs measured steady tokens/s over all {len(rows)} cells: median error {100 * med:.1f}%, "
        f"worst {100 * errs[-1]:.1f}%",
        "- the batch size from which batched AR is the fastest configuration at every larger B: "
        + "; ".join(f"{what} {'B = ' + str(v) if v is not None else 'none (speculation pays at the largest B)'}"
                    for what, v in (("measured", d["measured_crossover"]), ("predicted for DDTree", pc.get("ddtree")),
                                    ("predicted for MFD", pc.get("mfd")))),
        f"- global top-N accepts at least as many tokens as per-request N at the same total, within two standard "
        f"errors, at every (B, N, method): **{'yes' if s['global_accepts_at_least_per_request'] else 'no'}**",
        f"- global beats the best per-request N by >= 5% at some B >= 4: "
        f"**{'yes' if s['global_5pct_somewhere_b4'] else 'no'}** (best {100 * s['best_global_gain_b4']:+.1f}%)",
        f"- auto within 3% of the best measured configuration at every B: "
        f"**{'yes' if s['auto_within_3pct_everywhere'] else 'no'}** (worst {100 * s['worst_auto_gap']:+.1f}%)",
        f"- share of a round outside the two forwards at B = 16, worst cell: {100 * s['overhead_at_16_max']:.1f}% "
        "(target <= 10%)",
        f"- PREDICTED, not measured, for a GPU from the packaged `{d['gpu_profile']}` table (an assumption; a "
        "forward costed by its total rows): best policy / AR throughput at B = "
        + ", ".join(f"{r['batch_size']}: {r['tokens_per_s'] / r['ar_tokens_per_s']:.2f}x ({r['policy']})"
                    for r in d["gpu_predicted"] if r["method"] == "mfd") + " (MFD)",
    ]
    return "\n".join(lines)


#: block name -> (results file under the results directory, formatter)
BLOCKS: dict[str, tuple[str, Callable[[Result], str]]] = {
    "core-table": ("core_table.json", core_block),
    "chimera-bound": ("chimera_bound.json", chimera_bound_block),
    "chimera-share": ("chimera_share.json", chimera_share_block),
    "mixture-gain": ("mixture_gain.json", mixture_gain_block),
    "path-gain": ("path_gain.json", path_gain_block),
    "e2e": ("end_to_end.json", e2e_block),
    "e2e-gains": ("end_to_end.json", e2e_gains_block),
    "e2e-hf": ("end_to_end.json", e2e_hf_block),
    "e2e-dartree": ("end_to_end.json", e2e_dartree_block),
    "speedup-check": ("end_to_end.json", speedup_check_block),
    "prediction-check": ("end_to_end.json", prediction_check_block),
    "prediction-check-hybrid": ("hybrid/end_to_end.json", prediction_check_block),
    "bench-trees": ("bench_trees.json", bench_trees_block),
    "bench-fit": ("bench_fit.json", bench_fit_block),
    "bench-decode": ("bench_decode.json", bench_decode_block),
    "own-target": ("own_target/eval/eval.json", own_target_block),
    "bench-decode-hybrid": ("bench_decode_qwen3_5.json", bench_decode_block),
    "bench-draft-micro": ("bench_draft_micro.json", bench_draft_block),
    "bench-draft-tiny": ("bench_draft_tiny.json", bench_draft_block),
    "e2e-hybrid": ("hybrid/end_to_end.json", e2e_hybrid_block),
    "natural": ("natural/natural.json", natural_block),
    "bench-batch": ("bench_batch.json", bench_batch_block),
    "bench-batch-hybrid": ("bench_batch_qwen3_5.json", bench_batch_block),
    "headline": ("end_to_end.json", headline_block),
}
#: blocks whose formatter also reads files beside its results file (it gets that file's path)
_READS_BESIDE = {"own-target"}
#: blocks made from several results files: the files besides the one in BLOCKS (every one must
#: exist, else the block is skipped); the formatter gets {file name: Result} of all of them
_ALSO_READS: dict[str, tuple[str, ...]] = {"headline": ("chimera_bound.json", "natural/natural.json")}


def block_inputs(name: str) -> tuple[str, ...]:
    """The results files (relative to the results directory) that block ``name`` is made from."""
    return (BLOCKS[name][0],) + _ALSO_READS.get(name, ())


def render(text: str, results_dir: str | Path, source: str = "readme") -> tuple[str, list[str], list[str]]:
    """(new text, names of blocks that changed, names skipped for want of a results file).

    ``source`` names the text in error messages (an unknown block, a block without its closing
    marker)."""
    results_dir = Path(results_dir)
    names = [m.group("name") for m in _BLOCK_RE.finditer(text)]
    unknown = sorted(set(names) - set(BLOCKS))
    if unknown:
        raise ValueError(f"{source}: unknown report block(s) {unknown}; known: {sorted(BLOCKS)}")
    opened = re.findall(r"<!-- report:([a-z0-9-]+) -->", text)
    if sorted(opened) != sorted(names):
        raise ValueError(f"{source}: report block(s) without a closing marker: {sorted(set(opened) - set(names))}")
    changed: list[str] = []
    skipped: list[str] = []
    loaded: dict[str, Result] = {}

    def load(fname: str) -> Result:
        if fname not in loaded:
            loaded[fname] = Result.load(results_dir / fname)
        return loaded[fname]

    def replace(m: re.Match) -> str:
        name = m.group("name")
        fname, fmt = BLOCKS[name]
        inputs = block_inputs(name)
        if not all((results_dir / f).is_file() for f in inputs):
            skipped.append(name)
            return m.group(0)
        path = results_dir / fname
        if name in _ALSO_READS:
            text = fmt({f: load(f) for f in inputs})
        elif name in _READS_BESIDE:
            text = fmt(load(fname), path)
        else:
            text = fmt(load(fname))
        body = text.rstrip("\n") + "\n"
        if body != m.group("body"):
            changed.append(name)
        return f"<!-- report:{name} -->\n{body}<!-- /report:{name} -->"

    return _BLOCK_RE.sub(replace, text), changed, skipped


def check_layout(texts: dict[str, str]) -> None:
    """Every block sits in the file :data:`BLOCK_FILES` names for it, once, and nowhere else
    (``texts``: repository-relative file name -> its text); ValueError naming the file otherwise."""
    for fname, text in texts.items():
        found = [m.group("name") for m in _BLOCK_RE.finditer(text)]
        want = sorted(n for n, f in BLOCK_FILES.items() if f == fname)
        twice = sorted({n for n in found if found.count(n) > 1})
        if twice:
            raise ValueError(f"{fname}: block(s) {twice} appear more than once")
        stray = sorted(n for n in found if BLOCK_FILES.get(n, fname) != fname)
        if stray:
            raise ValueError(f"{fname}: block(s) {stray} belong in "
                             + ", ".join(sorted({BLOCK_FILES[n] for n in stray})) + " (report_files.BLOCK_FILES)")
        missing = sorted(set(want) - set(found))
        if missing:
            raise ValueError(f"{fname}: block(s) {missing} are missing (report_files.BLOCK_FILES puts them there)")


def main(argv=None) -> int:
    from mfd_theory.formatting import help_summary

    files_text = ", ".join(report_files())
    parser = argparse.ArgumentParser(prog="mfd report", description=help_summary(__doc__))
    parser.add_argument("--results", default="results", metavar="DIR",
                        help="directory holding the results files (default: results)")
    parser.add_argument("--file", "--readme", dest="file", default="", metavar="PATH",
                        help=f"rewrite (or check) this Markdown file only; --readme is the older name of this "
                             f"option (default: every file that holds a block: {files_text})")
    parser.add_argument("--out", default="", metavar="PATH",
                        help="with --file: write the rewritten file here instead of over it (default: over --file)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a block differs from what the results give, 2 when no block "
                             "could be checked for want of results (default: off)")
    args = parser.parse_args(argv)
    if args.out and not args.file:
        parser.error("--out: needs --file (one Markdown file to rewrite)")
    if args.file:
        paths = {args.file: Path(args.file)}
        if not paths[args.file].is_file():
            parser.error(f"--file: no file at {args.file}")
    else:
        paths = {name: ROOT / name for name in report_files()}
        absent = [name for name, p in paths.items() if not p.is_file()]
        if absent:
            parser.error(f"no file at {', '.join(absent)} under {ROOT} (the files report_files.BLOCK_FILES names)")
    results = Path(args.results)
    if not results.is_dir():
        parser.error(f"--results: no directory at {args.results}")
    if args.out:
        from mfd_theory.validation import check_out_file

        try:
            check_out_file(args.out, "--out")
        except ValueError as exc:
            parser.error(str(exc))
    texts = {name: p.read_text(encoding="utf-8") for name, p in paths.items()}
    if not args.file:
        check_layout(texts)  # a ValueError (a block in the wrong file) exits 2 through the CLI
    rendered = {name: render(text, results, name) for name, text in texts.items()}

    total = changed = 0
    skipped: list[tuple[str, str]] = []
    for name, (_, ch, sk) in rendered.items():
        total += len(_BLOCK_RE.findall(texts[name]))
        changed += len(ch)
        skipped += [(name, b) for b in sk]
        for block in sk:
            missing = [str(results / f) for f in block_inputs(block) if not (results / f).is_file()]
            print(f"skipped block {block} ({name}): no {', '.join(missing)}")
        if args.check:
            for block in ch:
                print(f"out of date: block {block} ({name}) differs from "
                      + ", ".join(str(results / f) for f in block_inputs(block)))
    if total and len(skipped) == total:
        missing = sorted({f for _, b in skipped for f in block_inputs(b) if not (results / f).is_file()})
        print(f"mfd report: error: none of the {total} report block(s) could be "
              f"{'checked' if args.check else 'rewritten'}: every one needs a results file missing from "
              f"{results}/ ({', '.join(missing)}); run the experiments first (mfd reproduce)", file=sys.stderr)
        return 2
    done = total - len(skipped)
    skip_text = f"; {len(skipped)} skipped for missing results (listed above)" if skipped else ""
    if args.check:
        print(f"checked {done} of {total} report block(s) against {results}/: {done - changed} match, "
              f"{changed} out of date{skip_text}")
        return 1 if changed else 0
    for name, (new, ch, _) in rendered.items():
        out = Path(args.out) if args.out else paths[name]
        if new != texts[name] or out != paths[name]:
            atomic_write_text(out, new)
            print(f"wrote {out} ({len(ch)} block(s) changed: {', '.join(ch) or 'none'})")
    print(f"regenerated {done} of {total} report block(s) from {results}/: {changed} changed{skip_text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
