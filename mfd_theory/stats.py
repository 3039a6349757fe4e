"""Paired comparisons of two decoding methods, with intervals that hold what a rerun redoes.

Both methods decode the same prompts, so a comparison is made prompt by prompt: the log ratio of
method A's value to method B's (tau, or tokens per second). With several independently trained
runs the run is the unit (prompts nested within runs); a single run gives a prompts-only interval,
labelled as such. Words: gain, loss, equivalent within a margin, inconclusive. No interval is
narrower than the data can resolve: with runs, the prompt-by-run noise nested in each run sets a
floor under the runs' spread, and a quantised value (tau over a fixed number of tokens moves in
steps of about one round) sets a floor of its own (``resolution``). See docs/statistics.md.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import stats as _st

from mfd_theory.validation import check_int, check_real

__all__ = ["MARGIN", "POWER", "VERDICTS", "Comparison", "compare", "compare_rows", "coupled_chi_square", "decide_power",
           "error_summary", "floor_interval", "paired", "row_tau_resolution", "runs_to_decide", "tau_resolution",
           "verdict"]

#: the equivalence margin of every verdict unless said otherwise: +-3% on the ratio scale
MARGIN = 0.03
VERDICTS = ("gain", "loss", "equivalent", "inconclusive")
#: the power "seeds to decide" asks for unless said otherwise
POWER = 0.8


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
    #: the standard error's floor in force (log scale) and what set it: "spread" (the observations'
    #: own spread was larger), "nested" (the prompt-by-run noise), "resolution" (the values' step)
    se_floor: float = 0.0
    se_from: str = "spread"

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


def tau_resolution(tau, tokens) -> np.ndarray:
    """The step of a measured tau on the log scale: tau = tokens / rounds moves by a whole round, so
    its log moves by ``log(1 + tau / tokens)`` (one round more or fewer over ``tokens`` tokens).
    ``tau`` and ``tokens`` broadcast; each token count must be >= 1."""
    t = np.asarray(tau, dtype=np.float64)
    n = np.asarray(tokens, dtype=np.float64)
    if not (np.isfinite(t).all() and (t > 0).all()):
        raise ValueError("tau: every value must be a finite positive number")
    if not (np.isfinite(n).all() and (n >= 1).all()):
        raise ValueError("tokens: every count must be at least 1")
    return np.log1p(t / n)


def _resolution_var(resolution, shape) -> float:
    """The variance floor of one prompt's log ratio from the step of its values: each of its two
    values is known to within +-step/2 (uniform rounding, standard deviation step / sqrt(12)),
    and the two roundings may be coupled (two taus of nearby round counts round in opposite
    directions), so their difference's standard deviation is at most twice that: variance
    step^2 / 3. The mean over the prompts' floors; 0 without a resolution."""
    if resolution is None:
        return 0.0
    r = np.asarray(resolution, dtype=np.float64)
    if not (np.isfinite(r).all() and (r >= 0).all()):
        raise ValueError("resolution: every step must be a finite number >= 0 (log scale)")
    try:
        r = np.broadcast_to(r, shape)
    except ValueError:
        raise ValueError(f"resolution: shape {r.shape} does not broadcast to the values' {shape}") from None
    return float((r ** 2).mean() / 3.0)


def _nested_var(d: np.ndarray) -> float:
    """The prompt-by-run variance of log ratios ``d`` [R, P] (R, P >= 2): the two-way residual
    d_rp - d_r. - d_.p + d_.., with (R - 1)(P - 1) degrees of freedom. A run's mean over its P
    prompts carries this noise / P whatever the training variance, so it floors the runs' spread."""
    R, P = d.shape
    res = d - d.mean(axis=1, keepdims=True) - d.mean(axis=0, keepdims=True) + d.mean()
    return float((res ** 2).sum() / ((R - 1) * (P - 1)))


