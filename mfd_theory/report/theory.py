"""Report blocks of the theory experiments: the core table, the chimera bound and share, the
mixture gain, the path gain and the best-mode trees (docs/results.md, first half).

Each block is ``block(results) -> str`` (:mod:`.inputs`); the tables of the core table, mixture
gain and path gain are formatted by their own commands, which the blocks call.
"""

from __future__ import annotations

from mfd_theory.layouts import at_budget, headline_k
from mfd_theory.report.inputs import Results
from mfd_theory.results import Result

__all__ = ["best_mode", "best_mode_text", "break_even", "chimera_bound", "chimera_share", "core_table", "core_table_text",
           "mixture_gain", "mixture_gain_summary", "path_gain", "path_gain_summary"]


def core_table(results: Results) -> str:
    return core_table_text(results.main)


def best_mode(results: Results) -> str:
    return best_mode_text(results.main)


def chimera_bound(results: Results) -> str:
    res = results.main
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


def chimera_share(results: Results) -> str:
    from mfd_theory.layouts import widen_setting

    res = results.main
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


def mixture_gain(results: Results) -> str:
    res = results.main
    lines = [mixture_gain_summary(res)]
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


def path_gain(results: Results) -> str:
    res = results.main
    cfg = res.config
    profile = cfg["profiles"][0]
    lines = [path_gain_summary(res, budget=64, profile=profile), ""]
    wins = [(f, g, c) for f, g, c in break_even(res, profile) if c is not None]
    costs = ", ".join(f"{c:g}" for c in cfg["step_costs"])
    if wins:
        lines.append(f"Path trees win ({profile}, step costs swept: {costs}) for: "
                     + "; ".join(f"{f} {g} up to c = {c:g}" for f, g, c in wins) + ".")
    else:
        lines.append(f"Path trees win for no family at any swept step cost ({costs}; {profile}).")
    for p in cfg["profiles"][1:]:
        w = [(f, g, c) for f, g, c in break_even(res, p) if c is not None]
        lines.append(f"Under {p}: " + ("; ".join(f"{f} {g} up to c = {c:g}" for f, g, c in w) if w else "never") + ".")
    return "\n".join(lines)


# ------------------------------------------------------------------ the theory commands' tables


def _cost_indices(costs: list[float], wanted=(1.0, 0.05)) -> list[int]:
    idx = [costs.index(c) for c in wanted if c in costs]
    return idx or sorted({0, len(costs) - 1})


