"""The evaluator shared by ``mfd eval`` and ``mfd e2e``: DDTree's protocol, with timing spread.

:func:`decode_cells` decodes every item (token ids, or :class:`~mfd_theory.llm.training.prompts.Prompt`
turn by turn) with every cell, methods interleaved per prompt, after a warm-up, decode-only timing over
``passes`` passes, prompts split over torchrun ranks; :func:`rows_from_records` pools them into rows,
:func:`mfd_gains` compares drafters. Protocol: docs/own-target.md (``mfd eval``), docs/results.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mfd_theory.formatting import is_best_budget, method_label
from mfd_theory.formatting import speed_gain_text as _gain_text
from mfd_theory.formatting import tau_gain_text as _tau_gain_text
from mfd_theory.speedup import cell_speedup
from mfd_theory.stats import compare_rows, error_summary
from mfd_theory.validation import check_int

from mfd_theory.llm.decoding.generate import speculative_generate
from mfd_theory.llm.decoding.trees import check_scorer
from mfd_theory.llm.training.prompts import Prompt, run_conversation

__all__ = ["Cell", "make_cells", "decode_cells", "rows_from_records", "mfd_gains", "gain_entry", "scorer_of", "cell_key",
           "prediction_summary", "best_budgets", "per_prompt_records", "format_gains", "format_rows",
           "add_speedup_predictions", "speedup_check"]


@dataclass(frozen=True)
class Cell:
    """One decoded configuration. A cell (and each record and row it makes) is identified by
    (method, drafter label, budget, scorer): ``scorer`` is how "mfd" ranks prefixes, "mixture"
    (what None becomes for "mfd") or "best_mode"; every other method has None."""

    method: str
    drafter_label: str              # "none" for ar
    budget: int                     # 0 for ar; the block's L for chain
    drafter: Any = None
    budget_rule: Any = None         # per-round tree size (speedup.PerRoundBudget); budget is then the cap
    temperatures: tuple | None = None  # decoded only at these temperatures (None: at every one)
    scorer: str | None = None       # "mfd" only: "mixture" (the default) or "best_mode"

    def __post_init__(self):
        object.__setattr__(self, "scorer", check_scorer(self.method, self.scorer))

    @property
    def K(self) -> int:
        return 0 if self.drafter is None else int(self.drafter.num_modes)

    @property
    def label(self) -> str:
        """The method as tables name it (:func:`mfd_theory.formatting.method_label`)."""
        return method_label(self.method, self.scorer)

    def at(self, temperature) -> bool:
        """Whether this cell is decoded at ``temperature``."""
        return self.temperatures is None or float(temperature) in {float(t) for t in self.temperatures}


def make_cells(drafters: dict[str, Any], methods, budgets, ddtree_on_mfd: bool = True,
               scorers=("mixture",)) -> list[Cell]:
    """ar first, then per drafter: chain (its block), ddtree per budget, mfd per scorer and budget
    (K > 1); a Domino drafter (``kind == "dartree"``) gets dartree per budget only.

    ``ddtree`` on an MFD drafter builds the product tree over its per-position marginals (the
    ablation); ``ddtree_on_mfd=False`` leaves it out. ``scorers``: the mfd trees to decode,
    "mixture" and / or "best_mode" (:data:`~mfd_theory.llm.decoding.trees.SCORERS`).
    """
    methods = tuple(methods)
    scorers = tuple(dict.fromkeys(scorers))
    if not scorers:
        raise ValueError("scorers: need at least one mfd scorer")
    for sc in scorers:
        check_scorer("mfd", sc)
    cells = [Cell("ar", "none", 0)] if "ar" in methods else []
    for label, d in drafters.items():
        K, L = int(d.num_modes), int(d.block_size) - 1
        if getattr(d, "kind", None) == "dartree":
            if "dartree" in methods:
                cells += [Cell("dartree", label, int(b), d) for b in budgets]
            continue
        if "chain" in methods:
            cells.append(Cell("chain", label, L, d))
        if "ddtree" in methods and (K == 1 or ddtree_on_mfd):
            cells += [Cell("ddtree", label, int(b), d) for b in budgets]
        if "mfd" in methods and K > 1:
            cells += [Cell("mfd", label, int(b), d, scorer=sc) for sc in scorers for b in budgets]
    return cells


def cell_key(method: str, drafter: str, *rest, scorer: str | None = None) -> tuple:
    """The dict key of a cell in what the measuring functions return or take (the round
    profile's calibration speeds, the per-round rules, the batch plans): (method, drafter, *rest),
    ``rest`` the budget where one is part of it, with the scorer appended for a best-mode mfd cell
    only, so that mixture and best-mode cells of one drafter stay apart and the mixture's
    keys keep the shape they had before scorers existed."""
    sc = check_scorer(method, scorer) if method == "mfd" else scorer
    return (method, drafter, *rest) if sc in (None, "mixture") else (method, drafter, *rest, sc)


def scorer_of(r: dict) -> str | None:
    """The scorer of a row, record or prediction: its "scorer", or for an "mfd" one written
    before rows carried it, "mixture"."""
    return check_scorer(r["method"], r.get("scorer")) if r.get("method") == "mfd" else r.get("scorer")


def _rule(c: Cell, temperature: float) -> dict:
    """The decoder's ``budget_rule`` keyword for a cell that has one (none otherwise); a rule may
    be given per temperature as a mapping."""
    rule = c.budget_rule
    if isinstance(rule, dict):
        rule = rule[float(temperature)]
    return {} if rule is None else {"budget_rule": rule}


def _item_turns(item, tokenizer, enable_thinking, answer):
    if isinstance(item, Prompt):
        return run_conversation(item, tokenizer, enable_thinking, answer)
    ids = [int(x) for x in np.asarray(item).reshape(-1)]
    return [(ids, answer(ids, 0))]


def first_ids(item, tokenizer, enable_thinking) -> list[int]:
    if isinstance(item, Prompt):
        from mfd_theory.llm.training.prompts import render

        return render(item.messages, tokenizer, enable_thinking)
    return [int(x) for x in np.asarray(item).reshape(-1)]


def decode_cells(target, cells: list[Cell], items: list, *, temperatures, max_new_tokens: int, seed: int = 0,
                 passes: int = 3, tokenizer=None, enable_thinking: bool = False, eos_token_id=None,
                 dist=None, progress: bool = True, dataset_name: str | None = None) -> list[dict] | None:
    """Decode every item with every cell at every temperature; per-prompt records.

    Returns the merged records on rank 0 (None on other ranks), sorted by temperature, item and
    cell. A record holds the cell, the item's index / dataset / id, the tokens (all turns), the
    accepted length of every round, the per-round predictions, and ``secs`` / ``n_decoded``: decode
    seconds per pass and the tokens they produced (first token of each turn excluded);
    ``turn_secs`` splits each pass's seconds by turn.
    ``eos_token_id`` is passed to the decoder ([] decodes a fixed number of tokens).
    ``dataset_name`` names the data set of items that are bare token arrays.
    """
    from tqdm.auto import tqdm

    passes = check_int("passes", passes, 1)
    rank, world = (dist.rank, dist.world) if dist is not None else (0, 1)
    mine = list(range(rank, len(items), world))
    kw = {} if eos_token_id is None else {"eos_token_id": eos_token_id}
    if mine:
        _warm_up(target, cells, torch.tensor(first_ids(items[mine[0]], tokenizer, enable_thinking)), temperatures,
                 max_new_tokens, kw)
    records = []
    bar = tqdm(total=passes * len(mine) * sum(c.at(t) for t in temperatures for c in cells),
               desc=f"evaluate (rank {rank})" if world > 1 else "evaluate", disable=not progress, leave=False)
    for temp in temperatures:
        recs = {}
        for pss in range(passes):
            for i in mine:
                for ci, c in enumerate(cells):
                    if not c.at(temp):
                        continue
                    turns_res = []

                    def answer(ids, turn, c=c, i=i):
                        res = speculative_generate(
                            target, c.drafter, torch.tensor(ids), max_new_tokens, c.method, budget=max(1, c.budget),
                            temperature=temp, seed=seed + 1000 * i + turn, metrics=pss == 0, scorer=c.scorer, **kw,
                            **_rule(c, temp))
                        turns_res.append(res)
                        return res.tokens

                    _item_turns(items[i], tokenizer, enable_thinking, answer)
                    turn_secs = [sum(s.t_step for s in r.steps) for r in turns_res]
                    if pss == 0:
                        recs[(i, ci)] = _record(c, ci, items[i], i, temp, turns_res, dataset_name)
                    recs[(i, ci)]["secs"].append(sum(turn_secs))
                    recs[(i, ci)]["turn_secs"].append(turn_secs)
                    bar.update(1)
        records.extend(recs[k] for k in sorted(recs))
    bar.close()
    gathered = dist.gather(records) if dist is not None else [records]
    if gathered is None:
        return None
    merged = [r for part in gathered for r in part]
    merged.sort(key=lambda r: (r["temperature"], r["item"], r["cell"]))
    return merged


def _warm_up(target, cells: list[Cell], ids: torch.Tensor, temperatures, max_new_tokens: int, kw: dict) -> None:
    """A short decode with every cell at every temperature: numba compiles the tree builders and
    torch picks its kernels before anything is timed."""
    for temp in temperatures:
        for c in cells:
            if c.at(temp):
                speculative_generate(target, c.drafter, ids, min(4, max_new_tokens), c.method,
                                     budget=max(1, c.budget), temperature=temp, seed=0, scorer=c.scorer, **kw,
                                     **_rule(c, temp))


def _record(c: Cell, ci: int, item, i: int, temp: float, turns_res: list, dataset_name: str | None) -> dict:
    """The record of item ``i`` decoded by cell ``ci`` (from the first pass, which keeps the
    metrics); ``secs`` and ``turn_secs`` are filled pass by pass."""
    steps = [s for r in turns_res for s in r.steps]
    split: dict[str, float] = {}
    for r in turns_res:
        for k, v in r.time_split().items():
            split[k] = split.get(k, 0.0) + v
    return {
        "temperature": float(temp), "item": i, "cell": ci,
        "dataset": item.dataset if isinstance(item, Prompt) else dataset_name,
        "id": item.id if isinstance(item, Prompt) else str(i),
        "method": c.method, "scorer": c.scorer, "drafter": c.drafter_label, "K": c.K, "budget": c.budget,
        "tokens": [t for r in turns_res for t in r.tokens],
        "turn_lengths": [len(r.tokens) for r in turns_res],
        "rounds": len(steps),
        "accepted": [s.accepted for s in steps],
        "predicted": [s.predicted for s in steps],
        "predicted_var": [s.predicted_var for s in steps],
        "covered": [s.covered_mass for s in steps],
        "dead": [s.dead_share for s in steps if s.tree_size],
        "dead_splice": [s.dead_splices / s.tree_size for s in steps if s.tree_size],
        "tree_sizes": [s.tree_size for s in steps],
        "split": split, "secs": [], "turn_secs": [],
        "n_decoded": sum(len(r.tokens) - 1 for r in turns_res),
    }


def _mean(a) -> float | None:
    return float(np.mean(a)) if len(a) else None


def _std(a) -> float | None:
    return float(np.std(a, ddof=1)) if len(a) > 1 else None


def rows_from_records(records: list[dict], cells: list[Cell]) -> list[dict]:
    """One row per (dataset, cell, temperature) from merged records (see :func:`decode_cells`).

    Missing values are None (JSON null). Speedup is per pass, against ar in the same pass and
    dataset: ``speedup_passes`` holds one per pass, ``speedup`` their mean. Each pass's speedup
    pools the row's prompts (all decoded tokens over all decode time, against ar's pooled rate).

    ``speedup_spec_bench`` is Spec-Bench's convention instead (``evaluation/speed.py``): per pass,
    the mean over prompts of each prompt's tokens/s, over the same mean for ar, then averaged over
    passes (prompts with no decode time, an answer that ended at its first token, are left out:
    they have no rate). It weights every prompt alike, where ``speedup`` weights them by their
    decode time.

    ``matches_ar`` is on every row: True / False on greedy rows (T = 0) when an ar cell ran
    (every prompt's tokens equal ar's, the lossless check); None (null) on every other row, which
    is not checked (sampled rows: the walk's draws use the same seeded generator as ar, but a
    last-bit difference in the logits may flip a draw, so equality is not required there).
    ``lossless_checked`` (bool, every row) says which: ``matches_ar is not None``.
    """
    rows = []
    keys = sorted({(r["temperature"], r["dataset"]) for r in records}, key=lambda k: (str(k[1]), k[0]))
    ar_ci = next((ci for ci, c in enumerate(cells) if c.method == "ar"), None)
    for temp, ds in keys:
        at = [r for r in records if r["temperature"] == temp and r["dataset"] == ds]
        by_cell = {ci: [r for r in at if r["cell"] == ci] for ci in range(len(cells))}
        ar_recs = by_cell[ar_ci] if ar_ci is not None else None
        for ci, c in enumerate(cells):
            if by_cell[ci]:
                rows.append(_row(c, by_cell[ci], ds, temp, ar_recs))
    return rows


def _pooled_time(recs: list[dict]) -> tuple[np.ndarray, int]:
    """(decode seconds per pass [passes], decoded tokens) of ``recs`` together."""
    return np.sum([r["secs"] for r in recs], axis=0), sum(r["n_decoded"] for r in recs)


def _speedups(recs: list[dict], ar_recs: list[dict] | None) -> tuple[list, list]:
    """(tokens per second, speedup over ar) per pass, None where a pass has no time or no ar."""
    secs, tok = _pooled_time(recs)
    tps = [tok / s if s > 0 else None for s in secs]
    ar_secs, ar_tok = _pooled_time(ar_recs) if ar_recs is not None else (None, 0)
    if ar_recs is not None and tok > 0 and ar_tok > 0:
        sp = [float((a / ar_tok) / (s / tok)) if s > 0 else None for a, s in zip(ar_secs, secs)]
    else:
        sp = [None] * len(secs)
    return tps, sp


def _gap_stats(recs: list[dict], acc: np.ndarray, pred: np.ndarray) -> tuple[float | None, float | None]:
    """(standard error, mean) of the per-round gap, measured - predicted accepted length."""
    pvar = np.array([a for r in recs for a in r.get("predicted_var", [np.nan] * len(r["predicted"]))],
                    dtype=float)
    diff = acc - pred
    ok = ~np.isnan(diff) & ~np.isnan(pvar)
    # s.e. of the mean gap from the trees' exact variances (coverage.acceptance_variance):
    # given the history, round t's accepted - predicted has mean 0 and variance
    # predicted_var_t, so the summed gap has variance sum_t predicted_var_t (a martingale).
    # The empirical std of the gaps would collapse on rare events (0 accepted in every
    # round gives std 0 and a huge |z|).
    se = float(math.sqrt(pvar[ok].sum()) / ok.sum()) if ok.sum() and pvar[ok].sum() > 0 else None
    gap_mean = float(diff[ok].mean()) if ok.sum() else None
    return se, gap_mean


def _row(c: Cell, recs: list[dict], ds, temp: float, ar_recs: list[dict] | None) -> dict:
    """The row of cell ``c`` from its records at one (dataset, temperature); ``ar_recs``: ar's
    records there (None without an ar cell)."""
    acc = np.array([a for r in recs for a in r["accepted"]], dtype=float)
    pred = np.array([a for r in recs for a in r["predicted"]], dtype=float)
    cov = np.array([a for r in recs for a in r["covered"]], dtype=float)
    dead = [a for r in recs for a in r["dead"]]
    dspl = [a for r in recs for a in r["dead_splice"]]
    sizes = [a for r in recs for a in r["tree_sizes"]]
    n = len(acc)
    secs, tok = _pooled_time(recs)
    tps, sp = _speedups(recs, ar_recs)
    sp_ok = [x for x in sp if x is not None]
    tps_ok = [x for x in tps if x is not None]
    se, gap_mean = _gap_stats(recs, acc, pred)
    split: dict[str, float] = {}
    for r in recs:
        for k, v in r["split"].items():
            split[k] = split.get(k, 0.0) + v
    row = {
        "dataset": ds, "method": c.method, "scorer": c.scorer, "drafter": c.drafter_label, "K": c.K,
        "budget": int(c.budget), "temperature": float(temp),
        "n_prompts": len(recs), "n_rounds": n, "n_steps": n,
        "tau": float(acc.mean() + 1) if n else None,
        "accepted_mean": _mean(acc), "accepted_std": _std(acc),
        "covered_mass_insample": _mean(pred[~np.isnan(pred)]) if n else None,
        "covered_mass_mean": _mean(cov[~np.isnan(cov)]) if n else None,
        "pred_gap_se": se,
        "pred_gap_z": gap_mean / se if se else None,
        "n_tokens": int(sum(len(r["tokens"]) for r in recs)), "n_decoded_tokens": int(tok),
        "seconds": float(np.mean(secs)),
        "tokens_per_s_passes": tps, "tokens_per_s": _mean(tps_ok), "tokens_per_s_std": _std(tps_ok),
        "speedup_passes": sp, "speedup": _mean(sp_ok), "speedup_std": _std(sp_ok),
        "speedup_spec_bench": _per_answer_ratio(recs, ar_recs) if ar_recs is not None else None,
        "dead_share": _mean(dead), "dead_splice_share": _mean(dspl),
        "mean_tree_size": _mean(sizes), "time_split": split,
        "per_round_budget": c.budget_rule is not None,
        # per prompt, for paired comparisons (mfd_theory.stats): its tau and its own decode speed
        "prompt_ids": [str(r["id"]) for r in recs],
        "prompt_tau": [float(np.mean(r["accepted"]) + 1) if r["accepted"] else None for r in recs],
        "prompt_tokens_per_s": [r["n_decoded"] / float(np.mean(r["secs"])) if np.mean(r["secs"]) > 0 else None
                                for r in recs],
    }
    row["matches_ar"] = None
    if temp == 0 and ar_recs is not None:
        ar_out = {r["item"]: r["tokens"] for r in ar_recs}
        row["matches_ar"] = all(r["tokens"] == ar_out.get(r["item"]) for r in recs)
    row["lossless_checked"] = row["matches_ar"] is not None
    return row


def _per_answer_rate(recs: list[dict], pss: int) -> float | None:
    """Mean over prompts of tokens / decode seconds in pass ``pss`` (prompts with no decode time
    left out); None when no prompt has one."""
    rates = [r["n_decoded"] / r["secs"][pss] for r in recs if r["secs"][pss] > 0]
    return float(np.mean(rates)) if rates else None


def _per_answer_ratio(recs: list[dict], ar_recs: list[dict]) -> float | None:
    """Spec-Bench's speedup (see :func:`rows_from_records`), averaged over passes."""
    if not recs or not ar_recs:
        return None
    ratios = []
    for pss in range(min(len(recs[0]["secs"]), len(ar_recs[0]["secs"]))):
        mine, base = _per_answer_rate(recs, pss), _per_answer_rate(ar_recs, pss)
        if mine is not None and base:
            ratios.append(mine / base)
    return float(np.mean(ratios)) if ratios else None


