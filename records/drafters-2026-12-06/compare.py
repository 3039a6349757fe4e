"""Paired comparisons of the drafters measured in this folder, from their committed tau records.

Each comparison: tau per HumanEval problem (all 164, the same cached answers: greedy at T = 0, the
target's samples of seed 0 at T = 1), method A against method B, by mfd_theory.stats.compare (one
training run each: Student t over the problems' log ratios, so a rerun that retrains is NOT in the
interval), Bonferroni over the rows of each table. Writes compare.json beside this file and prints
one line per comparison.

    .venv/bin/python records/drafters-2026-12-06/compare.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mfd_theory.stats import compare, runs_to_decide, tau_resolution

HERE = Path(__file__).resolve().parent
SET = "code-eval"


def cells(record: str, drafter: str | None = None) -> dict:
    """{(method, scorer, budget): per-problem tau} of the drafter a tau record measured (the one whose
    path ends with ``drafter`` where the record measured several)."""
    rec = json.loads((HERE / record).read_text())
    found = [d for d in rec["data"]["drafters"] if drafter is None or d["drafter"].rstrip("/").endswith(drafter)]
    if len(found) != 1:
        raise ValueError(f"{record}: {len(found)} drafters match {drafter!r}")
    d = found[0]
    out = {}
    for n, b in d["sets"][SET]["budgets"].items():
        for c in b["cells"]:
            out[(c["method"], c["scorer"], int(n))] = np.asarray(c["per_sequence_tau"], dtype=np.float64)
    return out


def same_n(k4: dict, k1: dict, budgets) -> dict:
    return {
        # the paper's same-N question: the MFD drafter's tree against the product drafter's DDTree
        "MFD K = 4 (mixture scorer) vs K = 1 DDTree, same N":
            [(("mfd", "mixture", n), ("ddtree", None, n)) for n in budgets],
        "MFD K = 4 (best-mode scorer) vs K = 1 DDTree, same N":
            [(("mfd", "best_mode", n), ("ddtree", None, n)) for n in budgets],
        # the K = 4 drafter's own DDTree (the product of its mixture's marginals) against K = 1's
        "K = 4 drafter's DDTree vs K = 1 DDTree, same N":
            [(("ddtree", None, n), ("ddtree", None, n)) for n in budgets],
    }


def own(budgets) -> dict:
    """The mixture's own effect: the K = 4 drafter's mixture and best-mode trees against DDTree over
    the same drafter's marginals (one drafter, one run: only the tree differs)."""
    return {"MFD K = 4 (mixture) vs the same drafter's DDTree": [(("mfd", "mixture", n), ("ddtree", None, n))
                                                                 for n in budgets],
            "MFD K = 4 (best-mode) vs the same drafter's DDTree": [(("mfd", "best_mode", n), ("ddtree", None, n))
                                                                   for n in budgets]}


def table(name: str, a: dict, b: dict, questions: dict) -> list[dict]:
    """Every pair of ``questions`` ({question: [(cell of a, cell of b)]}), Bonferroni over all of them."""
    family = sum(len(v) for v in questions.values())
    rows = []
    for q, pairs in questions.items():
        for ca, cb in pairs:
            c = compare(a[ca], b[cb], family=family)
            row = {"table": name, "question": q, "a": list(ca), "b": list(cb), "budget": ca[2],
                   "tau_a": float(a[ca].mean()), "tau_b": float(b[cb].mean()), "gain": c.gain, "lo": c.lo, "hi": c.hi,
                   "verdict": c.verdict, "model": c.model, "level": c.level, "family": c.family, "margin": c.margin,
                   "prompts": c.n_prompts}
            rows.append(row)
            print(f"[{name}] {q}, N = {ca[2]}: mean per-problem tau {row['tau_a']:.3f} vs {row['tau_b']:.3f}; "
                  f"gain {c.gain:+.1%} [{c.lo:+.1%}, {c.hi:+.1%}] {c.verdict}")
    return rows


