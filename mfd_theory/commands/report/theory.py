"""Report blocks of the theory experiments: the core table, the chimera bound and share, the
mixture gain, the path gain and the best-mode trees (docs/results.md, first half).

Each block is ``block(results) -> str`` (:mod:`.inputs`); the tables of the core table, mixture
gain and path gain are formatted by their own commands, which the blocks call.
"""

from __future__ import annotations

from mfd_theory.commands.report.inputs import Results

__all__ = ["best_mode", "chimera_bound", "chimera_share", "core_table", "mixture_gain", "path_gain"]


def core_table(results: Results) -> str:
    from mfd_theory.commands.theory.core_table import format_table

    return format_table(results.main)


def best_mode(results: Results) -> str:
    from mfd_theory.commands.theory.best_mode import format_table

    return format_table(results.main)


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
    from mfd_theory.commands.theory.mixture_gain import at_budget, format_summary, headline_k

    res = results.main
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


def path_gain(results: Results) -> str:
    from mfd_theory.commands.theory.path_gain import break_even, format_summary

    res = results.main
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
    for p in cfg["profiles"][1:]:
        w = [(f, g, c) for f, g, c in break_even(res, p) if c is not None]
        lines.append(f"Under {p}: " + ("; ".join(f"{f} {g} up to c = {c:g}" for f, g, c in w) if w else "never") + ".")
    return "\n".join(lines)
