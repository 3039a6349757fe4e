"""The work of ``mfd chimera-share`` (its config and command: :mod:`mfd_theory.commands.theory.chimera_share`, whose
page says what it computes): the cells, their store and the summaries."""

from __future__ import annotations

import dataclasses
from pathlib import Path
import time
from typing import Any

import numpy as np

from mfd_theory import synthetic as syn
from mfd_theory.chimeras import on_sequence_paths
from mfd_theory.coverage import splice_mask
from mfd_theory.layouts import setting_at_budget
from mfd_theory.results import wrote, Result, ResultStore
from mfd_theory.trees import mixture_tree, oracle_tree, product_tree


NAME = "chimera_share"


PAPER_RANGE = (0.27, 0.33)  # chimeras in a 64-node product tree, as the paper reports


def settings(config) -> list[tuple[str, dict[str, Any]]]:
    """The (family, keyword arguments) grid of the sweep."""
    L, V = config.L, config.V
    out: list[tuple[str, dict[str, Any]]] = []
    out += [("two_futures", dict(m=m, L=L, V=V)) for m in config.two_futures_m if m <= L]
    out += [("branching", dict(F=F, L=L, V=V, branch_at=b)) for F in config.F_values for b in config.branch_points]
    out += [("shifted", dict(F=F, L=L, V=V, shift_at=b)) for F in config.F_values if F <= 4
            for b in config.branch_points]
    out += [("noisy_futures", dict(F=F, L=L, V=V, temperature=t)) for F in config.noisy_F
            for t in config.temperatures]
    out += [("zipf_futures", dict(F=F, L=L, V=config.zipf_V, branch_at=b, accuracies=prof))
            for prof in config.zipf_profiles for F in config.zipf_F for b in config.branch_points[:2]]
    for noise in config.noise_levels:
        out += [("two_futures", dict(m=4, L=L, V=V, noise=noise)),
                ("branching", dict(F=3, L=L, V=V, branch_at=3, noise=noise)),
                ("shifted", dict(F=2, L=L, V=V, shift_at=3, noise=noise))]
    return out


def setting_key(family: str, kwargs: dict[str, Any]) -> str:
    return family + "," + ",".join(f"{k}={v}" for k, v in sorted(kwargs.items()))


def measure(st: syn.SyntheticTarget, budgets: tuple[int, ...], eps: float) -> dict[str, list[float]]:
    """Per-budget chimera, splice and coverage numbers for one target (see the module doc)."""
    target = st.target
    n_max = max(budgets)
    log_m = target.marginals().log_q[0]  # [L, V] the product drafter
    prod = product_tree(log_m, n_max)
    finite = np.isfinite(prod.log_score)  # zero-score nodes are budget no drafter would spend
    lp = target.node_log_probs(prod)  # [N]
    on_future = on_sequence_paths(prod.parent, prod.token, prod.depth, st.futures).any(axis=0)
    spl = splice_mask(prod, st.futures)
    chim = spl & ~on_future
    eps_chim = (lp == -np.inf) if st.exact else (lp <= np.log(eps))
    mix = mixture_tree(target.log_pi, target.log_q, n_max)
    orc = oracle_tree(target, n_max)
    p_prod = np.exp(lp)
    p_mix = np.exp(target.node_log_probs(mix))
    p_orc = np.exp(target.node_log_probs(orc))
    out: dict[str, list[float]] = {k: [] for k in ("nodes", "chimeras", "eps_chimeras", "splices",
                                                   "chimera_mass", "cov_product", "cov_mixture", "cov_oracle")}
    for N in budgets:
        sel = slice(0, N)
        f = finite[sel]
        out["nodes"].append(int(f.sum()))
        out["chimeras"].append(int((chim[sel] & f).sum()))
        out["eps_chimeras"].append(int((eps_chim[sel] & f).sum()))
        out["splices"].append(int((spl[sel] & f).sum()))
        out["chimera_mass"].append(float(p_prod[sel][chim[sel] & f].sum()))
        out["cov_product"].append(float(p_prod[sel][f].sum()))
        out["cov_mixture"].append(float(p_mix[sel].sum()))
        out["cov_oracle"].append(float(p_orc[sel].sum()))
    return out


