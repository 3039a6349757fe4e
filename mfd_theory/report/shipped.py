"""The shipped drafters measured by ``make reproduce`` (``mfd tau --preset reproduce`` on the release in
``drafters/``: all 164 HumanEval problems, T = 0): each drafter's tau per tree cell, the MFD drafter
against the K = 1 drafter's DDTree at the same N (paired over the problems: one training run each),
and the speed of the timed problems. Block ``real-shipped`` (docs/real-targets.md); the front page's
drafter rows (:mod:`.front`) read :func:`summary` too.

Every verdict is computed here from the per-problem tau in the record, so ``mfd report --check``
recomputes it from the committed file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mfd_theory.report.inputs import Results
from mfd_theory.stats import compare, tau_resolution

__all__ = ["QUESTIONS", "cell_label", "real_shipped", "summary"]

#: MFD's questions of one budget: (name, the MFD drafter's cell, the other drafter ("K=1" or "own"), its cell)
QUESTIONS = (
    ("MFD mixture vs K = 1 DDTree", ("mfd", "mixture"), "K=1", ("ddtree", None)),
    ("MFD best-mode vs K = 1 DDTree", ("mfd", "best_mode"), "K=1", ("ddtree", None)),
    ("MFD mixture vs its own DDTree", ("mfd", "mixture"), "own", ("ddtree", None)),
)
_LABELS = {("chain", None): "chain", ("ddtree", None): "DDTree", ("mfd", "mixture"): "MFD mixture",
           ("mfd", "best_mode"): "MFD best-mode", ("dartree", None): "DARTree"}


def cell_label(method: str, scorer: str | None) -> str:
    """``chain``, ``DDTree``, ``MFD mixture``, ``MFD best-mode``, ``DARTree``."""
    return _LABELS.get((method, scorer), method if scorer is None else f"{method} {scorer}")


def _name(row: dict) -> str:
    """The drafter's folder name (a train-drafter run's, for its ``drafter`` subfolder)."""
    p = Path(str(row["drafter"]))
    return p.parent.name if p.name == "drafter" and p.parent.name else p.name


def _cells(entry: dict, budget: str) -> dict:
    return {(c["method"], c.get("scorer")): c for c in entry["budgets"][budget]["cells"]}


def _question(a: dict, b: dict, tokens_per_problem: float, family: int) -> dict:
    """Cell ``a`` against cell ``b`` paired over the problems (one training run each: the interval
    holds the problems' noise, not a retrain's), floored by tau's resolution."""
    x = np.asarray(a["per_sequence_tau"], dtype=np.float64)
    y = np.asarray(b["per_sequence_tau"], dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"real-shipped: per-problem tau of {x.size} and {y.size} problems cannot be paired")
    keep = np.isfinite(x) & np.isfinite(y)  # an answer cut before its first token has no tau
    x, y = x[keep], y[keep]
    res = np.maximum(tau_resolution(x, tokens_per_problem), tau_resolution(y, tokens_per_problem))
    c = compare(x, y, family=family, resolution=res)
    return {"gain": c.gain, "lo": c.lo, "hi": c.hi, "verdict": c.verdict, "problems": c.n_prompts,
            "level": c.level, "family": c.family, "margin": c.margin, "tau_a": a["tau"], "tau_b": b["tau"]}


def summary(data: dict) -> dict:
    """What a ``tau.json`` of the shipped drafters says, per prompt set and budget: ``rows`` (each
    drafter's cells: tau, rounds, the mean accepted length over every root), ``questions``
    (:data:`QUESTIONS` for every MFD drafter against the K = 1 drafter, Bonferroni over the questions
    asked), ``timing`` (per drafter: plain decoding's time per token, each cell's round cost,
    measured speedup on the timed problems and full-set estimate) and ``speed_check``. Raises
    ValueError when the record has no drafter."""
    drafters = data.get("drafters") or []
    if not drafters:
        raise ValueError("real-shipped: the tau record has no drafters")
    k1 = [r for r in drafters if int(r.get("modes", 1)) == 1]
    sets_d = data.get("sets") or {}
    out: dict = {}
    for set_name in dict.fromkeys(s for r in drafters for s in r["sets"]):
        info = sets_d.get(set_name) or {}
        budgets = sorted({b for r in drafters if set_name in r["sets"] for b in r["sets"][set_name]["budgets"]},
                         key=int)
        for budget in budgets:
            rows, questions, timing = [], [], []
            for r in drafters:
                entry = r["sets"].get(set_name)
                if entry is None or budget not in entry["budgets"]:
                    continue
                cells = _cells(entry, budget)
                rows.append({"drafter": _name(r), "modes": int(r.get("modes", 1)),
                             "cells": {cell_label(*k): {"tau": c["tau"], "rounds": c["rounds"],
                                                        "anchor_accepted": c.get("anchor_accepted")}
                                       for k, c in cells.items()}})
                t = entry.get("timing")
                if t:
                    tc = [c for c in t["cells"] if str(c["budget"]) == budget]
                    timing.append({"drafter": _name(r), "ar_s_per_token": t["ar_s_per_token"],
                                   "timed_prompts": (t.get("speed_check") or {}).get("timed_prompts"),
                                   "speed_check": t.get("speed_check"), "plain_shared": t.get("plain_shared"),
                                   "cells": [{"cell": cell_label(c["method"], c.get("scorer")), "round_s": c["round_s"],
                                              "tau": c["tau"], "speedup": c["speedup"],
                                              "full_set_tau": c.get("full_set_tau"),
                                              "full_set_speedup": c.get("full_set_predicted_speedup")} for c in tc]})
            tokens = max(float(info.get("answer_tokens") or 1) / max(int(info.get("prompts") or 1), 1), 1.0)
            base = _cells(k1[0]["sets"][set_name], budget) if k1 and set_name in k1[0]["sets"] \
                and budget in k1[0]["sets"][set_name]["budgets"] else None
            for r in drafters:
                if int(r.get("modes", 1)) < 2 or set_name not in r["sets"] or budget not in r["sets"][set_name]["budgets"]:
                    continue
                own = _cells(r["sets"][set_name], budget)
                asked = [q for q in QUESTIONS if (q[2] == "own" or base) and q[1] in own
                         and q[3] in (own if q[2] == "own" else base)]
                for name, a_cell, other, b_cell in asked:
                    b = (own if other == "own" else base)[b_cell]
                    questions.append({"drafter": _name(r), "against": _name(r) if other == "own" else _name(k1[0]),
                                      "question": name, **_question(own[a_cell], b, tokens, family=len(asked))})
            out.setdefault(set_name, {})[budget] = {"rows": rows, "questions": questions, "timing": timing,
                                                    "prompts": info.get("prompts"),
                                                    "answer_tokens": info.get("answer_tokens")}
    return out


