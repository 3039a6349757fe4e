"""Seeded families of multi-future targets: :func:`two_futures`, :func:`branching`, :func:`shifted`,
:func:`noisy_futures` and :func:`zipf_futures`, each a :class:`SyntheticTarget` (the target as a
``MixtureOfProducts`` with one mode per future, plus the futures and their weights).
:data:`FAMILIES` and :func:`make` find a family by name. What each family imitates and how the
weights are drawn: docs/chimeras.md ("The synthetic target families").
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from mfd_theory.distributions import MixtureOfProducts, check_weights
from mfd_theory.validation import check_int, check_real

__all__ = [
    "FAMILIES",
    "ACCURACY_PROFILES",
    "MEDUSA_HEAD_ACCURACY",
    "SyntheticTarget",
    "branching",
    "decaying_confidence",
    "make",
    "noisy_futures",
    "shifted",
    "two_futures",
    "zipf_futures",
]

#: Top-1 accuracies of Medusa's five heads on Vicuna-7B (as reported in the Medusa paper; docs/background.md): a
#: realistic profile of how a drafter's per-position confidence decays with distance.
MEDUSA_HEAD_ACCURACY = (0.56, 0.32, 0.20, 0.15, 0.12)

#: Named confidence profiles for :func:`zipf_futures`. "medusa": Medusa's head accuracies with a
#: fitted power-law tail. "dflash": a constant 0.85 per position, DFlash-like confidence. With 15
#: drafted positions a chain accepting each token with probability 0.85 has
#: tau = 1 + sum_{d=1..15} 0.85^d = 6.17 (bonus token included), a little below the tau of about
#: 6.5 DFlash reports for Qwen3-8B on GSM8K.
ACCURACY_PROFILES = {"medusa": MEDUSA_HEAD_ACCURACY, "dflash": (0.85,)}


@dataclasses.dataclass(frozen=True)
class SyntheticTarget:
    """A multi-future target and the futures it was built from.

    Attributes
    ----------
    target : MixtureOfProducts
        K = F modes, mode k centred on ``futures[k]``; ``target.log_pi = log(weights)``.
    futures : np.ndarray
        int64 [F, L], the future token sequences (distinct rows).
    weights : np.ndarray
        float64 [F], the probability of each future (sums to 1).
    family : str
        Name of the family in :data:`FAMILIES`.
    params : dict
        The arguments that built it (seed included), for results files.
    """

    target: MixtureOfProducts
    futures: np.ndarray
    weights: np.ndarray
    family: str
    params: dict[str, Any]

    @property
    def F(self) -> int:
        return int(self.futures.shape[0])

    @property
    def L(self) -> int:
        return int(self.futures.shape[1])

    @property
    def V(self) -> int:
        return int(self.target.V)

    @property
    def exact(self) -> bool:
        """True when every mode is a point mass on its future (chimeras are P(s) == 0)."""
        return bool(np.all(np.isneginf(self.target.log_q) | (self.target.log_q == 0.0)))

    def disagreements(self) -> np.ndarray:
        """int64 [F, F]: number of positions where futures j and k disagree."""
        f = self.futures
        return (f[:, None, :] != f[None, :, :]).sum(axis=2).astype(np.int64)


def _weights(weights: Any, F: int, rng: np.random.Generator) -> np.ndarray:
    if weights is None:
        return rng.dirichlet(np.full(F, 4.0))  # [F]; generic, so marginals have no exact ties
    return check_weights(weights, F, "futures", positive=True)


def _point_modes(futures: np.ndarray, V: int) -> np.ndarray:
    """log_q [F, L, V] with a point mass (log 1 = 0) on each future's token."""
    F, L = futures.shape
    log_q = np.full((F, L, V), -np.inf)  # [F, L, V]
    log_q[np.arange(F)[:, None], np.arange(L)[None, :], futures] = 0.0
    return log_q


def _uniform_noise_modes(futures: np.ndarray, V: int, noise: float) -> np.ndarray:
    """(1 - noise) on the future's token plus noise / V spread uniformly (noise = 0: point mass)."""
    if noise == 0.0:
        return _point_modes(futures, V)
    F, L = futures.shape
    q = np.full((F, L, V), noise / V)  # [F, L, V]
    q[np.arange(F)[:, None], np.arange(L)[None, :], futures] += 1.0 - noise
    return np.log(q)