def run_setting(family: str, kwargs: dict[str, Any], config) -> Result:
    per_seed, disagreements = [], []
    for s in range(config.n_seeds):
        st = syn.make(family, seed=config.seed + s, **kwargs)
        m = measure(st, config.budgets, config.eps)
        per_seed += [dict(seed=config.seed + s, budget=int(b), **{k: v[i] for k, v in m.items()})
                     for i, b in enumerate(config.budgets)]
        disagreements.append(st.disagreements().tolist())
    return Result(NAME + "_cell", dict(family=family, kwargs=kwargs, budgets=list(config.budgets),
                                       eps=config.eps, n_seeds=config.n_seeds),
                  dict(per_seed=per_seed, disagreements=disagreements),
                  seed=list(range(config.seed, config.seed + config.n_seeds)))


def summarize(cell: Result) -> dict[str, Any]:
    """Means over seeds: shares of the tree's nodes and coverages, one ``by_budget`` row per budget."""
    rows = cell.data["per_seed"]
    budgets = list(cell.config["budgets"])
    seeds = list(dict.fromkeys(r["seed"] for r in rows))

    def arr(key):  # [seeds, budgets]
        at = {(r["seed"], r["budget"]): r[key] for r in rows}
        return np.array([[at[(s, b)] for b in budgets] for s in seeds], dtype=np.float64)

    nodes = np.maximum(arr("nodes"), 1)
    means = dict(
        nodes=arr("nodes").mean(0),
        chimera_share=(arr("chimeras") / nodes).mean(0),
        chimera_share_std=(arr("chimeras") / nodes).std(0),
        eps_chimera_share=(arr("eps_chimeras") / nodes).mean(0),
        splice_share=(arr("splices") / nodes).mean(0),
        chimera_mass=arr("chimera_mass").mean(0),
        cov_product=arr("cov_product").mean(0),
        cov_mixture=arr("cov_mixture").mean(0),
        cov_oracle=arr("cov_oracle").mean(0),
    )
    return dict(family=cell.config["family"], kwargs=cell.config["kwargs"],
                by_budget=[dict(budget=int(b), **{k: float(v[i]) for k, v in means.items()})
                           for i, b in enumerate(budgets)])


def run(config, out_dir: str | Path = "results", progress: bool = True) -> Result:
    t0 = time.perf_counter()
    store = ResultStore(Path(out_dir) / NAME)
    grid = settings(config)
    # f2: the cells' long layout (cells of the older layout are not reused)
    fingerprint = f"n{config.n_seeds},s{config.seed},L{config.L},V{config.V},e{config.eps:g},f2"
    it = grid
    if progress:
        from tqdm import tqdm

        it = tqdm(grid, desc="chimera share", leave=False)
    summary = []
    n_new = 0
    for family, kwargs in it:
        key = setting_key(family, kwargs) + "," + fingerprint + ",N" + "+".join(map(str, config.budgets))
        n_new += not store.has(key)
        cell = store.get_or_compute(key, lambda: run_setting(family, kwargs, config))
        summary.append(summarize(cell))
    at = 64 if 64 in config.budgets else None
    in_paper_range = []
    if at is not None:
        for row in summary:
            share = setting_at_budget(row, at, "chimera_share")
            row["share_at_64"] = share
            row["in_paper_range"] = bool(PAPER_RANGE[0] <= share <= PAPER_RANGE[1])
            in_paper_range.append(row["in_paper_range"])
    data = dict(settings=summary, paper_range=list(PAPER_RANGE), seconds=time.perf_counter() - t0)
    res = Result(NAME, dataclasses.asdict(config), data, seed=list(range(config.seed, config.seed + config.n_seeds)))
    path = Path(out_dir) / f"{NAME}.json"
    existed = path.exists()
    res.save(path)
    print(f"{len(summary)} settings x {config.n_seeds} seeds in {data['seconds']:.1f} s")
    print(f"wrote {n_new} cell files under {store.directory}/ ({len(summary) - n_new} reused)")
    wrote(path, existed)
    if progress:
        if at is not None:
            print("chimera share of a 64-node product tree (paper: 27-33%):")
            for row in summary:
                kw = ",".join(f"{k}={v}" for k, v in row["kwargs"].items() if k not in ("L", "V"))
                mark = "  <- in the paper's range" if row["in_paper_range"] else ""
                print(f"  {row['family']:14s} {kw:28s} {100 * row['share_at_64']:5.1f}%"
                      f"  cov product {setting_at_budget(row, at, 'cov_product'):5.2f} mixture "
                      f"{setting_at_budget(row, at, 'cov_mixture'):5.2f} oracle {setting_at_budget(row, at, 'cov_oracle'):5.2f}{mark}")
    return res