_TERMS = ("draft", "tree", "verify", "walk", "commit")


def _row_key(r: dict) -> tuple:
    return (r.get("dataset"), r["method"], r["drafter"], int(r["budget"]), float(r["temperature"]), scorer_of(r))


def add_speedup_predictions(rows: list[dict], records: list[dict], profile) -> list[dict]:
    """Add to every row the speedup the round cost model predicts (in place; returns ``rows``).

    ``profile`` is a :class:`~mfd_theory.speedup.LatencyProfile` measured before the cells ran.
    Per row:

    * ``speedup_from_insample_coverage``: from the theory's acceptance, i.e. the trees' predicted covered mass
      under the decoding rule (``covered_mass_insample``; its variance: the trees' exact
      per-round variances plus the spread of the per-round predictions), not the measured tau;
    * ``speedup_from_measured_tau``: the same cost model with the measured accepted lengths, so
      ``speedup_from_measured_tau / speedup - 1`` is the cost model's error alone;
    * ``round_ms_predicted`` / ``round_ms_measured``: one round's time by term (draft, tree,
      verify, walk, commit), predicted by the profile and measured in the first timing pass.

    No finite-length correction is applied: the loop cuts the last round's tree to the tokens
    left, so the rounds' accepted lengths (measured and predicted alike) already include the cut
    rounds, and a turn emits exactly 1 + accepted per round (fewer only at an EOS). Rows whose
    (method, K) the profile lacks get None.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(_row_key(r), []).append(r)
    for row in rows:
        recs = groups.get(_row_key(row), [])
        for key in ("speedup_from_insample_coverage", "speedup_from_measured_tau", "round_ms_predicted", "round_ms_measured"):
            row[key] = None
        split = row.get("time_split") or {}
        if row["method"] == "ar":
            row["speedup_from_insample_coverage"] = row["speedup_from_measured_tau"] = 1.0
            row["round_ms_predicted"] = profile.round_ms("ar", 0, 0, row["temperature"])
            if row.get("n_rounds") and all(k in split for k in _TERMS):
                row["round_ms_measured"] = {k: 1e3 * float(split[k]) / row["n_rounds"] for k in _TERMS}
            continue
        if not recs or not row.get("n_rounds"):
            continue
        pred = np.array([a for r in recs for a in r["predicted"]], dtype=float)
        acc = np.array([a for r in recs for a in r["accepted"]], dtype=float)
        temp, K, cap = row["temperature"], int(row["K"]), max(1, int(row["budget"]))
        # a per-round rule builds the tree at the cap, then verifies the first n nodes it keeps
        n = max(1, int(round(row["mean_tree_size"]))) if row.get("per_round_budget") and row.get(
            "mean_tree_size") else cap

        try:
            if pred.size and not np.isnan(pred).any():
                a = float(pred.mean())
                row["speedup_from_insample_coverage"] = cell_speedup(a, row["method"], K, n, profile, temp, build_budget=cap)
                parts = profile.round_ms(row["method"], K, n, temp, a, build_n=cap)
                row["round_ms_predicted"] = {k: float(v) for k, v in parts.items()}
            row["speedup_from_measured_tau"] = cell_speedup(float(acc.mean()), row["method"], K, n, profile, temp,
                                                             build_budget=cap)
        except ValueError:  # the profile has no overhead table for this (method, K)
            continue
        if all(k in split for k in _TERMS):
            row["round_ms_measured"] = {k: 1e3 * float(split[k]) / row["n_rounds"] for k in _TERMS}
    return rows


def _rel(a, b) -> float | None:
    return float(a / b - 1) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def speedup_check(rows: list[dict]) -> dict:
    """How well the predicted speedups match the measured ones, over every speculative row.

    * relative error per row: predicted / measured - 1, for ``speedup_from_insample_coverage`` (theory's
      acceptance + cost model) and ``speedup_from_measured_tau`` (cost model alone); the median
      and the worst |error|, and how many rows lie within their measured spread;
    * best budget per (dataset, temperature, drafter, method) among tree methods with two or
      more budgets: the budget with the highest predicted speedup is a hit when it is the measured
      best, or its measured speedup is within the measured spread of the best's (the two rows'
      pass-to-pass standard deviations combined);
    * per term of the round (draft, tree, verify, walk, commit): measured / predicted ms summed
      over rows, and its share of the rows' total time error (which term the model gets wrong).
    """
    spec = [r for r in rows if r["method"] != "ar" and isinstance(r.get("speedup"), (int, float))
            and isinstance(r.get("speedup_from_insample_coverage"), (int, float))]
    out: dict[str, Any] = {"n_rows": len(spec)}
    if not spec:
        return out
    # the noise floor: how far one timing pass lies from another on this machine
    spreads = [r["speedup_std"] / r["speedup"] for r in spec if isinstance(r.get("speedup_std"), (int, float))]
    out["median_rel_spread"] = float(np.median(spreads)) if spreads else None
    for key, name in (("speedup_from_insample_coverage", "theory"), ("speedup_from_measured_tau", "tau")):
        errs = [(abs(_rel(r[key], r["speedup"])), r) for r in spec if _rel(r.get(key), r["speedup"]) is not None]
        if not errs:
            continue
        e = np.array([x for x, _ in errs])
        worst = max(errs, key=lambda t: t[0])[1]
        inside = sum(1 for x, r in errs if r.get("speedup_std") is not None
                     and abs(r[key] - r["speedup"]) <= r["speedup_std"])
        out[name] = {"median_rel_error": float(np.median(e)), "worst_rel_error": float(e.max()),
                     "mean_rel_error": float(e.mean()), "within_spread": inside, "n": len(errs),
                     "worst_row": {k: worst.get(k) for k in ("dataset", "method", "scorer", "drafter", "budget",
                                                              "temperature")},
                     # by T, signed too: the acceptance error and the cost model's error seen apart
                     "by_temperature": {f"{t:g}": error_summary([_rel(r[key], r["speedup"]) for _, r in errs
                                                                 if r["temperature"] == t])
                                        for t in sorted({r["temperature"] for _, r in errs})}}
    groups: dict[tuple, list[dict]] = {}
    for r in spec:
        if r["method"] != "chain":
            groups.setdefault((r.get("dataset"), r["temperature"], r["drafter"], r["method"], scorer_of(r)),
                              []).append(r)
    picks = []
    for (ds, temp, drafter, method, scorer), rs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        if len(rs) < 2:
            continue
        best = max(rs, key=lambda r: r["speedup"])
        chosen = max(rs, key=lambda r: r["speedup_from_insample_coverage"])
        spread = math.hypot(best.get("speedup_std") or 0.0, chosen.get("speedup_std") or 0.0)
        exact = chosen is best
        picks.append({"dataset": ds, "temperature": temp, "drafter": drafter, "method": method, "scorer": scorer,
                      "predicted_budget": chosen["budget"], "measured_budget": best["budget"],
                      "predicted_budget_speedup": chosen["speedup"], "best_speedup": best["speedup"],
                      "spread": spread, "exact": exact,
                      "hit": exact or best["speedup"] - chosen["speedup"] <= spread})
    out["best_budget"] = picks
    out["best_budget_hits"] = sum(p["hit"] for p in picks)
    out["best_budget_exact"] = sum(p["exact"] for p in picks)
    # the AR round in the run against the profile's: far from 1 means the machine's load changed
    # between the profile and the run (every term then drifts, the small kernels most)
    out["ar_round"] = [{"temperature": r["temperature"], "measured_ms": sum(r["round_ms_measured"].values()),
                        "predicted_ms": sum(r["round_ms_predicted"].values()),
                        "measured_over_predicted": sum(r["round_ms_measured"].values())
                        / sum(r["round_ms_predicted"].values())}
                       for r in rows if r["method"] == "ar" and r.get("round_ms_measured") and r.get("round_ms_predicted")]
    with_terms = [r for r in spec if r.get("round_ms_predicted") and r.get("round_ms_measured")]
    if with_terms:
        errs = {k: sum(abs(r["round_ms_measured"][k] - r["round_ms_predicted"][k]) for r in with_terms)
                for k in _TERMS}
        total_err = sum(errs.values()) or 1.0
        terms = {}
        for k in _TERMS:
            meas = sum(r["round_ms_measured"][k] for r in with_terms)
            pred = sum(r["round_ms_predicted"][k] for r in with_terms)
            terms[k] = {"measured_ms": meas / len(with_terms), "predicted_ms": pred / len(with_terms),
                        "measured_over_predicted": meas / pred if pred > 0 else None,
                        "abs_error_share": errs[k] / total_err}
        out["terms"] = terms
    return out


def gain_entry(r: dict, base: dict, family: int = 1) -> dict:
    """Row ``r`` against row ``base``: both taus and speedups, the pooled tau gain (a ratio minus
    one) and the paired comparisons of tau and speed (:func:`compare_rows`); the fields of
    :func:`mfd_gains`' entries."""
    return {"tau": r["tau"], "speedup": r["speedup"], "speedup_std": r.get("speedup_std"),
            "single_tau": base["tau"], "single_speedup": base["speedup"],
            "single_speedup_std": base.get("speedup_std"),
            "tau_gain": r["tau"] / base["tau"] - 1 if r["tau"] and base["tau"] else None,
            **compare_rows(r, base, family)}


