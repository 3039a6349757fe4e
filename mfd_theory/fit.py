"""Fitting K-mode mixture-of-products drafters by EM.

:func:`fit_mixture` fits target samples, :func:`fit_mixture_exact` an exact ``MixtureOfProducts``
target; both run soft EM (MAP-EM) or hard (winner-take-all) EM with restarts, and :class:`FitInfo`
keeps the penalised objective. :func:`fit_mixture_rows` fits sampled paths together with the
target's exact conditionals along them (:func:`rb_marginals` is its K = 1). The settings, the prior
and the objectives: docs/design.md ("Fitting mixture drafters by EM").
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np

from mfd_theory._kernels.fit import _em, _em_rows, _log_likelihood
from mfd_theory.distributions import MixtureOfProducts
from mfd_theory.validation import check_int, check_real, token_ids

__all__ = ["FitInfo", "em_kernel", "fit_mixture", "fit_mixture_exact", "fit_mixture_rows", "log_likelihood",
           "path_log_likelihoods", "rb_marginals"]

Assignment = Literal["soft", "hard"]


@dataclasses.dataclass(frozen=True)
class FitInfo:
    """Diagnostics of a fit: the objective of every restart and the trace of the winner.

    ``objective`` is the penalised objective per block: the weighted mean log-likelihood of the
    mixture (soft) or of each block's best mode (hard), plus the Dirichlet log prior divided by
    the total weight (see docs/design.md, "Fitting mixture drafters by EM"; 0 when ``smoothing = 0``).
    """

    assignment: str
    objectives: tuple[float, ...]  # one per restart (after screening; the winner's when done)
    best_restart: int
    trace: tuple[float, ...]  # objective per iteration of the best restart
    n_iter: int
    n_unique: int  # distinct rows EM actually ran on

    @property
    def objective(self) -> float:
        return self.objectives[self.best_restart]


def _check_common(K, smoothing, n_restarts, max_iter, tol, assignment):
    K = check_int("K", K, 1)
    smoothing = check_real("smoothing", smoothing, 0, 1, high_open=True)
    n_restarts = check_int("n_restarts", n_restarts, 1)
    max_iter = check_int("max_iter", max_iter, 1)
    tol = check_real("tol", tol, 0)
    if assignment not in ("soft", "hard"):
        raise ValueError(f"assignment: must be 'soft' or 'hard', got {assignment!r}")
    return K, float(smoothing), n_restarts, max_iter, float(tol)


def _check_samples(samples, vocab_size) -> np.ndarray:
    V = check_int("vocab_size", vocab_size, 1)
    x = np.asarray(samples)
    if x.ndim != 2:
        raise ValueError(f"samples: expected a 2-D array [n, L], got shape {x.shape}")
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"samples: need at least one row and one position, got shape {x.shape}")
    x = token_ids("samples", x)
    lo, hi = int(x.min()), int(x.max())
    if lo < 0 or hi >= V:
        raise ValueError(f"samples: token ids must lie in [0, vocab_size={V}), found range [{lo}, {hi}]")
    return np.ascontiguousarray(x, dtype=np.int64)


def _check_weights(weights, n: int) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(f"weights: expected shape ({n},), got {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights: must be finite and non-negative")
    if w.sum() <= 0:
        raise ValueError("weights: must not all be zero")
    return w


def _unique_rows(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Collapse duplicate rows, summing their weights (EM's cost then scales with distinct rows)."""
    uniq, inverse = np.unique(x, axis=0, return_inverse=True)  # [U, L], [n]
    wu = np.bincount(inverse.ravel(), weights=w, minlength=uniq.shape[0])  # [U]
    keep = wu > 0
    return np.ascontiguousarray(uniq[keep]), np.ascontiguousarray(wu[keep])


