"""Experiment: the best-mode tree (the released MFD drafters' ranking, max_k log Q_k) against the
mixture tree (sum_k pi_k Q_k) and the product tree, and the best-mode builder against enumeration.

Two parts:

1. **Enumeration check.** ``n_instances`` random small drafters (K <= ``max_K``, L <= ``max_L``,
   V <= ``max_V``, N <= ``max_budget``), a quarter each with integer weights (exact ties and
   zeros), continuous weights, continuous weights with zeroed entries, and candidate lists (a
   random subset of tokens per mode and position, integer weights, handed over as
   ``token_ids``): :func:`mfd_theory.trees.best_mode_tree` must equal, node for node and score
   for score, every prefix scored and sorted by the tie rule (:func:`mfd_theory.trees.enumerated_best_mode`).
2. **Scorer table.** On every synthetic family (:mod:`mfd_theory.synthetic`), with L = 15, per
   setting and seed: the product tree over the target's marginals, and the mixture and best-mode
   trees of three drafters: ``own`` (the target's own modes and weights, K = F, so the mixture
   tree is the oracle tree) and ``fit K=k`` for k in ``Ks`` (fitted to the exact target by soft
   EM, :func:`mfd_theory.fit.fit_mixture_exact`). At each budget: coverage under the target
   (expected accepted tokens), chimera share (nodes of finite drafter score that splice the
   futures but are a prefix of none, over those nodes), and coverage under the drafter's own
   mixture, where the mixture tree is optimal and the best-mode tree covers at least pi_min of
   it (proven; docs/chimeras.md, "Best-mode trees"): the sweep counts violations of both.

Cells are stored one per file under ``<out_dir>/best_mode/`` (a rerun resumes); the merged result
goes to ``<out_dir>/best_mode.json``: ``check`` (the enumeration check's counts), ``rows`` (one
per cell, drafter and budget: scalars only), ``table`` (per family, drafter and budget: means
over the family's cells and the counts of cells where best-mode covers more / less target mass
than the mixture) and ``theorems`` (violation counts and the smallest ratio seen).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mfd_theory.configs.options import budgets_opt, Checked, Command, opt, seed_opt
from mfd_theory.results import Result
from mfd_theory.runs.theory.best_mode import run as _sweep


_FAMILIES = ("two_futures", "branching", "shifted", "noisy_futures", "zipf_futures")


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    n_instances: int = opt(10_000, "random small drafters checked against enumeration", ge=0)
    max_K: int = opt(3, "enumeration check: most modes", ge=1, le=6)
    max_L: int = opt(4, "enumeration check: longest block", ge=1, le=5)
    max_V: int = opt(5, "enumeration check: largest vocabulary", ge=1, le=6)
    max_budget: int = opt(48, "enumeration check: largest budget N", ge=1)
    families: tuple[str, ...] = opt(_FAMILIES, "synthetic target families of the scorer table", choices=_FAMILIES)
    two_futures_ms: tuple[int, ...] = opt((2, 4, 8), "two_futures: disagreeing positions m", ge=1)
    Fs: tuple[int, ...] = opt((2, 3, 4), "the other families: numbers of futures F (shifted: F <= 4)", ge=2)
    branch_at: int = opt(3, "branching, shifted and zipf_futures: position where the futures part", ge=0)
    temperature: float = opt(0.75, "noisy_futures: temperature of each future", gt=0)
    zipf_profile: str = opt("dflash", "zipf_futures: confidence profile", choices=("medusa", "dflash"))
    L: int = opt(15, "block length of the scorer table", ge=2)
    V: int = opt(32, "vocabulary size (zipf_futures: twice this)", ge=2)
    budgets: tuple[int, ...] = budgets_opt((16, 64, 256), "budgets N of the table")
    Ks: tuple[int, ...] = opt((2, 4), "modes of the fitted drafters", ge=2)
    seeds: tuple[int, ...] = opt((0, 1, 2, 3), "seeds (one target per seed and setting)", ge=0)
    seed: int = seed_opt("seed of the enumeration check's instances")

    def validate(self) -> None:
        if self.branch_at >= self.L:
            raise ValueError(f"--branch-at: must be < --L ({self.L}), got {self.branch_at}")
        if "two_futures" in self.families and not any(m <= self.L for m in self.two_futures_ms):
            raise ValueError(f"--two-futures-ms: two_futures needs an m <= --L ({self.L}), got "
                             f"{','.join(map(str, self.two_futures_ms))}")
        if "shifted" in self.families and min(self.Fs) > 4:
            raise ValueError(f"--Fs: shifted takes F <= 4, got {','.join(map(str, self.Fs))}")


def run(config: Config = Config(), out_dir: str | Path = "results", progress: bool = True) -> Result:
    """The sweep of ``config`` (its cells stored under ``out_dir``, a rerun resumes), its result
    written to ``out_dir``: :func:`mfd_theory.runs.theory.best_mode.run`."""
    return _sweep(config, out_dir, progress)


CLI = Command("best-mode", __name__, Config, __doc__)


def main(argv=None) -> Result:
    return CLI.main(argv, lambda config, opts: run(config, opts.out, progress=not opts.quiet))


if __name__ == "__main__":
    main()