def mfd_gains(rows: list[dict]) -> list[dict]:
    """MFD (and ddtree over an MFD drafter's marginals) against the single-mode (K = 1) drafter of
    the same run, paired over prompts (one run: prompts-only intervals, docs/statistics.md).

    Per dataset and temperature. Per budget: against the single-mode drafter's ddtree at the same
    budget (``best_budget`` False). Best budget (``best_budget`` True): each method at its fastest
    measured budget (``budget``) against the fastest single-mode tree, chain or ddtree at any
    budget (``single_budget``), both picked on this run's own timings (in sample). Each table's
    intervals are Bonferroni-adjusted for the number of its entries.
    """
    per, best, rows_of = [], [], {}
    groups = sorted({(r.get("dataset"), r["temperature"]) for r in rows}, key=lambda k: (str(k[0]), k[1]))
    for ds, temp in groups:
        at = [r for r in rows if r.get("dataset") == ds and r["temperature"] == temp]
        # the product drafter: K = 1, and no Domino drafter (K = 1 too, it decodes DARTree trees)
        domino = {r["drafter"] for r in at if r["method"] == "dartree"}
        single_label = next((r["drafter"] for r in at if r["K"] == 1 and r["drafter"] not in domino), None)
        if single_label is None:
            continue
        single = [r for r in at if r["drafter"] == single_label and r["tau"] is not None]
        same = {r["budget"]: r for r in single if r["method"] == "ddtree"}
        base_info = {"dataset": ds, "temperature": temp}
        for r in at:
            if r["K"] < 2 or r["budget"] not in same:
                continue
            e = {**base_info, "method": r["method"], "scorer": scorer_of(r), "drafter": r["drafter"],
                 "budget": r["budget"], "best_budget": False, "single_budget": r["budget"]}
            per.append(e)
            rows_of[id(e)] = (r, same[r["budget"]])
        fast_single = [r for r in single if r["speedup"] is not None]
        for label in dict.fromkeys(r["drafter"] for r in at if r["K"] >= 2):
            for method, scorer in dict.fromkeys((m, scorer_of(r)) for m in ("mfd", "ddtree") for r in at
                                                if r["drafter"] == label and r["method"] == m):
                mine = [r for r in at if r["drafter"] == label and r["method"] == method and scorer_of(r) == scorer
                        and r["speedup"] is not None]
                if not mine or not fast_single:
                    continue
                bm, bs = max(mine, key=lambda r: r["speedup"]), max(fast_single, key=lambda r: r["speedup"])
                e = {**base_info, "method": method, "scorer": scorer, "drafter": label, "budget": bm["budget"],
                     "best_budget": True, "single_budget": bs["budget"]}
                best.append(e)
                rows_of[id(e)] = (bm, bs)
    for table in (per, best):
        for e in table:
            e.update(gain_entry(*rows_of[id(e)], family=len(table)))
    return best + per