def _seed_rows(x: np.ndarray, w: np.ndarray, K: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding under Hamming distance: K row indices, spread across the modes."""
    U = x.shape[0]
    p = w / w.sum()
    chosen = [int(rng.choice(U, p=p))]
    dist = np.sum(x != x[chosen[0]], axis=1).astype(np.float64)  # [U]
    for _ in range(1, K):
        score = w * dist**2
        if score.sum() <= 0:  # fewer distinct rows than modes: repeat by weight
            chosen.append(int(rng.choice(U, p=p)))
        else:
            chosen.append(int(rng.choice(U, p=score / score.sum())))
        dist = np.minimum(dist, np.sum(x != x[chosen[-1]], axis=1))
    return np.asarray(chosen)


def _marginal_counts(x: np.ndarray, w: np.ndarray, V: int) -> np.ndarray:
    L = x.shape[1]
    out = np.zeros((L, V))  # [L, V]
    for i in range(L):
        out[i] = np.bincount(x[:, i], weights=w, minlength=V)
    return out / w.sum()


def _init(x, w, K, V, rng, blend: float = 0.5, marg=None):
    """Each mode starts half on one seed row, half on the smoothed marginals (``marg`` [L, V], by
    default the rows' token frequencies)."""
    marg = _marginal_counts(x, w, V) if marg is None else marg  # [L, V]
    marg = 0.9 * marg + 0.1 / V
    rows = _seed_rows(x, w, K, rng)
    L = x.shape[1]
    q = np.broadcast_to(blend * marg, (K, L, V)).copy()  # [K, L, V]
    for k, r in enumerate(rows):
        q[k, np.arange(L), x[r]] += 1.0 - blend
    return np.full(K, -math.log(K)), np.log(q)


def _run_restarts(x, w, K, V, seed, smoothing, n_restarts, max_iter, tol, hard, screen_iter):
    """Restarts from k-means++ seeds; with ``screen_iter`` > 0 every restart first runs that many
    iterations and only the best one continues to convergence (EM's early iterations already
    separate good starts from bad ones, so the losers need not be run to the end)."""
    rng = np.random.default_rng(seed)
    if K == 1:
        n_restarts = 1  # the marginals are the unique optimum
    first = max_iter if (screen_iter <= 0 or n_restarts == 1) else min(screen_iter, max_iter)
    runs = []
    for r in range(n_restarts):
        log_pi, log_q = _init(x, w, K, V, rng)
        trace, n_iter = _em(x, w, log_pi, log_q, first, tol, smoothing, hard)
        runs.append([float(trace[n_iter]), r, log_pi, log_q, trace[: n_iter + 1], n_iter])
    best = max(runs, key=lambda run: run[0])
    _, r, log_pi, log_q, trace, n_iter = best
    if n_iter == first and first < max_iter:  # stopped by the screening cap, not by convergence
        more, n_more = _em(x, w, log_pi, log_q, max_iter - first, tol, smoothing, hard)
        trace = np.concatenate([trace, more[1 : n_more + 1]])  # more[0] repeats trace[-1]
        n_iter += n_more
        best[0] = float(trace[-1])
    info = FitInfo(
        assignment="hard" if hard else "soft",
        objectives=tuple(run[0] for run in runs),
        best_restart=r,
        trace=tuple(float(t) for t in trace),
        n_iter=int(n_iter),
        n_unique=int(x.shape[0]),
    )
    return log_pi, log_q, info


def fit_mixture(
    samples,
    K: int,
    vocab_size: int,
    seed: int = 0,
    *,
    weights=None,
    assignment: Assignment = "soft",
    smoothing: float = 1e-4,
    n_restarts: int = 4,
    max_iter: int = 200,
    tol: float = 1e-7,
    screen_iter: int = 10,
    return_info: bool = False,
):
    """Fit a K-mode mixture-of-products drafter to target blocks by EM.

    Parameters
    ----------
    samples : int array [n, L]
        Target blocks, token ids in ``[0, vocab_size)``.
    K : int
        Number of modes (>= 1). ``K = 1`` returns the smoothed (MAP) per-position marginals.
    vocab_size : int
        V; the fitted ``log_q`` has shape [K, L, V].
    seed : int
        Seeds the k-means++ initialisation of every restart.
    weights : float array [n], optional
        Per-row weights (e.g. probabilities of distinct sequences); default all ones.
    assignment : "soft" or "hard"
        Soft: MAP-EM (maximum likelihood when ``smoothing = 0``). Hard: winner-take-all (each
        block trains only its best mode; pi is the smoothed share of blocks each mode wins).
    smoothing : float in [0, 1)
        Strength of the Dirichlet prior: ``smoothing * n / V`` pseudo-counts on every token of
        every mode's row and ``smoothing * n / K`` on every mode weight (n = total weight). A
        mode's estimate is ``(counts + beta) / (n_k + V beta)``, so a token no sample shows keeps
        about ``smoothing / V`` (exactly ``smoothing / (V (1 + smoothing))`` for K = 1).
    n_restarts, max_iter, tol
        Restarts (best objective kept), iteration cap, and the stopping threshold on the change of
        the penalised objective per block (soft; hard stops when no block changes mode).
    screen_iter : int
        Every restart runs this many iterations, then only the best continues (0: run every
        restart to convergence).
    return_info : bool
        Also return a :class:`FitInfo`.

    Returns
    -------
    MixtureOfProducts, or (MixtureOfProducts, FitInfo) when ``return_info``.
    """
    K, smoothing, n_restarts, max_iter, tol = _check_common(
        K, smoothing, n_restarts, max_iter, tol, assignment
    )
    x = _check_samples(samples, vocab_size)  # [n, L]
    w = np.ones(x.shape[0]) if weights is None else _check_weights(weights, x.shape[0])  # [n]
    xu, wu = _unique_rows(x, w)  # [U, L], [U]
    screen_iter = check_int("screen_iter", screen_iter, 0)
    log_pi, log_q, info = _run_restarts(
        xu, wu, K, int(vocab_size), seed, smoothing, n_restarts, max_iter, tol, assignment == "hard", screen_iter
    )
    model = MixtureOfProducts(log_pi, log_q)
    return (model, info) if return_info else model


def em_kernel(samples, weights, log_pi, log_q, max_iter: int, smoothing: float = 1e-4, hard: bool = False):
    """EM iterations alone, for benchmarks that time them apart from :func:`fit_mixture`'s checks,
    deduplication and restarts: ``samples`` int64 [n, L], ``weights`` [n], ``log_pi`` [K] and
    ``log_q`` [K, L, V] (updated in place), no checks. Returns (objective trace, iterations)."""
    return _em(samples, weights, log_pi, log_q, int(max_iter), 0.0, float(smoothing), bool(hard))


def _support_rows(target: MixtureOfProducts, max_support: int) -> np.ndarray | None:
    """All sequences with P > 0 (union over components), or None when there are too many."""
    q = np.exp(target.log_q)  # [F, L, V]
    pi = np.exp(target.log_pi)  # [F]
    blocks = []
    total = 0
    for f in range(target.K):
        if pi[f] == 0:
            continue
        supports = [np.flatnonzero(q[f, i] > 0) for i in range(target.L)]
        size = math.prod(len(s) for s in supports)
        total += size
        if total > max_support:
            return None
        grids = np.meshgrid(*supports, indexing="ij")
        blocks.append(np.stack([g.ravel() for g in grids], axis=1))  # [size, L]
    rows = np.unique(np.concatenate(blocks, axis=0), axis=0)
    return np.ascontiguousarray(rows, dtype=np.int64)


def _component_em(target, K, seed, smoothing, n_restarts, max_iter, tol):
    """EM whose units are the target's components (weight pi_f, distribution P_f).

    E-step: each component goes wholly to the mode with the highest expected log-likelihood
    E_{x~P_f} log Q_k(x) (the limit of EM on n -> infinity samples when a component's blocks move
    together); M-step: each mode becomes the weight-averaged per-position distribution of its
    components. With K >= F this recovers the target; with K < F it merges components. Used when
    the target's support is too large to enumerate.
    """
    p = np.exp(target.log_q)  # [F, L, V]
    pf = np.exp(target.log_pi)  # [F]
    F, L, V = p.shape
    rng = np.random.default_rng(seed)
    best = None
    objectives = []
    for r in range(1 if K == 1 else n_restarts):
        # seed modes on distinct components (k-means++ on total-variation distance)
        first = int(rng.choice(F, p=pf / pf.sum()))
        rows = [first]
        dist = 0.5 * np.abs(p - p[first]).sum(axis=(1, 2))  # [F]
        for _ in range(1, K):
            score = pf * dist**2
            nxt = int(rng.choice(F, p=score / score.sum())) if score.sum() > 0 else int(rng.choice(F, p=pf / pf.sum()))
            rows.append(nxt)
            dist = np.minimum(dist, 0.5 * np.abs(p - p[nxt]).sum(axis=(1, 2)))
        marg = np.einsum("f,fiv->iv", pf, p)  # [L, V]
        q = 0.5 * p[rows] + 0.5 * (0.9 * marg + 0.1 / V)  # [K, L, V]
        log_pi = np.full(K, -math.log(K))
        trace = []
        for _ in range(max_iter + 1):
            log_q = np.log(q)
            # expected log-likelihood of component f under mode k
            ell = np.einsum("fiv,kiv->fk", p, np.maximum(log_q, -1e30))  # [F, K] (0 * log 0 -> 0)
            # the infinite-sample limit: a component's blocks are so many that they all go to
            # the mode with the best expected log-likelihood (soft or hard alike)
            a = np.argmax(ell, axis=1)  # [F]
            resp = np.zeros((F, K))
            resp[np.arange(F), a] = 1.0
            obj = float(np.sum(pf * ell.max(axis=1)) / pf.sum())
            trace.append(obj)
            if len(trace) > 1 and abs(trace[-1] - trace[-2]) <= tol * max(1.0, abs(obj)):
                break
            wk = pf[:, None] * resp  # [F, K]
            nk = wk.sum(axis=0)  # [K]
            # the same Dirichlet MAP step as the sample EM, with total weight sum_f pi_f
            W, beta, gamma = pf.sum(), smoothing * pf.sum() / V, smoothing * pf.sum() / K
            counts = np.einsum("fk,fiv->kiv", wk, p)  # [K, L, V]
            denom = nk + V * beta  # [K]
            q = np.where(denom[:, None, None] > 0, counts + beta, 1.0) / np.where(denom > 0, denom, V)[:, None, None]
            pk = (nk + gamma) / (W + K * gamma)
            with np.errstate(divide="ignore"):
                log_pi = np.log(pk)
        objectives.append(trace[-1])
        if best is None or trace[-1] > best[0]:
            best = (trace[-1], r, log_pi.copy(), np.log(q), trace)
    _, r, log_pi, log_q, trace = best
    info = FitInfo(
        assignment="components",
        objectives=tuple(objectives),
        best_restart=r,
        trace=tuple(trace),
        n_iter=len(trace) - 1,
        n_unique=F,
    )
    return log_pi, log_q, info


def fit_mixture_exact(
    target: MixtureOfProducts,
    K: int,
    seed: int = 0,
    *,
    method: Literal["auto", "support", "components"] = "auto",
    max_support: int = 200_000,
    assignment: Assignment = "soft",
    smoothing: float = 1e-4,
    n_restarts: int = 4,
    max_iter: int = 200,
    tol: float = 1e-9,
    screen_iter: int = 10,
    return_info: bool = False,
):
    """Fit a K-mode drafter to an exact target, with no sampling noise.

    ``method="support"`` runs EM over every sequence the target gives positive probability,
    weighted by that probability (the infinite-sample limit of :func:`fit_mixture`); it needs the
    support to hold at most ``max_support`` sequences (true for exact futures, false for noisy
    ones). ``method="components"`` runs EM whose units are the target's own components, each
    moving to one mode as a whole (see :func:`_component_em`; ``assignment`` does not apply);
    ``"auto"`` picks the support when it fits. Other arguments as in :func:`fit_mixture`.
    """
    if not isinstance(target, MixtureOfProducts):
        raise ValueError(f"target: expected a MixtureOfProducts, got {type(target).__name__}")
    K, smoothing, n_restarts, max_iter, tol = _check_common(
        K, smoothing, n_restarts, max_iter, tol, assignment
    )
    if method not in ("auto", "support", "components"):
        raise ValueError(f"method: must be 'auto', 'support' or 'components', got {method!r}")
    max_support = check_int("max_support", max_support, 1)
    screen_iter = check_int("screen_iter", screen_iter, 0)
    hard = assignment == "hard"
    rows = None if method == "components" else _support_rows(target, max_support)
    if method == "support" and rows is None:
        raise ValueError(
            f"target: its support has more than max_support={max_support} sequences; "
            "use method='components' or sample it"
        )
    if rows is None:
        log_pi, log_q, info = _component_em(target, K, seed, smoothing, n_restarts, max_iter, tol)
    else:
        w = np.empty(rows.shape[0])
        _log_likelihood(rows, np.ascontiguousarray(target.log_pi), np.ascontiguousarray(target.log_q), w)
        w = np.exp(w)  # [U] exact probabilities
        log_pi, log_q, info = _run_restarts(
            rows, w, K, target.V, seed, smoothing, n_restarts, max_iter, tol, hard, screen_iter
        )
    model = MixtureOfProducts(log_pi, log_q)
    return (model, info) if return_info else model


def path_log_likelihoods(model: MixtureOfProducts, samples) -> np.ndarray:
    """log Q(x) [n] of every block of ``samples`` [n, L] under a mixture drafter."""
    if not isinstance(model, MixtureOfProducts):
        raise ValueError(f"model: expected a MixtureOfProducts, got {type(model).__name__}")
    x = _check_samples(samples, model.V)
    if x.shape[1] != model.L:
        raise ValueError(f"samples: expected {model.L} positions, got {x.shape[1]}")
    out = np.empty(x.shape[0])
    _log_likelihood(x, np.ascontiguousarray(model.log_pi), np.ascontiguousarray(model.log_q), out)
    return out


def log_likelihood(model: MixtureOfProducts, samples, weights=None) -> float:
    """Weighted mean log Q(x) per block of ``samples`` [n, L] under a mixture drafter."""
    out = path_log_likelihoods(model, samples)
    w = np.ones(out.shape[0]) if weights is None else _check_weights(weights, out.shape[0])
    with np.errstate(invalid="ignore"):
        return float(np.sum(w * out) / w.sum()) if np.all(np.isfinite(out[w > 0])) else -math.inf


# ------------------------------------------------------------------ paths with their exact conditionals
def _check_rows(samples, row_ids, row_probs, vocab_size, tail=None):
    """(x [n, L], ids [n, L, k], p [n, L, k], g [n, L], tail [L, V]) checked: an unlisted token v of
    row (m, i) has probability g[m, i] tail[i, v], the row's remaining mass shaped like ``tail``
    (uniform by default) over the tokens the row does not list."""
    V = check_int("vocab_size", vocab_size, 1)
    x = _check_samples(samples, V)
    n, L = x.shape
    ids = np.asarray(row_ids)
    if ids.ndim != 3 or ids.shape[:2] != (n, L) or ids.shape[2] < 1:
        raise ValueError(f"row_ids: expected shape [{n}, {L}, k] with k >= 1 (the samples' [n, L]), got {ids.shape}")
    ids = token_ids("row_ids", ids)
    k = ids.shape[2]
    if k > V:
        raise ValueError(f"row_ids: lists {k} tokens per row, more than vocab_size = {V}")
    if ids.min() < 0 or ids.max() >= V:
        raise ValueError(f"row_ids: token ids must lie in [0, vocab_size={V})")
    srt = np.sort(ids, axis=2)
    if (srt[:, :, 1:] == srt[:, :, :-1]).any():
        raise ValueError("row_ids: a token appears twice in one row")
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    p = np.asarray(row_probs, dtype=np.float64)
    if p.shape != ids.shape:
        raise ValueError(f"row_probs: expected shape {ids.shape} (row_ids'), got {p.shape}")
    if not np.isfinite(p).all() or (p < 0).any():
        raise ValueError("row_probs: must be finite probabilities >= 0")
    total = p.sum(axis=2)  # [n, L]
    if (total > 1 + 1e-5).any():
        raise ValueError(f"row_probs: a row's listed probabilities sum to {total.max():.6g} > 1")
    if tail is None:
        shape = np.full((L, V), 1.0 / V)
    else:
        shape = np.asarray(tail, dtype=np.float64)
        if shape.shape != (L, V):
            raise ValueError(f"tail: expected shape [{L}, {V}] (positions, vocabulary), got {shape.shape}")
        if not np.isfinite(shape).all() or (shape < 0).any() or (shape.sum(axis=1) <= 0).any():
            raise ValueError("tail: must hold finite weights >= 0, some positive at every position")
        shape = shape / shape.sum(axis=1, keepdims=True)
    if k == V:
        if (np.abs(total - 1) > 1e-5).any():
            raise ValueError("row_probs: rows that list every token must sum to 1")
        g = np.zeros((n, L))
    else:
        free = 1.0 - np.take_along_axis(np.broadcast_to(shape, (n, L, V)), ids, axis=2).sum(axis=2)  # [n, L]
        g = np.where(free > 1e-12, np.clip(1.0 - total, 0.0, None) / np.maximum(free, 1e-12), 0.0)
    return x, ids, np.ascontiguousarray(p), np.ascontiguousarray(g), np.ascontiguousarray(shape)


def _dense_mean(ids, p, g, tail) -> np.ndarray:
    """The mean over paths of the dense rows ``c_{m,i}`` [L, V] that ``ids``, ``p``, ``g``, ``tail`` describe."""
    n, L, _ = ids.shape
    out = g.mean(axis=0)[:, None] * tail  # [L, V]: the unlisted mass, shaped like the tail
    for i in range(L):
        listed = ids[:, i]  # [n, k]
        np.add.at(out[i], listed.ravel(), (p[:, i] - g[:, i, None] * tail[i, listed]).ravel() / n)
    return out


def rb_marginals(row_ids, row_probs, vocab_size, tail=None) -> np.ndarray:
    """Per-position marginals [L, V] from the target's exact conditionals along sampled paths: the
    mean of each position's rows (Rao-Blackwellised: unbiased like token counts, with no token
    left at 0 that a row gives mass). ``row_ids`` / ``row_probs`` [n, L, k] and ``tail`` as for
    :func:`fit_mixture_rows`."""
    ids = np.asarray(row_ids)
    if ids.ndim != 3:
        raise ValueError(f"row_ids: expected shape [n, L, k], got {ids.shape}")
    _, ids, p, g, shape = _check_rows(np.zeros(ids.shape[:2], dtype=np.int64), ids, row_probs, vocab_size, tail)
    return _dense_mean(ids, p, g, shape)


def fit_mixture_rows(
    samples,
    row_ids,
    row_probs,
    K: int,
    vocab_size: int,
    seed: int = 0,
    *,
    n_restarts: int = 4,
    max_iter: int = 100,
    tol: float = 1e-7,
    screen_iter: int = 10,
    floor: float = 1e-9,
    tail=None,
    return_info: bool = False,
):
    """Fit a K-mode mixture of products to sampled paths and the target's exact conditionals along them.

    Parameters
    ----------
    samples : int array [n, L]
        Paths sampled from the target.
    row_ids, row_probs : arrays [n, L, k]
        Path m's conditional at position i, ``P(. | context, x_m,<i)``: its k listed tokens and their
        probabilities (k = V: the whole row); the row's remaining mass goes to the tokens it does not
        list in proportion to ``tail``.
    K, vocab_size, seed
        Modes, V, and the seed of the restarts' k-means++ starts.
    n_restarts, max_iter, tol, screen_iter
        As in :func:`fit_mixture`; the restart with the best mean path log-likelihood is kept.
    floor : float in (0, 1)
        Every mode's rows are mixed with this share of the uniform row (no path token at -inf).
    tail : array [L, V], optional
        The shape of each row's unlisted mass at each position (default uniform); the exact
        marginals, when known, keep a truncated row's tail close to the truth.

    Returns
    -------
    MixtureOfProducts (and a :class:`FitInfo` with ``return_info``; its objective is the mean
    log Q(x) of the paths, with no prior). The EM (:func:`mfd_theory._kernels.fit._em_rows`) weights
    each path by its mode responsibility and averages the exact rows, with a count correction that
    keeps the step unbiased for plain EM's: docs/design.md ("Fitting mixture drafters by EM").
    K = 1 returns :func:`rb_marginals` (mixed with the floor).
    """
    K = check_int("K", K, 1)
    n_restarts = check_int("n_restarts", n_restarts, 1)
    max_iter = check_int("max_iter", max_iter, 1)
    tol = float(check_real("tol", tol, 0))
    screen_iter = check_int("screen_iter", screen_iter, 0)
    floor = float(check_real("floor", floor, 0, 1, low_open=True, high_open=True))
    x, ids, p, g, shape = _check_rows(samples, row_ids, row_probs, vocab_size, tail)
    V = int(vocab_size)
    marg = _dense_mean(ids, p, g, shape)  # [L, V]
    rng = np.random.default_rng(seed)
    w = np.ones(x.shape[0])
    if K == 1:
        n_restarts = 1  # one iteration from anywhere gives the marginals
    first = max_iter if (screen_iter <= 0 or n_restarts == 1) else min(screen_iter, max_iter)
    runs = []
    for r in range(n_restarts):
        log_pi, log_q = _init(x, w, K, V, rng, marg=marg)
        trace, n_iter = _em_rows(x, ids, p, g, shape, log_pi, log_q, first, tol, floor)
        runs.append([float(trace[n_iter]), r, log_pi, log_q, trace[: n_iter + 1], n_iter])
    best = max(runs, key=lambda run: run[0])
    _, r, log_pi, log_q, trace, n_iter = best
    if n_iter == first and first < max_iter:  # stopped by the screening cap, not by convergence
        more, n_more = _em_rows(x, ids, p, g, shape, log_pi, log_q, max_iter - first, tol, floor)
        trace = np.concatenate([trace, more[1: n_more + 1]])
        n_iter += n_more
        best[0] = float(trace[-1])
    info = FitInfo(assignment="rows", objectives=tuple(run[0] for run in runs), best_restart=r,
                   trace=tuple(float(t) for t in trace), n_iter=int(n_iter), n_unique=int(x.shape[0]))
    model = MixtureOfProducts(log_pi - np.logaddexp.reduce(log_pi), log_q)
    return (model, info) if return_info else model
