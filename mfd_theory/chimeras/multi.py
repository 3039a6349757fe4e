"""F >= 3 futures: the minimum number of full-length chimeras, pattern by pattern.

Disagreement patterns (column types) and their futures, the pairwise bound, the rearrangement
lower bound (a minimum hitting set solved by HiGHS) against the best drafter a search finds
(:func:`min_chimeras_multi`), and the conjectured all-distinct formula. What is proven, what is
computer-assisted and what is only observed: docs/chimeras.md, section 2.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np

from mfd_theory.chimeras._check import _check_sequences
from mfd_theory.chimeras.two_futures import TIE_TOL
from mfd_theory.validation import check_int

__all__ = ["MultiFutureMinimum", "all_patterns", "canonical_pattern", "column_pattern", "column_types",
           "conjectured_min_all_distinct", "futures_from_pattern", "min_chimeras_multi", "pairwise_bound"]


def _partition_label(col: np.ndarray) -> str:
    """'01|2': futures 0 and 1 share a token at this position, future 2 has another."""
    blocks: dict[int, list[int]] = {}
    for f, tok in enumerate(col.tolist()):
        blocks.setdefault(tok, []).append(f)
    parts = sorted(("".join(str(f) for f in b) for b in blocks.values()), key=lambda s: (s[0], s))
    return "|".join(parts)


def column_pattern(futures: Any) -> dict[str, int]:
    """The disagreement pattern of F futures [F, L] (or a MixtureOfProducts: its modes' most likely
    sequences): column type -> number of positions.

    A column type is the partition of the futures by their token at that position, written like
    '01|2' (futures 0 and 1 agree, 2 differs); positions where all agree are not counted.
    For two futures the pattern is {'0|1': m}.
    """
    seqs = _check_sequences(futures, name="futures")
    out: dict[str, int] = {}
    for i in range(seqs.shape[1]):
        if np.unique(seqs[:, i]).size > 1:
            lab = _partition_label(seqs[:, i])
            out[lab] = out.get(lab, 0) + 1
    return dict(sorted(out.items()))


def futures_from_pattern(pattern: dict[str, int], F: int | None = None) -> np.ndarray:
    """int64 [F, m]: futures with exactly the given column pattern (token = block index)."""
    if not pattern:
        raise ValueError("pattern: is empty (the futures would be identical)")
    labels = list(pattern)
    members = sorted({int(c) for lab in labels for c in lab if c.isdigit()})
    F = len(members) if F is None else check_int("F", F, 2)
    cols = []
    for lab, n in pattern.items():
        check_int(f"pattern[{lab!r}]", n, 0)
        blocks = lab.split("|")
        seen = sorted(int(c) for b in blocks for c in b)
        if seen != list(range(F)) or len(blocks) < 2:
            raise ValueError(f"pattern: {lab!r} is not a partition of futures 0..{F - 1} into >= 2 blocks")
        col = np.empty(F, dtype=np.int64)
        for bi, b in enumerate(blocks):
            col[[int(c) for c in b]] = bi
        cols.extend([col] * n)
    fut = np.stack(cols, axis=1) if cols else np.zeros((F, 0), dtype=np.int64)  # [F, m]
    if len({tuple(r) for r in fut.tolist()}) != F:
        raise ValueError("pattern: leaves two futures identical (no column separates them)")
    return fut


def canonical_pattern(pattern: dict[str, int], F: int) -> tuple[tuple[str, int], ...]:
    """The pattern under the relabelling of futures that sorts smallest (patterns equal up to
    renaming the futures have the same minimum)."""
    best = None
    fut = futures_from_pattern(pattern, F)
    for perm in itertools.permutations(range(F)):
        key = tuple(sorted(column_pattern(fut[list(perm)]).items()))
        if best is None or key < best:
            best = key
    return best


class _Grid:
    """The splice grid of F futures over their disagreement positions."""

    def __init__(self, futures: np.ndarray):
        self.futures = futures
        self.pos = np.flatnonzero((futures != futures[:1]).any(axis=0))  # [P]
        self.cols = [np.unique(futures[:, i]) for i in self.pos]
        sizes = [c.size for c in self.cols]
        self.G = int(np.prod(sizes)) if sizes else 1
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        # every grid point as per-position column indices (mixed radix), [G, P]
        idx = np.indices(sizes).reshape(len(sizes), -1).T if sizes else np.zeros((1, 0), np.int64)
        self.idx = idx.astype(np.int64)
        self.feat = self.idx + self.offsets[:-1][None, :]  # [G, P] feature id of each token
        fidx = np.stack([np.searchsorted(c, futures[:, i]) for c, i in zip(self.cols, self.pos)], axis=1) \
            if sizes else np.zeros((futures.shape[0], 0), np.int64)  # [F, P]
        radix = np.concatenate([np.cumprod(sizes[::-1])[::-1][1:], [1]]).astype(np.int64) if sizes else np.zeros(0, np.int64)
        self.radix = radix
        self.future_ids = (fidx * radix[None, :]).sum(axis=1)  # [F] grid index of each future
        self.future_idx = fidx
        self.is_future = np.zeros(self.G, dtype=np.bool_)
        self.is_future[self.future_ids] = True
        self.D = int(self.offsets[-1])

    def count(self, w: np.ndarray, tol: float = TIE_TOL) -> int:
        """Grid points other than the futures scoring at least min over futures (ties count in)."""
        s = w[self.feat].sum(axis=1)  # [G]
        t = s[self.is_future].min()
        return int(((s >= t - tol * (1 + abs(t))) & ~self.is_future).sum())


@dataclasses.dataclass(frozen=True)
class MultiFutureMinimum:
    """Minimum full-length chimeras for F futures: proven lower bound vs best drafter found."""

    F: int
    pattern: dict[str, int]
    splices: int  # grid points other than the futures (the most a tree can hold)
    lower_bound: int | None  # minimum hitting set of the rearrangement sets (None: not computed)
    observed_min: int  # the fewest chimeras a drafter found by search keeps (an upper bound)
    pairwise_bound: int  # the two-future bound applied to every pair (proven, weaker)
    n_sets: int  # rearrangement sets used for the lower bound
    witness_log_q: np.ndarray | None = None  # a drafter [P, V] attaining observed_min

    @property
    def proven(self) -> bool:
        """True when the lower bound meets a drafter that attains it: the minimum is exact.

        Computer-assisted: the bound is an integer program solved by HiGHS, whose optimality is
        not independently certified."""
        return self.lower_bound is not None and self.lower_bound == self.observed_min


def pairwise_bound(futures: Any) -> int:
    """max over pairs of 2^(m_jk - 1) - 1 - (number of other futures that are splices of j, k).

    Proven: the complementary pairs of j and k's splices are disjoint, each holds a kept splice,
    and another future can fill at most one of them.
    """
    seqs = _check_sequences(futures, name="futures")
    F = seqs.shape[0]
    best = 0
    for j, k in itertools.combinations(range(F), 2):
        m = int((seqs[j] != seqs[k]).sum())
        if m == 0:
            raise ValueError(f"futures: rows {j} and {k} are identical")
        inside = sum(
            bool(np.all((seqs[l] == seqs[j]) | (seqs[l] == seqs[k]))) for l in range(F) if l not in (j, k)
        )
        best = max(best, (1 << (m - 1)) - 1 - inside)
    return best


def _rearrangement_sets(grid: _Grid, max_sets: int) -> list[np.ndarray]:
    """Grid-index sets whose columns rearrange those of a subset of the futures, minus any set
    that contains a future (a future may be the member that clears the threshold)."""
    F = grid.futures.shape[0]
    fidx = grid.future_idx  # [F, P]
    out: dict[tuple[int, ...], None] = {}
    for r in range(2, F + 1):
        for S in itertools.combinations(range(F), r):
            S = list(S)
            Q = [i for i in range(fidx.shape[1]) if np.unique(fidx[S, i]).size > 1]
            if not Q:
                continue
            perms = list(itertools.permutations(range(r)))
            # the first varying column's order only relabels the set's members: fix it
            n_sets = len(perms) ** (len(Q) - 1)
            if len(out) + n_sets > max_sets:
                raise ValueError(f"max_sets: the rearrangement sets exceed {max_sets}; use a smaller pattern")
            base = fidx[S[0]].copy()
            for choice in itertools.product(perms, repeat=len(Q) - 1):
                rows = np.repeat(base[None, :], r, axis=0)  # [r, P]
                rows[:, Q[0]] = fidx[S, Q[0]]
                for qi, i in enumerate(Q[1:]):
                    rows[:, i] = fidx[np.asarray(S)[list(choice[qi])], i]
                ids = (rows * grid.radix[None, :]).sum(axis=1)
                if grid.is_future[ids].any():
                    continue
                out[tuple(sorted(set(ids.tolist())))] = None
    return [np.asarray(k, dtype=np.int64) for k in out]


def _min_hitting_set(sets: list[np.ndarray], G: int) -> int:
    if not sets:
        return 0
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix

    rows = np.concatenate([np.full(s.size, j) for j, s in enumerate(sets)])
    cols = np.concatenate(sets)
    A = csr_matrix((np.ones(cols.size), (rows, cols)), shape=(len(sets), G))
    res = milp(np.ones(G), constraints=LinearConstraint(A, 1, np.inf), integrality=np.ones(G),
               bounds=Bounds(0, 1), options=dict(mip_rel_gap=0.0))
    if not res.success:
        raise RuntimeError(f"hitting set: MILP solver failed ({res.message})")
    return int(round(res.fun))


def _search(grid: _Grid, n_trials: int, seed: int) -> tuple[int, np.ndarray]:
    """Random drafters (half with the futures made to tie, then jittered), then local search."""
    rng = np.random.default_rng(seed)
    Phi = np.zeros((grid.futures.shape[0], grid.D))  # [F, D]: which tokens each future uses
    for f in range(grid.futures.shape[0]):
        Phi[f, grid.feat[grid.future_ids[f]]] = 1.0
    best, best_w = None, None
    for it in range(n_trials):
        w = rng.standard_normal(grid.D) * rng.choice([0.1, 1.0, 10.0], size=grid.D)
        if it % 2 == 0:
            r = Phi @ w
            w = w + np.linalg.lstsq(Phi, r.mean() - r, rcond=None)[0] + 1e-4 * rng.standard_normal(grid.D)
        c = grid.count(w)
        if best is None or c < best:
            best, best_w = c, w
    w, cur = best_w.copy(), best
    for _ in range(n_trials):
        mask = rng.random(grid.D) < 0.3
        w2 = w + mask * rng.standard_normal(grid.D) * rng.choice([1e-3, 1e-2, 1e-1, 1.0])
        c = grid.count(w2)
        if c <= cur:
            w, cur = w2, c
    return int(cur), w


def _witness_log_q(grid: _Grid, w: np.ndarray, other_mass: float = 1e-9) -> np.ndarray:
    """A drafter over the disagreement positions [P, V] whose scores on the grid follow w."""
    V = int(grid.futures.max()) + 1
    spread = max(1e-12, max(np.ptp(w[grid.offsets[i]:grid.offsets[i + 1]]) for i in range(len(grid.cols))))
    scale = 4.0 / spread  # rescaling every weight keeps the ranking of full-length splices
    rows = []
    for i, c in enumerate(grid.cols):
        x = np.full(V, -np.inf)
        x[c] = scale * w[grid.offsets[i]:grid.offsets[i + 1]]
        p = np.exp(x - x[c].max())
        p = (1 - other_mass) * p / p.sum() + other_mass / V  # other tokens: far below any splice
        rows.append(np.log(p / p.sum()))
    return np.stack(rows)  # [P, V]


def min_chimeras_multi(
    futures: Any, n_trials: int = 1000, seed: int = 0, max_sets: int = 200_000, witness: bool = False,
    lower_bound: bool = True,
) -> MultiFutureMinimum:
    """Minimum full-length chimeras a product tree must hold to contain every future.

    Returns a :class:`MultiFutureMinimum` with the lower bound (minimum hitting set of the
    rearrangement sets, solved to zero gap by scipy's HiGHS MILP: computer-assisted, as the
    solver's optimality is not independently certified), the observed minimum over ``n_trials``
    random and locally improved drafters, and the pairwise bound. ``proven`` is True when they
    meet. With ``witness`` the drafter attaining the observed minimum is returned (over the
    disagreement positions, as log_q [P, V]). ``lower_bound=False`` skips the MILP (search only,
    an upper bound; ``lower_bound`` is then None).
    """
    seqs = _check_sequences(futures, name="futures")
    if len({tuple(r) for r in seqs.tolist()}) != seqs.shape[0]:
        raise ValueError("futures: contains identical rows")
    if seqs.shape[0] < 2:
        raise ValueError("futures: need at least two futures")
    grid = _Grid(seqs)
    if grid.G > 200_000:
        raise ValueError(f"futures: the splice grid has {grid.G} points; too many to search")
    sets = _rearrangement_sets(grid, max_sets) if lower_bound else []
    lower = _min_hitting_set(sets, grid.G) if lower_bound else None
    observed, w = _search(grid, check_int("n_trials", n_trials, 1), check_int("seed", seed, 0))
    return MultiFutureMinimum(
        F=seqs.shape[0],
        pattern=column_pattern(seqs),
        splices=grid.G - seqs.shape[0],
        lower_bound=lower,
        observed_min=observed,
        pairwise_bound=pairwise_bound(seqs),
        n_sets=len(sets),
        witness_log_q=_witness_log_q(grid, w) if witness else None,
    )


def conjectured_min_all_distinct(F: int, m: int) -> int:
    """CONJECTURE (not proven): sum_{k=2..F} (k^(m-1) - 1) full-length chimeras at least, and
    exactly, when F futures take F distinct tokens at each of their m disagreement positions.

    F = 2 is the theorem. Computed (computer-assisted: MILP lower bound met by a drafter whose
    tree is built and counted) for the cases stored in ``mfd_theory/data/chimera_all_distinct.json``
    (``python -m mfd_theory.commands.theory.chimera_exact``) and the sweep of ``chimera_bound``;
    see docs/chimeras.md.
    """
    F = check_int("F", F, 2)
    m = check_int("m", m, 1)
    return sum(k ** (m - 1) - 1 for k in range(2, F + 1))


def column_types(F: int) -> list[str]:
    """Every partition of futures 0..F-1 into >= 2 blocks, as column-type labels ('01|2', ...)."""
    F = check_int("F", F, 2, 8)
    out: set[str] = set()

    def rec(i: int, blocks: list[list[int]]) -> None:
        if i == F:
            if len(blocks) >= 2:
                col = np.empty(F, dtype=np.int64)
                for bi, b in enumerate(blocks):
                    col[b] = bi
                out.add(_partition_label(col))
            return
        for b in blocks:
            b.append(i)
            rec(i + 1, blocks)
            b.pop()
        blocks.append([i])
        rec(i + 1, blocks)
        blocks.pop()

    rec(0, [])
    return sorted(out)


def all_patterns(F: int, max_columns: int) -> list[dict[str, int]]:
    """Every disagreement pattern of F distinct futures with 1..max_columns disagreement
    positions, one per class of patterns equal up to renaming the futures."""
    types = column_types(F)
    seen: dict[tuple, None] = {}
    for tot in range(1, check_int("max_columns", max_columns, 1) + 1):
        for combo in itertools.combinations_with_replacement(types, tot):
            pat: dict[str, int] = {}
            for c in combo:
                pat[c] = pat.get(c, 0) + 1
            try:
                key = canonical_pattern(pat, F)
            except ValueError:  # two futures would be identical
                continue
            seen.setdefault(key, None)
    return [dict(k) for k in seen]