def _half_widths(d: np.ndarray, obs: np.ndarray, alpha: float, resolution) -> dict[str, tuple[float, float]]:
    """{source: (standard error, half-width)} of the mean of ``obs`` (log scale): its own spread
    (Student t, n - 1 degrees of freedom), the prompt-by-run noise with runs (Student t, (R - 1)
    x (P - 1) degrees of freedom) and the values' resolution (normal: the step is known). The
    resolution's is not divided by the runs: runs that agree exactly share their rounding."""
    runs, prompts = d.shape
    q = 1 - alpha / 2
    se = float(obs.std(ddof=1) / math.sqrt(obs.size))
    out = {"spread": (se, float(_st.t.ppf(q, obs.size - 1)) * se)}
    if runs >= 2:
        se = math.sqrt(_nested_var(d) / d.size)
        out["nested"] = (se, float(_st.t.ppf(q, (runs - 1) * (prompts - 1))) * se)
    if resolution is not None:
        se = math.sqrt(_resolution_var(resolution, d.shape) / prompts)
        out["resolution"] = (se, float(_st.norm.ppf(q)) * se)
    return out


def compare(a, b, *, margin: float = MARGIN, level: float = 0.95, family: int = 1,
            resolution=None) -> Comparison:
    """Method A against method B from paired per-prompt values ``a``, ``b`` [runs, prompts] (or
    [prompts] for one run), larger is better.

    With 2 or more runs: the mean over prompts of each run's log ratio, then Student t over the
    runs (R - 1 degrees of freedom). With one run: Student t over the prompts' log ratios. The
    interval's two-sided level is ``level`` adjusted for ``family`` comparisons (Bonferroni:
    each interval at 1 - (1 - level) / family), so the whole table's statements hold together.

    The interval has floors, so that runs (or prompts) that agree by chance, or values too
    coarse to differ, never give it width 0 (docs/statistics.md, "Floors"); the widest of these
    half-widths is used, and ``se_from`` names it:

    * "spread": the observations' own, as above;
    * "nested" (2 runs or more): the prompt-by-run noise (the two-way residual of the log ratios,
      (R - 1)(P - 1) degrees of freedom) over R x P: every run's mean carries it, whatever the
      runs' spread shows;
    * "resolution": ``resolution`` is the step of each prompt's values on the log scale (a scalar
      or an array broadcasting to [runs, prompts]; the larger of a's and b's step;
      :func:`tau_resolution` for tau), so each log ratio is known to within a variance of
      step^2 / 3 at best (two roundings, perhaps coupled), and the mean of P of them to within that / P, runs or not (runs that
      agree exactly share their rounding). Normal quantile. None: the values are taken as exact,
      and identical values give width 0."""
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
    mean = float(obs.mean())
    widths = _half_widths(d, obs, alpha, resolution)
    se_from = max(widths, key=lambda k: widths[k][1])
    floor = max((w for k, w in widths.items() if k != "spread"), key=lambda w: w[1], default=(0.0, 0.0))
    half = widths[se_from][1]
    lo, hi = math.expm1(mean - half), math.expm1(mean + half)
    return Comparison(gain=math.expm1(mean), lo=lo, hi=hi, verdict=verdict(lo, hi, margin), model=model,
                      n_runs=runs, n_prompts=prompts, df=float(obs.size - 1), level=1 - alpha, family=family,
                      margin=margin, run_gains=tuple(float(math.expm1(x)) for x in run_means), se_floor=floor[0],
                      se_from=se_from)


