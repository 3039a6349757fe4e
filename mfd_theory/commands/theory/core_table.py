"""The main job's first table: coverage and dead-node share of chain, product, mixture and oracle
trees on a multi-future synthetic target, plus coverage against budget.

Result data: ``rows`` (the table at ``budget``, keyed by tree), ``chain``, ``futures`` [F, L], and
``by_budget``, one row per (tree, budget N of ``budgets``): ``tree``, ``budget``, ``n_nodes``,
``coverage``, ``dead``, ``dead_splices``, ``dead_share``.

The target has F futures over L = 15 positions that agree at some positions and disagree at the
others (the situation of a sentence with several valid continuations), each future a peaked
product (``noise`` spread uniformly, the rest on the future's token). The product drafter is the
target's per-position marginals (the best any single-mode drafter can do), the chain is its greedy
path (DFlash), the mixture drafter has the target's own modes ("exact modes", so its tree is the
oracle's) and the oracle ranks by the target itself.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from mfd_theory.coverage import chimera_mask, coverage, splice_mask
from mfd_theory.distributions import MixtureOfProducts, norm_tol
from mfd_theory.results import Result
from mfd_theory.trees import chain_tree, mixture_tree, oracle_tree, product_tree
from mfd_theory.configs.options import budgets_opt, Checked, Command, figure_option, opt, save_result, seed_opt, wrote
from mfd_theory.report.theory import core_table_text


NAME = "core_table"


@dataclasses.dataclass(frozen=True)
class CoreTableConfig(Checked):
    L: int = opt(15, "block length (drafted positions)", ge=1)
    V: int = opt(1000, "vocabulary size", ge=2)
    n_futures: int = opt(3, "futures F of the target", ge=1)
    weights: tuple[float, ...] = opt((0.5, 0.3, 0.2), "weight of each future (one per future, sum 1)", gt=0)
    disagree_prob: float = opt(0.5, "chance that a future differs from the first at a position", ge=0, le=1)
    noise: float = opt(0.02, "probability spread uniformly over the vocabulary at every position", ge=0, lt=1)
    eps: float = opt(1e-3, "a node is dead when its target prefix probability is <= eps", ge=0, lt=1)
    budget: int = opt(64, "tree budget N of the table", ge=1)
    budgets: tuple[int, ...] = budgets_opt((4, 8, 16, 32, 64, 128, 256, 512, 1024), "budgets of the coverage curve")
    seed: int = seed_opt("random seed of the target")

    def validate(self) -> None:
        if len(self.weights) != self.n_futures:
            raise ValueError(f"--weights: {len(self.weights)} weights for --n-futures {self.n_futures}")
        if abs(sum(self.weights) - 1.0) > norm_tol(np.float64):  # the rule MixtureOfProducts.futures applies
            raise ValueError(f"--weights: must sum to 1, got {sum(self.weights):g}")


def make_target(cfg: CoreTableConfig) -> tuple[MixtureOfProducts, np.ndarray]:
    """F futures: a base sequence, and copies that disagree with it at random positions."""
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
    by_budget = []  # long format: one row per (tree, budget)
    for N in cfg.budgets:
        for name, t in (
            ("product", product_tree(log_m, N)),
            ("mixture", mixture_tree(target.log_pi, target.log_q, N)),
            ("oracle", oracle_tree(target, N)),
        ):
            s = _tree_stats(t, target, seqs, cfg.eps)
            by_budget.append({"tree": name, "budget": int(N), **s, "dead_share": s["dead"] / s["n_nodes"]})
    data = {
        "futures": seqs,
        "rows": rows,
        "chain": rows["chain"],
        "by_budget": by_budget,
    }
    return Result(name="core_table", config=dataclasses.asdict(cfg), data=data, seed=cfg.seed)


CLI = Command("core-table", __name__, CoreTableConfig, __doc__, extras=(figure_option(
    "also draw coverage and dead share against N into this file, a .png, .pdf or .svg"),))


def main(argv=None) -> Result:
    return CLI.main(argv, _run)


def _run(cfg: CoreTableConfig, opts) -> Result:
    res = run(cfg)
    print(core_table_text(res))
    save_result(res, Path(opts.out) / f"{NAME}.json")
    if opts.figure:
        from mfd_theory.figures import save_figure
        from mfd_theory.figures.core import coverage_vs_budget

        existed = Path(opts.figure).exists()
        wrote(save_figure(coverage_vs_budget(res), opts.figure), existed)
    return res
