"""Shared Hypothesis strategies for the theory core.

Sizes stay tiny (K <= 3, L <= 4, V <= 4) so that tests/reference.py can enumerate every prefix.
Probabilities come from small integer weights by default, which produces exact zeros (-inf
log-probs) and exact ties; a continuous variant produces the generic, tie-free case.
Strategies return plain numpy arrays (or small dataclasses of them); tests build the package's
objects from them, so a failing example prints readable arrays.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import strategies as st

MAX_K, MAX_L, MAX_V = 3, 4, 4
MAX_BUDGET = 40


def _normalise_log(weights: np.ndarray) -> np.ndarray:
    """log(w / row sum) along the last axis; zero weights become -inf."""
    w = weights / weights.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        return np.log(w)


@st.composite
def weight_arrays(draw, shape: tuple[int, ...], ties: bool | None = None, zeros: bool = True):
    """Positive-row-sum weights of `shape`: small integers (ties, zeros) or continuous values."""
    if ties is None:
        ties = draw(st.booleans())
    n = int(np.prod(shape))
    if ties:
        lo = 0 if zeros else 1
        flat = draw(st.lists(st.integers(lo, 3), min_size=n, max_size=n))
        w = np.array(flat, dtype=np.float64).reshape(shape)
    else:
        flat = draw(
            st.lists(st.floats(0.05, 1.0, allow_nan=False, allow_infinity=False), min_size=n, max_size=n)
        )
        w = np.array(flat, dtype=np.float64).reshape(shape)
        if zeros:
            zero = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))).reshape(shape)
            w = np.where(zero & (draw(st.integers(0, 3)) == 0), 0.0, w)
    rows = w.reshape(-1, shape[-1])
    dead = rows.sum(axis=1) == 0
    rows[dead, 0] = 1.0  # every row needs some mass; put it on token 0
    return rows.reshape(shape)


@dataclasses.dataclass(frozen=True)
class Mixture:
    """Parameters of a mixture of products: log_pi [K], log_q [K, L, V] (normalised rows)."""

    log_pi: np.ndarray
    log_q: np.ndarray

    @property
    def K(self) -> int:
        return self.log_q.shape[0]

    @property
    def L(self) -> int:
        return self.log_q.shape[1]

    @property
    def V(self) -> int:
        return self.log_q.shape[2]

    def build(self):
        from mfd_theory.distributions import MixtureOfProducts

        return MixtureOfProducts(self.log_pi, self.log_q)


@st.composite
def mixtures(draw, max_K=MAX_K, max_L=MAX_L, max_V=MAX_V, min_V=1, K=None, ties=None, zeros=True):
    K = draw(st.integers(1, max_K)) if K is None else K
    L = draw(st.integers(1, max_L))
    V = draw(st.integers(min_V, max_V))
    log_pi = _normalise_log(draw(weight_arrays((K,), ties=ties, zeros=zeros)))
    log_q = _normalise_log(draw(weight_arrays((K, L, V), ties=ties, zeros=zeros)))  # [K, L, V]
    return Mixture(log_pi, log_q)


def products(**kw):
    return mixtures(K=1, **kw)


@dataclasses.dataclass(frozen=True)
class Futures:
    """Exact (or noisy) futures: sequences [F, L] over range(V), positive weights [F]."""

    sequences: np.ndarray
    weights: np.ndarray
    V: int
    noise: float = 0.0

    @property
    def L(self) -> int:
        return self.sequences.shape[1]

    def build(self):
        from mfd_theory.distributions import MixtureOfProducts

        return MixtureOfProducts.futures(
            # relative weights here; the builder takes them summing to one
            self.sequences, weights=self.weights / self.weights.sum(), vocab_size=self.V, noise=self.noise
        )


@st.composite
def futures(draw, max_F=MAX_K, max_L=MAX_L, max_V=MAX_V, noise=None):
    F = draw(st.integers(1, max_F))
    L = draw(st.integers(1, max_L))
    V = draw(st.integers(1, max_V))
    seqs = np.array(
        draw(st.lists(st.lists(st.integers(0, V - 1), min_size=L, max_size=L), min_size=F, max_size=F)),
        dtype=np.int64,
    )  # [F, L]
    weights = np.array(draw(st.lists(st.integers(1, 3), min_size=F, max_size=F)), dtype=np.float64)
    if noise is None:
        noise = draw(st.sampled_from([0.0, 0.0, 0.1]))
    return Futures(seqs, weights, V, noise)


def targets(**kw):
    """Any target the calculators accept: a mixture of products or a set of futures."""
    return st.one_of(mixtures(**kw), futures())


def budgets(max_budget=MAX_BUDGET):
    return st.integers(1, max_budget)


@dataclasses.dataclass(frozen=True)
class Candidates:
    """Top-k candidates per mode and position, as a GPU drafter hands them over.

    values [K, L, k] (log-probs, unnormalised, may be -inf), token_ids [K, L, k] (distinct per row).
    """

    log_pi: np.ndarray
    values: np.ndarray
    token_ids: np.ndarray


@st.composite
def candidates(draw, K=None, max_K=MAX_K, max_L=MAX_L, max_k=MAX_V, id_pool=6, large_ids=None, L=None, k=None):
    K = draw(st.integers(1, max_K)) if K is None else K
    L = draw(st.integers(1, max_L)) if L is None else L
    k = draw(st.integers(1, max_k)) if k is None else k
    if large_ids is None:
        large_ids = draw(st.booleans())
    pool = max(id_pool, k)
    offset = 151_000 if large_ids else 0  # ids from a real vocabulary's tail
    ids = np.empty((K, L, k), dtype=np.int64)
    for m in range(K):
        for i in range(L):
            ids[m, i] = draw(st.permutations(range(pool)))[:k]
    ids += offset
    vals = _normalise_log(draw(weight_arrays((K, L, k))))  # [K, L, k]
    if draw(st.booleans()):
        order = np.argsort(-vals, axis=-1, kind="stable")  # sorted descending, like torch.topk
        vals = np.take_along_axis(vals, order, axis=-1)
        ids = np.take_along_axis(ids, order, axis=-1)
    log_pi = _normalise_log(draw(weight_arrays((K,))))  # zero-weight modes are legal
    return Candidates(log_pi, vals, ids)


@st.composite
def candidate_batches(draw, max_B=4, K=None, max_K=MAX_K, max_L=MAX_L, max_k=MAX_V):
    """B requests' candidates of one shape (a batch's round): a list of :class:`Candidates` and
    each request's depth (0 included: a request without a tree) and budget."""
    B = draw(st.integers(1, max_B))
    K = draw(st.integers(1, max_K)) if K is None else K
    L, k = draw(st.integers(1, max_L)), draw(st.integers(1, max_k))
    large = draw(st.booleans())
    cands = [draw(candidates(K=K, L=L, k=k, large_ids=large)) for _ in range(B)]
    depths = draw(st.lists(st.integers(0, L), min_size=B, max_size=B))
    budgets_ = draw(st.lists(budgets(), min_size=B, max_size=B))
    return cands, depths, budgets_