def floor_interval(c: dict | None, resolution: float) -> dict | None:
    """A stored comparison (:meth:`Comparison.to_dict`, perhaps written before the floors existed)
    with the ``resolution`` floor of :func:`compare` applied after the fact: its interval widened,
    if narrower, to the normal half-width of a mean of ``n_prompts`` log ratios of step
    ``resolution`` (log scale), and its verdict re-worded. What a stored interval cannot give back
    (the prompt-by-run noise) is not added. A new dict; ``c`` None gives None."""
    if not c:
        return c
    r = check_real("resolution", resolution, 0)
    se = math.sqrt(r * r / 3.0 / c["n_prompts"])
    need = float(_st.norm.ppf(1 - (1 - c["level"]) / 2)) * se
    mean = math.log1p(c["gain"])
    half = (math.log1p(c["hi"]) - math.log1p(c["lo"])) / 2
    out = dict(c)
    if need > half:
        lo, hi = math.expm1(mean - need), math.expm1(mean + need)
        out.update(lo=lo, hi=hi, verdict=verdict(lo, hi, c["margin"]), se_floor=se, se_from="resolution")
    return out


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
    a prompts-only interval; tau's floored by its resolution, :func:`row_tau_resolution`): ``{"tau_cmp": ..., "speed_cmp": ...}``, each a Comparison's dict or None
    when fewer than 2 prompts pair up."""
    out = {}
    for name, key in (("tau_cmp", "prompt_tau"), ("speed_cmp", "prompt_tokens_per_s")):
        x, y = paired(a, b, key)
        res = row_tau_resolution(a, b) if key == "prompt_tau" else None
        out[name] = compare(x, y, family=family, resolution=res).to_dict() if x.size >= 2 else None
    return out


def row_tau_resolution(*rows: dict) -> float | None:
    """The step of a prompt's tau in rows of an evaluation (log scale): a prompt decoded in r rounds
    has tau = tokens / r, so one round more moves its log by log(1 + 1 / r); r is taken as the rows'
    rounds per prompt (``n_rounds`` / ``n_prompts``), the coarsest row's (fewest rounds). None when a
    row does not say."""
    steps = []
    for r in rows:
        n, p = r.get("n_rounds"), r.get("n_prompts")
        if not (isinstance(n, (int, float)) and isinstance(p, (int, float)) and n > 0 and p > 0):
            return None
        steps.append(math.log1p(p / n))
    return max(steps) if steps else None


# ----------------------------------------------------------------------------- prediction errors
def error_summary(errors) -> dict:
    """Relative errors (predicted / measured - 1): the median and worst |error|, the mean signed
    error and how many came out too high. A bias shows in the last two, which absolute errors hide."""
    e = np.asarray([x for x in errors if x is not None], dtype=np.float64)
    if e.size == 0:
        raise ValueError("errors: nothing to summarise")
    return {"median_abs_error": float(np.median(np.abs(e))), "worst_abs_error": float(np.abs(e).max()),
            "mean_signed_error": float(e.mean()), "too_high": int((e > 0).sum()), "n": int(e.size)}


# ----------------------------------------------------------------------------- z-scores of several cells
def coupled_chi_square(zs, independent: bool = False) -> dict:
    """The sum of the cells' z^2 (``zs``: C1's walk check per cell,
    :func:`mfd_theory.llm.measure.calibration.walk_check`), its degrees of freedom (one per cell) and, only
    when the cells are ``independent`` (each decoded its own sampled text), the chi-square p-value
    of both tails. Coupled cells (one sampling seed: the same text) keep the mean, one per cell,
    but not the chi-square's spread: ``pvalue`` is then None, and ``note`` says why."""
    z = np.asarray(zs, dtype=np.float64).reshape(-1)
    z = z[np.isfinite(z)]
    s, df = float((z ** 2).sum()), int(z.size)
    out = {"sum_z2": s, "df": df, "pvalue": None, "note": None}
    if df == 0:
        return out
    if independent:
        lo, hi = _st.chi2.cdf(s, df), _st.chi2.sf(s, df)
        out["pvalue"] = float(min(1.0, 2 * min(lo, hi)))
    else:
        out["note"] = ("cells coupled: they decode the same sampled text (one sampling seed), so the sum has mean "
                       f"{df} but not a chi-square's spread; no p-value")
    return out



# ----------------------------------------------------------------------------- how many runs would decide
#: the chi-square quantiles :func:`decide_power` integrates over (midpoints of equal-probability bins)
_POWER_GRID = 2000


