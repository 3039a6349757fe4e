"""The data-scaling curve's report block (``mfd scaling``, docs/real-targets.md): each drafter kind's
held-out HumanEval tau against its training tokens, MFD's gain over the K = 1 drafter's DDTree at
each size, and what four times the data changed, all computed here from the per-problem tau in
``scaling.json`` (so ``mfd report --check`` recomputes every verdict from the committed record).

:func:`curve` is the computation, :func:`curve_text` its tables, :func:`real_scaling` the block.
"""

from __future__ import annotations

import numpy as np

from mfd_theory.report.inputs import Results
from mfd_theory.stats import compare, tau_resolution

__all__ = ["QUESTIONS", "curve", "curve_text", "real_scaling"]

#: MFD's questions at one size: (name, the MFD drafter's cell, the other drafter ("K=1" or "own"), its cell)
QUESTIONS = (
    ("mixture vs K = 1 DDTree", ("mfd", "mixture"), "K=1", ("ddtree", None)),
    ("best-mode vs K = 1 DDTree", ("mfd", "best_mode"), "K=1", ("ddtree", None)),
    ("mixture vs its own DDTree", ("mfd", "mixture"), "own", ("ddtree", None)),
)
#: the cell a kind's curve follows: its best tree at the budget
MAIN_CELL = {"K=1": ("ddtree", None)}
_MFD_CELL = ("mfd", "mixture")
CELLS = (("chain", None), ("ddtree", None), ("mfd", "mixture"), ("mfd", "best_mode"), ("dartree", None))
CELL_NAMES = {("chain", None): "chain", ("ddtree", None): "DDTree", ("mfd", "mixture"): "MFD mixture",
              ("mfd", "best_mode"): "MFD best-mode", ("dartree", None): "DARTree"}


def _cells(row: dict) -> dict:
    return {(c["method"], c.get("scorer")): c for c in row["cells"]}


def _main_cell(kind: str) -> tuple:
    return MAIN_CELL.get(kind, ("dartree", None) if kind == "dartree" else _MFD_CELL)


def _kinds(rows: list[dict]) -> list[str]:
    return sorted({r["kind"] for r in rows}, key=lambda k: (k != "K=1", k))


def _group(rows: list[dict]) -> dict:
    """{(kind, max_tokens): {seed: row}}; a seed measured twice is an error."""
    out: dict = {}
    for r in rows:
        g = out.setdefault((r["kind"], int(r["max_tokens"])), {})
        if r["seed"] in g:
            raise ValueError(f"scaling: {r['kind']} at {r['max_tokens']} tokens has seed {r['seed']} twice")
        g[r["seed"]] = r
    return out


def _per_problem(rows: list[dict], cell: tuple) -> np.ndarray:
    return np.stack([np.asarray(_cells(r)[cell]["per_problem_tau"], dtype=np.float64) for r in rows])


def _compare(a_rows: list[dict], a_cell: tuple, b_rows: list[dict], b_cell: tuple, family: int) -> dict:
    """``a_rows``' cell against ``b_rows``' (paired seed by seed, the same problems), over the seeds
    when there are two or more (runs model), else over the problems (one training run each)."""
    a, b = _per_problem(a_rows, a_cell), _per_problem(b_rows, b_cell)
    if a.shape != b.shape:
        raise ValueError(f"scaling: per-problem tau of shapes {a.shape} and {b.shape} cannot be paired")
    tokens = [max(float(r["eval_answer_tokens"] or 1) / max(int(r["prompts"] or 1), 1), 1.0) for r in a_rows]
    res = np.maximum(tau_resolution(a, np.asarray(tokens)[:, None]), tau_resolution(b, np.asarray(tokens)[:, None]))
    one = a.shape[0] == 1
    c = compare(a[0] if one else a, b[0] if one else b, family=family, resolution=res[0] if one else res)
    return {"gain": c.gain, "lo": c.lo, "hi": c.hi, "verdict": c.verdict, "model": c.model, "seeds": a.shape[0],
            "prompts": c.n_prompts, "level": c.level, "family": c.family, "margin": c.margin,
            "tau_a": float(a.mean()), "tau_b": float(b.mean())}


