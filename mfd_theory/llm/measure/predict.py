"""Predict every cell's tau and speedup before decoding, from calibration prompts only; check after.

Acceptance is the trees' covered mass under the decoding rule, read off calibration decodes of
every cell the evaluation will run (prompts disjoint from the evaluated ones); speedup is the round
cost model's at that acceptance. :func:`write_predictions` writes them before the evaluation and
:func:`prediction_check` compares after. Design: docs/results.md ("Predicting before decoding").
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mfd_theory.results import Result
from mfd_theory.stats import error_summary
from mfd_theory.speedup import PerRoundBudget, best_fixed_budget, cell_speedup, isotonic

from mfd_theory.coverage import prefix_log_probs
from mfd_theory.llm.decoding.generate import speculative_generate
from mfd_theory.llm.decoding.trees import check_scorer
from mfd_theory.llm.measure.evaluate import cell_key, scorer_of

__all__ = ["subtree_coverage", "CalibrationEntry", "Calibration", "CoverageMap", "calibrate_acceptance",
           "predict_cells", "choose_budgets", "per_round_rules", "uncalibrated", "prompt_digest", "check_disjoint",
           "write_predictions", "load_predictions", "prediction_check", "attach_predictions", "prediction_lines"]

Z95 = 1.959963984540054


def subtree_coverage(tree, node_log_cond) -> np.ndarray:
    """[N + 1]: entry n = the target's covered mass of the tree's first n nodes (entry 0 = 0),
    from one verify of the whole tree (``node_log_cond``: each node's log conditional given its
    parent's path). The first n nodes are prefix-closed because parents precede children, and a
    node's conditional depends only on its ancestors (tree attention), so this equals verifying
    the n-node tree on its own."""
    if tree is None or not len(tree):
        return np.zeros(1)
    lp = prefix_log_probs(tree.parent, tree.depth, np.asarray(node_log_cond, dtype=np.float64))
    return np.concatenate([[0.0], np.cumsum(np.exp(lp))])


def prompt_digest(ids) -> str:
    """A short hash of one prompt's token ids (identifies a prompt across files and runs)."""
    a = np.asarray(ids, dtype=np.int64).reshape(-1)
    return hashlib.sha256(a.tobytes()).hexdigest()[:16]


def check_disjoint(calibration: list[dict], evaluation: list[dict]) -> None:
    """Refuse a calibration set that shares a prompt (by its token hash) with the evaluation."""
    shared = {c["sha256"] for c in calibration} & {e["sha256"] for e in evaluation}
    if shared:
        raise ValueError(f"calibration prompts: {len(shared)} of them are also evaluated; a prediction must not "
                         "see the prompts it predicts")


@dataclass
class CalibrationEntry:
    """Rounds of one cell's calibration decodes (one method and scorer, drafter, budget, temperature)."""

    method: str
    drafter: str
    K: int
    temperature: float
    budget: int                       # the budget decoded (a per-round rule's cap)
    per_round: bool = False           # decoded with a per-round budget rule
    prompt: list = field(default_factory=list)    # [rounds] calibration prompt index
    mass: list = field(default_factory=list)      # [rounds] covered mass of the round's tree (decoding rule)
    size: list = field(default_factory=list)      # [rounds] tree size verified
    target: list = field(default_factory=list)    # [rounds] arrays [size + 1]: covered mass of the first n nodes
    gains: list = field(default_factory=list)     # [rounds] arrays [size]: drafter's prefix probability, builder order
    scorer: str | None = None         # "mfd" only: "mixture" (what None becomes) or "best_mode"
    calibration_set: str | None = None  # the calibration prompt set decoded (None: one set serves every data set)

    def __post_init__(self):
        self.scorer = check_scorer(self.method, self.scorer) if self.method == "mfd" else self.scorer

    def curves(self, M: int | None = None) -> np.ndarray:
        """[rounds, M + 1]: covered mass of each round's first n nodes (a smaller tree holds its mass)."""
        M = self.budget if M is None else M
        out = np.empty((len(self.target), M + 1))
        for i, c in enumerate(self.target):
            c = c[:M + 1]
            out[i, :c.size] = c
            out[i, c.size:] = c[-1]
        return out

    def self_mass(self, n: int) -> np.ndarray:
        """[rounds]: the drafter's own mass on its n best nodes (by its score)."""
        return np.array([np.sort(g)[::-1][:n].sum() if len(g) else 0.0 for g in self.gains])

    def summary(self) -> dict:
        mass = np.asarray(self.mass, dtype=np.float64)
        return {"method": self.method, "scorer": self.scorer, "drafter": self.drafter, "K": self.K,
                "temperature": self.temperature, "calibration_set": self.calibration_set,
                "budget": self.budget, "per_round": self.per_round, "rounds": len(self.mass),
                "prompts": len(set(self.prompt)), "mean_target_mass": float(mass.mean()) if mass.size else None,
                # a chain's node scores are not probabilities: no self estimate
                "mean_self_mass": float(self.self_mass(self.budget).mean())
                if self.gains and self.method != "chain" else None}


class CoverageMap:
    """Monotone map from a drafter's own coverage estimate (its probability mass on a tree) to the
    target's covered mass of that tree, fitted by isotonic regression on calibration rounds."""

    def __init__(self, x, y):
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if x.size == 0 or x.shape != y.shape:
            raise ValueError("x, y: need the same non-zero number of calibration rounds")
        order = np.argsort(x, kind="stable")
        xs, ys = x[order], y[order]
        knots, idx = np.unique(xs, return_inverse=True)
        w = np.bincount(idx).astype(np.float64)
        mean_y = np.bincount(idx, weights=ys) / w
        self.x, self.y = knots, isotonic(mean_y, w)
        self.n = int(x.size)

    def __call__(self, x) -> np.ndarray:
        return np.interp(np.asarray(x, dtype=np.float64), self.x, self.y)

    def to_dict(self) -> dict:
        return {"x": self.x.tolist(), "y": self.y.tolist(), "rounds": self.n}


@dataclass
class Calibration:
    entries: list[CalibrationEntry]
    prompts: list[dict]               # [{"index", "id", "sha256", "dataset"}] of the calibration prompts
    seconds: float = 0.0

    def _mine(self, method: str, drafter: str, temperature: float, scorer: str | None = None
              ) -> list[CalibrationEntry]:
        sc = check_scorer(method, scorer) if method == "mfd" else scorer
        return [e for e in self.entries if e.method == method and e.drafter == drafter
                and e.temperature == float(temperature) and e.scorer == sc]

    def find(self, method: str, drafter: str, temperature: float, n: int, per_round: bool = False,
             scorer: str | None = None) -> CalibrationEntry | None:
        """The entry of the cell decoded at budget (or cap) ``n``, with a per-round rule or without
        (``scorer``: of an mfd cell, None meaning "mixture")."""
        return next((e for e in self._mine(method, drafter, temperature, scorer)
                     if e.budget == n and e.per_round == per_round), None)

    def largest(self, method: str, drafter: str, temperature: float, scorer: str | None = None
                ) -> CalibrationEntry | None:
        fixed = [e for e in self._mine(method, drafter, temperature, scorer) if not e.per_round and e.target]
        return max(fixed, key=lambda e: e.budget) if fixed else None

    def coverage_map(self, method: str, drafter: str, temperature: float, scorer: str | None = None
                     ) -> CoverageMap | None:
        mine = [e for e in self._mine(method, drafter, temperature, scorer) if e.gains and not e.per_round]
        if not mine:
            return None
        return CoverageMap(np.concatenate([e.self_mass(e.budget) for e in mine]),
                           np.concatenate([[c[-1] for c in e.target] for e in mine]))


def _base(label: str) -> str:
    return str(label).removesuffix("/per-round")


def _rule_at(cell, temperature: float):
    rule = cell.budget_rule
    return rule[float(temperature)] if isinstance(rule, dict) else rule


def uncalibrated(cal: Calibration, cells: list, temperatures) -> list:
    """The tree cells of ``cells`` that no calibration decode of ``cal`` ran at some temperature
    (e.g. the theory's chosen budgets, chosen after the first calibration)."""
    return [c for c in cells if c.method != "ar" and any(
        cal.find(c.method, _base(c.drafter_label), t, max(1, int(c.budget)), _rule_at(c, t) is not None,
                 c.scorer) is None
        for t in temperatures if c.at(t))]


def _cluster_mean_se(values: np.ndarray, groups: np.ndarray) -> tuple[float, float | None]:
    """Mean over rounds and its standard error with each group (prompt) as one cluster."""
    v = np.asarray(values, dtype=np.float64)
    m = float(v.mean())
    ids = np.unique(groups)
    if ids.size < 2:
        return m, None
    resid = np.array([(v[groups == g] - m).sum() for g in ids])
    se = math.sqrt(ids.size / (ids.size - 1) * float((resid ** 2).sum())) / v.size
    return m, se


@torch.no_grad()
def calibrate_acceptance(target, cells: list, prompts: list, *, temperatures, max_new_tokens: int, seed: int = 0,
                         eos_token_id=(), progress: bool = True, calibration_set: str | None = None) -> Calibration:
    """Decode the calibration ``prompts`` (token-id sequences) with every tree cell of ``cells``
    at every temperature, as the evaluation will (same budget, same per-round rule), keeping each
    round's covered mass under the decoding rule, its tree size, the covered mass of the tree's
    first n nodes and the drafter's own node probabilities.

    Sampling seeds are disjoint from the evaluation's (which uses ``seed + 1000 * prompt +
    turn``). ``eos_token_id`` as the evaluation passes it to the decoder (default: none, a fixed
    number of tokens; None: the target's own). ``calibration_set``: the name of the prompt set,
    kept on every entry (None: one set serving every data set)."""
    from tqdm.auto import tqdm

    if not prompts:
        raise ValueError("prompts: need at least one calibration prompt")
    todo = [c for c in cells if c.method != "ar"]
    ids = [torch.as_tensor(np.asarray(p).reshape(-1)) for p in prompts]
    eos = None if eos_token_id is None else list(eos_token_id)
    t0 = time.perf_counter()
    entries = []
    bar = tqdm(total=len(ids) * sum(c.at(t) for t in temperatures for c in todo), desc="calibrate acceptance",
               disable=not progress, leave=False)
    for temp in temperatures:
        for cell in todo:
            if not cell.at(temp):
                continue
            rule = _rule_at(cell, temp)
            budget = max(1, int(cell.budget))
            e = CalibrationEntry(cell.method, _base(cell.drafter_label), cell.K, float(temp), budget, rule is not None,
                                 scorer=cell.scorer, calibration_set=calibration_set)
            for i, p in enumerate(ids):
                res = speculative_generate(target, cell.drafter, p, max_new_tokens, cell.method, budget=budget,
                                           temperature=temp, seed=seed + 7_000_003 + 1000 * i, keep_trees=True,
                                           eos_token_id=eos, scorer=cell.scorer,
                                           **({} if rule is None else {"budget_rule": rule}))
                for s in res.steps:  # every round counts, as in the evaluation (a tree-less last round: 0)
                    tree = s.tree is not None and len(s.tree) > 0 and s.tree_size > 0
                    e.prompt.append(i)
                    e.mass.append(float(s.predicted) if tree else 0.0)
                    e.size.append(int(s.tree_size) if tree else 0)
                    # a tree-less round covers nothing and the drafter predicts nothing for it: every
                    # per-round list has one entry per round, so all their means share one denominator
                    e.target.append(subtree_coverage(s.tree, s.node_log_cond) if tree else np.zeros(1))
                    e.gains.append(np.exp(s.tree.log_score) if tree else np.zeros(0))
                bar.update(1)
            entries.append(e)
    bar.close()
    return Calibration(entries, [], time.perf_counter() - t0)


def prediction_se(se_calibration: float | None, n_calibration: int, n_evaluated: int | None) -> float | None:
    """The standard error of a prediction of the evaluated prompts' mean from the calibration
    prompts' mean: both are samples of one prompt distribution, so their difference has the
    calibration mean's variance plus the evaluated mean's, about ``se_calibration**2 *
    n_calibration / n_evaluated`` (the same between-prompt variance over the other set's size).
    ``n_evaluated`` None: the calibration's own standard error (an interval for the population
    mean, not for another prompt set's)."""
    if se_calibration is None or n_evaluated is None:
        return se_calibration
    return float(se_calibration * math.sqrt(1.0 + n_calibration / max(1, int(n_evaluated))))


def _predict_one(cal: Calibration, cell, temperature: float, profile, cmap_cache: dict,
                 n_evaluated: int | None = None) -> dict:
    method, label, K, scorer = cell.method, _base(cell.drafter_label), cell.K, cell.scorer
    n = max(1, int(cell.budget))
    rule = _rule_at(cell, temperature)
    out: dict[str, Any] = {"method": method, "scorer": scorer, "drafter": label, "K": K, "budget": n,
                           "temperature": float(temperature), "per_round_budget": rule is not None}
    e = cal.find(method, label, temperature, n, rule is not None, scorer)
    if e is not None and e.mass:
        vals, groups = np.asarray(e.mass), np.asarray(e.prompt)
        sizes = np.asarray(e.size, dtype=np.float64)
        out["source"] = "calibrated"
    else:  # not decoded: map the drafter's own estimate through its calibration
        key = (method, label, float(temperature), scorer)
        if key not in cmap_cache:
            cmap_cache[key] = cal.coverage_map(method, label, temperature, scorer)
        cmap = cmap_cache[key]
        larger = [x for x in cal._mine(method, label, temperature, scorer) if not x.per_round
                  and x.budget >= n and x.gains]
        if cmap is None or rule is not None or not larger:
            out.update(source=None, predicted_accepted=None)
            return out
        src = min(larger, key=lambda x: x.budget)
        vals = cmap(src.self_mass(n))  # a tree-less round's own mass is 0, mapped to the map's value there
        vals = np.where(np.asarray(src.size) > 0, vals, 0.0)
        groups = np.asarray(src.prompt)
        sizes = np.where(np.asarray(src.size) > 0, float(n), 0.0)
        out["source"] = "mapped"
    a, se_cal = _cluster_mean_se(vals, groups)
    se = prediction_se(se_cal, int(np.unique(groups).size), n_evaluated)
    n_eff = float(sizes[sizes > 0].mean()) if (sizes > 0).any() else float(n)
    out.update(predicted_accepted=a, predicted_accepted_se=se, predicted_tau=1.0 + a, predicted_tau_se=se,
               calibration_se=se_cal, evaluated_prompts=n_evaluated,
               predicted_mean_tree_size=n_eff, calibration_rounds=int(len(vals)),
               calibration_prompts=int(np.unique(groups).size))
    if profile is not None:
        build = n if rule is not None else None
        size = max(1.0, n_eff) if rule is not None else n
        try:
            sp = [cell_speedup(max(0.0, x), method, K, size, profile, temperature, build_budget=build)
                  for x in (a, a - Z95 * (se or 0.0), a + Z95 * (se or 0.0))]
            out.update(predicted_speedup=sp[0], predicted_speedup_lo=sp[1], predicted_speedup_hi=sp[2])
        except ValueError:  # the profile has no table for this (method, K)
            pass
    return out


def predict_cells(cal: Calibration, cells: list, temperatures, profile=None, dataset: str | None = None,
                  n_evaluated: int | None = None) -> list[dict]:
    """One prediction per (cell, temperature) from the calibration alone (see docs/results.md, "How
    acceptance is predicted"), for the evaluated data set named ``dataset`` of ``n_evaluated``
    prompts (known before decoding: only their number is used), whose own sampling variance the
    interval includes (:func:`prediction_se`)."""
    cache: dict = {}
    out = []
    for temp in temperatures:
        for c in cells:
            if not c.at(temp):
                continue
            if c.method == "ar":
                out.append({"method": "ar", "scorer": None, "drafter": c.drafter_label, "K": 0, "budget": 0,
                            "temperature": float(temp), "per_round_budget": False, "source": "ar",
                            "predicted_accepted": 0.0, "predicted_accepted_se": 0.0, "predicted_tau": 1.0,
                            "predicted_tau_se": 0.0, "predicted_speedup": 1.0, "predicted_speedup_lo": 1.0,
                            "predicted_speedup_hi": 1.0})
                continue
            out.append(_predict_one(cal, c, temp, profile, cache, n_evaluated))
    for p in out:
        p["dataset"] = dataset
    return out


def choose_budgets(cal: Calibration, cells: list, temperatures, profile, calibration_speed: dict | None = None,
                   on_grid: bool = False, dataset: str | None = None,
                   calibration_speed_sampled: dict | None = None) -> list[dict]:
    """Per (temperature, method, scorer, drafter) of a tree method: the fixed budget with the
    highest predicted speedup, next to two naive rules over the grid: the smallest budget, and the
    budget whose calibration decodes ran fastest (``calibration_speed``: {:func:`cell_key` (method,
    drafter, budget): speedup} from the round profile's greedy decodes; at T > 0, from its sampled
    decodes, ``calibration_speed_sampled``, where given). ``on_grid``: choose among the cells'
    budgets only; either way ``theory_grid_budget`` is the theory's choice among them, the one its
    regret is measured at (against rules that choose among the same budgets).

    The coverage curve over every n up to the largest budget M: for trees built best first
    (``ddtree``, ``mfd``), the covered mass of the first n nodes of the M-node trees of the
    calibration decode at M (nested reading: biased upwards at small n, see docs/results.md, "How acceptance is predicted"; the
    mixture's n-node tree is approximated by the first n nodes of its M-node tree); for
    ``dartree``, the drafter's own mass on its best n nodes through its :class:`CoverageMap`."""
    out = []
    groups: dict[tuple, list] = {}
    for c in cells:
        if c.method in ("ar", "chain") or c.budget_rule is not None:
            continue
        groups.setdefault((c.method, c.drafter_label, c.scorer), []).append(c)
    for temp in temperatures:
        for (method, label, scorer), cs in groups.items():
            grid = sorted({int(c.budget) for c in cs})
            M = grid[-1]
            e = cal.largest(method, label, temp, scorer)
            if e is None:
                continue
            if method in ("ddtree", "mfd"):
                curves = e.curves(M)
            else:
                cmap = cal.coverage_map(method, label, temp, scorer)
                if cmap is None:
                    continue
                curves = np.stack([cmap(e.self_mass(n)) for n in range(M + 1)], axis=1)
                curves[:, 0] = 0.0
            ch = best_fixed_budget(curves, profile, grid if on_grid else None, method=method, K=cs[0].K,
                                   temperature=temp)
            on = ch if on_grid else best_fixed_budget(curves, profile, grid, method=method, K=cs[0].K,
                                                      temperature=temp)
            row = {"dataset": dataset, "temperature": float(temp), "method": method, "scorer": scorer, "drafter": label,
                   "K": cs[0].K, "budget": ch.budget, "theory_grid_budget": on.budget,
                   "predicted_speedup_at_choice": ch.speedup,
                   "predicted_coverage_at_choice": float(curves[:, ch.budget].mean()), "max_budget": M,
                   "grid": grid, "naive_smallest": grid[0]}
            timed, source = calibration_speed, "greedy"
            if float(temp) > 0 and calibration_speed_sampled:  # the rule knows what ran fastest sampled
                timed, source = calibration_speed_sampled, "sampled"
            if timed:
                speeds = {n: timed.get(cell_key(method, label, n, scorer=scorer)) for n in grid}
                speeds = {n: s for n, s in speeds.items() if s is not None}
                if speeds:
                    row["naive_calibration_best"] = max(speeds, key=lambda n: (speeds[n], -n))
                    row["naive_calibration_timed"] = source
            out.append(row)
    return out


def per_round_rules(choices: list[dict], profile, cells: list) -> dict:
    """{:func:`cell_key` (method, drafter): {temperature: PerRoundBudget}}: CaDDTree's per-round
    size, built at twice the fixed choice (at most the largest budget) and cut, for the trees built
    best first (``ddtree``, ``mfd``; a DARTree tree is grown depth by depth and has no best-first cut)."""
    k_of = {c.drafter_label: c.K for c in cells}
    cap: dict = {}
    for ch in choices:
        if ch["method"] in ("ddtree", "mfd"):
            key = cell_key(ch["method"], ch["drafter"], scorer=ch.get("scorer"))
            cap[key] = max(cap.get(key, 1), min(ch["max_budget"], 2 * ch["budget"]))
    temps = sorted({ch["temperature"] for ch in choices})
    return {key: {t: PerRoundBudget(profile, key[0], k_of[key[1]], t, c) for t in temps} for key, c in cap.items()}


def write_predictions(path: str | Path, *, predictions: list[dict], choices: list[dict], cal: Calibration,
                      evaluation_prompts: list[dict], profile=None, config: dict | None = None,
                      seed: int | None = None, extra: dict | None = None) -> Result:
    """Write ``predictions.json`` (atomically, flushed to disk) before the evaluation decodes its
    first prompt: every cell's predicted tau and speedup with intervals, the chosen budgets, the
    calibration summary, the profile, both prompt lists and the time it was written."""
    check_disjoint(cal.prompts, evaluation_prompts)
    maps = {}
    for e in (x for x in cal.entries if x.method != "chain"):
        key = (f"{e.method}/{e.drafter}/T={e.temperature:g}" + ("/best_mode" if e.scorer == "best_mode" else "")
               + (f"/{e.calibration_set}" if e.calibration_set else ""))
        if key not in maps:  # each calibration set's own map, as its data set's predictions used it
            mine = Calibration([x for x in cal.entries if x.calibration_set == e.calibration_set], [])
            m = mine.coverage_map(e.method, e.drafter, e.temperature, e.scorer)
            maps[key] = m.to_dict() if m is not None else None
    data = {"written_at_unix": time.time(), "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cells": predictions, "budget_choice": choices,
            "calibration": {"seconds": cal.seconds, "entries": [e.summary() for e in cal.entries],
                            "coverage_maps": maps},
            "calibration_prompts": cal.prompts, "evaluation_prompts": evaluation_prompts,
            "round_profile": profile.to_dict() if profile is not None else None, **(extra or {})}
    res = Result("predictions", config=config or {}, data=data, seed=seed)
    res.save(path)
    return res


def load_predictions(path: str | Path) -> dict:
    return Result.load(path).data


def _key(r: dict) -> tuple:
    return (r.get("dataset"), r["method"], r["drafter"], int(r["budget"]), float(r["temperature"]), bool(r.get("per_round_budget")),
            scorer_of(r))


def _per_round(r: dict) -> bool:
    """A row decoded with a per-round budget rule (flagged, or labelled ``<drafter>/per-round``)."""
    return bool(r.get("per_round_budget")) or str(r["drafter"]).endswith("/per-round")


def _row_key(r: dict) -> tuple:
    return (r.get("dataset"), r["method"], _base(r["drafter"]), int(r["budget"]), float(r["temperature"]),
            _per_round(r), scorer_of(r))


def attach_predictions(rows: list[dict], predictions: dict) -> list[dict]:
    """Copy each row's prediction (read back from ``predictions.json``) into the row, in place."""
    by = {_key(p): p for p in predictions["cells"]}
    for r in rows:
        p = by.get(_row_key(r))
        for k in ("predicted_tau", "predicted_tau_se", "predicted_speedup", "predicted_speedup_lo",
                  "predicted_speedup_hi", "predicted_mean_tree_size"):
            r[k] = None if p is None else p.get(k)
        r["prediction_source"] = None if p is None else p.get("source")
    return rows


def _rel(a, b):
    ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and b
    return float(a / b - 1) if ok else None



def prediction_check(predictions: dict, rows: list[dict], chosen_rows: list[dict] | None = None) -> dict:
    """Predicted (before decoding) against measured, over every speculative row with a prediction:
    tau and speedup errors (median, worst, share inside the interval) and, per (temperature,
    method, drafter), the budget choice's regret (measured speedup at the best grid budget over the
    measured speedup at the chosen one, minus 1) next to the naive rules' regrets."""
    rows = [dict(r) for r in rows]
    chosen_rows = [dict(r) for r in chosen_rows or []]
    attach_predictions(rows, predictions)
    attach_predictions(chosen_rows, predictions)
    cells = []
    for r in rows + chosen_rows:
        if r["method"] == "ar" or r.get("predicted_tau") is None or r.get("tau") is None:
            continue
        e_tau = _rel(r["predicted_tau"], r["tau"])
        e_sp = _rel(r.get("predicted_speedup"), r.get("speedup"))
        lo, hi = r.get("predicted_speedup_lo"), r.get("predicted_speedup_hi")
        cells.append({"dataset": r.get("dataset"), "method": r["method"], "scorer": scorer_of(r),
                      "drafter": _base(r["drafter"]),
                      "K": r.get("K"), "budget": r["budget"], "temperature": r["temperature"],
                      "per_round_budget": _per_round(r), "mean_tree_size": r.get("mean_tree_size"),
                      "predicted_mean_tree_size": r.get("predicted_mean_tree_size"), "tau": r["tau"],
                      "predicted_tau": r["predicted_tau"], "predicted_tau_se": r.get("predicted_tau_se"),
                      "tau_error": e_tau, "speedup": r.get("speedup"), "speedup_std": r.get("speedup_std"),
                      "predicted_speedup": r.get("predicted_speedup"), "predicted_speedup_lo": lo,
                      "predicted_speedup_hi": hi, "speedup_error": e_sp, "source": r.get("prediction_source"),
                      "on_grid": r in rows,
                      "tau_within_2se": (abs(r["predicted_tau"] - r["tau"]) <= 2 * r["predicted_tau_se"])
                      if r.get("predicted_tau_se") else None})
    out: dict[str, Any] = {"cells": cells, "n_cells": len(cells)}
    for name in ("tau", "speedup"):
        errs = [(abs(c[f"{name}_error"]), c) for c in cells if c[f"{name}_error"] is not None]
        if errs:
            e = np.array([x for x, _ in errs])
            w = max(errs, key=lambda t: t[0])[1]
            out[name] = {"median_abs_error": float(np.median(e)), "worst_abs_error": float(e.max()),
                         "mean_signed_error": float(np.mean([c[f"{name}_error"] for _, c in errs])),
                         "n": len(errs), "worst": {k: w[k] for k in ("method", "scorer", "drafter", "budget",
                                                                     "temperature")}}
            for t in sorted({c["temperature"] for _, c in errs}):
                at = [c[f"{name}_error"] for _, c in errs if c["temperature"] == t]
                out[name].setdefault("by_temperature", {})[f"{t:g}"] = error_summary(at)
            for n in sorted({int(c["budget"]) for _, c in errs if c["method"] != "chain"}):
                at = [c[f"{name}_error"] for _, c in errs if c["method"] != "chain" and int(c["budget"]) == n]
                out[name].setdefault("by_budget", {})[str(n)] = error_summary(at)
            for t in sorted({c["temperature"] for _, c in errs}):  # signed, by T and N together
                for n in sorted({int(c["budget"]) for _, c in errs if c["method"] != "chain"}):
                    at = [c[f"{name}_error"] for _, c in errs if c["method"] != "chain" and int(c["budget"]) == n
                          and c["temperature"] == t]
                    if at:
                        out[name].setdefault("by_temperature_budget", []).append(
                            {"temperature": float(t), "budget": n, **error_summary(at)})
    g0 = [c for c in cells if c["temperature"] == 0]
    out["t0_cells_differing"] = sum(1 for c in g0 if abs(c["predicted_tau"] - c["tau"]) > 1e-9)
    out["t0_cells"] = len(g0)
    within = [c["tau_within_2se"] for c in cells if c["tau_within_2se"] is not None]
    out["tau_within_2se"] = sum(within)
    out["tau_with_se"] = len(within)
    out["budget_regret"] = budget_regret(predictions.get("budget_choice", []), rows)
    for rule in REGRET_RULES:
        v = [e[rule]["regret"] for e in out["budget_regret"] if e.get("reported") and e[rule]["regret"] is not None]
        out[f"mean_regret_{rule}"] = float(np.mean(v)) if v else None
    return out


#: the budget rules whose regret is compared, each choosing among the same grid budgets: the theory's
#: choice restricted to the grid, the smallest budget, the budget that ran fastest on calibration
REGRET_RULES = ("theory", "smallest", "calibration_best")
#: fewer candidates than this make a rule comparison vacuous (with two, every rule may tie)
MIN_REGRET_CANDIDATES = 3


def _held_out_speed(row: dict) -> float | None:
    """The mean speedup of a row's timing passes after the first (the first picks the best budget)."""
    rest = [x for x in (row.get("speedup_passes") or [])[1:] if x is not None]
    return float(np.mean(rest)) if rest else None


def budget_regret(choices: list[dict], rows: list[dict]) -> list[dict]:
    """Per (data set, temperature, method, scorer, drafter) of ``choices``: each rule's regret,
    measured on timing passes that did not pick the best budget.

    Every rule chooses among the grid's budgets (the theory's choice restricted to the grid,
    ``theory_grid_budget``, where it chose off the grid). The best budget is the one fastest on
    the first timing pass; every rule, the best included, is then scored on the mean of the other
    passes, so the best cell's own luck on the pass that picked it does not count against the
    rules (the winner's curse). Regret = best's speedup / the rule's speedup - 1 on those passes
    (negative where a rule beat the first pass's pick). An entry is ``reported`` only with at least
    :data:`MIN_REGRET_CANDIDATES` grid budgets and two timing passes; otherwise ``why`` says
    what was missing."""
    out = []
    for ch in choices:
        grid = {int(r["budget"]): r for r in rows if r.get("dataset") == ch.get("dataset")
                and r["method"] == ch["method"] and scorer_of(r) == scorer_of(ch) and r["drafter"] == ch["drafter"]
                and float(r["temperature"]) == ch["temperature"] and not r.get("per_round_budget")
                and isinstance(r.get("speedup"), (int, float))}
        if not grid:
            continue
        entry = {"dataset": ch.get("dataset"), "K": ch.get("K"), "temperature": ch["temperature"],
                 "method": ch["method"], "scorer": scorer_of(ch), "drafter": ch["drafter"],
                 "candidates": sorted(grid), "calibration_timed": ch.get("naive_calibration_timed")}
        first = {n: (r.get("speedup_passes") or [None])[0] for n, r in grid.items()}
        held = {n: _held_out_speed(r) for n, r in grid.items()}
        if len(grid) < MIN_REGRET_CANDIDATES:
            out.append({**entry, "reported": False,
                        "why": f"{len(grid)} grid budget(s): a comparison of rules needs at least "
                               f"{MIN_REGRET_CANDIDATES}"})
            continue
        if any(v is None for v in (*first.values(), *held.values())):
            out.append({**entry, "reported": False, "why": "needs two timing passes or more (one picks, the "
                                                            "others score)"})
            continue
        best_n = max(grid, key=lambda n: (first[n], -n))
        entry.update(reported=True, best_budget=best_n, best_speedup=held[best_n])
        picks = {"theory": ch.get("theory_grid_budget", ch["budget"]), "smallest": ch.get("naive_smallest"),
                 "calibration_best": ch.get("naive_calibration_best")}
        for rule in REGRET_RULES:
            n = picks[rule]
            s = held.get(int(n)) if n is not None else None
            entry[rule] = {"budget": n, "speedup": s, "regret": (held[best_n] / s - 1) if s else None}
        out.append(entry)
    return out


def prediction_lines(check: dict | None) -> list[str]:
    """A few plain lines summarising :func:`prediction_check` (what ``mfd eval`` prints)."""
    if not check or not check.get("n_cells"):
        return []
    out = ["", f"predicted before decoding (calibration prompts only) vs measured, {check['n_cells']} cells:"]
    for name in ("tau", "speedup"):
        e = check.get(name)
        if e:
            out.append(f"  {name}: median |error| {100 * e['median_abs_error']:.1f}%, worst "
                       f"{100 * e['worst_abs_error']:.1f}%, mean signed error {100 * e['mean_signed_error']:+.1f}%")
    rules = [(r, check.get(f"mean_regret_{r}")) for r in REGRET_RULES]
    if any(v is not None for _, v in rules):
        out.append("  budget regret (first pass's best / the rule's budget - 1, on the other passes), mean: " + ", ".join(
            f"{r.replace('_', ' ')} {100 * v:.1f}%" for r, v in rules if v is not None))
    return out