def decide_power(mean: float, sd: float, runs: int, *, margin: float = MARGIN, level: float = 0.95,
                 family: int = 1) -> float:
    """The probability that ``runs`` runs give a verdict other than "inconclusive" (the interval of
    :func:`compare`, runs model, at ``level`` over ``family``) when each run's mean log ratio is
    normal with mean ``mean`` and standard deviation ``sd`` (log scale).

    Given the runs' spread s, their mean x is normal and independent of s, and the verdict is
    decided when x lies in gain (x > h), loss (x < -h) or equivalent (log(1 - margin) + h <= x <=
    log(1 + margin) - h), h = t x s / sqrt(runs); the probability of that union is exact, and the
    average over s (a scaled chi-square with runs - 1 degrees of freedom) is taken on
    equal-probability quantiles (accurate to about 1e-4; the slow twin in tests/reference.py
    simulates it)."""
    from scipy.special import ndtr

    runs = check_int("runs", runs, 2)
    check_real("sd", sd, 0)
    check_real("margin", margin, 0, 1, high_open=True)
    check_real("level", level, 0, 1, low_open=True, high_open=True)
    family = check_int("family", family, 1)
    alpha = (1 - level) / family
    if sd == 0:
        return float(verdict(math.expm1(mean), math.expm1(mean), margin) != "inconclusive")
    t = float(_st.t.ppf(1 - alpha / 2, runs - 1))
    lo_m, hi_m = math.log1p(-margin), math.log1p(margin)
    se = sd / math.sqrt(runs)
    df = runs - 1
    u = _st.chi2.ppf((np.arange(_POWER_GRID) + 0.5) / _POWER_GRID, df)  # [G]
    h = t * se * np.sqrt(u / df)  # [G] the half-widths

    def mass(a, b):  # P(a < x < b), 0 where the interval is empty
        return np.where(b > a, ndtr((b - mean) / se) - ndtr((a - mean) / se), 0.0)

    e_lo, e_hi = lo_m + h, hi_m - h  # the equivalent region, empty where e_hi < e_lo
    p = (ndtr((-h - mean) / se) + (1 - ndtr((h - mean) / se)) + mass(e_lo, e_hi)
         - mass(e_lo, np.minimum(e_hi, -h)) - mass(np.maximum(e_lo, h), e_hi))
    return float(np.clip(p.mean(), 0.0, 1.0))


def runs_to_decide(run_gains, *, margin: float = MARGIN, level: float = 0.95, family: int = 1,
                   max_runs: int = 50, power: float | None = POWER, min_sd: float = 0.0) -> int | None:
    """How many runs a replicated comparison would need for a verdict other than "inconclusive",
    if the true mean log ratio and spread of the runs were those measured in ``run_gains`` (each
    run's gain, :attr:`Comparison.run_gains`).

    ``power`` (0.8 by default): the smallest R >= 2 at which R new runs give a verdict with at
    least that probability (:func:`decide_power`: the new runs' mean and spread vary as runs do).
    ``power=None``: the smallest R at which the interval of :func:`compare` would decide if the
    new runs' mean and spread came out exactly as measured, the median case, about 50% power for
    a gain or a loss. ``min_sd``: a floor under the measured spread (log scale; the resolution's
    or the nested noise's share of a run, ``Comparison.se_floor`` x sqrt(runs)). None when no R
    up to ``max_runs`` decides (the mean is too close to 0 for the spread, or, for equivalence,
    too close to the margin). A projection from the measured runs, not a measurement: three runs
    estimate a spread poorly, and the next runs' may differ."""
    g = np.asarray(run_gains, dtype=np.float64)
    if g.ndim != 1 or g.size < 2:
        raise ValueError(f"run_gains: need the gains of 2 runs or more, got shape {g.shape}")
    if not (np.isfinite(g).all() and (g > -1).all()):
        raise ValueError("run_gains: every gain must be finite and above -1 (a ratio minus one)")
    check_real("margin", margin, 0, 1, high_open=True)
    check_real("level", level, 0, 1, low_open=True, high_open=True)
    family = check_int("family", family, 1)
    max_runs = check_int("max_runs", max_runs, 2)
    if power is not None:
        check_real("power", power, 0, 1, low_open=True, high_open=True)
    check_real("min_sd", min_sd, 0)
    x = np.log1p(g)
    mean, sd = float(x.mean()), max(float(x.std(ddof=1)), float(min_sd))
    alpha = (1 - level) / family
    for r in range(2, max_runs + 1):
        if power is None:
            half = float(_st.t.ppf(1 - alpha / 2, r - 1)) * sd / math.sqrt(r)
            if verdict(math.expm1(mean - half), math.expm1(mean + half), margin) != "inconclusive":
                return r
        elif decide_power(mean, sd, r, margin=margin, level=level, family=family) >= power:
            return r
    return None