def best_budgets(rows: list[dict]) -> list[dict]:
    """The fastest budget per (dataset, temperature, drafter, method, scorer) among tree methods."""
    out = {}
    for r in rows:
        if r["method"] in ("ar", "chain") or r["speedup"] is None:
            continue
        k = (r.get("dataset"), r["temperature"], r["drafter"], r["method"], scorer_of(r))
        if k not in out or r["speedup"] > out[k]["speedup"]:
            out[k] = r
    return [{"dataset": k[0], "temperature": k[1], "drafter": k[2], "method": k[3], "scorer": k[4],
             "budget": r["budget"], "tau": r["tau"], "speedup": r["speedup"], "speedup_std": r["speedup_std"]}
            for k, r in out.items()]


def prediction_summary(rows: list[dict], records: list[dict] | None = None) -> dict:
    """How well measured acceptance matches the trees' covered mass at T > 0 (in sample: each
    round's tree against that round's own verify logits; a test of the theorem, not a forecast).

    Each row's z is (measured - covered) / s.e. of the per-round difference, standard normal if
    the theorem holds. The rows are not independent of each other: every cell decodes a prompt
    with the same sampling seed, so the sum of z^2 over rows is no chi-square with one degree per
    row. With the per-prompt ``records``, ``clustered`` pools every T > 0 row's gaps per prompt
    (prompts are independent) into one z over the prompts: sum of all gaps over the square root
    of the sum of the per-prompt summed gaps squared.
    """
    zs = [r["pred_gap_z"] for r in rows if r["temperature"] > 0 and r["method"] != "ar"
          and isinstance(r.get("pred_gap_z"), float) and not math.isnan(r["pred_gap_z"])]
    if not zs:
        return {"n_rows": 0}
    z = np.asarray(zs)
    out = {"n_rows": len(zs), "mean_z": float(z.mean()), "max_abs_z": float(np.abs(z).max()),
           "share_abs_z_below_2": float((np.abs(z) < 2).mean()), "sum_z2": float((z ** 2).sum())}
    if records:
        per: dict = {}
        for r in records:
            if r["temperature"] <= 0 or r["method"] == "ar":
                continue
            gap = np.asarray(r["accepted"], dtype=float) - np.asarray(r["predicted"], dtype=float)
            gap = gap[~np.isnan(gap)]
            key = (r.get("dataset"), r["item"])
            per[key] = per.get(key, 0.0) + float(gap.sum())
        s = np.array(list(per.values()))
        if s.size >= 2 and (s ** 2).sum() > 0:
            out["clustered"] = {"z": float(s.sum() / math.sqrt((s ** 2).sum())), "prompts": int(s.size)}
    return out


