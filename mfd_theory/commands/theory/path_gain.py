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
from pathlib import Path

from mfd_theory.configs.options import budgets_opt, Checked, Command, opt
from mfd_theory.report.theory import path_gain_summary
from mfd_theory.results import Result
from mfd_theory.runs.theory.path_gain import cells, MAX_F, run as _sweep
from mfd_theory.speedup import default_profile_names


_FAMILIES = ("two_futures", "branching", "shifted", "noisy_futures", "zipf_futures")


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    families: tuple[str, ...] = opt(_FAMILIES, "synthetic target families", choices=_FAMILIES)
    Fs: tuple[int, ...] = opt((2, 4, 8), "futures per target (shifted: F <= 4; two_futures: F = 2, m varies)", ge=2)
    two_futures_ms: tuple[int, ...] = opt((2, 4, 8), "disagreeing positions of the two futures", ge=1)
    seeds: tuple[int, ...] = opt((0, 1, 2), "seeds (one target per seed and cell)", ge=0)
    L: int = opt(15, "block length", ge=2)
    budgets: tuple[int, ...] = budgets_opt((16, 32, 64, 128, 256), "reported budgets N (the largest bounds every tree)")
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
                    why.append(f"{f} takes F <= {MAX_F[f]}, got --Fs {','.join(map(str, self.Fs))}")
            raise ValueError(f"--families: no cell to run for {', '.join(empty)}: " + "; ".join(why)
                             + " (every other family takes any F >= 2)")


def run(config: Config = Config(), out_dir: str | Path = "results", progress: bool = True) -> Result:
    """The sweep of ``config`` (its cells stored under ``out_dir``, a rerun resumes), its result
    written to ``out_dir``: :func:`mfd_theory.runs.theory.path_gain.run`."""
    return _sweep(config, out_dir, progress)


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