def _build(futures, weights, log_q, family, params) -> SyntheticTarget:
    futures = np.ascontiguousarray(futures, dtype=np.int64)
    if len({tuple(r) for r in futures.tolist()}) != futures.shape[0]:
        raise AssertionError("internal: futures are not distinct")  # generators guarantee this
    target = MixtureOfProducts(np.log(weights), log_q)
    return SyntheticTarget(target, futures, np.asarray(weights, dtype=np.float64), family, params)


def _distinct_tokens(rng: np.random.Generator, V: int, k: int) -> np.ndarray:
    """k distinct tokens in [0, V)."""
    return rng.choice(V, size=k, replace=False).astype(np.int64)


# ----------------------------------------------------------------------------- families


def two_futures(
    m: int = 4,
    L: int = 15,
    V: int = 32,
    seed: int = 0,
    positions: Any = None,
    weights: Any = None,
    noise: float = 0.0,
) -> SyntheticTarget:
    """(a) Two futures that disagree in exactly ``m`` positions.

    Imitates two phrasings that differ in a few scattered words. ``positions`` (0-based, m
    distinct values in [0, L)) fixes where they disagree; by default m positions are drawn. With
    ``noise > 0`` each mode puts (1 - noise) on its future's token and noise / V on every token.

    Defaults: m=4, L=15, V=32, weights ~ Dirichlet(4, 4), noise=0 (exact futures).
    """
    L = check_int("L", L, 1)
    V = check_int("V", V, 2)
    m = check_int("m", m, 1, L)
    noise = check_real("noise", noise, 0, 1)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    if positions is None:
        pos = np.sort(rng.choice(L, size=m, replace=False)).astype(np.int64)
    else:
        pos = np.asarray(positions, dtype=np.int64).ravel()
        if pos.size != m or len(set(pos.tolist())) != m or pos.min() < 0 or pos.max() >= L:
            raise ValueError(f"positions: need {m} distinct positions in [0, {L}), got {positions!r}")
        pos = np.sort(pos)
    a = rng.integers(0, V, size=L).astype(np.int64)  # [L]
    b = a.copy()
    b[pos] = (a[pos] + rng.integers(1, V, size=m)) % V  # a different token at each chosen position
    futures = np.stack([a, b])  # [2, L]
    w = _weights(weights, 2, rng)
    params = dict(m=m, L=L, V=V, seed=seed, positions=pos.tolist(), noise=noise)
    return _build(futures, w, _uniform_noise_modes(futures, V, noise), "two_futures", params)


def branching(
    F: int = 3,
    L: int = 15,
    V: int = 32,
    branch_at: int = 3,
    seed: int = 0,
    weights: Any = None,
    noise: float = 0.0,
) -> SyntheticTarget:
    """(b) F futures that share the first ``branch_at`` tokens and then branch.

    Imitates a fork after a shared prefix (which list item comes next, which argument a function
    gets). At position ``branch_at`` (0-based) all F futures take distinct tokens; after it each
    future draws its tokens independently, so later positions mostly disagree (they agree by
    chance with probability about 1/V, as unrelated continuations sometimes do).

    Defaults: F=3, L=15, V=32, branch_at=3, weights ~ Dirichlet(4, ..., 4), noise=0.
    """
    F = check_int("F", F, 2)
    L = check_int("L", L, 1)
    V = check_int("V", V, 2)
    if F > V:
        raise ValueError(f"F: at most V = {V} futures can branch at one position, got {F}")
    branch_at = check_int("branch_at", branch_at, 0, L - 1)
    noise = check_real("noise", noise, 0, 1)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    futures = np.empty((F, L), dtype=np.int64)  # [F, L]
    futures[:, :branch_at] = rng.integers(0, V, size=branch_at)[None, :]
    futures[:, branch_at] = _distinct_tokens(rng, V, F)
    futures[:, branch_at + 1:] = rng.integers(0, V, size=(F, L - branch_at - 1))
    w = _weights(weights, F, rng)
    params = dict(F=F, L=L, V=V, branch_at=branch_at, seed=seed, noise=noise)
    return _build(futures, w, _uniform_noise_modes(futures, V, noise), "branching", params)


