"""Experiment: how much of a product-ranked tree do chimeras take, family by family?

For every synthetic family (:mod:`mfd_theory.synthetic`) on a grid of F, m, branch point and
noise, with L = 15, the product drafter is the target's per-position marginals (the best product
approximation, min KL(P || Q)); the experiment builds its product tree and, for comparison, the
mixture tree with the target's exact modes and the oracle tree, at N = 16..1024 nodes, and
records per budget:

* ``chimeras``: nodes that splice the futures but are a prefix of none of them (the paper's
  count; for exact futures these are exactly the nodes with P(s) = 0);
* ``eps_chimeras``: nodes with P(s) <= eps (eps = 0 for exact futures, ``eps`` otherwise);
* ``splices``: nodes whose every token agrees with some future at that position;
* ``nodes``: nodes actually in the tree (a drafter with exact zeros has fewer positive-score
  prefixes than large budgets ask for; zero-score nodes are not counted);
* ``cov_product``, ``cov_mixture``, ``cov_oracle``: expected accepted tokens C(T).

Raw counts per seed are stored (one ResultStore cell per setting, so the sweep resumes: its
``per_seed`` rows, one per seed and budget, and each seed's [F, F] ``disagreements``) and the
summary ``results/chimera_share.json`` holds the per-setting means: ``settings``, one row per
setting (``family``, ``kwargs``, ``share_at_64``, ``in_paper_range``) whose ``by_budget`` holds one
row per budget (``budget``, ``nodes``, ``chimera_share`` and its ``chimera_share_std`` over seeds,
``eps_chimera_share``, ``splice_share``, ``chimera_mass``, ``cov_product``, ``cov_mixture``,
``cov_oracle``): long format, no per-budget list inside a row (:func:`mfd_theory.layouts.widen_setting` gives the
lists back, as the figures draw them). Best-first builders emit nodes in score order, so the
first N nodes of the N = 1024 tree are the top-N tree for every N.

Run: ``mfd chimera-share`` (about 30 s with the defaults).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mfd_theory.configs.options import budgets_opt, Checked, Command, opt, seed_opt
from mfd_theory.results import Result
from mfd_theory.runs.theory.chimera_share import run as _sweep


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    L: int = opt(15, "block length", ge=1)
    V: int = opt(32, "vocabulary size", ge=2)
    budgets: tuple[int, ...] = budgets_opt((16, 32, 64, 128, 256, 512, 1024), "tree budgets N")
    n_seeds: int = opt(8, "seeds per setting", ge=1)
    seed: int = seed_opt("first seed")
    eps: float = opt(1e-6, "P(s) <= eps marks a chimera of a noisy target (exact targets: P(s) == 0)", ge=0, lt=1)
    two_futures_m: tuple[int, ...] = opt((1, 2, 4, 8, 15), "two_futures: disagreement counts m", ge=1)
    F_values: tuple[int, ...] = opt((2, 3, 4), "branching / shifted: numbers of futures F", ge=2)
    branch_points: tuple[int, ...] = opt((0, 3, 7), "branching / shifted: position where the futures part", ge=0)
    noisy_F: tuple[int, ...] = opt((2, 3), "noisy_futures: numbers of futures F", ge=2)
    temperatures: tuple[float, ...] = opt((0.25, 0.5, 0.75, 0.85, 1.0), "noisy_futures: temperatures", gt=0)
    zipf_F: tuple[int, ...] = opt((2, 3), "zipf_futures: numbers of futures F", ge=2)
    zipf_profiles: tuple[str, ...] = opt(("medusa", "dflash"), "zipf_futures: confidence profiles",
                                         choices=("medusa", "dflash"))
    zipf_V: int = opt(64, "zipf_futures: vocabulary size", ge=2)
    noise_levels: tuple[float, ...] = opt((0.1, 0.2, 0.3), "uniform noise on one setting per exact family",
                                          ge=0, lt=1, empty=True)

    def validate(self) -> None:
        if any(b >= self.L for b in self.branch_points):
            raise ValueError(f"--branch-points: must be < --L ({self.L}), got {self.branch_points}")


def run(config: Config = Config(), out_dir: str | Path = "results", progress: bool = True) -> Result:
    """The sweep of ``config`` (its cells stored under ``out_dir``, a rerun resumes), its result
    written to ``out_dir``: :func:`mfd_theory.runs.theory.chimera_share.run`."""
    return _sweep(config, out_dir, progress)


CLI = Command("chimera-share", __name__, Config, __doc__)


def main(argv=None) -> Result:
    return CLI.main(argv, lambda config, opts: run(config, opts.out, progress=not opts.quiet))


if __name__ == "__main__":
    main()
