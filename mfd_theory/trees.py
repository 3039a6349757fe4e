"""Draft trees and their exact builders: :class:`DraftTree`, :func:`product_tree`,
:func:`mixture_tree`, :func:`best_mode_tree`, :func:`oracle_tree`, :func:`chain_tree` and
:func:`path_tree`, and :func:`candidate_trees` (a batch's trees from candidate lists, in one kernel
call).

Each builder returns the exact top-N prefixes, best first, under one documented tie rule; the row
screening is here, the searches in ``_kernels/trees.py`` (``path_tree``'s in ``path_trees.py``).
Scores, tie rule and how the builders work: docs/design.md ("How the builders work").
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mfd_theory._kernels import trees as _k
from mfd_theory.distributions import MixtureOfProducts, norm_tol, pos_tol
from mfd_theory.validation import check_int

__all__ = [
    "DraftTree",
    "best_mode_tree",
    "candidate_trees",
    "chain_tree",
    "greedy_walks",
    "mixture_tree",
    "oracle_tree",
    "product_lattice_stage",
    "product_tree",
    "top_candidates",
    "total_prefixes",
]

class DraftTree:
    """A prefix-closed set of prefixes stored as node arrays (parents precede children).

    Attributes
    ----------
    parent : int64 [N]   index of the parent node, -1 for children of the root
    token : int64 [N]    token at the node
    depth : int64 [N]    1-based depth (prefix length)
    log_score : float64 [N]  the ranking score the builder used (0 when none)
    """

    __slots__ = ("parent", "token", "depth", "log_score")

    def __init__(self, parent, token, depth=None, log_score=None, *, validate: bool = True):
        parent = np.asarray(parent, dtype=np.int64).reshape(-1)
        token = np.asarray(token, dtype=np.int64).reshape(-1)
        N = parent.shape[0]
        if token.shape[0] != N:
            raise ValueError(f"token: has {token.shape[0]} entries but parent has {N}")
        if depth is None:
            depth = _depths(parent)
        depth = np.asarray(depth, dtype=np.int64).reshape(-1)
        if log_score is None:
            log_score = np.zeros(N)
        log_score = np.asarray(log_score, dtype=np.float64).reshape(-1)
        if depth.shape[0] != N or log_score.shape[0] != N:
            raise ValueError(f"depth/log_score: must have N = {N} entries like parent")
        if validate:
            _validate_tree(parent, token, depth, log_score)
        self.parent = parent
        self.token = token
        self.depth = depth
        self.log_score = log_score

    def __len__(self) -> int:
        return int(self.parent.shape[0])

    def __repr__(self) -> str:
        d = int(self.depth.max()) if len(self) else 0
        return f"DraftTree(N={len(self)}, max_depth={d})"

    def __eq__(self, other) -> bool:
        if not isinstance(other, DraftTree):
            return NotImplemented
        return (
            np.array_equal(self.parent, other.parent)
            and np.array_equal(self.token, other.token)
            and np.array_equal(self.depth, other.depth)
            and np.array_equal(self.log_score, other.log_score)
        )

    @property
    def max_depth(self) -> int:
        return int(self.depth.max()) if len(self) else 0

    def children(self, i: int) -> np.ndarray:
        """Indices of the children of node ``i`` (``-1`` for the root), in storage order."""
        if not -1 <= i < len(self):
            raise ValueError(f"i: node index {i} outside [-1, {len(self)})")
        return np.flatnonzero(self.parent == i)

    def paths(self) -> list[tuple[int, ...]]:
        """The prefix of every node, as token tuples, in node order."""
        out: list[tuple[int, ...]] = []
        for n in range(len(self)):
            p = self.parent[n]
            out.append((out[p] if p >= 0 else ()) + (int(self.token[n]),))
        return out

    @classmethod
    def from_paths(cls, paths, log_score=None) -> "DraftTree":
        """Build a tree from a prefix-closed collection of token sequences.

        Paths are stored shortest first (stable), so parents precede children.
        """
        try:
            tups = [tuple(int(t) for t in p) for p in paths]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"paths: expected a collection of integer token sequences ({exc})") from exc
        if any(len(t) == 0 for t in tups):
            raise ValueError("paths: the empty prefix is the implicit root, not a node")
        if any(min(t) < 0 for t in tups):
            raise ValueError("paths: contains negative token ids")
        if len(set(tups)) != len(tups):
            raise ValueError("paths: contains duplicates")
        order = sorted(range(len(tups)), key=lambda i: len(tups[i]))
        index: dict[tuple[int, ...], int] = {}
        parent = np.empty(len(tups), dtype=np.int64)
        token = np.empty(len(tups), dtype=np.int64)
        for n, i in enumerate(order):
            t = tups[i]
            if len(t) > 1:
                if t[:-1] not in index:
                    raise ValueError(f"paths: not prefix-closed, {t} lacks its parent {t[:-1]}")
                parent[n] = index[t[:-1]]
            else:
                parent[n] = -1
            token[n] = t[-1]
            index[t] = n
        scores = None
        if log_score is not None:
            ls = np.asarray(log_score, dtype=np.float64).reshape(-1)
            if ls.shape[0] != len(tups):
                raise ValueError(f"log_score: expected {len(tups)} entries, got {ls.shape[0]}")
            scores = ls[order]
        return cls(parent, token, None, scores)

    def ancestor_mask(self) -> np.ndarray:
        """bool [N+1, N+1], root first: ``mask[i, j]`` is True when j is i or an ancestor of i.

        Row = query. Ready for tree attention over [root, nodes...]: every node sees the root,
        its ancestors and itself.
        """
        return _k._ancestor_mask(self.parent)

    def save(self, path: str | os.PathLike) -> Path:
        """Save as .npz (atomically)."""
        import io

        from mfd_theory.results import atomic_write_bytes

        buf = io.BytesIO()
        np.savez(buf, parent=self.parent, token=self.token, depth=self.depth, log_score=self.log_score)
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_suffix(path.suffix + ".npz") if path.suffix else path.with_suffix(".npz")
        atomic_write_bytes(path, buf.getvalue())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "DraftTree":
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"path: no tree file at {path}")
        try:
            with np.load(path) as z:
                missing = {"parent", "token", "depth", "log_score"} - set(z.files)
                if missing:
                    raise ValueError(f"path: {path} lacks the arrays {sorted(missing)}")
                return cls(z["parent"], z["token"], z["depth"], z["log_score"])
        except (OSError, EOFError) as exc:
            raise ValueError(f"path: {path} is not a readable .npz tree ({exc})") from exc


def _depths(parent: np.ndarray) -> np.ndarray:
    depth = np.empty(parent.shape[0], dtype=np.int64)
    for n, p in enumerate(parent):
        if p >= n:
            raise ValueError(f"parent: node {n} has parent {p}; parents must precede children")
        depth[n] = 1 if p < 0 else depth[p] + 1
    return depth


def _validate_tree(parent, token, depth, log_score) -> None:
    N = parent.shape[0]
    if N == 0:
        return
    idx = np.arange(N)
    if (parent < -1).any() or (parent >= idx).any():
        raise ValueError("parent: every parent must be -1 (root) or an earlier node index")
    if (token < 0).any():
        raise ValueError("token: token ids must be non-negative")
    expected = np.where(parent < 0, 1, depth[np.maximum(parent, 0)] + 1)
    if not np.array_equal(depth, expected):
        raise ValueError("depth: must equal the parent's depth + 1 (1 for children of the root)")
    if np.isnan(log_score).any():
        raise ValueError("log_score: contains NaN")
    pairs = parent * (int(token.max()) + 1) + token
    if np.unique(pairs).shape[0] != N:
        raise ValueError("token: two children of the same parent carry the same token")


# ------------------------------------------------------------------------------------ builders
def total_prefixes(sizes, cap: int) -> int:
    """sum_d prod_{i<=d} sizes[i], capped at ``cap`` (avoids huge integers for V**L)."""
    total, prod = 0, 1
    for s in sizes:
        prod *= int(s)
        total += prod
        if total >= cap or prod == 0:
            return min(total, cap)
    return min(total, cap)


MAX_BUDGET = 1 << 24  # 16.7M nodes; beyond this the node arrays alone would not fit in memory


def _check_budget(budget) -> int:
    budget = check_int("budget", budget, 1, integral_floats=True)
    if budget > MAX_BUDGET:
        raise ValueError(f"budget: {budget} exceeds the supported maximum of {MAX_BUDGET} nodes")
    return budget


def _check_scores(name: str, a) -> tuple[np.ndarray, float]:
    """-> (contiguous float32 / float64 scores, the positive-entry tolerance of the input dtype).

    The kernels read float32 and float64. float16 (bfloat16 arrives from torch as float32 or
    float16) is upcast to float32, integers and other float widths to float64; float16 -> float32
    is exact, so the tree is the one the float16 values define. Tolerances follow the dtype the
    values arrived in (:func:`mfd_theory.distributions.pos_tol`).
    """
    a = np.asarray(a)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"{name}: expected a float array of log-probabilities, got dtype {a.dtype}")
    tol = pos_tol(a.dtype)
    if a.dtype == np.float16:
        a = a.astype(np.float32)
    elif a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float64)
    return np.ascontiguousarray(a), tol


def _raise_status(name: str, status: int) -> None:
    if status == _k.HAS_NAN:
        raise ValueError(f"{name}: contains NaN")
    if status == _k.HAS_POSINF:
        raise ValueError(f"{name}: contains +inf (a probability of infinity)")
    if status == _k.HAS_POSITIVE:
        raise ValueError(f"{name}: has entries above 0 (probability > 1); pass log-probabilities, not logits")


def _check_log_pi(log_pi, K: int) -> np.ndarray:
    lp = np.asarray(log_pi)
    if lp.dtype == object or not (np.issubdtype(lp.dtype, np.floating) or np.issubdtype(lp.dtype, np.integer)):
        raise ValueError(f"log_pi: expected a float array of log-weights, got dtype {lp.dtype}")
    ptol, ntol = pos_tol(lp.dtype), norm_tol(lp.dtype)
    lp = lp.astype(np.float64).reshape(-1)
    if lp.shape[0] != K:
        raise ValueError(f"log_pi: has {lp.shape[0]} weights but log_q has K = {K} modes")
    if np.isnan(lp).any() or np.isposinf(lp).any():
        raise ValueError("log_pi: contains NaN or +inf")
    if (lp > ptol).any():
        raise ValueError("log_pi: has entries above 0 (weight > 1)")
    total = np.exp(lp).sum()
    if abs(total - 1.0) > ntol:
        raise ValueError(f"log_pi: weights sum to {total:.9g} in probability space, not 1")
    return lp


def _build(log_pi: np.ndarray, log_q: np.ndarray, budget: int, token_ids, name: str, tol: float,
           best_mode: bool = False) -> DraftTree:
    """Shared path of product_tree, mixture_tree and best_mode_tree. log_q [K, L, V] or
    candidates [K, L, k].

    K = 1 runs DDTree's lattice over per-depth sorted lists; K > 1 runs the threshold-algorithm
    search (both exact; the tests compare them with each other and with enumeration), under the
    mixture score or, with ``best_mode``, the best-mode score (log_pi then unread).
    """
    K, L, W = log_q.shape
    if L < 1 or W < 1:
        raise ValueError(f"{name}: needs at least one position and one token, got shape {log_q.shape}")
    # weights renormalised in float64: the search scores a prefix on which every mode agrees with
    # that shared log weight, exact only when sum_k pi_k = 1
    log_pi = log_pi - np.logaddexp.reduce(log_pi)
    if token_ids is None:
        V = W
        N = min(budget, total_prefixes([V] * L, budget))
        vals, ids, by_id, lens, bound, log_q = _dense_lists(log_pi, log_q, N, name, tol, best_mode)  # log_q clipped
        if K == 1:
            out = _k._product_lattice(vals[0], ids[0], lens[0], N)
        while K > 1:
            closed = (lens >= V).all(axis=0)  # [L]: every mode's list is its whole row
            out = _search(log_pi, vals, ids, lens, N, full_rows=log_q, closed=closed, by_id=by_id, bound=bound,
                          best_mode=best_mode)
            if out[4] != _k.NEEDS_MORE:
                break
            # a parent needed tokens beyond every mode's list: read every row again, longer lists
            M = min(V, 2 * vals.shape[2])
            vals, ids, by_id, lens, status = _k._topk_rows(log_q, M, tol, *_whole_rows(log_q))
            bound = None
    else:
        ids = np.asarray(token_ids)
        if ids.shape != log_q.shape:
            raise ValueError(f"token_ids: shape {ids.shape} does not match the candidate values' {log_q.shape}")
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"token_ids: must be integers, got dtype {ids.dtype}")
        vals, ids, status = _k._prepare_candidates(log_q, ids, tol)
        if status == 5:
            raise ValueError("token_ids: contains negative token ids")
        _raise_status(name, status)
        lens = np.full((K, L), W, dtype=np.int64)
        if K == 1:
            N = min(budget, total_prefixes([W] * L, budget))
            out = _k._product_lattice(vals[0], ids[0], lens[0], N)
            dup_rows = out[4][None]  # only the list entries the tree used can matter
        else:
            dup_rows = lens
        if _k._lists_have_duplicates(ids, dup_rows):
            raise ValueError("token_ids: a token appears twice in one mode's candidate list at one position")
        if K > 1:
            out = _search(log_pi, vals, ids, lens, budget, full_rows=None, closed=True, best_mode=best_mode)
    parent, token, depth, score = out[0], out[1], out[2], out[3]
    return DraftTree(parent.copy(), token.copy(), depth.copy(), score.copy(), validate=False)


def _search(log_pi, vals, ids, lens, budget, full_rows, closed, by_id=None, bound=None, best_mode=False):
    """The K > 1 threshold-algorithm search over sorted per-mode lists vals / ids [K, L, M]
    (mixture score, or the best-mode score with ``best_mode``).

    lens [K, L]: entries per list. closed: bool or bool [L], the lists hold every token of that
    depth. by_id [K, L, M]: each list's positions in increasing token-id order (computed when
    None). bound [K, L]: an upper bound on log q_k of the tokens beyond mode k's list (default:
    its last value; -inf at closed depths).
    """
    K, L, M = vals.shape
    closed = np.broadcast_to(np.asarray(closed, dtype=bool), (L,)).copy()
    if by_id is None:
        by_id = _k._id_order(ids, lens)
    tok_u, U, list_u, rank = _k._universe(ids, lens, by_id)
    if full_rows is None:
        N = min(budget, total_prefixes(U, budget))
        G = _k._gather_candidates(vals, list_u, lens, tok_u.shape[1])
    else:
        N = budget
        G = _k._gather_full(full_rows, tok_u, U, tok_u.shape[1])
    if bound is None:
        last = np.take_along_axis(vals, np.maximum(lens - 1, 0)[:, :, None], axis=2)[:, :, 0]  # [K, L]
        bound = np.where(lens > 0, last, -np.inf)
    bound = np.where(closed[None, :], -np.inf, bound)
    return _k._mixture_tree(log_pi, G, list_u, vals, lens, rank, tok_u, closed, bound, N, best_mode)


# Every row is first read for its top FIRST_LIST tokens; only rows whose list may be too short
# for the tree are read again (see _dense_lists).
FIRST_LIST = 64


def _whole_rows(log_q):
    """(floor, todo) for _topk_rows that select from every row with no floor."""
    K, L, _ = log_q.shape
    return np.full((K, L), -np.inf, dtype=log_q.dtype), np.ones((K, L), dtype=bool)


def _list_floors(log_pi, vals, ids, lens, N: int, rows, best_mode: bool = False) -> np.ndarray:
    """floor [K, L] float64: log q_k values below which no token of mode k at depth d can be in
    the top-N tree, given lists vals / ids [K, L, M] that are exact prefixes of the order of
    each row of rows [K, L, V].

    A prefix through token t at depth d scores at most max_k (P_kd + log q_{k,d}(t)), with P_kd
    = sum_{i<d} max_t log q_{k,i} (the weights sum to one, so the mixture of the modes' values
    is at most their largest; the best-mode score is that largest). Any N prefixes give a lower
    bound B on the N-th best score: here the top N of each mode's own product tree over the
    lists, under the builder's score. So t
    matters only if some mode k has log q_{k,d}(t) >= B - P_kd. A relative slack of 1e-9 covers
    the rounding of these float64 sums (a path's score here and in the builders may differ in
    the last bits).
    """
    K, L, _ = vals.shape
    best = np.where(lens > 0, vals[:, :, 0], -np.inf)  # [K, L]
    P = np.zeros((K, L))
    for d in range(1, L):  # left to right, as the builders sum a path
        P[:, d] = P[:, d - 1] + best[:, d - 1]
    B = -np.inf
    for k in range(K):
        parent, token, depth, score, _ = _k._product_lattice(vals[k], ids[k], lens[k], N)
        if score.shape[0] == N:
            if K > 1:
                score = _k._path_scores(log_pi, rows, parent, token, depth, best_mode)
            B = max(B, float(score.min()))
    if not np.isfinite(B):
        return np.full((K, L), -np.inf)  # no bound: every list must be complete up to N
    with np.errstate(invalid="ignore"):
        floor = B - P - 1e-9 * (1.0 + abs(B) + np.abs(P))
    return np.where(np.isneginf(P), np.inf, floor)  # after a zero-probability depth, nothing


def _dense_lists(log_pi, log_q, N: int, name: str, tol: float, best_mode: bool = False):
    """Sorted top lists of the dense rows log_q [K, L, V] that the exact builders need.

    Every row is read once for its top min(V, N, FIRST_LIST) tokens (and checked). The tree
    never needs more than N tokens of a row, nor a token below the row's floor
    (:func:`_list_floors`); a row whose first list ends at or above its floor is read again for
    its tokens at or above the floor, at most min(V, N). Returns vals, ids, by_id [K, L, M],
    lens [K, L], bound [K, L] (an upper bound on the tokens beyond each list, for the
    threshold search) and the rows, clipped to <= 0 if they held round-off above 0.
    """
    K, L, V = log_q.shape
    M = min(V, N)
    M0 = min(M, FIRST_LIST)
    vals, ids, by_id, lens, status = _k._topk_rows(log_q, M0, tol, *_whole_rows(log_q))
    _raise_status(name, status)
    if status == _k.ROUND_OFF:
        # round-off above 0 (within the dtype's tolerance) is clipped once, here, for everything
        # that reads the rows later: a child could otherwise outscore its parent
        log_q = np.minimum(log_q, np.asarray(0, dtype=log_q.dtype))
        vals, ids, by_id, lens, status = _k._topk_rows(log_q, M0, tol, *_whole_rows(log_q))
    bound = vals[:, :, M0 - 1].copy()
    if M0 == M:
        return vals, ids, by_id, lens, bound, log_q
    floor = _list_floors(log_pi, vals, ids, lens, N, log_q, best_mode)  # [K, L]
    todo = vals[:, :, M0 - 1] >= floor
    if not todo.any():
        return vals, ids, by_id, lens, bound, log_q
    # the floor in the rows' dtype, rounded down so that no wanted token falls below it
    f = floor.astype(log_q.dtype)
    f = np.where(f > floor, np.nextafter(f, np.asarray(-np.inf, dtype=f.dtype)), f)
    f = np.where(todo, f, np.asarray(np.inf, dtype=f.dtype))
    v2, i2, b2, l2, _ = _k._topk_rows(log_q, M, tol, f, todo)  # rows already checked above
    out_v = np.empty((K, L, M))
    out_i = np.empty((K, L, M), dtype=np.int64)
    out_b = np.empty((K, L, M), dtype=np.int64)
    out_v[:, :, :M0], out_i[:, :, :M0], out_b[:, :, :M0] = vals, ids, by_id
    out_v[todo], out_i[todo], out_b[todo] = v2[todo], i2[todo], b2[todo]
    lens = np.where(todo, l2, lens)
    # a re-read list that stops short of M holds every token at or above the floor
    bound = np.where(todo, np.where(l2 < M, f.astype(np.float64), v2[:, :, M - 1]), bound)
    return out_v, out_i, out_b, lens, bound, log_q


def product_tree(log_q, budget: int, token_ids=None) -> DraftTree:
    """Top-``budget`` prefixes by the product ``prod_i q_i(s_i)`` (DDTree's ranking).

    Parameters
    ----------
    log_q : array [L, V] or a one-mode MixtureOfProducts
        Per-position log-probabilities (float64, float32, or float16, which is upcast to float32
        exactly; entries may exceed 0 by the round-off ``pos_tol(dtype)`` allows, and are read
        as 0, so no prefix outscores its parent). With
        ``token_ids``, the candidate log-probabilities [L, k] instead. A
        :class:`~mfd_theory.distributions.MixtureOfProducts` with K = 1, such as what
        ``target.marginals()`` returns, stands for its rows.
    budget : int
        N, the number of nodes (root excluded); capped at the number of prefixes that exist.
    token_ids : int array [L, k], optional
        Token ids of the candidates; the tree is then exact within them.
    """
    budget = _check_budget(budget)
    log_q = _product_rows(log_q)
    log_q, tol = _check_scores("log_q", log_q)
    if log_q.ndim != 2:
        raise ValueError(f"log_q: expected shape [L, V], got {log_q.shape}")
    ids = None
    if token_ids is not None:
        ids = np.asarray(token_ids)
        if ids.ndim != 2:
            raise ValueError(f"token_ids: expected shape [L, k], got {ids.shape}")
        ids = ids[None]
    return _build(np.zeros(1), log_q[None], budget, ids, "log_q", tol)


def product_lattice_stage(log_probs, token_ids):
    """The product builder's heap alone, for benchmarks that time it apart from the checks.

    ``log_probs`` [L, k] (each row sorted descending) and ``token_ids`` [L, k] as
    :func:`product_tree` takes them with ``token_ids=``; they are prepared once here, and the
    returned ``build(budget)`` runs only the lattice kernel on them, no checks, returning its raw
    node arrays. Use :func:`product_tree` for anything but timing."""
    vals, ids, status = _k._prepare_candidates(np.asarray(log_probs)[None], np.asarray(token_ids)[None], 1e-6)
    _raise_status("log_probs", status)
    lens = np.full(vals.shape[1], vals.shape[2], dtype=np.int64)
    return lambda budget: _k._product_lattice(vals[0], ids[0], lens, int(budget))


def _product_rows(log_q):
    """A one-mode MixtureOfProducts -> its rows [L, V]; anything else unchanged."""
    if isinstance(log_q, MixtureOfProducts):
        if log_q.K != 1:
            raise ValueError(
                f"log_q: a MixtureOfProducts with K = {log_q.K} modes is not a product; pass "
                "target.marginals() for its per-position marginals, or use mixture_tree / oracle_tree"
            )
        return log_q.log_q[0]  # [L, V]
    return log_q


def mixture_tree(log_pi, log_q=None, budget: int | None = None, token_ids=None) -> DraftTree:
    """Exact top-``budget`` prefixes by the mixture ``sum_k pi_k prod_i q_{k,i}(s_i)``.

    ``mixture_tree(log_pi, log_q, budget)``, or ``mixture_tree(mixture, budget)`` with a
    :class:`~mfd_theory.distributions.MixtureOfProducts` standing for its weights and rows (as
    :func:`product_tree` takes a one-mode one).

    Parameters
    ----------
    log_pi : array [K], or a MixtureOfProducts
        Log mode weights; they sum to one within ``norm_tol(log_pi.dtype)``, the rule
        :class:`~mfd_theory.distributions.MixtureOfProducts` applies.
    log_q : array [K, L, V]
        Per-mode log-probabilities, or candidate values [K, L, k] with ``token_ids`` (dtypes as
        in :func:`product_tree`).
    token_ids : int array [K, L, k], optional
        Candidate ids per mode; a token missing from mode k's list has q_k = 0 there.
    """
    if isinstance(log_pi, MixtureOfProducts):
        if log_q is not None and budget is not None:
            raise ValueError("budget: given twice (a MixtureOfProducts is followed by the budget alone: "
                             "mixture_tree(mixture, budget))")
        if token_ids is not None:
            raise ValueError("token_ids: a MixtureOfProducts has whole rows, not candidate lists")
        budget = log_q if budget is None else budget
        log_pi, log_q = log_pi.log_pi, log_pi.log_q
    if log_q is None:
        raise ValueError("log_q: missing (pass log_pi, log_q, budget, or a MixtureOfProducts and the budget)")
    if budget is None:
        raise ValueError("budget: missing")
    budget = _check_budget(budget)
    log_q, tol = _check_scores("log_q", log_q)
    if log_q.ndim != 3:
        raise ValueError(f"log_q: expected shape [K, L, V], got {log_q.shape}")
    lp = _check_log_pi(log_pi, log_q.shape[0])
    if token_ids is not None and np.asarray(token_ids).ndim != 3:
        raise ValueError(f"token_ids: expected shape [K, L, k], got {np.asarray(token_ids).shape}")
    return _build(lp, log_q, budget, token_ids, "log_q", tol)


def best_mode_tree(log_q, budget: int, token_ids=None) -> DraftTree:
    """Exact top-``budget`` prefixes by the best-mode score ``max_k sum_{i<=d} log q_{k,i}(s_i)``.

    The released MFD drafters' ranking: each prefix counts with its most likely mode's product
    probability, and no mode weights are read (a drafter without a usable gate builds it). The
    tree is prefix-closed, since every mode's log weight falls along a path; ``log_score`` holds
    the best-mode score; ties as every builder breaks them (docs/design.md, "Ties", with a
    token's rank its best over the modes' lists). With K = 1 it is :func:`product_tree`. How it
    relates to :func:`mixture_tree`: docs/chimeras.md ("Best-mode trees").

    Parameters
    ----------
    log_q : array [K, L, V], or a MixtureOfProducts
        Per-mode log-probabilities (dtypes as in :func:`product_tree`), or candidate values
        [K, L, k] with ``token_ids``. A
        :class:`~mfd_theory.distributions.MixtureOfProducts` stands for its rows (its weights
        are not used).
    budget : int
        N, the number of nodes (root excluded); capped at the number of prefixes that exist.
    token_ids : int array [K, L, k], optional
        Candidate ids per mode; a token missing from mode k's list has q_k = 0 there.
    """
    if isinstance(log_q, MixtureOfProducts):
        if token_ids is not None:
            raise ValueError("token_ids: a MixtureOfProducts has whole rows, not candidate lists")
        log_q = log_q.log_q
    budget = _check_budget(budget)
    log_q, tol = _check_scores("log_q", log_q)
    if log_q.ndim != 3:
        raise ValueError(f"log_q: expected shape [K, L, V], got {log_q.shape}")
    if token_ids is not None and np.asarray(token_ids).ndim != 3:
        raise ValueError(f"token_ids: expected shape [K, L, k], got {np.asarray(token_ids).shape}")
    K = log_q.shape[0]
    if K < 1:
        raise ValueError(f"log_q: needs at least one mode, got shape {log_q.shape}")
    return _build(np.full(K, -np.log(K)), log_q, budget, token_ids, "log_q", tol, best_mode=True)


def top_candidates(log_q, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest entries of every row (last axis) of log-probabilities ``log_q`` [..., V]
    (float32 or float64; float16 read exactly as float32), best first, ties to the lower token id
    (the builders' rule): (values float64 [..., k], token ids int64 [..., k]). The dense builders'
    own numba row screen, one pass per row; NaN, +inf and entries above 0 beyond round-off are
    refused by name."""
    a, tol = _check_scores("log_q", log_q)
    if a.ndim < 1 or a.shape[-1] < 1:
        raise ValueError(f"log_q: expected rows [..., V] with V >= 1, got shape {a.shape}")
    V = a.shape[-1]
    k = check_int("k", k, 1, V)
    x = a.reshape(1, -1, V)  # [1, rows, V]
    floor = np.full(x.shape[:2], -np.inf, dtype=x.dtype)
    vals, ids, _, _, status = _k._topk_rows(x, k, tol, floor, np.ones(x.shape[:2], dtype=bool))
    _raise_status("log_q", status)
    return vals.reshape(*a.shape[:-1], k), ids.reshape(*a.shape[:-1], k)


def candidate_trees(log_pi, values, token_ids, budgets, depths) -> list[DraftTree | None]:
    """Many requests' trees from candidate lists in one kernel call (a batch's round).

    ``values`` / ``token_ids`` [B, K, L, k]: request b's candidates per mode and position, as
    :func:`mixture_tree` (K > 1) or :func:`product_tree` (K = 1) take them with ``token_ids``;
    ``log_pi`` [B, K] its log mode weights (renormalised here); ``budgets`` [B] (or one int) its
    nodes; ``depths`` [B] how many of the L positions its tree may use (0: no tree, None
    returned). Request b's tree equals ``mixture_tree(log_pi[b], values[b, :, :d], budgets[b],
    token_ids[b, :, :d])`` with d = depths[b] (``product_tree`` when K = 1), node for node."""
    vals, tol = _check_scores("values", values)
    if vals.ndim != 4:
        raise ValueError(f"values: expected shape [B, K, L, k], got {vals.shape}")
    B, K, L, W = vals.shape
    ids = np.asarray(token_ids)
    if ids.shape != vals.shape:
        raise ValueError(f"token_ids: shape {ids.shape} does not match the values' {vals.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"token_ids: must be integers, got dtype {ids.dtype}")
    lp = np.asarray(log_pi, dtype=np.float64)
    if lp.shape != (B, K) or np.isnan(lp).any() or np.isposinf(lp).any():
        raise ValueError(f"log_pi: expected finite log-weights [B, K] = [{B}, {K}], got shape {lp.shape}")
    lp = lp - np.logaddexp.reduce(lp, axis=1, keepdims=True)
    bud = np.broadcast_to(np.asarray(budgets), (B,))
    dep = np.broadcast_to(np.asarray(depths), (B,))
    bud = np.array([_check_budget(x) for x in bud], dtype=np.int64)
    dep = np.array([check_int("depths", x, 0, L) for x in dep], dtype=np.int64)
    if W < 1 and dep.any():
        raise ValueError("values: needs at least one candidate per position")
    parent, token, depth, score, off, status = _k._candidate_trees(
        lp, vals, ids.astype(np.int64, copy=False), bud, dep, tol)
    if status == 5:
        raise ValueError("token_ids: contains negative token ids")
    if status == 7:
        raise ValueError("token_ids: a token appears twice in one mode's candidate list at one position")
    _raise_status("values", status)
    return [DraftTree(parent[off[b]:off[b + 1]], token[off[b]:off[b + 1]], depth[off[b]:off[b + 1]],
                      score[off[b]:off[b + 1]], validate=False) if dep[b] else None for b in range(B)]


def greedy_walks(trees, next_tokens, row_start) -> list[tuple[list[int], int]]:
    """The lossless walk of every tree at T = 0 in one kernel call: ``next_tokens`` [R] holds the
    target's most likely next token at every verify row, request b's root row at ``row_start[b]``
    and node i's at ``row_start[b] + i + 1`` (``trees[b]`` None: the root alone). Returns per tree
    (the accepted node indices, the bonus token)."""
    B = len(trees)
    sizes = np.array([0 if t is None else len(t) for t in trees], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    live = [t for t in trees if t is not None and len(t)]
    parent = np.concatenate([t.parent for t in live]).astype(np.int64) if live else np.empty(0, np.int64)
    token = np.concatenate([t.token for t in live]).astype(np.int64) if live else np.empty(0, np.int64)
    nxt = np.ascontiguousarray(next_tokens, dtype=np.int64).reshape(-1)
    start = np.ascontiguousarray(row_start, dtype=np.int64).reshape(-1)
    if start.shape[0] < B or (B and (start[:B] + sizes + 1 > nxt.shape[0]).any()):
        raise ValueError(f"next_tokens: {nxt.shape[0]} rows do not hold the {B} trees' rows from row_start")
    lens, path, bonus = _k._greedy_walks(parent, token, offsets, nxt, start[:B])
    ends = np.concatenate([[0], np.cumsum(lens)])
    return [(path[ends[b]:ends[b + 1]].tolist(), int(bonus[b])) for b in range(B)]


def oracle_tree(target, budget: int) -> DraftTree:
    """Top-``budget`` prefixes by the target's own prefix probability: the coverage ceiling."""
    if not isinstance(target, MixtureOfProducts):
        raise ValueError(f"target: expected a MixtureOfProducts, got {type(target).__name__}")
    return mixture_tree(target, budget)


def chain_tree(tokens, log_score=None) -> DraftTree:
    """One path through ``tokens`` (DFlash's chain verification)."""
    t = np.asarray(tokens).reshape(-1)
    if t.shape[0] == 0:
        raise ValueError("tokens: is empty")
    if not np.issubdtype(t.dtype, np.integer):
        raise ValueError(f"tokens: must be integers, got dtype {t.dtype}")
    if (t < 0).any():
        raise ValueError("tokens: contains negative token ids")
    n = t.shape[0]
    return DraftTree(np.arange(n) - 1, t, np.arange(1, n + 1), log_score)



def path_tree(drafter, budget: int, max_depth: int | None = None) -> DraftTree:
    """Exact top-``budget`` prefixes by a path-dependent drafter (DARTree's ranking).

    The score of a prefix is ``sum_i log q(s_i | s_<i)`` under the drafter's own conditionals,
    so every parent has its own ranked children. ``drafter`` has ``L``, ``V`` and
    ``log_cond(prefix) -> [V]``, e.g. :class:`mfd_theory.path_trees.MemoryDrafter`; same tie
    rule and budget checks as the other builders; ``max_depth`` keeps only prefixes of length
    <= max_depth (the exact top-N among them: a path-dependent drafter pays one sequential step
    per depth, so a cost model may prefer a shallower tree). The search is
    :func:`mfd_theory.path_trees.best_first`.
    """
    from mfd_theory.path_trees import best_first, check_drafter

    budget = _check_budget(budget)
    L, V = check_drafter(drafter, max_depth)  # L: the depth limit, min(drafter.L, max_depth)
    N = min(budget, total_prefixes([V] * L, budget))
    parent, token, depth, score = best_first(drafter, L, V, N)
    return DraftTree(parent, token, depth, score, validate=False)


__all__ += ["path_tree"]


def enumerated_best_mode(log_q: np.ndarray, budget: int, present: np.ndarray | None = None):
    """(paths, scores): the first ``budget`` prefixes by the best-mode score under the tie rule,
    found by scoring every prefix and sorting them all (for tiny K, L, V only).

    log_q [K, L, V]; ``present`` [K, L, V] (bool) marks the tokens in each mode's candidate list
    (default: every token), an absent token having q_k = 0 and no rank in mode k's list.
    The tie rule's key, key(s) = (-S(s), key(parent), best rank, token) with key(root) smallest,
    unrolls into the flat vector (-S(s_1..d), -S(s_1..d-1), ..., -S(s_1), -1, r_1, t_1, ...,
    r_d, t_d): the scores of the prefix and of its ancestors, a marker below every -S (which is
    >= 0) where the chain reaches the root, then the ranks and tokens from the root down; two
    keys that agree up to one marker belong to prefixes of one depth. Sorting these vectors
    lexicographically is the tie rule's order. Scores are each mode's running sum from 0.0,
    left to right, as the builders take them.
    """
    K, L, V = log_q.shape
    present = np.ones((K, L, V), dtype=bool) if present is None else present
    x = np.where(present, log_q, -np.inf)  # [K, L, V]
    rank = np.full((L, V), V, dtype=np.int64)  # best rank over the modes' lists
    for k in range(K):
        for d in range(L):
            toks = np.flatnonzero(present[k, d])
            ordered = toks[np.lexsort((toks, -x[k, d, toks]))]  # by value, then id
            rank[d, ordered] = np.minimum(rank[d, ordered], np.arange(ordered.size))
    universe = [np.flatnonzero(present[:, d].any(axis=0)) for d in range(L)]
    width = L + 1 + 2 * L
    keys, tokens, scores = [], [], []
    for depth in range(1, L + 1):
        if any(u.size == 0 for u in universe[:depth]):
            break
        grids = np.meshgrid(*universe[:depth], indexing="ij")  # every combination, first token slowest
        pre = np.stack([g.reshape(-1) for g in grids], axis=1)  # [n, d]
        vals = x[:, np.arange(depth)[None, :], pre]  # [K, n, d]
        run = np.cumsum(vals, axis=2)  # [K, n, d]: each mode's score of every prefix of the row
        S = run.max(axis=0)  # [n, d]: best-mode score of s_1..j
        key = np.zeros((pre.shape[0], width))
        key[:, :depth] = -S[:, ::-1]
        key[:, depth] = -1.0
        key[:, depth + 1: depth + 1 + 2 * depth: 2] = rank[np.arange(depth)[None, :], pre]
        key[:, depth + 2: depth + 2 + 2 * depth: 2] = pre
        keys.append(key)
        tokens.append(np.pad(pre, ((0, 0), (0, L - depth)), constant_values=-1))
        scores.append(S[:, -1])
    key = np.concatenate(keys)  # [prefixes, width]
    order = np.lexsort(key.T[::-1])[:budget]  # first column first
    tok = np.concatenate(tokens)[order].tolist()  # [budget, L], padded with -1
    return [tuple(t for t in row if t >= 0) for row in tok], np.concatenate(scores)[order]


__all__ += ["enumerated_best_mode"]