def seed_spread(runs: list[dict], names: list[str], label: str = "K = 1") -> list[dict]:
    """Per cell measured on every seed: each seed's mean tau over the problems, their mean and
    standard deviation (ddof 1) over the seeds, and the spread as a share of the mean: the size of
    difference a single retrain makes, against which a one-seed comparison must be read."""
    out = []
    for c in sorted(set.intersection(*(set(r) for r in runs)), key=lambda c: (c[2], c[0])):
        taus = np.array([r[c].mean() for r in runs])
        row = {"cell": list(c), "records": names, "tau": [float(t) for t in taus], "mean": float(taus.mean()),
               "sd": float(taus.std(ddof=1)), "cv": float(taus.std(ddof=1) / taus.mean())}
        out.append(row)
        print(f"[{label} over seeds] {c[0]} {c[1] or ''} N = {c[2]}: tau " + " / ".join(f"{t:.3f}" for t in taus)
              + f"; mean {row['mean']:.3f}, sd {row['sd']:.3f} ({row['cv']:.1%} of the mean)")
    return out


def tokens_per_problem(record: str) -> float:
    """The mean answer length per problem of a tau record's set (its per-problem lengths are not
    stored): the token count the resolution floor assumes for every problem."""
    s = json.loads((HERE / record).read_text())["data"]["sets"][SET]
    return s["answer_tokens"] / s["prompts"]


def over_seeds(k4_runs: list[dict], k1_runs: list[dict], tokens: float, budget: int = 32) -> list[dict]:
    """The paper's same-N question replicated over training seeds: K = 4 seed s against K = 1 seed s
    (for every seed both have; the pairing of seeds is arbitrary, that of problems within a seed is not),
    by mfd_theory.stats.compare's runs model (each seed's mean log ratio over the 164 problems, then
    Student t over the seeds, with the nested and resolution floors), Bonferroni over the rows, and
    the seeds a verdict would need at 80% power (and at the measured mean and spread: about 50%)."""
    pairs = {"MFD K = 4 (mixture scorer) vs K = 1 DDTree": (("mfd", "mixture", budget), ("ddtree", None, budget)),
             "MFD K = 4 (best-mode scorer) vs K = 1 DDTree": (("mfd", "best_mode", budget), ("ddtree", None, budget)),
             "K = 4 drafter's DDTree vs K = 1 DDTree": (("ddtree", None, budget), ("ddtree", None, budget)),
             "MFD K = 4 (mixture) vs the same drafter's DDTree": (("mfd", "mixture", budget), ("ddtree", None, budget))}
    rows = []
    for q, (ca, cb) in pairs.items():
        own_tree = "same drafter" in q
        a = np.stack([r[ca] for r in k4_runs])
        b = np.stack([r[cb] for r in (k4_runs if own_tree else k1_runs)])
        res = np.maximum(tau_resolution(a, tokens), tau_resolution(b, tokens))
        c = compare(a, b, family=len(pairs), resolution=res)
        need80 = runs_to_decide(c.run_gains, family=len(pairs), min_sd=c.se_floor * np.sqrt(c.n_runs))
        need50 = runs_to_decide(c.run_gains, family=len(pairs), power=None, min_sd=c.se_floor * np.sqrt(c.n_runs))
        row = {"table": "over seeds", "question": q, "a": list(ca), "b": list(cb), "budget": budget,
               "tau_a": [float(x.mean()) for x in a], "tau_b": [float(x.mean()) for x in b],
               "gain": c.gain, "lo": c.lo, "hi": c.hi, "verdict": c.verdict, "model": c.model, "runs": c.n_runs,
               "level": c.level, "family": c.family, "margin": c.margin, "prompts": c.n_prompts,
               "run_gains": list(c.run_gains), "se_from": c.se_from, "seeds_to_decide_80": need80,
               "seeds_to_decide_50": need50}
        rows.append(row)
        print(f"[over seeds] {q}, N = {budget}: per-seed gains " + " / ".join(f"{g:+.1%}" for g in c.run_gains)
              + f"; gain {c.gain:+.1%} [{c.lo:+.1%}, {c.hi:+.1%}] {c.verdict} ({c.n_runs} seeds, floor: {c.se_from}); "
              f"seeds to decide: {need80} at 80% power, {need50} at the measured mean and spread")
    return rows


