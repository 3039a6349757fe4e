"""Experiment: how much of the oracle's coverage a fitted K-mode mixture drafter recovers, and
what that is worth in predicted speed, on the synthetic target families.

For every family (two futures with m disagreements, branching, shifted, noisy, Zipf background),
number of futures F (F = 1: the family's first future alone, a product target) and seed:

1. draw ``n_samples`` blocks from the target and fit drafters by EM (:func:`mfd_theory.fit.
   fit_mixture`): K = 1 (the marginals: the best product drafter a cross-entropy-trained
   single-mode network converges to) and K in ``Ks`` (soft EM and the winner-take-all variant);
   also, with no sampling noise, :func:`~mfd_theory.fit.fit_mixture_exact` for the same K;
2. build each drafter's best-first tree (``product_tree`` for K = 1, ``mixture_tree`` otherwise)
   and the oracle tree at the largest budget; best-first emission makes the first N nodes the
   N-node tree, so one tree gives the whole coverage curve C(T_N), N = 1..max budget;
3. record coverage, the fraction of the oracle's coverage, the chimera share (nodes that splice
   the futures' tokens but are no prefix of any single future), and the predicted speedup under
   each latency profile (:mod:`mfd_theory.speedup`): best fixed budget, and the per-step choice
   (the drafter's own Q as the predicted gain of each node, as CaDDTree does).

A Sequoia baseline per cell: the product drafter's positional acceptance vector (chance the
r-th ranked token of a position's marginal is the target's, averaged over positions) fed to
:func:`mfd_theory.speedup.sequoia_choice`.

Cells are stored one per file under ``<out_dir>/mixture_gain/`` (a rerun resumes); the merged
result with a per-family summary goes to ``<out_dir>/mixture_gain.json``.

Result layout (long format: no list of per-budget values inside a row; :func:`budget_rows`
flattens every cell into one table):

* ``cells`` (and ``confidence_cells``): one per (family, F, m, seed[, confidence]): its keys,
  ``oracle`` ({n_nodes, best}), ``drafters`` (one row per fitted drafter: ``K``, ``assignment``,
  ``source``, fit time, log-likelihood, best fixed budget and per-step budget per profile),
  ``by_budget`` (one row per drafter and reported budget: the drafter's keys, ``budget``,
  ``coverage``, ``oracle_coverage``, ``frac_oracle``, ``chimera_share``), ``speedup_at`` (one row
  per drafter, profile and budget), ``coverage_curves`` (a columnar table: ``n`` on
  :func:`mfd_theory.layouts.curve_grid`, ``oracle``, then one column per drafter, named by :func:`mfd_theory.layouts.drafter_key`),
  ``sampling_repeats`` (F = 1 cells: one row per drafter, repeat and budget) and ``sequoia``;
* ``summary`` / ``confidence_summary``: per family (and F = 1 or not) / per confidence: scalars
  and, in ``by_budget``, one row per budget (and drafter);
* the result's ``seed``: the list of seeds the cells ran with (each cell file records its own;
  a cell's fits, samples and repeats derive their streams from it).

:func:`mfd_theory.layouts.widen_cell` turns a stored cell back into per-drafter arrays over the budgets (what the
summaries and figures compute with).

Run: ``mfd mixture-gain`` (about 3 minutes on 2 cores with the defaults).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mfd_theory.configs.options import budgets_opt, Checked, Command, opt
from mfd_theory.layouts import HEADLINE_K
from mfd_theory.report.theory import mixture_gain_summary
from mfd_theory.results import Result
from mfd_theory.runs.theory.mixture_gain import run as _sweep
from mfd_theory.speedup import default_profile_names


_FAMILIES = ("two_futures", "branching", "shifted", "noisy_futures", "zipf_futures")


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    families: tuple[str, ...] = opt(_FAMILIES, "synthetic target families", choices=_FAMILIES)
    Fs: tuple[int, ...] = opt((1, 2, 3, 4), "futures per target (two_futures: F in {1, 2}, m varies)", ge=1)
    two_futures_ms: tuple[int, ...] = opt((2, 4, 8), "disagreeing positions of the two futures", ge=1)
    Ks: tuple[int, ...] = opt((1, 2, 4, 8), f"drafter modes; must include 1 (the product drafter) and one K > 1 "
                              f"(the summary's mixture: {HEADLINE_K} when present, else the largest)", ge=1)
    budgets: tuple[int, ...] = budgets_opt((16, 32, 64, 128, 256, 512, 1024), "reported budgets N")
    seeds: tuple[int, ...] = opt((0, 1, 2), "seeds (one target per seed and cell)", ge=0)
    L: int = opt(15, "block length", ge=1)
    n_samples: int = opt(10_000, "target blocks sampled to fit the drafters", ge=1)
    n_restarts: int = opt(2, "EM restarts", ge=1)
    max_iter: int = opt(100, "EM iterations at most", ge=1)
    tol: float = opt(1e-6, "EM stops when the log-likelihood gains less than this", gt=0)
    smoothing: float = opt(1e-4, "Dirichlet smoothing of the fitted per-position distributions", ge=0)
    hard: bool = opt(True, "also fit the winner-take-all variant")
    exact_fit: bool = opt(True, "also fit from the exact target (no sampling noise)")
    profiles: tuple[str, ...] = opt(("h100_qwen3-8b", "cpu_small"), "shipped latency profiles (assumed)",
                                    choices=tuple(default_profile_names()))
    profile_path: str = opt("", "a measured profile (results/verify_latency*.json), added when given "
                                "(running max applied)")
    sequoia_ranks: int = opt(8, "Sequoia baseline: ranks of the positional acceptance vector", ge=1)
    sequoia_depth: int = opt(15, "Sequoia baseline: largest tree depth", ge=1)
    # zipf_futures with a constant per-position confidence c (the target's own token gets c, a Zipf
    # background the rest): how the gain moves from Medusa-like (tau ~ 2) to DFlash-like (tau ~ 7)
    # acceptance. Fitted K = 1 and K = HEADLINE_K only, for F in confidence_Fs.
    confidences: tuple[float, ...] = opt((0.3, 0.5, 0.7, 0.85, 0.95), "zipf confidence sweep: per-position "
                                         "confidence c of each future", gt=0, lt=1, empty=True)
    confidence_Fs: tuple[int, ...] = opt((2, 3, 4), "zipf confidence sweep: numbers of futures F", ge=2)
    # F = 1 cells: refit K = 1 and K = HEADLINE_K on this many fresh sample draws, to size the
    # sampling noise the mixture's loss (if any) is compared with
    noise_repeats: int = opt(4, "F = 1 cells: refits on fresh samples that size the sampling noise", ge=0)

    def validate(self) -> None:
        if 1 not in self.Ks or max(self.Ks) < 2:
            raise ValueError(f"--Ks: must include 1 (the product drafter) and a K > 1 (the mixture), "
                             f"got {','.join(map(str, self.Ks))}")
        if self.profile_path and not Path(self.profile_path).is_file():
            raise ValueError(f"--profile-path: no file at {self.profile_path}")
        # values a family cannot make would stop the sweep half-way (after cells were written)
        if "shifted" in self.families and max(self.Fs) > 4:
            raise ValueError(f"--Fs: shifted takes F <= 4, got {','.join(map(str, self.Fs))} (drop the larger "
                             "F or shifted from --families)")
        if "two_futures" in self.families and max(self.Fs) >= 2 and max(self.two_futures_ms) > self.L:
            raise ValueError(f"--two-futures-ms: two_futures needs m <= --L ({self.L}), got "
                             f"{','.join(map(str, self.two_futures_ms))}")


def run(config: Config = Config(), out_dir: str | Path = "results", progress: bool = True) -> Result:
    """The sweep of ``config`` (its cells stored under ``out_dir``, a rerun resumes), its result
    written to ``out_dir``: :func:`mfd_theory.runs.theory.mixture_gain.run`."""
    return _sweep(config, out_dir, progress)


CLI = Command("mixture-gain", __name__, Config, __doc__)


def main(argv=None) -> Result:
    return CLI.main(argv, _run)


def _run(config: Config, opts) -> Result:
    result = run(config, opts.out, progress=not opts.quiet)
    print(mixture_gain_summary(result))
    print(f"({result.data['seconds']:.0f} s)")
    return result


if __name__ == "__main__":
    main()
