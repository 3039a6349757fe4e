"""Paired comparisons of two decoding methods, with intervals that hold what a rerun redoes.

Both methods decode the same prompts, so a comparison is made prompt by prompt: the log ratio of
method A's value to method B's (tau, or tokens per second). With several independently trained
runs the run is the unit (prompts nested within runs); a single run gives a prompts-only interval,
labelled as such. Words: gain, loss, equivalent within a margin, inconclusive. See docs/statistics.md.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import stats as _st

from mfd_theory.validation import check_int, check_real

__all__ = ["MARGIN", "VERDICTS", "Comparison", "compare", "compare_rows", "error_summary", "paired", "runs_to_decide", "verdict"]

#: the equivalence margin of every verdict unless said otherwise: +-3% on the ratio scale
MARGIN = 0.03
VERDICTS = ("gain", "loss", "equivalent", "inconclusive")


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A over B: the relative gain ``gain`` (the geometric mean ratio minus one) and its interval.

    ``model`` says what the interval holds: "runs" (each run's mean log ratio over the prompts is
    one observation, Student t over the runs: training variance and prompt noise both in it) or
    "prompts" (one run: Student t over the prompts' log ratios; a rerun that retrains is not in
    it). ``level`` is the interval's coverage after the multiplicity adjustment (Bonferroni over
    ``family`` comparisons); ``run_gains`` the gain of each run alone."""

    gain: float
    lo: float
    hi: float
    verdict: str
    model: str
    n_runs: int
    n_prompts: int
    df: float
    level: float
    family: int
    margin: float
    run_gains: tuple[float, ...]

    def text(self) -> str:
        """``+4.1% [+1.2%, +7.0%], gain (3 runs x 24 prompts)``."""
        what = f"{self.n_runs} runs x {self.n_prompts} prompts" if self.model == "runs" else \
            f"1 run, {self.n_prompts} prompts"
        return f"{100 * self.gain:+.1f}% [{100 * self.lo:+.1f}%, {100 * self.hi:+.1f}%], {self.verdict} ({what})"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def verdict(lo: float, hi: float, margin: float = MARGIN) -> str:
    """The word for an interval [lo, hi] of a relative gain: "gain" or "loss" when it excludes 0,
    "equivalent" when it lies within +-``margin``, "inconclusive" otherwise."""
    if lo > 0:
        return "gain"
    if hi < 0:
        return "loss"
    if -margin <= lo and hi <= margin:
        return "equivalent"
    return "inconclusive"