def curve(data: dict) -> dict:
    """The curve of ``scaling.json``'s ``data``: ``points`` (per kind and size: seeds, tokens, training
    time and loss, each cell's tau, mean and spread over the seeds), ``mfd`` (MFD's :data:`QUESTIONS` at
    every size where an MFD kind and K = 1 were both measured, Bonferroni over the questions of one
    size, seeds paired by number), ``data_gain`` (each kind's own tree at each size against the size
    below, seeds paired by number)."""
    rows = data.get("drafters") or []
    if not rows:
        raise ValueError("scaling: no drafters in the record")
    groups = _group(rows)
    points = []
    for (kind, size), by_seed in sorted(groups.items(), key=lambda kv: (_kinds(rows).index(kv[0][0]), kv[0][1])):
        rs = [by_seed[s] for s in sorted(by_seed)]
        cells = {}
        for cell in CELLS:
            taus = [_cells(r)[cell]["tau"] for r in rs if cell in _cells(r)]
            if len(taus) == len(rs):
                cells[CELL_NAMES[cell]] = {"tau": float(np.mean(taus)), "per_seed": [float(t) for t in taus],
                                           "sd": float(np.std(taus, ddof=1)) if len(taus) > 1 else None}

        def mean(key, rs=rs):
            vals = [r[key] for r in rs if r.get(key) is not None]
            return float(np.mean(vals)) if vals else None

        points.append({"kind": kind, "max_tokens": size, "seeds": sorted(by_seed), "tokens": mean("tokens"),
                       "answer_tokens": mean("answer_tokens"), "sequences": mean("sequences"),
                       "train_minutes": None if mean("train_seconds") is None else mean("train_seconds") / 60,
                       "loss_last50": mean("loss_last50"), "acc1_last50": mean("acc1_last50"),
                       "vocab_coverage_eval": mean("vocab_coverage_eval"), "cells": cells})
    mfd = []
    sizes = sorted({s for (_, s) in groups})
    for kind in _kinds(rows):
        if not kind.startswith("K=") or kind == "K=1":
            continue
        for size in sizes:
            m, k1 = groups.get((kind, size)), groups.get(("K=1", size))
            if not m:
                continue
            asked = [q for q in QUESTIONS if q[2] == "own" or k1]
            for name, a_cell, other, b_cell in asked:
                seeds = sorted(set(m) & set(k1)) if other == "K=1" else sorted(m)
                if not seeds:
                    continue
                b_rows = [(k1 if other == "K=1" else m)[s] for s in seeds]
                row = _compare([m[s] for s in seeds], a_cell, b_rows, b_cell, family=len(asked))
                mfd.append({"kind": kind, "max_tokens": size, "question": name, **row})
    data_gain = []
    for kind in _kinds(rows):
        ks = [s for s in sizes if (kind, s) in groups]
        cell = _main_cell(kind)
        for lo_size, hi_size in zip(ks, ks[1:]):
            seeds = sorted(set(groups[(kind, lo_size)]) & set(groups[(kind, hi_size)]))
            row = _compare([groups[(kind, hi_size)][s] for s in seeds], cell,
                           [groups[(kind, lo_size)][s] for s in seeds], cell, family=1)
            data_gain.append({"kind": kind, "cell": CELL_NAMES[cell], "from": lo_size, "to": hi_size, **row})
    return {"budget": data.get("budget"), "points": points, "mfd": mfd, "data_gain": data_gain}


def _num(v, fmt: str = "{:.3f}") -> str:
    return "-" if v is None else fmt.format(v)


def _tau(cell: dict | None) -> str:
    if cell is None:
        return "-"
    if cell["sd"] is None:
        return f"{cell['tau']:.3f}"
    return f"{cell['tau']:.3f} ± {cell['sd']:.3f}"


def _interval(r: dict) -> str:
    return f"{r['gain']:+.1%} [{r['lo']:+.1%}, {r['hi']:+.1%}] {r['verdict']}"


def _over(r: dict) -> str:
    return (f"{r['seeds']} seeds" if r["model"] == "runs"
            else f"1 seed, {r['prompts']} problems")