def per_prompt_records(records: list[dict]) -> list[dict]:
    """The per-prompt part of the records worth saving: tokens, rounds and accepted lengths."""
    keep = ("dataset", "id", "drafter", "K", "method", "scorer", "budget", "temperature", "tokens", "turn_lengths",
            "rounds", "accepted")
    return [{k: r.get(k) for k in keep} for r in records]


def _fmt(v, p=2) -> str:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{p}f}"


def _pm(mean, std, p=2) -> str:
    return _fmt(mean, p) if std is None else f"{_fmt(mean, p)} ± {_fmt(std, p)}"


def format_rows(rows: list[dict]) -> list[str]:
    """Markdown table of evaluation rows (speedup as mean ± std over timing passes)."""
    lines = ["| dataset | T | method | drafter | N | tau | accepted (mean ± std) | predicted | speedup | "
             "tokens/s | dead share | = ar |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.get('dataset')} | {r['temperature']:g} | {method_label(r['method'], scorer_of(r))} | "
            f"{r['drafter']} | {r['budget']} | {_fmt(r['tau'])} | {_pm(r['accepted_mean'], r['accepted_std'])} | "
            f"{_fmt(r['covered_mass_insample'])} | {_pm(r['speedup'], r.get('speedup_std'))} | "
            f"{_pm(r['tokens_per_s'], r.get('tokens_per_s_std'), 1)} | {_fmt(r['dead_share'])} | "
            f"{'' if r.get('matches_ar') is None else ('yes' if r['matches_ar'] else 'NO')} |")
    return lines


