"""Checks of the latency tables shared by the profile and batch modules: milliseconds, tree sizes,
monotone tables. Each names the field (and the entry) it refuses."""

from __future__ import annotations

import math

import numpy as np

from mfd_theory.validation import check_int, check_real


def _positive_time(name: str, value) -> float:
    """Milliseconds: a finite number >= 0. NaN gets its own message: it is what an untimed term
    reads as in a measured profile."""
    if isinstance(value, float) and math.isnan(value):
        raise ValueError(f"{name}: is NaN (was it timed? write a measured value, or 0 to leave it out)")
    return check_real(name, value, 0)


def _ms_list(name: str, values, n: int | None = None) -> tuple[float, ...]:
    """A list of finite, non-negative milliseconds (``n`` entries when given); names the bad entry."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
        raise ValueError(f"{name}: expected a list of milliseconds, got {values!r}")
    out = tuple(_positive_time(f"{name}[{i}]", v) for i, v in enumerate(values))
    if n is not None and len(out) != n:
        raise ValueError(f"{name}: has {len(out)} entries but the table has {n} sizes (missing N values?)")
    return out


def _size_list(name: str, values, low: int = 1) -> tuple[int, ...]:
    """Strictly increasing integers >= ``low``."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__") or len(values) == 0:
        raise ValueError(f"{name}: expected a non-empty list of integers, got {values!r}")
    # a JSON file may hold a size as 64.0
    out = [check_int(f"{name}[{i}]", v, low, integral_floats=True) for i, v in enumerate(values)]
    if any(b <= a for a, b in zip(out, out[1:])):
        raise ValueError(f"{name}: must be strictly increasing, got {out}")
    return tuple(out)


def _monotone(name: str, sizes, times, what: str) -> None:
    d = np.diff(np.asarray(times, dtype=np.float64))
    if np.any(d < 0):
        i = int(np.flatnonzero(d < 0)[0])
        raise ValueError(f"{name}: not monotone: {times[i]:.4g} ms at {what}={sizes[i]} but {times[i + 1]:.4g} ms at "
                         f"{what}={sizes[i + 1]} (more work cannot take less time; re-measure, or fit a "
                         "monotone table with speedup.isotonic)")