def shifted(
    F: int = 2,
    L: int = 15,
    V: int = 32,
    shift_at: int = 3,
    seed: int = 0,
    weights: Any = None,
    noise: float = 0.0,
) -> SyntheticTarget:
    """(c) Futures that say the same thing but one of them has an inserted or deleted token.

    Imitates "lots of farmers" / "a lot of farmers": a single extra or missing token shifts the
    rest of the text by one, so every position from ``shift_at`` on disagrees although the futures
    share all their words. Future 0 is the base text x[:L]; future 1 inserts a token at
    ``shift_at``; future 2 (F >= 3) deletes the token at ``shift_at``; future 3 (F = 4) inserts two
    tokens there. The base text never repeats a token in consecutive positions, so every shifted
    position really disagrees.

    Defaults: F=2, L=15, V=32, shift_at=3, weights ~ Dirichlet(4, ..., 4), noise=0.
    """
    F = check_int("F", F, 2, 4)
    L = check_int("L", L, 1)
    V = check_int("V", V, 3)
    shift_at = check_int("shift_at", shift_at, 0, L - 1)
    noise = check_real("noise", noise, 0, 1)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    # Base text of length L + 2 with no token equal to its predecessor or the one two back, so a
    # shift by one or two positions disagrees everywhere after the shift.
    x = np.empty(L + 2, dtype=np.int64)
    for i in range(L + 2):
        banned = {int(x[j]) for j in (i - 1, i - 2) if j >= 0}
        choices = [v for v in range(V) if v not in banned]
        x[i] = choices[int(rng.integers(0, len(choices)))]
    # Inserted tokens differ from the two base tokens they push aside, so the shift really
    # disagrees at shift_at too.
    pool = [v for v in range(V) if v not in (int(x[shift_at]), int(x[shift_at + 1]))]
    if F >= 4 and len(pool) < 2:
        raise ValueError(f"V: shifted with F = 4 needs V >= 4, got {V}")
    ins = rng.choice(pool, size=2 if F >= 4 else 1, replace=False).astype(np.int64)
    rows = [x[:L]]
    rows.append(np.concatenate([x[:shift_at], ins[:1], x[shift_at:]])[:L])  # one token inserted
    if F >= 3:
        rows.append(np.concatenate([x[:shift_at], x[shift_at + 1:]])[:L])  # one token deleted
    if F >= 4:
        rows.append(np.concatenate([x[:shift_at], ins, x[shift_at:]])[:L])  # two tokens inserted
    futures = np.stack(rows)  # [F, L]
    w = _weights(weights, F, rng)
    params = dict(F=F, L=L, V=V, shift_at=shift_at, seed=seed, noise=noise)
    return _build(futures, w, _uniform_noise_modes(futures, V, noise), "shifted", params)


def noisy_futures(
    F: int = 2,
    L: int = 15,
    V: int = 32,
    temperature: float = 0.5,
    seed: int = 0,
    branch_at: int = 0,
    peak: float = 4.0,
    weights: Any = None,
) -> SyntheticTarget:
    """(d) Branching futures, each a peaked product with a temperature rather than a point mass.

    Imitates a target that is unsure token by token even within one continuation. Mode k at
    position i has logits ``peak * onehot(futures[k, i]) + z`` with z ~ N(0, 1) (seeded), divided
    by ``temperature`` and normalised: low temperature gives nearly exact futures, high
    temperature nearly uniform ones. The futures come from :func:`branching` with the same seed.

    Defaults: F=2, L=15, V=32, temperature=0.5, branch_at=0, peak=4, weights ~ Dirichlet(4, 4).
    """
    temperature = check_real("temperature", temperature, 0, low_open=True)
    peak = check_real("peak", peak, 0)
    base = branching(F, L, V, branch_at, seed, weights=weights)
    futures, w = base.futures, base.weights
    rng = np.random.default_rng([int(seed), 4])
    logits = rng.standard_normal((F, L, V))  # [F, L, V]
    logits[np.arange(F)[:, None], np.arange(L)[None, :], futures] += peak
    logits /= temperature
    log_q = logits - np.logaddexp.reduce(logits, axis=2, keepdims=True)  # [F, L, V]
    params = dict(F=F, L=L, V=V, temperature=temperature, seed=seed, branch_at=branch_at, peak=peak)
    return _build(futures, w, log_q, "noisy_futures", params)


