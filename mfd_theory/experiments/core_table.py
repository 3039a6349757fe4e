"""The main job's first table: coverage and dead-node share of chain, product, mixture and oracle
trees on a multi-future synthetic target, plus coverage against budget.

The target has F futures over L = 15 positions that agree at some positions and disagree at the
others (the situation of a sentence with several valid continuations), each future a peaked
product (``noise`` spread uniformly, the rest on the future's token). The product drafter is the
target's per-position marginals (the best any single-mode drafter can do), the chain is its greedy
path (DFlash), the mixture drafter has the target's own modes ("exact modes", so its tree is the
oracle's) and the oracle ranks by the target itself.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from ..coverage import chimera_mask, coverage, splice_mask
from ..distributions import MixtureOfProducts
from ..results import Result
from ..trees import chain_tree, mixture_tree, oracle_tree, product_tree
from ._config import add_dataclass_args, config_from_args


@dataclasses.dataclass(frozen=True)
class CoreTableConfig:
    L: int = 15
    V: int = 1000
    n_futures: int = 3
    weights: tuple[float, ...] = (0.5, 0.3, 0.2)
    disagree_prob: float = 0.5
    noise: float = 0.02
    eps: float = 1e-3
    budget: int = 64
    budgets: tuple[int, ...] = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
    seed: int = 0


def make_target(cfg: CoreTableConfig) -> tuple[MixtureOfProducts, np.ndarray]:
    """F futures: a base sequence, and copies that disagree with it at random positions."""
    if len(cfg.weights) != cfg.n_futures:
        raise ValueError(f"weights: {len(cfg.weights)} weights for n_futures = {cfg.n_futures}")
    rng = np.random.default_rng(cfg.seed)
    base = rng.integers(0, cfg.V, size=cfg.L)
    seqs = [base]
    for _ in range(cfg.n_futures - 1):
        s = base.copy()
        flip = rng.random(cfg.L) < cfg.disagree_prob
        s[flip] = (s[flip] + rng.integers(1, cfg.V, size=int(flip.sum()))) % cfg.V  # a different token
        seqs.append(s)
    seqs = np.stack(seqs)  # [F, L]
    return MixtureOfProducts.futures(seqs, cfg.weights, cfg.V, noise=cfg.noise), seqs


def _tree_stats(tree, target, seqs, eps):
    dead = chimera_mask(tree, target, eps=eps)
    spl = splice_mask(tree, seqs)
    return {
        "n_nodes": len(tree),
        "coverage": coverage(tree, target),
        "dead": int(dead.sum()),
        "dead_splices": int((dead & spl).sum()),
    }


def run(cfg: CoreTableConfig = CoreTableConfig(), progress: bool = False) -> Result:
    target, seqs = make_target(cfg)
    drafter = target.marginals()
    log_m = drafter.log_q[0]  # [L, V]
    trees = {
        "chain": chain_tree(np.argmax(log_m, axis=1)),
        "product": product_tree(log_m, cfg.budget),
        "mixture": mixture_tree(target.log_pi, target.log_q, cfg.budget),
        "oracle": oracle_tree(target, cfg.budget),
    }
    rows = {name: _tree_stats(t, target, seqs, cfg.eps) for name, t in trees.items()}
    by_budget = {"product": [], "mixture": [], "oracle": []}
    dead_by_budget = {"product": [], "mixture": [], "oracle": []}
    for N in cfg.budgets:
        for name, t in (
            ("product", product_tree(log_m, N)),
            ("mixture", mixture_tree(target.log_pi, target.log_q, N)),
            ("oracle", oracle_tree(target, N)),
        ):
            s = _tree_stats(t, target, seqs, cfg.eps)
            by_budget[name].append(s["coverage"])
            dead_by_budget[name].append(s["dead"] / s["n_nodes"])
    data = {
        "futures": seqs,
        "rows": rows,
        "chain": rows["chain"],
        "budgets": list(cfg.budgets),
        "coverage_by_budget": by_budget,
        "dead_share_by_budget": dead_by_budget,
    }
    return Result(name="core_table", config=dataclasses.asdict(cfg), data=data, seed=cfg.seed)


def format_table(result: Result) -> str:
    cfg, rows = result.config, result.data["rows"]
    oracle_cov = rows["oracle"]["coverage"]
    lines = [
        f"{cfg['n_futures']}-future target, L = {cfg['L']}, V = {cfg['V']}, noise = {cfg['noise']}, "
        f"N = {cfg['budget']}; dead = P(s) <= {cfg['eps']:g}",
        "",
        "| tree | nodes | coverage (E[accepted]) | tau | of oracle | dead share | dead splices |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("chain", "product", "mixture", "oracle"):
        r = rows[name]
        lines.append(
            f"| {name} | {r['n_nodes']} | {r['coverage']:.3f} | {1 + r['coverage']:.3f} | "
            f"{r['coverage'] / oracle_cov:.1%} | {r['dead'] / r['n_nodes']:.1%} | {r['dead_splices']} |"
        )
    return "\n".join(lines)


def main(argv=None) -> Result:
    parser = argparse.ArgumentParser(prog="mfd core-table", description=__doc__.splitlines()[0])
    add_dataclass_args(parser, CoreTableConfig)
    parser.add_argument("--out", default="results/core_table.json")
    parser.add_argument("--figure", default="paper_figs/coverage_vs_budget.png")
    args = parser.parse_args(argv)
    res = run(config_from_args(CoreTableConfig, args))
    res.save(args.out)
    print(format_table(res))
    if args.figure:
        from ..figures import save_figure
        from ..figures.core import coverage_vs_budget

        print("figure:", save_figure(coverage_vs_budget(res), args.figure))
    return res