def format_gains(gains: list[dict]) -> list[str]:
    """Markdown tables of :func:`mfd_gains`: best budgets, then per budget. Gains are paired over
    prompts within this one run, with their Bonferroni-adjusted intervals and verdicts."""
    lines: list[str] = []
    best = [g for g in gains if is_best_budget(g)]
    if best:
        lines += ["", "| dataset | T | method | drafter | best tau | single tau | tau gain | best speedup (N) | "
                  "single speedup (N) | speed gain |", "|---|---|---|---|---|---|---|---|---|---|"]
        for g in best:
            lines.append(f"| {g.get('dataset')} | {g['temperature']:g} | {method_label(g['method'], g.get('scorer'))} | "
                         f"{g['drafter']} | {_fmt(g['tau'])} | {_fmt(g['single_tau'])} | {_tau_gain_text(g)} | "
                         f"{_pm(g['speedup'], g.get('speedup_std'))} ({g['budget']}) | "
                         f"{_pm(g['single_speedup'], g.get('single_speedup_std'))} ({g.get('single_budget')}) | "
                         f"{_gain_text(g)} |")
    per = [g for g in gains if not is_best_budget(g)]
    if per:
        lines += ["", "| dataset | T | method | drafter | N | tau | single-mode ddtree tau | tau gain | "
                  "speed gain |", "|---|---|---|---|---|---|---|---|---|"]
        for g in per:
            lines.append(f"| {g.get('dataset')} | {g['temperature']:g} | {method_label(g['method'], g.get('scorer'))} | "
                         f"{g['drafter']} | {g['budget']} | {_fmt(g['tau'])} | {_fmt(g['single_tau'])} | "
                         f"{_tau_gain_text(g)} | "
                         f"{_gain_text(g)} |")
    return lines