def _log_ratios(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"b: shape {b.shape} differs from a's {a.shape} (the same runs and prompts, paired)")
    if a.ndim == 1:
        a, b = a[None], b[None]
    if a.ndim != 2 or a.shape[1] < 2:
        raise ValueError(f"a: expected values [runs, prompts] with at least 2 prompts, got shape {a.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all() and (a > 0).all() and (b > 0).all()):
        raise ValueError("a, b: every value must be a finite positive number (tau, tokens per second)")
    return np.log(a) - np.log(b)  # [R, P]


def compare(a, b, *, margin: float = MARGIN, level: float = 0.95, family: int = 1) -> Comparison:
    """Method A against method B from paired per-prompt values ``a``, ``b`` [runs, prompts] (or
    [prompts] for one run), larger is better.

    With 2 or more runs: the mean over prompts of each run's log ratio, then Student t over the
    runs (R - 1 degrees of freedom). With one run: Student t over the prompts' log ratios. The
    interval's two-sided level is ``level`` adjusted for ``family`` comparisons (Bonferroni:
    each interval at 1 - (1 - level) / family), so the whole table's statements hold together."""
    d = _log_ratios(a, b)
    check_real("margin", margin, 0, 1, high_open=True)
    check_real("level", level, 0, 1, low_open=True, high_open=True)
    family = check_int("family", family, 1)
    runs, prompts = d.shape
    alpha = (1 - level) / family
    run_means = d.mean(axis=1)  # [R]
    if runs >= 2:
        obs, model = run_means, "runs"
    else:
        obs, model = d[0], "prompts"
    n = obs.size
    mean = float(obs.mean())
    se = float(obs.std(ddof=1) / math.sqrt(n))
    df = float(n - 1)
    half = float(_st.t.ppf(1 - alpha / 2, df)) * se
    lo, hi = math.expm1(mean - half), math.expm1(mean + half)
    return Comparison(gain=math.expm1(mean), lo=lo, hi=hi, verdict=verdict(lo, hi, margin), model=model,
                      n_runs=runs, n_prompts=prompts, df=df, level=1 - alpha, family=family, margin=margin,
                      run_gains=tuple(float(math.expm1(x)) for x in run_means))


# ----------------------------------------------------------------------------- rows of an evaluation
def paired(a: dict, b: dict, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``a`` and ``b``'s per-prompt ``key`` values (``prompt_tau`` or ``prompt_tokens_per_s``)
    on the prompts both have a value for, in the same order: the pairs of a paired comparison."""
    bv = dict(zip(b.get("prompt_ids") or [], b.get(key) or []))
    pairs = [(x, bv[i]) for i, x in zip(a.get("prompt_ids") or [], a.get(key) or [])
             if x is not None and bv.get(i) is not None]
    return np.array([x for x, _ in pairs], dtype=float), np.array([y for _, y in pairs], dtype=float)


def compare_rows(a: dict, b: dict, family: int = 1) -> dict:
    """Row ``a`` against row ``b`` of one run, paired over their prompts (:func:`compare`,
    a prompts-only interval): ``{"tau_cmp": ..., "speed_cmp": ...}``, each a Comparison's dict or None
    when fewer than 2 prompts pair up."""
    out = {}
    for name, key in (("tau_cmp", "prompt_tau"), ("speed_cmp", "prompt_tokens_per_s")):
        x, y = paired(a, b, key)
        out[name] = compare(x, y, family=family).to_dict() if x.size >= 2 else None
    return out


# ----------------------------------------------------------------------------- prediction errors
def error_summary(errors) -> dict:
    """Relative errors (predicted / measured - 1): the median and worst |error|, the mean signed
    error and how many came out too high. A bias shows in the last two, which absolute errors hide."""
    e = np.asarray([x for x in errors if x is not None], dtype=np.float64)
    if e.size == 0:
        raise ValueError("errors: nothing to summarise")
    return {"median_abs_error": float(np.median(np.abs(e))), "worst_abs_error": float(np.abs(e).max()),
            "mean_signed_error": float(e.mean()), "too_high": int((e > 0).sum()), "n": int(e.size)}


# ----------------------------------------------------------------------------- how many runs would decide
def runs_to_decide(run_gains, *, margin: float = MARGIN, level: float = 0.95, family: int = 1,
                   max_runs: int = 50) -> int | None:
    """How many runs a replicated comparison would need for a verdict other than "inconclusive",
    if the runs' mean log ratio and their spread stayed as measured in ``run_gains`` (each run's
    gain, :attr:`Comparison.run_gains`): the smallest R >= 2 at which the interval of
    :func:`compare` (same ``level`` and ``family``) excludes 0 or lies within +-``margin``. None
    when no R up to ``max_runs`` decides it (the mean is too close to 0 for the spread, or, for
    equivalence, too close to the margin). A projection from the measured runs, not a measurement:
    the next runs' spread may differ."""
    g = np.asarray(run_gains, dtype=np.float64)
    if g.ndim != 1 or g.size < 2:
        raise ValueError(f"run_gains: need the gains of 2 runs or more, got shape {g.shape}")
    if not (np.isfinite(g).all() and (g > -1).all()):
        raise ValueError("run_gains: every gain must be finite and above -1 (a ratio minus one)")
    check_real("margin", margin, 0, 1, high_open=True)
    check_real("level", level, 0, 1, low_open=True, high_open=True)
    family = check_int("family", family, 1)
    max_runs = check_int("max_runs", max_runs, 2)
    x = np.log1p(g)
    mean, sd = float(x.mean()), float(x.std(ddof=1))
    alpha = (1 - level) / family
    for r in range(2, max_runs + 1):
        half = float(_st.t.ppf(1 - alpha / 2, r - 1)) * sd / math.sqrt(r)
        if verdict(math.expm1(mean - half), math.expm1(mean + half), margin) != "inconclusive":
            return r
    return None
