"""Experiment: check the 2^(m-1) - 1 chimera bound on many random instances.

Three parts, all written to ``results/chimera_bound.json``:

1. ``verify``: :func:`mfd_theory.chimeras.verify_bound` on ``n_instances`` random instances with
   m in [1, m_max], instances whose futures tie (Q(a) = Q(b)) set aside, every other tie kept
   (the theorem covers them); violations must be 0. Includes the tightness
   table (m, bound, observed minimum, observed maximum) and the rate in instances per second.
2. ``ties``: the same on marginals drawn from a coarse integer grid, where exact ties are common:
   the instances with other ties must still show 0 violations, and for those with Q(a) = Q(b),
   how often a tie-break that favours the futures gets below the bound.
3. ``constructed`` and ``cross_check``: the tight and worst instances for each m, counted on
   explicit trees, and a sample of random small instances whose count from scores is compared
   with the chimeras of ``product_tree(log_q, N)`` built by the core builder.

Run: ``mfd chimera-bound`` (about 10 s with the defaults).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mfd_theory.configs.options import Checked, Command, opt, seed_opt
from mfd_theory.results import Result
from mfd_theory.runs.theory.chimera_bound import run as _sweep


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    n_instances: int = opt(1_000_000, "random instances checked against the bound", ge=1)
    n_tie_instances: int = opt(100_000, "instances on the tie-prone integer grid", ge=1)
    seed: int = seed_opt("random seed")
    m_max: int = opt(10, "largest number m of disagreement positions", ge=1, le=20)
    L_max: int = opt(12, "largest block length of the random instances (>= m-max)", ge=1)
    V_max: int = opt(8, "largest vocabulary of the random instances", ge=2)
    alpha: float = opt(1.0, "Dirichlet concentration of the random drafter marginals", gt=0)
    near_tie_frac: float = opt(0.5, "share of instances whose futures nearly tie", ge=0, le=1)
    grid: int = opt(3, "integer weights 1..grid for the tie run", ge=1)
    constructed_L: int = opt(15, "block length of the tight / worst instances", ge=1)
    constructed_V: int = opt(8, "vocabulary of the tight / worst instances", ge=2)
    n_cross_check: int = opt(300, "random small instances re-counted on explicit trees", ge=0)
    multi_F3_columns: int = opt(5, "F = 3: every pattern with up to this many disagreement positions", ge=0)
    multi_F4_columns: int = opt(3, "F = 4: every pattern with up to this many disagreement positions", ge=0)
    multi_all_distinct_F3: int = opt(6, "F = 3, every position distinct: m = 1..this", ge=0)
    multi_all_distinct_F4: int = opt(4, "F = 4, every position distinct: m = 1..this", ge=0)
    multi_trials: int = opt(500, "drafters searched per pattern", ge=1)
    multi_retry_trials: int = opt(4000, "drafters searched per retry when the search misses the lower bound", ge=1)
    multi_retries: int = opt(3, "retries per pattern", ge=0)

    def validate(self) -> None:
        if self.L_max < self.m_max:
            raise ValueError(f"--L-max: must be >= --m-max ({self.m_max}), got {self.L_max}")


def run(config: Config = Config(), out_dir: str | Path = "results", progress: bool = True) -> Result:
    """The sweep of ``config`` (its cells stored under ``out_dir``, a rerun resumes), its result
    written to ``out_dir``: :func:`mfd_theory.runs.theory.chimera_bound.run`."""
    return _sweep(config, out_dir, progress)


CLI = Command("chimera-bound", __name__, Config, __doc__)


def main(argv=None) -> Result:
    return CLI.main(argv, lambda config, opts: run(config, opts.out, progress=not opts.quiet))


if __name__ == "__main__":
    main()