def _interval(q: dict) -> str:
    return f"{q['gain']:+.1%} [{q['lo']:+.1%}, {q['hi']:+.1%}] {q['verdict']}"


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def real_shipped(results: Results) -> str:
    """The shipped drafters' tables: tau per drafter and cell, MFD's questions as verdicts, the timed
    problems' speed, then the run (problems, tokens, numerics, host, commit and its cost)."""
    res = results.main
    d, cfg, prov = res.data, res.config, res.provenance or {}
    summ = summary(d)
    num = prov.get("numerics") or {}
    flags = ", ".join(num.get("isa_flags") or []) or "?"
    host = f"{num.get('cpu') or prov.get('host') or '?'} ({flags})"
    out = []
    for set_name, by_budget in summ.items():
        s = (d.get("sets") or {}).get(set_name) or {}
        for budget, b in by_budget.items():
            out.append(f"**{set_name}, N = {budget}** ({b['prompts']} problems, {b['answer_tokens']:,} answer tokens; "
                       "greedy tau over every round of each whole answer, bonus included; the mean accepted draft "
                       "tokens over every root of the answer beside it):")
            out += ["", "| drafter | K | tree | tau | accepted per root |", "|---|---|---|---|---|"]
            for r in b["rows"]:
                for cell, c in r["cells"].items():
                    acc = "-" if c["anchor_accepted"] is None else f"{c['anchor_accepted']:.3f}"
                    out.append(f"| {r['drafter']} | {r['modes']} | {cell} | {c['tau']:.3f} | {acc} |")
            if b["questions"]:
                fam = max(q["family"] for q in b["questions"])
                out += ["", f"Paired over the problems (one training run each: the interval holds the problems' "
                        f"noise, not a retrain's; {b['questions'][0]['level']:.1%} each, Bonferroni over {fam}; "
                        f"equivalent within +-{b['questions'][0]['margin']:.0%}):", "",
                        "| question | tau (A / B) | gain of A [interval] | problems |", "|---|---|---|---|"]
                for q in b["questions"]:
                    out.append(f"| {q['question']} | {q['tau_a']:.3f} / {q['tau_b']:.3f} | {_interval(q)} | "
                               f"{q['problems']} |")
            if b["timing"]:
                out += ["", "Speed (decoded for real and timed in this run: plain decoding and every tree on the "
                        "first problems of the set; the full-set figure is the set's tau x plain time per token / the "
                        "round cost, in-sample):", "",
                        "| drafter | tree | round cost (s) | tau, timed | speedup, timed | tau, full set | "
                        "speedup, full set (estimate) |", "|---|---|---|---|---|---|---|"]
                for t in b["timing"]:
                    for c in t["cells"]:
                        fst = "-" if c["full_set_tau"] is None else f"{c['full_set_tau']:.3f}"
                        out.append(f"| {t['drafter']} | {c['cell']} | {c['round_s']:.3f} | {c['tau']:.3f} | "
                                   f"{_x(c['speedup'])} | {fst} | {_x(c['full_set_speedup'])} |")
                notes = []
                for t in b["timing"]:
                    sc = t.get("speed_check") or {}
                    check = ("" if sc.get("median_predicted_over_measured") is None
                             or sc.get("worst_relative_error") is None else
                             f"; each timed problem's speedup predicted from the others' costs: median predicted / "
                             f"measured {sc['median_predicted_over_measured']:.2f}, worst error "
                             f"{sc['worst_relative_error']:.0%}")
                    once = " (the same plain decodes for every drafter)" if t.get("plain_shared") else ""
                    notes.append(f"{t['drafter']}: plain decoding {1000 * t['ar_s_per_token']:.0f} ms a token over "
                                 f"{t['timed_prompts']} timed problem{'' if t['timed_prompts'] == 1 else 's'}{once}"
                                 f"{check}")
                out += ["", "; ".join(notes) + "."]
            out += ["", f"The target's answers: {s.get('answer_seconds', '?')} s (read from the cache when 0); the "
                    f"replay of every round: {s.get('tau_seconds', '?')} s ({s.get('tau_answer_tokens_per_s', '?')} "
                    "answer tokens a second, every drafter and budget)."]
    out += ["", f"`mfd tau` on `{d.get('target')}`, numerics {num.get('mode') or cfg.get('numerics') or '?'}, "
            f"{d.get('dtype')}, {d.get('threads', cfg.get('threads'))} threads, on {host}; measured "
            f"{str(prov.get('created', '?'))[:10]} at `{str(prov.get('git_sha', '?'))[:7]}`; the whole run "
            f"{d.get('wall_s', 0) / 60:.1f} min."]
    return "\n".join(out)
