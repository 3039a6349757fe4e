"""Paired comparisons of the drafters measured in this folder, from their committed tau records.

Each comparison: greedy tau per HumanEval problem (all 164, the same cached greedy answers), method A
against method B, by mfd_theory.stats.compare (one training run each: Student t over the problems'
log ratios, so a rerun that retrains is NOT in the interval), Bonferroni over the comparisons of
one question. Writes compare.json beside this file and prints one line per comparison.

    .venv/bin/python records/drafters-2026-12-06/compare.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mfd_theory.stats import compare

HERE = Path(__file__).resolve().parent
SET = "code-eval"


def cells(record: str) -> dict:
    """{(method, scorer, budget): per-problem tau} of the one drafter a tau record measured."""
    rec = json.loads((HERE / record).read_text())
    (d,) = rec["data"]["drafters"]
    out = {}
    for n, b in d["sets"][SET]["budgets"].items():
        for c in b["cells"]:
            out[(c["method"], c["scorer"], int(n))] = np.asarray(c["per_sequence_tau"], dtype=np.float64)
    return out


def main() -> list[dict]:
    k1, k4 = cells("tau-k1-300.json"), cells("tau-k4-300.json")
    budgets = sorted({n for (_, _, n) in k1})
    questions = {
        # the paper's same-N question: the MFD drafter's tree against the product drafter's DDTree
        "MFD K = 4 (mixture scorer) vs K = 1 DDTree, same N":
            [(("mfd", "mixture", n), ("ddtree", None, n)) for n in budgets],
        "MFD K = 4 (best-mode scorer) vs K = 1 DDTree, same N":
            [(("mfd", "best_mode", n), ("ddtree", None, n)) for n in budgets],
        # the K = 4 drafter's own DDTree (the product of its mixture's marginals) against K = 1's
        "K = 4 drafter's DDTree vs K = 1 DDTree, same N":
            [(("ddtree", None, n), ("ddtree", None, n)) for n in budgets],
    }
    family = sum(len(v) for v in questions.values())
    rows = []
    for q, pairs in questions.items():
        for a, b in pairs:
            c = compare(k4[a], k1[b], family=family)
            row = {"question": q, "a": list(a), "b": list(b), "budget": a[2], "tau_a": float(k4[a].mean()),
                   "tau_b": float(k1[b].mean()), "gain": c.gain, "lo": c.lo, "hi": c.hi, "verdict": c.verdict,
                   "model": c.model, "level": c.level, "family": c.family, "margin": c.margin, "prompts": c.n_prompts}
            rows.append(row)
            print(f"{q}, N = {a[2]}: mean per-problem tau {row['tau_a']:.3f} vs {row['tau_b']:.3f}; "
                  f"gain {c.gain:+.1%} [{c.lo:+.1%}, {c.hi:+.1%}] {c.verdict} (over problems, one run each)")
    out = {"rule": ("paired over the 164 HumanEval problems; mfd_theory.stats.compare on per-problem greedy tau, "
                    "one training run per drafter (Student t over problems), Bonferroni over every row"),
           "records": ["tau-k1-300.json", "tau-k4-300.json"], "rows": rows}
    (HERE / "compare.json").write_text(json.dumps(out, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
