"""Checking the two-future bound on random instances (:func:`verify_bound`, a numba kernel
over Dirichlet or integer-grid drafters), with the tightness table per m in :class:`BoundCheck`.
What the runs found: docs/chimeras.md, section 1.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from mfd_theory._kernels import chimeras as _k
from mfd_theory.chimeras.two_futures import TIE_TOL, chimera_lower_bound
from mfd_theory.validation import check_int, check_real

__all__ = ["BoundCheck", "verify_bound"]


@dataclasses.dataclass
class BoundCheck:
    """Outcome of :func:`verify_bound`.

    ``instances`` counts instances checked against the bound: all with Q(a) != Q(b), whatever
    other ties they have; those with Q(a) = Q(b) (within twice the tie tolerance) are set aside
    and counted in ``ties``. ``violations`` counts checked instances with fewer than
    2^(m-1) - 1 full-length splice chimeras when every tie is broken in the futures' favour (the
    theorem says 0). ``other_ties`` counts checked instances where some splice ties with t (ties
    the theorem shows harmless). ``by_m[m]`` holds, per m: ``bound``, ``instances``, ``min`` and
    ``max`` observed chimeras (ties broken for / against the futures), ``min_slack``
    (min - bound), ``violations``, ``ties``, ``other_ties``, and, for the set-aside instances,
    ``tie_min`` / ``tie_max`` (chimeras when every tie is broken for / against the futures) and
    ``tie_violations`` (those below the bound with ties broken for the futures).
    """

    instances: int
    violations: int
    ties: int
    by_m: dict[int, dict[str, Any]]
    seconds: float
    config: dict[str, Any]
    other_ties: int = 0

    @property
    def rate(self) -> float:
        """Instances drawn per second."""
        total = self.instances + self.ties
        return total / self.seconds if self.seconds > 0 else float("inf")

    @property
    def min_slack(self) -> dict[int, int]:
        return {m: row["min_slack"] for m, row in self.by_m.items() if row["instances"]}

    def table(self) -> list[dict[str, Any]]:
        """The tightness table: one row per m (m, bound, observed minimum, observed maximum)."""
        return [dict(m=m, **row) for m, row in sorted(self.by_m.items())]


def verify_bound(
    n_instances: int = 100_000,
    seed: int = 0,
    m_min: int = 1,
    m_max: int = 10,
    L_max: int = 12,
    V_max: int = 8,
    alpha: float = 1.0,
    near_tie_frac: float = 0.5,
    grid: int = 0,
) -> BoundCheck:
    """Check the bound on random instances; returns a :class:`BoundCheck`.

    Each instance draws m in [m_min, m_max], L in [m, max(m, L_max)], V in [2, V_max], drafter
    marginals per position from Dirichlet(alpha), and two futures differing in m random
    positions; a fraction ``near_tie_frac`` re-weights one disagreement position so the futures
    nearly tie (where the bound is tight). It then counts the full-length splices that score at
    least t = min(Q(a), Q(b)), i.e. the full-length splice chimeras of the smallest product tree
    holding both futures (:func:`min_product_tree_containing`, which the tests compare this count
    with). Only instances where the futures tie, Q(a) = Q(b), are set aside (``ties``); every
    other instance is checked with its ties broken in favour of the futures, the case the
    theorem covers.

    With ``grid > 0`` the marginals are drawn from integer weights 1..grid instead, so exact
    ties are frequent; the set-aside instances are reported with their chimera counts when ties
    are broken in favour of the futures (``tie_min``) and against them (``tie_max``).
    """
    n = check_int("n_instances", n_instances, 1)
    seed = check_int("seed", seed, 0)
    m_min = check_int("m_min", m_min, 1, 20)
    m_max = check_int("m_max", m_max, m_min, 20)
    L_max = check_int("L_max", L_max, 1)
    V_max = check_int("V_max", V_max, 2)
    grid = check_int("grid", grid, 0)
    alpha = check_real("alpha", alpha, 0, low_open=True)
    near_tie_frac = check_real("near_tie_frac", near_tie_frac, 0, 1)
    out_m = np.empty(n, dtype=np.int64)
    out_above = np.empty(n, dtype=np.int64)
    out_tied = np.empty(n, dtype=np.int64)
    out_kind = np.empty(n, dtype=np.int64)
    out_ftie = np.empty(n, dtype=np.bool_)  # the futures tie: Q(a) = Q(b)
    # compile outside the timed region so the rate measures the check, not numba
    _k._verify_kernel(1, 1, 1, 1, 2, 1.0, 0.0, 0, TIE_TOL, 0, out_m[:1], out_above[:1], out_tied[:1], out_kind[:1],
                      out_ftie[:1])
    t0 = time.perf_counter()
    _k._verify_kernel(n, m_min, m_max, L_max, V_max, float(alpha), float(near_tie_frac), grid, TIE_TOL,
                      seed, out_m, out_above, out_tied, out_kind, out_ftie)
    seconds = time.perf_counter() - t0
    by_m: dict[int, dict[str, Any]] = {}
    total_checked = total_viol = total_ties = total_other = 0
    for m in range(m_min, m_max + 1):
        sel = out_m == m
        bound = chimera_lower_bound(m)
        tied = sel & out_ftie  # Q(a) = Q(b): outside the theorem, set aside
        checked = sel & ~out_ftie  # every other instance, whatever its other ties
        low = out_above[checked]  # ties broken for the futures: only strictly-above splices
        row: dict[str, Any] = dict(
            bound=bound,
            instances=int(checked.sum()),
            min=int(low.min()) if low.size else None,
            max=int((out_above + out_tied)[checked].max()) if low.size else None,
            min_slack=int(low.min()) - bound if low.size else None,
            violations=int((low < bound).sum()),
            ties=int(tied.sum()),
            other_ties=int((checked & (out_tied > 0)).sum()),
            near_tie_instances=int((checked & (out_kind == 1)).sum()),
            min_generic=int(out_above[checked & (out_kind == 0)].min()) if (checked & (out_kind == 0)).any() else None,
        )
        if tied.any():
            row["tie_min"] = int(out_above[tied].min())
            row["tie_max"] = int((out_above + out_tied)[tied].max())
            row["tie_violations"] = int((out_above[tied] < bound).sum())
        by_m[m] = row
        total_checked += row["instances"]
        total_viol += row["violations"]
        total_ties += row["ties"]
        total_other += row["other_ties"]
    config = dict(n_instances=n, seed=seed, m_min=m_min, m_max=m_max, L_max=L_max, V_max=V_max,
                  alpha=float(alpha), near_tie_frac=float(near_tie_frac), grid=grid, tie_tol=TIE_TOL)
    return BoundCheck(total_checked, total_viol, total_ties, by_m, seconds, config, total_other)
