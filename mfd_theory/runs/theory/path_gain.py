"""The work of ``mfd path-gain`` (its config and command: :mod:`mfd_theory.commands.theory.path_gain`, whose
page says what it computes): the cells, their store and the summaries."""

from __future__ import annotations

import dataclasses
from pathlib import Path
import time
from typing import Any

import numpy as np

from mfd_theory.fit import fit_mixture_exact
from mfd_theory.layouts import curve_grid, group_label
from mfd_theory.path_trees import MemoryDrafter
from mfd_theory.results import wrote, Result, ResultStore
from mfd_theory.speedup import default_profile, load_latency_profile, path_speedup, speedup
from mfd_theory.synthetic import make
from mfd_theory.runs.theory import cell_config, cell_key
from mfd_theory.trees import mixture_tree, oracle_tree, path_tree, product_tree


NAME = "path_gain"


MAX_F = {"shifted": 4, "two_futures": 2}  # the families' own limits on F


TIE = 0.005  # mean speedups closer than 0.5% name no winner (the profiles are assumptions anyway)


# fields that only choose which cells run; a stored cell stays valid when they change
_SWEEP_FIELDS = ("families", "Fs", "two_futures_ms", "seeds")


def _profiles(config):
    profs = [default_profile(name) for name in config.profiles]
    if config.profile_path:
        profs.append(load_latency_profile(config.profile_path, make_monotone=True))  # timing noise
    return profs


def make_target(family: str, F: int, m: int | None, seed: int, L: int):
    if family == "two_futures":
        return make(family, seed=seed, L=L, m=min(m if m is not None else 4, L))
    return make(family, seed=seed, L=L, F=F)


def _curve(tree, target, max_n: int) -> np.ndarray:
    """[max_n + 1]: C(T_n), n = 0..max_n (T_n: the first n nodes; held flat once the tree ends)."""
    c = np.concatenate([[0.0], np.cumsum(np.exp(target.node_log_probs(tree)))])
    return np.concatenate([c, np.full(max_n + 1 - c.shape[0], c[-1])])


def _depths(tree, max_n: int) -> np.ndarray:
    """[max_n + 1]: depth of T_n (entry 0 is 1, a placeholder never used as a budget)."""
    d = np.concatenate([[1], np.maximum.accumulate(tree.depth)])
    return np.concatenate([d, np.full(max_n + 1 - d.shape[0], d[-1])]).astype(np.float64)


def _best(s: np.ndarray) -> tuple[int, float]:
    """(budget, speedup) at the best budget of a curve over n = 1..max_n (index 0 unused)."""
    i = int(np.argmax(s[1:])) + 1
    return i, float(s[i])


def run_cell(config, family: str, F: int, m: int | None, seed: int) -> dict[str, Any]:
    t = make_target(family, F, m, seed, config.L)
    target = t.target
    max_n = max(config.budgets)
    bidx = np.asarray(config.budgets)
    grid = curve_grid(max_n)
    n_all = np.arange(max_n + 1)
    profiles = _profiles(config)
    curves: dict[str, np.ndarray] = {}
    depths: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}

    def timed(name, build):
        t0 = time.perf_counter()
        tree = build()
        seconds[name] = time.perf_counter() - t0
        curves[name] = _curve(tree, target, max_n)
        depths[name] = _depths(tree, max_n)

    timed("oracle", lambda: oracle_tree(target, max_n))
    timed("product", lambda: product_tree(target.marginals(), max_n))
    for K in config.Ks:
        model = fit_mixture_exact(target, K, seed=seed, smoothing=config.fit_smoothing)
        timed(f"mixture K={K}", lambda: mixture_tree(model.log_pi, model.log_q, max_n))
    caps = sorted({min(c, config.L) for c in config.depth_caps})
    for r in config.memories:
        drafter = MemoryDrafter(target, r, temperature=config.temperature, smoothing=config.smoothing)
        for D in caps:
            timed(f"path r={r} D={D}", lambda: path_tree(drafter, max_n, max_depth=D))

    out: dict[str, Any] = dict(
        family=family, F=t.F, m=m, seed=seed, L=config.L, V=t.V, params=t.params,
        methods={name: dict(build_seconds=seconds[name]) for name in curves},
        by_budget=[dict(method=name, budget=int(n), coverage=float(curves[name][n]), depth=int(depths[name][n]))
                   for name in curves for n in bidx],
        coverage_curves={"n": grid.tolist(), **{name: curves[name][grid].tolist() for name in curves}},
        depth_curves={"n": grid.tolist(), **{name: depths[name][grid].tolist() for name in curves}},
        speed={},
    )
    # best speedup per method: block drafters pay one pass whatever the depth; path trees pay per depth
    for p in profiles:
        per_cost = []
        for c in config.step_costs:
            row: dict[str, Any] = dict(step_cost=float(c))
            for name, cov in curves.items():
                if name.startswith("path"):
                    s = path_speedup(cov, np.maximum(n_all, 1), depths[name], p, step_cost=c)
                else:
                    s = speedup(cov, np.maximum(n_all, 1), p)
                n, v = _best(np.asarray(s))
                row[name] = dict(budget=n, speedup=v, coverage=float(cov[n]), depth=int(depths[name][n]))
            per_cost.append(row)
        out["speed"][p.name] = per_cost
    return out