def main() -> list[dict]:
    rows, records = [], []
    k1, k4 = cells("tau-k1-300.json"), cells("tau-k4-300.json")
    budgets = sorted({n for (_, _, n) in k1})
    rows += table("T = 0", k4, k1, same_n(k4, k1, budgets))
    rows += table("T = 0, one drafter", k4, k4, own(budgets))
    records += ["tau-k1-300.json", "tau-k4-300.json"]
    if (HERE / "tau-t1-k1-k4-300.json").is_file():
        t1k1, t1k4 = cells("tau-t1-k1-k4-300.json", "k1-l1-b16/drafter"), cells("tau-t1-k1-k4-300.json", "k4-l1-b16/drafter")
        b1 = sorted({n for (_, _, n) in t1k1})
        rows += table("T = 1", t1k4, t1k1, same_n(t1k4, t1k1, b1))
        rows += table("T = 1, one drafter", t1k4, t1k4, own(b1))
        records.append("tau-t1-k1-k4-300.json")
    if (HERE / "tau-k1-300-s1.json").is_file():  # a rerun: the same recipe, seed 1 against seed 0
        s1 = cells("tau-k1-300-s1.json")
        rows += table("K = 1 rerun", s1, k1, {"K = 1 seed 1 vs seed 0, same method and N": [
            ((m, sc, n), (m, sc, n)) for (m, sc, n) in sorted(set(k1) & set(s1), key=lambda c: (c[2], c[0]))]})
        records.append("tau-k1-300-s1.json")
    seeds = [f for f in ("tau-k1-300.json", "tau-k1-300-s1.json", "tau-k1-300-s2.json") if (HERE / f).is_file()]
    if len(seeds) == 3:  # the same recipe, three seeds: how far a retrain moves tau, cell by cell
        s2 = cells("tau-k1-300-s2.json")
        rows += table("K = 1 rerun, seed 2", s2, k1, {"K = 1 seed 2 vs seed 0, same method and N": [
            ((m, sc, n), (m, sc, n)) for (m, sc, n) in sorted(set(k1) & set(s2), key=lambda c: (c[2], c[0]))]})
        records.append("tau-k1-300-s2.json")
        out_seeds = seed_spread([cells(f) for f in seeds], seeds)
    else:
        out_seeds = None
    k4_seeds = [f for f in ("tau-k4-300.json", "tau-k4-300-s1.json", "tau-k4-300-s2.json") if (HERE / f).is_file()]
    out_k4_seeds, out_over = None, None
    if len(k4_seeds) >= 2 and out_seeds is not None:  # K = 4 with seeds of its own: seed s against K = 1's seed s
        k4_runs = [cells(f) for f in k4_seeds]
        out_k4_seeds = seed_spread(k4_runs, k4_seeds, "K = 4")
        out_over = over_seeds(k4_runs, [cells(f) for f in seeds][: len(k4_runs)], tokens_per_problem(seeds[0]))
        records += k4_seeds[1:]
    out = {"rule": ("paired over the 164 HumanEval problems; mfd_theory.stats.compare on per-problem tau, one "
                    "training run per drafter (Student t over problems: a rerun that retrains is not in the "
                    "interval), Bonferroni over the rows of each table"),
           "records": records, "rows": rows, "k1_seeds": out_seeds,
           "k4_seeds": out_k4_seeds, "over_seeds": out_over}
    (HERE / "compare.json").write_text(json.dumps(out, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