def decaying_confidence(L: int, accuracies=MEDUSA_HEAD_ACCURACY) -> np.ndarray:
    """float64 [L]: per-position confidence following ``accuracies``, extended by a power law.

    The first ``len(accuracies)`` positions take the given values; later ones follow
    c_i = c_1 * i^(-alpha), with alpha fitted by least squares in log-log to the given values
    (alpha = 0.93 for Medusa's heads: c_15 = 0.045); a single value is held constant.
    ``accuracies`` may also name a profile in :data:`ACCURACY_PROFILES`.
    """
    L = check_int("L", L, 1)
    if isinstance(accuracies, str):
        if accuracies not in ACCURACY_PROFILES:
            raise ValueError(f"accuracies: unknown profile {accuracies!r}; known: {sorted(ACCURACY_PROFILES)}")
        accuracies = ACCURACY_PROFILES[accuracies]
    acc = np.asarray(accuracies, dtype=np.float64)
    if acc.ndim != 1 or acc.size == 0 or np.any(acc <= 0) or np.any(acc > 1):
        raise ValueError("accuracies: need a non-empty 1-D sequence of values in (0, 1]")
    i = np.arange(1, acc.size + 1, dtype=np.float64)
    if acc.size > 1:
        alpha = -np.polyfit(np.log(i), np.log(acc / acc[0]), 1)[0]
    else:
        alpha = 0.0  # one value: constant confidence
    pos = np.arange(1, L + 1, dtype=np.float64)
    conf = acc[0] * pos ** (-alpha)  # [L]
    k = min(L, acc.size)
    conf[:k] = acc[:k]
    return conf


def zipf_futures(
    F: int = 2,
    L: int = 15,
    V: int = 64,
    seed: int = 0,
    branch_at: int = 0,
    zipf_s: float = 1.1,
    accuracies=MEDUSA_HEAD_ACCURACY,
    weights: Any = None,
) -> SyntheticTarget:
    """(e) Branching futures over a Zipf background, with confidence decaying per position.

    Imitates what a real drafter sees: at position i each future's own token has probability
    c_i (Medusa's head accuracies 0.56, 0.32, 0.20, 0.15, 0.12, then a fitted power law, see
    :func:`decaying_confidence`) and the remaining 1 - c_i is spread over the vocabulary by a Zipf
    law with exponent ``zipf_s`` (rank r gets weight r^-s; one seeded ranking of the vocabulary
    shared by all positions and futures, like a language's word frequencies).

    ``accuracies`` may name a profile in :data:`ACCURACY_PROFILES` ("medusa", "dflash").

    Defaults: F=2, L=15, V=64, branch_at=0, zipf_s=1.1, Medusa accuracies, weights ~ Dirichlet(4).
    """
    zipf_s = check_real("zipf_s", zipf_s, 0)
    conf = decaying_confidence(L, accuracies)  # [L]
    base = branching(F, L, V, branch_at, seed, weights=weights)
    futures, w = base.futures, base.weights
    rng = np.random.default_rng([int(seed), 5])
    ranks = rng.permutation(V) + 1  # [V], rank of each token in the background
    bg = ranks.astype(np.float64) ** (-zipf_s)
    bg /= bg.sum()  # [V]
    q = (1.0 - conf)[None, :, None] * bg[None, None, :]  # [1, L, V]
    q = np.repeat(q, F, axis=0)  # [F, L, V]
    q[np.arange(F)[:, None], np.arange(L)[None, :], futures] += conf[None, :]
    params = dict(F=F, L=L, V=V, seed=seed, branch_at=branch_at, zipf_s=zipf_s,
                  accuracies=accuracies if isinstance(accuracies, str)
                  else [float(a) for a in np.atleast_1d(accuracies)])
    return _build(futures, w, np.log(q), "zipf_futures", params)


#: Family name -> function. Every function takes keyword arguments with the defaults documented
#: in its docstring and a ``seed``, and returns a :class:`SyntheticTarget`.
FAMILIES: dict[str, Callable[..., SyntheticTarget]] = {
    "two_futures": two_futures,
    "branching": branching,
    "shifted": shifted,
    "noisy_futures": noisy_futures,
    "zipf_futures": zipf_futures,
}


def make(family: str, seed: int = 0, **kwargs: Any) -> SyntheticTarget:
    """Build a target of the named family: ``make("branching", seed=1, F=4)``."""
    if family not in FAMILIES:
        raise ValueError(f"family: unknown family {family!r}; known: {sorted(FAMILIES)}")
    return FAMILIES[family](seed=seed, **kwargs)