@st.composite
def prefix_closed_paths(draw, L: int, V: int, max_nodes: int = MAX_BUDGET):
    """A random prefix-closed set of paths (grown one child at a time from the root)."""
    n = draw(st.integers(1, max_nodes))
    paths: list[tuple[int, ...]] = []
    present: set[tuple[int, ...]] = set()
    for _ in range(n):
        frontier = [
            p + (v,)
            for p in [()] + paths
            if len(p) < L
            for v in range(V)
            if p + (v,) not in present
        ]
        if not frontier:
            break
        p = frontier[draw(st.integers(0, len(frontier) - 1))]
        paths.append(p)
        present.add(p)
    return paths


def generic_log_q(seed: int, shape: tuple[int, ...], scale: float = 2.0) -> np.ndarray:
    """Normalised log-probs from Gaussian logits: no ties and no zeros (almost surely)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=shape) * scale
    z -= z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@dataclasses.dataclass(frozen=True)
class TableDrafter:
    """A path-dependent drafter given by one row per parent prefix: rows[prefix] = log q(. | prefix).

    Any function of the whole path, so it exercises path_tree beyond what MemoryDrafter produces;
    integer weights give ties and zeros (-inf) under parents of every kind.
    """

    L: int
    V: int
    rows: dict

    def log_cond(self, prefix) -> np.ndarray:
        return self.rows[tuple(int(t) for t in prefix)]


@st.composite
def table_drafters(draw, max_L=3, max_V=3, ties=None):
    L = draw(st.integers(1, max_L))
    V = draw(st.integers(1, max_V))
    parents = [()]
    for d in range(1, L):
        parents += [p + (v,) for p in parents if len(p) == d - 1 for v in range(V)]
    w = draw(weight_arrays((len(parents), V), ties=ties))  # [parents, V]
    logs = _normalise_log(w)
    return TableDrafter(L, V, {p: logs[i] for i, p in enumerate(parents)})
