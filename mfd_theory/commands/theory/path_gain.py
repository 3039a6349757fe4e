"""Experiment: product vs fitted mixture vs path-dependent (DARTree-style) draft trees at equal
budget, and what each is worth once drafting cost is paid.

Three ways to draft for a multi-future target (the synthetic families of :mod:`mfd_theory.synthetic`):

* **product** - DDTree's tree over the target's per-position marginals (the best single-mode
  block drafter; one drafting pass per block);
* **mixture** - MFD's tree over a K-mode mixture fitted to the exact target
  (:func:`mfd_theory.fit.fit_mixture_exact`, no sampling noise; one pass per block);
* **path** - the exact top-N tree of a path-dependent drafter that sees the last r tokens of its
  path (:class:`mfd_theory.path_trees.MemoryDrafter`: the target's own conditionals through that
  window, so its only handicap is memory), for r in ``memories``, and depth caps ``depth_caps``
  (the drafter pays one sequential step per depth, so a shallower tree can be faster).

All three drafters are idealised the same way (derived from the exact target, no training
noise), so the comparison isolates the drafter's *form*: a latent mixture of K products vs a
correction that conditions on a window of the path. Coverage (expected accepted tokens) is exact.

Cost: product and mixture trees need one drafting pass per block; a path tree of depth D needs
``1 + step_cost (D - 1)`` passes (:func:`mfd_theory.speedup.path_speedup`), ``step_cost`` the
cost of one extra depth step in block passes, swept over ``step_costs`` (1: a full drafter
forward per depth; 0.05: a light GRU-style head). Each method's speedup is the best over budgets
(and, for path trees, over memory and depth cap) under each latency profile (ASSUMED profiles
unless a measured one is given).

Cells are stored one per file under ``<out_dir>/path_gain/`` (a rerun resumes); the merged
result with a per-family summary goes to ``<out_dir>/path_gain.json``.

Result layout (no list of per-budget values inside a row; :func:`budget_rows` flattens it):

* ``cells``: one per (family, F or m, seed): its keys, ``methods`` ({method: {build_seconds}}),
  ``by_budget`` (one row per method and reported budget: ``method``, ``budget``, ``coverage``,
  ``depth``), ``coverage_curves`` and ``depth_curves`` (columnar tables: ``n``, the budgets of
  :func:`~mfd_theory.layouts.curve_grid`, then one column per method), and
  ``speed`` (per profile, one row per step cost: each method's best budget, speedup, coverage
  and depth);
* ``summary``: one row per (family, F or m): ``by_budget`` (``method``, ``budget``, mean
  ``coverage`` over the row's cells) and ``speed`` (per profile and step cost: means, wins,
  winner);
* the result's ``seed``: the list of seeds the cells ran with (each cell file records its own).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np

from mfd_theory.commands._cli import Checked, Command, opt, wrote
from mfd_theory.layouts import curve_grid
from mfd_theory.fit import fit_mixture_exact
from mfd_theory.layouts import group_label
from mfd_theory.path_trees import MemoryDrafter
from mfd_theory.results import Result, ResultStore, to_jsonable
from mfd_theory.speedup import default_profile, default_profile_names, load_latency_profile, path_speedup, speedup
from mfd_theory.synthetic import make
from mfd_theory.trees import mixture_tree, oracle_tree, path_tree, product_tree
from mfd_theory.report.theory import path_gain_summary

NAME = "path_gain"
_FAMILIES = ("two_futures", "branching", "shifted", "noisy_futures", "zipf_futures")
_MAX_F = {"shifted": 4, "two_futures": 2}  # the families' own limits on F
TIE = 0.005  # mean speedups closer than 0.5% name no winner (the profiles are assumptions anyway)


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    families: tuple[str, ...] = opt(_FAMILIES, "synthetic target families", choices=_FAMILIES)
    Fs: tuple[int, ...] = opt((2, 4, 8), "futures per target (shifted: F <= 4; two_futures: F = 2, m varies)", ge=2)
    two_futures_ms: tuple[int, ...] = opt((2, 4, 8), "disagreeing positions of the two futures", ge=1)
    seeds: tuple[int, ...] = opt((0, 1, 2), "seeds (one target per seed and cell)", ge=0)
    L: int = opt(15, "block length", ge=2)
    budgets: tuple[int, ...] = opt((16, 32, 64, 128, 256), "reported budgets N (the largest bounds every tree)", ge=1)
    Ks: tuple[int, ...] = opt((2, 4), "modes of the fitted mixture drafters (the summary's mixture: the largest)", ge=2)
    memories: tuple[int, ...] = opt((1, 2, 4, 8), "path drafter: tokens of its path it sees (r)", ge=0)
    depth_caps: tuple[int, ...] = opt((4, 8, 15), "path trees: largest depth (values >= L: no cap)", ge=1)
    temperature: float = opt(1.0, "path drafter: temperature of its conditionals", gt=0)
    smoothing: float = opt(0.0, "path drafter: weight of the uniform mixed into its conditionals", ge=0, le=1)
    fit_smoothing: float = opt(1e-4, "mixture fit: Dirichlet smoothing", ge=0)
    step_costs: tuple[float, ...] = opt((0.02, 0.05, 0.1, 0.25, 0.5, 1.0),
                                        "cost of one extra depth step of the path drafter, in block passes", ge=0)
    profiles: tuple[str, ...] = opt(("h100_qwen3-8b", "cpu_small"), "shipped latency profiles (assumed)",
                                    choices=tuple(default_profile_names()))
    profile_path: str = opt("", "a measured profile (results/verify_latency*.json), added when given "
                                "(running max applied)")

    def validate(self) -> None:
        if self.profile_path and not Path(self.profile_path).is_file():
            raise ValueError(f"--profile-path: no file at {self.profile_path}")
        # a family none of whose cells the sweep's values allow would silently drop out of the
        # result (all of them: an empty result and exit status 0)
        empty = [f for f in self.families if not any(c[0] == f for c in cells(self))]
        if empty:
            why = []
            for f in empty:
                if f == "two_futures":
                    why.append(f"two_futures varies m and needs an m <= --L ({self.L}), got --two-futures-ms "
                               f"{','.join(map(str, self.two_futures_ms))}")
                else:
                    why.append(f"{f} takes F <= {_MAX_F[f]}, got --Fs {','.join(map(str, self.Fs))}")
            raise ValueError(f"--families: no cell to run for {', '.join(empty)}: " + "; ".join(why)
                             + " (every other family takes any F >= 2)")


# fields that only choose which cells run; a stored cell stays valid when they change
_SWEEP_FIELDS = ("families", "Fs", "two_futures_ms", "seeds")


def _profiles(config: Config):
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


def run_cell(config: Config, family: str, F: int, m: int | None, seed: int) -> dict[str, Any]:
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


def cells(config: Config):
    """(family, F, m, seed) of every cell."""
    for family in config.families:
        for seed in config.seeds:
            if family == "two_futures":
                for m in config.two_futures_ms:
                    if m <= config.L:
                        yield family, 2, m, seed
            else:
                for F in config.Fs:
                    if F <= _MAX_F.get(family, F):
                        yield family, F, None, seed


def _cell_key(family, F, m, seed) -> str:
    return f"{family},F={F},m={m if m is not None else 0},seed={seed}"


#: the cells' layout; a cell stored in another (older) layout is recomputed
CELL_FORMAT = 2


def _cell_config(config: Config) -> dict[str, Any]:
    d = to_jsonable(dataclasses.asdict(config))
    return {**{k: v for k, v in d.items() if k not in _SWEEP_FIELDS}, "cell_format": CELL_FORMAT}


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


def summarize(cell_rows: list[dict], config: Config) -> list[dict[str, Any]]:
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


def run(config: Config = Config(), out_dir: str | Path = "results", progress: bool = True) -> Result:
    from tqdm import tqdm  # text bars: tqdm.auto wants ipywidgets in a notebook and warns without it

    store = ResultStore(Path(out_dir) / NAME)
    todo = list(cells(config))
    cell_cfg = _cell_config(config)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    n_new = 0
    for family, F, m, seed in tqdm(todo, desc=NAME, disable=not progress):
        key = _cell_key(family, F, m, seed)
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


CLI = Command("path-gain", __name__, Config, __doc__)


def main(argv=None) -> Result:
    return CLI.main(argv, _run)


def _run(config: Config, opts) -> Result:
    result = run(config, opts.out, progress=not opts.quiet)
    print(path_gain_summary(result))
    print(f"({result.data['seconds']:.0f} s)")
    return result


if __name__ == "__main__":
    main()