def curve_text(data: dict) -> str:
    """The curve's three tables (Markdown): the points, MFD's gain at each size, four times the data."""
    cv = curve(data)
    n = cv["budget"]
    names = [CELL_NAMES[c] for c in CELLS if any(CELL_NAMES[c] in p["cells"] for p in cv["points"])]
    lines = [f"| kind | training tokens (answer tokens) | sequences | seeds | training wall min | loss, last 50 steps | "
             f"first-position accuracy | draft vocabulary's share of HumanEval's answers | "
             + " | ".join(f"{x} tau" for x in names) + " |",
             "|---|---|---|---|---|---|---|---|" + "---|" * len(names)]
    for p in cv["points"]:
        lines.append(
            f"| {p['kind']} | {_num(p['tokens'], '{:,.0f}')} ({_num(p['answer_tokens'], '{:,.0f}')}) | "
            f"{_num(p['sequences'], '{:,.0f}')} | {len(p['seeds'])} | {_num(p['train_minutes'], '{:.0f}')} | "
            f"{_num(p['loss_last50'], '{:.2f}')} | {_num(p['acc1_last50'], '{:.2f}')} | "
            f"{_num(p['vocab_coverage_eval'], '{:.1%}')} | " + " | ".join(_tau(p["cells"].get(x)) for x in names) + " |")
    lines += ["", f"MFD's gain at each size, tau at N = {n}, per-problem tau paired over the same HumanEval problems "
              "(over the seeds, runs model, where a size has two or more of each kind; with one seed the interval "
              "holds the problems' noise and not a retrain's); Bonferroni over the questions of one size; margin of "
              "equivalence ±3%:", "",
              "| kind | training tokens (cap) | question | mean per-problem tau (MFD / other) | over | gain [interval] verdict |",
              "|---|---|---|---|---|---|"]
    for r in cv["mfd"]:
        lines.append(f"| {r['kind']} | {r['max_tokens']:,} | {r['question']} | {r['tau_a']:.3f} / {r['tau_b']:.3f} | "
                     f"{_over(r)} | {_interval(r)} |")
    if not cv["mfd"]:
        lines.append("| - | - | no size has an MFD drafter and a K = 1 drafter both measured | - | - | - |")
    lines += ["", "Four times the data: each kind's own tree at a size against the size below (the same seeds, "
              "paired over the problems as above):", "",
              "| kind | tree | training tokens (cap) | mean per-problem tau (more / less data) | over | gain [interval] verdict |",
              "|---|---|---|---|---|---|"]
    for r in cv["data_gain"]:
        lines.append(f"| {r['kind']} | {r['cell']} | {r['from']:,} -> {r['to']:,} | {r['tau_a']:.3f} / {r['tau_b']:.3f} | "
                     f"{_over(r)} | {_interval(r)} |")
    return "\n".join(lines)


def real_scaling(results: Results) -> str:
    """The ``real-scaling`` block: how the drafters were measured, then :func:`curve_text`."""
    res = results.main
    d = res.data
    rows = d.get("drafters") or []
    prov = res.provenance or {}
    def known(key: str) -> str:  # the values the rows record, and how many rows recorded none
        vals = sorted({str(r[key]) for r in rows if r.get(key) is not None})
        missing = sum(r.get(key) is None for r in rows)
        return ", ".join(vals or ["-"]) + (f" ({missing} of {len(rows)} drafters' runs did not record it)"
                                           if missing else "")

    hosts = f"training {known('train_host')}; tau {known('tau_host')}"
    dtypes = sorted({str(r.get("tau_dtype")) for r in rows})
    temps = sorted({float(r.get("temperature") or 0) for r in rows})
    ids = sorted({str(r.get("ids_sha256"))[:12] for r in rows})
    head = (f"Each drafter trained on the first N tokens (whole sequences) of one corpus's instructions (each smaller "
            f"set a prefix of the larger; {len(ids)} distinct token-id hashes), by its kind's train-drafter preset, "
            f"training numerics {known('train_numerics')}; tau at T = {', '.join(f'{t:g}' for t in temps)} over every round "
            f"of the target's answers to all {rows[0]['prompts'] if rows else '?'} HumanEval problems (`mfd tau`), "
            f"{', '.join(dtypes)}; hosts: {hosts}. Assembled {str(prov.get('created', '?'))[:10]} at "
            f"`{str(prov.get('git_sha', '?'))[:7]}` from {len(rows)} drafters' tau records (each one's commit is in the record).")
    pending = d.get("pending") or []
    if pending:
        head += (f" Not measured yet ({len(pending)}): "
                 + ", ".join(f"{p['preset']} on {p['tokens']:,} tokens seed {p['seed']}" for p in pending) + ".")
    return head + "\n\n" + curve_text(d) + "\n"