def core_table_text(result: Result) -> str:
    cfg, rows = result.config, result.data["rows"]
    oracle_cov = rows["oracle"]["coverage"]
    lines = [
        f"{cfg['n_futures']}-future target, L = {cfg['L']}, V = {cfg['V']}, noise = {cfg['noise']}, "
        f"N = {cfg['budget']}; dead = P(s) <= {cfg['eps']:g}",
        "",
        "| tree | nodes | coverage (E[accepted]) | tau | of oracle | dead share | dead splices |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("chain", "product", "mixture", "oracle"):
        r = rows[name]
        lines.append(
            f"| {name} | {r['n_nodes']} | {r['coverage']:.3f} | {1 + r['coverage']:.3f} | "
            f"{r['coverage'] / oracle_cov:.1%} | {r['dead'] / r['n_nodes']:.1%} | {r['dead_splices']} |"
        )
    return "\n".join(lines)


def best_mode_text(result: Result) -> str:
    """Markdown: the enumeration check, the theorem checks, then the scorer table."""
    d, cfg = result.data, result.config
    c, th = d["check"], d["theorems"]
    kinds = ", ".join(f"{r['instances']:,} {k}" for k, r in c["by_kind"].items())
    lines = [
        f"Best-mode builder against enumeration: **{c['mismatches']} mismatches** in {c['instances']:,} random "
        f"drafters (K <= {cfg['max_K']}, L <= {cfg['max_L']}, V <= {cfg['max_V']}, N <= {cfg['max_budget']}; "
        f"{kinds}; {c['with_ties']:,} with tied scores in the tree), node order and scores compared exactly.",
        "",
        f"Coverage under the drafter's own mixture, {th['rows']} (cell, drafter, N) rows: the mixture tree is "
        f"never beaten ({th['mixture_optimal_violations']} violations); the best-mode tree never covers less "
        f"than pi_min of it ({th['lower_bound_violations']} violations; the smallest ratio seen is "
        f"{th['min_q_ratio']:.3f}, where pi_min = {th['min_q_ratio_pi_min']:.3f}).",
        "",
        f"L = {cfg['L']}, {len(cfg['seeds'])} seeds per setting; coverage = expected accepted tokens under the "
        "target (mean over the family's cells); chimeras = share of nodes that splice the futures but follow "
        "none; more / less: cells where best-mode covers more / less target mass than the mixture.",
        "",
        "| family | drafter | N | product | mixture | best-mode | oracle | chimeras product | mixture | "
        "best-mode | best-mode more / less | sets differ |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["table"]:
        lines.append(
            f"| {r['family']} | {r['drafter']} | {r['budget']} | {r['coverage_product']:.2f} | "
            f"{r['coverage_mixture']:.2f} | {r['coverage_best_mode']:.2f} | {r['oracle']:.2f} | "
            f"{100 * r['chimera_share_product']:.1f}% | {100 * r['chimera_share_mixture']:.1f}% | "
            f"{100 * r['chimera_share_best_mode']:.1f}% | {r['best_mode_more']} / {r['best_mode_less']} of "
            f"{r['cells']} | {r['sets_differ']} |")
    return "\n".join(lines)


def mixture_gain_summary(result: Result, budgets=(64, 256), profile: str | None = None) -> str:
    """A Markdown table: per family, the fraction of the oracle's coverage at two budgets for the
    product drafter and the fitted K-mode mixture, and the predicted speed gain."""
    s = result.data["summary"]
    cfg_budgets = list(result.config["budgets"])
    profile = profile or result.config["profiles"][0]
    # the requested budgets that the run has; otherwise its middle and largest ones
    budgets = [b for b in budgets if b in cfg_budgets] or sorted({cfg_budgets[len(cfg_budgets) // 2],
                                                                  cfg_budgets[-1]})
    hk = headline_k(result.config["Ks"])
    head = " | ".join(f"product N={b} | mixture K={hk} N={b}" for b in budgets)
    b64 = 64 if 64 in cfg_budgets else budgets[0]
    lines = [
        f"| family (F >= 2) | {head} | chimeras N={b64} (product) | predicted gain ({profile}) |",
        "|---" * (2 + 2 * len(budgets) + 1) + "|",
    ]
    for family, fam in s.items():
        for label in ("multi", "single"):
            if label not in fam or "mixture" not in fam[label]:
                continue
            e = fam[label]
            rows = e["by_budget"]
            cells = " | ".join(f"{at_budget(rows, b, 'frac_oracle_mean', 'product'):.3f} | "
                               f"{at_budget(rows, b, 'frac_oracle_mean', 'mixture'):.3f}" for b in budgets)
            name = family if label == "multi" else f"{family} (F = 1)"
            lines.append(
                f"| {name} | {cells} | {at_budget(rows, b64, 'chimera_share_mean', 'product'):.2f} | "
                f"{100 * e['mixture']['predicted_gain'][profile]:+.1f}% |"
            )
    conf = result.data.get("confidence_summary") or []
    if conf:
        lines += [
            "",
            f"| zipf, constant confidence c (F = {','.join(map(str, result.config['confidence_Fs']))}) | "
            f"oracle C at N={budgets[0]} | product N={budgets[0]} | mixture N={budgets[0]} | "
            f"product tau at best N | predicted gain ({profile}) |",
            "|---|---|---|---|---|---|",
        ]
        for e in conf:
            r = next(x for x in e["by_budget"] if x["budget"] == budgets[0])
            lines.append(
                f"| c = {e['confidence']:g} | {r['oracle_coverage']:.2f} | {r['product_frac']:.3f} | "
                f"{r['mixture_frac']:.3f} | {e['product_best'][profile]['tau']:.2f} | "
                f"{100 * e['predicted_gain'][profile]:+.1f}% |"
            )
    return "\n".join(lines)


def path_gain_summary(result: Result, budget: int = 64, profile: str | None = None) -> str:
    """Markdown: coverage at one budget per method and family, then the best predicted speedup of
    each method (and the winner) at two per-depth step costs of the path drafter."""
    cfg, s = result.config, result.data["summary"]
    budgets = list(cfg["budgets"])
    b = budget if budget in budgets else budgets[len(budgets) // 2]
    profile = profile or cfg["profiles"][0]
    mems = list(cfg["memories"])
    K = max(cfg["Ks"])
    full = min(max(cfg["depth_caps"]), cfg["L"])  # path trees at full depth: the best each memory allows
    lines = [
        f"Coverage (expected accepted tokens) at N = {b}; path trees at full depth, memory r:",
        "",
        f"| family | F / m | product | mixture K={K} | " + " | ".join(f"path r={r}" for r in mems) + " | oracle |",
        "|---" * (5 + len(mems)) + "|",
    ]
    for e in s:
        cov = {r["method"]: r["coverage"] for r in e["by_budget"] if r["budget"] == b}
        path = " | ".join(f"{cov[f'path r={r} D={full}']:.2f}" for r in mems)
        lines.append(f"| {e['family']} | {e['group']} | {cov['product']:.2f} | {cov[f'mixture K={K}']:.2f} | "
                     f"{path} | {cov['oracle']:.2f} |")
    costs = list(cfg["step_costs"])
    ci = _cost_indices(costs)
    head = " | ".join(f"c = {costs[j]:g}: product / mixture / path | winner" for j in ci)
    lines += [
        "",
        f"Best predicted speedup ({profile}, ASSUMED latencies unless measured) over budgets; path trees "
        f"also over memory and depth cap; c = one extra depth step of the path drafter, in block passes:",
        "",
        f"| family | F / m | {head} |",
        "|---" * (2 + 2 * len(ci)) + "|",
    ]
    for e in s:
        sp = e["speed"][profile]
        parts = []
        for j in ci:
            v = sp[j]["speedup"]
            win = sp[j]["winner"] if sp[j]["winner"].startswith("tie") else \
                f"{sp[j]['winner']} (+{100 * sp[j]['margin']:.1f}%)"
            parts.append(f"{v['product']:.2f}x / {v['mixture']:.2f}x / {v['path']:.2f}x | {win}")
        lines.append(f"| {e['family']} | {e['group']} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def break_even(result: Result, profile: str | None = None) -> list[tuple[str, str, float | None]]:
    """(family, group, largest swept step cost at which the path tree still wins by at least
    :data:`TIE`) per summary row (None: it wins at no swept cost)."""
    cfg = result.config
    profile = profile or cfg["profiles"][0]
    out = []
    for e in result.data["summary"]:
        won = [x["step_cost"] for x in e["speed"][profile] if x["winner"] == "path"]
        out.append((e["family"], e["group"], max(won) if won else None))
    return out
