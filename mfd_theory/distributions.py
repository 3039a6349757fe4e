"""Mixtures of products over a block of L positions (:class:`MixtureOfProducts`), and checks.

A drafter (in the synthetic world, a target too) is ``Q(s) = sum_k pi_k prod_{i<=d} q_{k,i}(s_i)``;
K = 1 is a product drafter (DFlash / DDTree). Stored in log space as float64: ``log_pi`` [K] and
``log_q`` [K, L, V], ``-inf`` allowed. Notation: docs/background.md.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mfd_theory._kernels.distributions import _node_mode_log_weights
from mfd_theory.validation import check_int, check_real, token_ids

__all__ = ["MixtureOfProducts", "check_log_probs", "check_weights", "logsumexp", "norm_tol", "pos_tol"]

# Tolerances for log-probabilities, scaled to the precision they arrived in (one rule for the
# distributions here and the tree builders). A log-prob x rounded to a float type of machine
# epsilon eps is off by about |x| eps / 2, so a row's probabilities are off by about eps / 2 times
# its entropy (<= log V, 12 nats for a 150k vocabulary) plus the few roundings of the log-softmax
# itself: 64 eps leaves a wide margin. float64 keeps a floor of 1e-9 (its own round-off is ~1e-15, the
# floor admits rows normalised in float64 from coarser data). The largest entry of a log-softmax
# row is x_max - logsumexp(x), whose rounding can leave it slightly above 0 (~eps |logsumexp|
# for logits of order 10): 16 eps, with a float64 floor of 1e-12.
NORM_TOL = 1e-9
POS_TOL = 1e-12


def _eps(dtype) -> float:
    dtype = np.dtype(dtype)
    return float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.floating) else float(np.finfo(np.float64).eps)


def norm_tol(dtype) -> float:
    """Probability-space tolerance for "sums to one" of log-probs given in ``dtype``.

    float64 (and integers): 1e-9; float32: 64 eps = 7.6e-6; float16: 64 eps = 0.0625.
    """
    return max(NORM_TOL, 64 * _eps(dtype))


def check_weights(weights, n: int, what: str, positive: bool = False) -> np.ndarray:
    """``weights`` as float64 [n], checked: finite, non-negative (> 0 with ``positive``) and
    summing to one within ``norm_tol`` of their dtype; returned with that round-off divided
    out. Weights that do not sum to one are refused, not rescaled: [3, 2, 1] is more likely a
    mistake than a request for [1/2, 1/3, 1/6]. ``what`` names the n entries in messages."""
    try:
        raw = np.asarray(weights)
        w = raw.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"weights: expected {n} numbers, got {weights!r}") from exc
    if w.shape != (n,):
        raise ValueError(f"weights: expected shape ({n},) for {n} {what}, got {w.shape}")
    if not np.isfinite(w).all() or (w <= 0 if positive else w < 0).any():
        raise ValueError(f"weights: every weight must be finite and {'> 0' if positive else 'non-negative'}")
    total = float(w.sum())
    if abs(total - 1.0) > norm_tol(raw.dtype):
        raise ValueError(f"weights: must sum to 1, got {total:.9g} (normalise them first)")
    return w / total


def pos_tol(dtype) -> float:
    """How far above 0 a log-prob given in ``dtype`` may lie (round-off of a certain token's 0).

    float64 (and integers): 1e-12; float32: 16 eps = 1.9e-6; float16: 16 eps = 0.0156. Entries
    above it are rejected (a probability above one: logits, not log-probs).
    """
    return max(POS_TOL, 16 * _eps(dtype))


def logsumexp(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """log(sum(exp(a))) along ``axis``, exact for all -inf slices (returns -inf there)."""
    a = np.asarray(a, dtype=np.float64)
    m = np.max(a, axis=axis, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - m_safe), axis=axis, keepdims=True)) + m_safe
    return np.squeeze(out, axis=axis)


def check_log_probs(name: str, arr, ndim: int | None = None) -> np.ndarray:
    """Validate an array of log-probabilities: numeric, no NaN, no +inf, entries <= 0.

    Returns it as float64 (float16 / float32 are upcast exactly). Probabilities above one
    (positive log-probs beyond the round-off :func:`pos_tol` allows for the input's dtype) are
    rejected as the "negative probabilities" of log space cannot occur; a probability above one
    means the caller passed logits, not log-probs.
    """
    a = np.asarray(arr)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"{name}: expected a numeric array of log-probabilities, got dtype {a.dtype}")
    tol = pos_tol(a.dtype)
    a = a.astype(np.float64, copy=False)
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name}: is empty (shape {a.shape})")
    if np.isnan(a).any():
        raise ValueError(f"{name}: contains NaN")
    if np.isposinf(a).any():
        raise ValueError(f"{name}: contains +inf (a probability of infinity)")
    if (a > tol).any():
        raise ValueError(
            f"{name}: has entries above 0 (probability > 1, max {a.max():.3g}); pass log-probabilities, not logits"
        )
    return a


class MixtureOfProducts:
    """``sum_k pi_k prod_i q_{k,i}`` over L positions and a vocabulary of V tokens.

    Parameters
    ----------
    log_pi : array [K]
        Log mixture weights; ``exp(log_pi)`` sums to one within ``norm_tol(log_pi.dtype)``.
    log_q : array [K, L, V]
        Per-mode, per-position log-probabilities; each ``exp(log_q[k, i])`` sums to one within
        ``norm_tol(log_q.dtype)`` (1e-9 for float64, 7.6e-6 for float32 rows such as a float32
        log-softmax). Stored as float64 either way; float16 / float32 input is renormalised in
        float64 on the way in.
    """

    __slots__ = ("log_pi", "log_q", "_cdf")

    def __init__(self, log_pi, log_q):
        q_tol = norm_tol(np.asarray(log_q).dtype)
        pi_tol = norm_tol(np.asarray(log_pi).dtype)
        log_q = check_log_probs("log_q", log_q, ndim=3)
        log_pi = check_log_probs("log_pi", log_pi, ndim=1)
        K, L, V = log_q.shape
        if log_pi.shape[0] != K:
            raise ValueError(f"log_pi: has {log_pi.shape[0]} weights but log_q has K = {K} modes")
        if V < 1 or L < 1:
            raise ValueError(f"log_q: needs L >= 1 and V >= 1, got shape {log_q.shape}")
        sums = np.exp(log_q).sum(axis=2)  # [K, L]
        bad = np.abs(sums - 1.0) > q_tol
        if bad.any():
            k, i = map(int, np.argwhere(bad)[0])
            raise ValueError(
                f"log_q: row (mode {k}, position {i}) sums to {sums[k, i]:.12g} in probability space, not 1"
            )
        total = np.exp(log_pi).sum()
        if abs(total - 1.0) > pi_tol:
            raise ValueError(f"log_pi: weights sum to {total:.12g} in probability space, not 1")
        # Coarser input is renormalised in float64, so the stored target sums to one to float64
        # precision and passes the float64 checks downstream (builders, fits) unchanged.
        if q_tol > NORM_TOL:
            log_q = log_q - np.log(sums)[:, :, None]  # [K, L, V]
        if pi_tol > NORM_TOL:
            log_pi = log_pi - np.log(total)
        self.log_pi = np.ascontiguousarray(log_pi)
        self.log_q = np.ascontiguousarray(log_q)
        self.log_pi.setflags(write=False)
        self.log_q.setflags(write=False)
        self._cdf = None

    # ---------------------------------------------------------------- shape
    @property
    def K(self) -> int:
        return int(self.log_q.shape[0])

    @property
    def L(self) -> int:
        return int(self.log_q.shape[1])

    @property
    def V(self) -> int:
        return int(self.log_q.shape[2])

    def __repr__(self) -> str:
        return f"MixtureOfProducts(K={self.K}, L={self.L}, V={self.V})"

    # ---------------------------------------------------------------- constructors
    @classmethod
    def product(cls, log_q) -> "MixtureOfProducts":
        """A product distribution (K = 1) from per-position log-probs [L, V]."""
        log_q = check_log_probs("log_q", log_q, ndim=2)
        return cls(np.zeros(1), log_q[None])  # [1, L, V]

    @classmethod
    def futures(
        cls,
        sequences,
        weights=None,
        vocab_size: int | None = None,
        noise: float = 0.0,
    ) -> "MixtureOfProducts":
        """One mode per future sequence, weighted by ``weights`` (one per sequence, summing to one
        within ``norm_tol``; uniform by default).

        With ``noise = 0`` each mode is a point mass on its sequence (exact futures). With
        ``noise > 0`` every position keeps ``1 - noise`` on the future's token and spreads
        ``noise`` uniformly over the whole vocabulary (so the future's own token gets
        ``1 - noise + noise / V``).
        """
        seqs = _as_sequences("sequences", sequences)
        F, L = seqs.shape
        if vocab_size is None:
            raise ValueError("vocab_size: is required")
        V = check_int("vocab_size", vocab_size, 1, integral_floats=True)
        if seqs.min() < 0 or seqs.max() >= V:
            raise ValueError(f"sequences: tokens must lie in [0, {V}), got range [{seqs.min()}, {seqs.max()}]")
        w = np.full(F, 1.0 / F) if weights is None else check_weights(weights, F, "futures")
        check_real("noise", noise, 0, 1)  # checked, not converted: the arithmetic below keeps its type
        q = np.full((F, L, V), noise / V)  # [F, L, V]
        q[np.arange(F)[:, None], np.arange(L)[None, :], seqs] += 1.0 - noise
        with np.errstate(divide="ignore"):
            log_q = np.log(q)
            log_pi = np.log(w)
        # renormalise away round-off so validation holds exactly
        log_q -= logsumexp(log_q, axis=2)[..., None]
        log_pi -= logsumexp(log_pi)
        return cls(log_pi, log_q)

    # ---------------------------------------------------------------- probabilities
    def log_prefix_prob(self, prefix: Sequence[int]) -> float:
        """log P(s) for a token sequence ``s`` of length 0..L (the empty prefix has P = 1)."""
        s = np.asarray(prefix, dtype=np.int64).reshape(-1)
        d = s.shape[0]
        if d > self.L:
            raise ValueError(f"prefix: length {d} exceeds L = {self.L}")
        if d and (s.min() < 0 or s.max() >= self.V):
            raise ValueError(f"prefix: tokens must lie in [0, {self.V})")
        per_mode = self.log_pi + self.log_q[:, np.arange(d), s].sum(axis=1)  # [K]
        return float(logsumexp(per_mode))

    def node_mode_log_weights(self, tree) -> np.ndarray:
        """[N, K]: log pi_k + sum_{i<=d} log q_{k,i}(s_i) for every node's prefix s."""
        self._check_tree(tree)
        return _node_mode_log_weights(tree.parent, tree.token, tree.depth, self.log_pi, self.log_q)

    def node_log_probs(self, tree) -> np.ndarray:
        """[N]: log P(s) of every node's prefix in a :class:`~mfd_theory.trees.DraftTree`."""
        return logsumexp(self.node_mode_log_weights(tree), axis=1)

    def _check_tree(self, tree) -> None:
        if len(tree) == 0:
            return
        if int(tree.depth.max()) > self.L:
            raise ValueError(f"tree: has depth {int(tree.depth.max())} but the target has L = {self.L}")
        if int(tree.token.max()) >= self.V:
            raise ValueError(f"tree: has token {int(tree.token.max())} outside the target's V = {self.V}")

    def sampling_cdfs(self) -> tuple[np.ndarray, np.ndarray]:
        """Cumulative mode weights [K] and per-position cumulative probabilities [K, L, V].

        Computed once and cached (the distribution is immutable); sampling and the Monte Carlo
        walk search them.
        """
        if self._cdf is None:
            pi_cdf = np.cumsum(np.exp(self.log_pi))
            cdf = np.cumsum(np.exp(self.log_q), axis=2)  # [K, L, V]
            pi_cdf.setflags(write=False)
            cdf.setflags(write=False)
            self._cdf = (pi_cdf, cdf)
        return self._cdf

    def marginals(self) -> "MixtureOfProducts":
        """The best product approximation (min KL(P || Q) over products): per-position marginals."""
        log_m = logsumexp(self.log_pi[:, None, None] + self.log_q, axis=0)  # [L, V]
        log_m = log_m - logsumexp(log_m, axis=1)[:, None]
        return MixtureOfProducts(np.zeros(1), log_m[None])

    def sample(self, n: int, seed: int | None = 0) -> np.ndarray:
        """Draw ``n`` full blocks: int64 [n, L]."""
        n = check_int("n", n, 0, integral_floats=True)
        rng = np.random.default_rng(seed)
        modes = rng.choice(self.K, size=n, p=_probs(self.log_pi))  # [n]
        out = np.empty((n, self.L), dtype=np.int64)
        cdf = self.sampling_cdfs()[1]  # [K, L, V]
        u = rng.random((n, self.L))
        for k in range(self.K):
            rows = np.flatnonzero(modes == k)
            for i in range(self.L):
                out[rows, i] = np.searchsorted(cdf[k, i], u[rows, i] * cdf[k, i, -1], side="right")
        np.minimum(out, self.V - 1, out=out)
        return out


def _probs(log_p: np.ndarray) -> np.ndarray:
    p = np.exp(log_p)
    return p / p.sum()


def _as_sequences(name: str, sequences) -> np.ndarray:
    """Validate a collection of equal-length integer sequences -> int64 [F, L]."""
    try:
        seqs = [np.asarray(s) for s in sequences]
    except TypeError as exc:
        raise ValueError(f"{name}: expected a list of token sequences") from exc
    if len(seqs) == 0:
        raise ValueError(f"{name}: is empty (need at least one sequence)")
    lengths = {s.shape for s in seqs}
    if len(lengths) != 1 or seqs[0].ndim != 1:
        raise ValueError(f"{name}: sequences must be 1-D and of equal length, got shapes {sorted(lengths)}")
    if seqs[0].shape[0] == 0:
        raise ValueError(f"{name}: sequences are empty (length 0)")
    return token_ids(name, np.stack(seqs))
