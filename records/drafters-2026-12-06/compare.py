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

from mfd_theory.stats import compare

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


def seed_spread(runs: list[dict], names: list[str]) -> list[dict]:
    """Per cell measured on every seed: each seed's mean tau over the problems, their mean and
    standard deviation (ddof 1) over the seeds, and the spread as a share of the mean: the size of
    difference a single retrain makes, against which a one-seed comparison must be read."""
    out = []
    for c in sorted(set.intersection(*(set(r) for r in runs)), key=lambda c: (c[2], c[0])):
        taus = np.array([r[c].mean() for r in runs])
        row = {"cell": list(c), "records": names, "tau": [float(t) for t in taus], "mean": float(taus.mean()),
               "sd": float(taus.std(ddof=1)), "cv": float(taus.std(ddof=1) / taus.mean())}
        out.append(row)
        print(f"[K = 1 over seeds] {c[0]} N = {c[2]}: tau " + " / ".join(f"{t:.3f}" for t in taus)
              + f"; mean {row['mean']:.3f}, sd {row['sd']:.3f} ({row['cv']:.1%} of the mean)")
    return out


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
    out = {"rule": ("paired over the 164 HumanEval problems; mfd_theory.stats.compare on per-problem tau, one "
                    "training run per drafter (Student t over problems: a rerun that retrains is not in the "
                    "interval), Bonferroni over the rows of each table"),
           "records": records, "rows": rows, "k1_seeds": out_seeds}
    (HERE / "compare.json").write_text(json.dumps(out, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
