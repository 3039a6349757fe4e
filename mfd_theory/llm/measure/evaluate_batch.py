"""``mfd eval --batch-size B``: every cell decodes the evaluated prompts B at a time.

First turns only, in consecutive batches of B through
:func:`mfd_theory.llm.decoding.batch.speculative_generate_batch`, ``passes`` times, cells interleaved
per pass; a row adds throughput, per-request latency, the speedup over batched AR at the same B and,
at T = 0, the lossless check. Design: docs/own-target.md ("Many requests at once").
"""

from __future__ import annotations

import numpy as np

from mfd_theory.llm.decoding.batch import POLICIES, speculative_generate_batch
from mfd_theory.llm.measure.evaluate import Cell, cell_key, first_ids

__all__ = ["decode_batch_cells"]


def decode_batch_cells(target, cells: list[Cell], items: list, *, batch_size: int, policy: str, temperatures,
                       max_new_tokens: int, seed: int = 0, passes: int = 2, tokenizer=None,
                       enable_thinking: bool = False, eos_token_id=None, plans: dict | None = None,
                       progress: bool = True) -> list[dict]:
    """Rows (see the module docstring); ``plans[cell_key(method, drafter_label, scorer=...)]``: the
    ``auto`` policy's plan (:class:`mfd_theory.speedup.BatchPlan`) of every tree cell when
    ``policy == "auto"`` (:func:`~mfd_theory.llm.measure.evaluate.cell_key`)."""
    from tqdm.auto import tqdm

    if policy not in POLICIES:
        raise ValueError(f"--budget-policy: must be one of {POLICIES}, got {policy!r}")
    bad = sorted({c.method for c in cells if c.method == "dartree"})
    if bad:
        raise ValueError("--batch-size: method dartree grows its trees depth by depth and is not batched; "
                         "leave it out of --methods")
    if policy == "auto" and any(cell_key(c.method, c.drafter_label, scorer=c.scorer) not in (plans or {})
                                for c in cells if c.method not in ("ar", "chain")):
        raise ValueError("--budget-policy: auto needs a plan for every tree cell")
    datasets: dict = {}
    for it in items:
        datasets.setdefault(getattr(it, "dataset", "prompts"), []).append(first_ids(it, tokenizer, enable_thinking))
    runs: dict = {}
    todo = [(p, ds, ci, t) for p in range(passes) for t in temperatures for ds in datasets
            for ci in range(len(cells))]
    for p, ds, ci, temp in tqdm(todo, desc="batched cells", disable=not progress):
        c = cells[ci]
        prompts = datasets[ds]
        out = {"tokens": [], "rounds": 0, "accepted": [], "latency": [], "secs": 0.0, "n": 0}
        for s in range(0, len(prompts), batch_size):
            batch = prompts[s: s + batch_size]
            kw = dict(temperature=temp, seed=seed + s, eos_token_id=eos_token_id, metrics=False)
            if c.method == "ar":
                res = speculative_generate_batch(target, None, batch, max_new_tokens, "ar", **kw)
            else:
                pol = "per_request" if c.method == "chain" else policy
                res = speculative_generate_batch(target, c.drafter, batch, max_new_tokens, c.method,
                                                 budget=max(int(c.budget), 1), policy=pol,
                                                 plan=(plans or {}).get(cell_key(c.method, c.drafter_label,
                                                                                 scorer=c.scorer)),
                                                 scorer=c.scorer, **kw)
            out["tokens"] += [r.tokens for r in res.results]
            out["accepted"] += [a for r in res.rounds for a in r.accepted]
            out["latency"] += list(res.latency)
            out["secs"] += res.t_total
            out["n"] += res.new_tokens
        runs.setdefault((ds, ci, temp), []).append(out)
    rows = []
    ar_ci = next((ci for ci, c in enumerate(cells) if c.method == "ar"), None)
    for (ds, ci, temp), outs in runs.items():
        c = cells[ci]
        tps = [o["n"] / o["secs"] for o in outs]
        row = {"dataset": ds, "method": c.method, "scorer": c.scorer, "drafter": c.drafter_label, "K": c.K,
               "budget": c.budget,
               "temperature": temp, "batch_size": batch_size, "budget_policy": "off" if c.method == "ar" else
               ("per_request" if c.method == "chain" else policy), "n_prompts": len(datasets[ds]),
               "tau": float(np.mean(outs[0]["accepted"])) + 1.0 if outs[0]["accepted"] else None,
               "tokens_per_s": float(np.mean(tps)), "tokens_per_s_passes": tps,
               "latency_s": float(np.mean(outs[0]["latency"]))}
        # matches_ar: checked (a bool) on greedy rows where batched AR ran, null elsewhere;
        # lossless_checked says which, as the one-at-a-time rows do
        row["lossless_checked"] = ar_ci is not None and temp == 0
        row["matches_ar"] = None
        if ar_ci is not None:
            ar = runs[(ds, ar_ci, temp)]
            row["speedup_passes"] = [t / (a["n"] / a["secs"]) for t, a in zip(tps, ar)]
            row["speedup"] = float(np.mean(row["speedup_passes"]))
            if temp == 0:
                row["matches_ar"] = bool(outs[0]["tokens"] == ar[0]["tokens"])
        rows.append(row)
    return rows