def cells(config):
    """(family, F, m, seed) of every cell."""
    for family in config.families:
        for seed in config.seeds:
            if family == "two_futures":
                for m in config.two_futures_ms:
                    if m <= config.L:
                        yield family, 2, m, seed
            else:
                for F in config.Fs:
                    if F <= MAX_F.get(family, F):
                        yield family, F, None, seed


#: the cells' layout; a cell stored in another (older) layout is recomputed
CELL_FORMAT = 2


def per_budget(rows: list[dict], method: str, key: str = "coverage") -> list:
    """``key`` of one method over the budgets, in the order the long ``by_budget`` rows hold them."""
    return [r[key] for r in rows if r["method"] == method]


def budget_rows(result) -> list[dict]:
    """Every cell's ``by_budget`` rows with the cell's keys (family, F, m, seed): one flat table,
    ``pandas.DataFrame(budget_rows(result))``."""
    data = result.data if hasattr(result, "data") else result["data"]
    return [dict(family=c["family"], F=c["F"], m=c["m"], seed=c["seed"], **r)
            for c in data["cells"] for r in c["by_budget"]]


def _best_path(row: dict, memory: int | None = None) -> tuple[str, dict]:
    """The path-tree entry (over memories and depth caps, or one memory's caps) with the best speedup."""
    names = [k for k in row if k.startswith("path") and (memory is None or k.startswith(f"path r={memory} "))]
    name = max(names, key=lambda k: row[k]["speedup"])
    return name, row[name]


def summarize(cell_rows: list[dict], config) -> list[dict[str, Any]]:
    """Per family and F (two_futures: per m): mean coverage per method at every budget, and per
    profile and step cost the mean best speedup of product, mixture and the best path tree, with
    the winner (by mean speedup) and how many cells each method wins."""
    profiles = [p.name for p in _profiles(config)]
    K = max(config.Ks)
    out = []
    for family in config.families:
        rows = [c for c in cell_rows if c["family"] == family]
        for label in dict.fromkeys(group_label(c) for c in rows):
            sel = [c for c in rows if group_label(c) == label]
            names = list(sel[0]["methods"])
            mean_cov = {n: np.mean([per_budget(c["by_budget"], n) for c in sel], axis=0) for n in names}
            entry: dict[str, Any] = dict(
                family=family, group=label, n_cells=len(sel), K=K,
                by_budget=[dict(method=n, budget=int(b), coverage=float(mean_cov[n][i]))
                           for n in names for i, b in enumerate(config.budgets)],
                speed={},
            )
            for pn in profiles:
                per_cost = []
                for j, c in enumerate(config.step_costs):
                    prod = [cell["speed"][pn][j]["product"] for cell in sel]
                    mix = [cell["speed"][pn][j][f"mixture K={K}"] for cell in sel]
                    path = [_best_path(cell["speed"][pn][j]) for cell in sel]
                    means = dict(product=float(np.mean([x["speedup"] for x in prod])),
                                 mixture=float(np.mean([x["speedup"] for x in mix])),
                                 path=float(np.mean([x[1]["speedup"] for x in path])))
                    wins = {k: 0 for k in means}
                    for a, b, (_, pth) in zip(prod, mix, path):
                        vals = dict(product=a["speedup"], mixture=b["speedup"], path=pth["speedup"])
                        wins[max(vals, key=vals.get)] += 1
                    ranked = sorted(means, key=means.get, reverse=True)
                    margin = means[ranked[0]] / means[ranked[1]] - 1  # over the runner-up
                    per_cost.append(dict(
                        step_cost=float(c), speedup=means, wins=wins, margin=margin,
                        winner=ranked[0] if margin >= TIE else f"tie ({ranked[0]}, {ranked[1]})",
                        path_choice=[dict(name=n, budget=x["budget"], depth=x["depth"]) for n, x in path],
                        path_depth_mean=float(np.mean([x[1]["depth"] for x in path])),
                    ))
                entry["speed"][pn] = per_cost
            out.append(entry)
    return out


def run(config, out_dir: str | Path = "results", progress: bool = True) -> Result:
    from tqdm import tqdm  # text bars: tqdm.auto wants ipywidgets in a notebook and warns without it

    store = ResultStore(Path(out_dir) / NAME)
    todo = list(cells(config))
    cell_cfg = cell_config(config, _SWEEP_FIELDS, CELL_FORMAT)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    n_new = 0
    for family, F, m, seed in tqdm(todo, desc=NAME, disable=not progress):
        key = cell_key(family, F, m, seed)
        n_new += not store.has(key)

        def compute():
            return Result(f"{NAME}/{key}", cell_cfg, run_cell(config, family, F, m, seed), seed=seed)

        res = store.get_or_compute(key, compute)
        if res.config != cell_cfg:  # a cell stored under different settings is recomputed
            res = compute()
            store.save(key, res)
            n_new += 1
        rows.append(res.data)
    data = dict(cells=rows, summary=summarize(rows, config), seconds=time.perf_counter() - t0,
                profiles={p.name: p.to_dict() for p in _profiles(config)})
    result = Result(NAME, dataclasses.asdict(config), data, seed=sorted({seed for _, _, _, seed in todo}))
    print(f"wrote {n_new} cell files under {store.directory}/ ({len(todo) - n_new} reused)")
    path = Path(out_dir) / f"{NAME}.json"
    existed = path.exists()
    wrote(result.save(path), existed)
    return result
