"""Path-dependent drafters and the exact search behind ``trees.path_tree`` (DARTree's ranking).

:class:`MemoryDrafter` is the synthetic world's drafter, :func:`check_drafter` checks the
drafter interface (``L``, ``V``, ``log_cond``) and :func:`best_first` is the search. Nothing here
imports ``trees``, which stays the one module that makes ``DraftTree``s. Design: docs/design.md
("Path-dependent trees").
"""

from __future__ import annotations

import heapq

import numpy as np

from mfd_theory.distributions import MixtureOfProducts, logsumexp, pos_tol
from mfd_theory.validation import check_int, check_real

__all__ = ["MemoryDrafter", "best_first", "check_drafter"]


class MemoryDrafter:
    """The target's own conditionals seen through the last ``memory`` tokens, tempered, smoothed.

    For a target ``P = sum_k pi_k prod_i p_{k,i}`` (a :class:`MixtureOfProducts`) and a prefix
    ``s`` of length d (next position d, 0-based), the drafter:

    1. takes the window ``s[j:d]`` with ``j = max(0, d - memory)``, and backs off to the longest
       suffix of that window with positive probability under P (the empty window always has
       probability one). A window that no future of the target produces carries no information
       about which future the walk is in, so the drafter forgets it, as an n-gram model backs off;
    2. forms the posterior over the target's modes given that window alone,
       ``w_k ∝ pi_k prod_{j<=i<d} p_{k,i}(s_i)``, and the conditional
       ``c(x) = sum_k w_k p_{k,d}(x)`` - exactly P's conditional of position d given positions j..d-1;
    3. tempers, ``c_T(x) ∝ c(x)^(1 / temperature)`` (zeros stay zero), and smooths,
       ``q(x) = (1 - smoothing) c_T(x) + smoothing / V``.

    ``memory = 0`` gives the target's per-position marginals for every parent: the product drafter
    of :meth:`MixtureOfProducts.marginals`, so the path tree is DDTree's product tree.
    ``memory >= L - 1`` sees the whole prefix: with temperature 1 and no smoothing ``Q(s) = P(s)``
    and the path tree is the oracle tree. In between, memory r is the length of the path a
    correction head can use; an r-token window identifies the walk's future only when the futures
    differ somewhere within the last r positions.
    """

    __slots__ = ("target", "memory", "temperature", "smoothing")

    def __init__(self, target: MixtureOfProducts, memory: int, temperature: float = 1.0, smoothing: float = 0.0):
        if not isinstance(target, MixtureOfProducts):
            raise ValueError(f"target: expected a MixtureOfProducts, got {type(target).__name__}")
        check_int("memory", memory, 0)  # tokens of the path the drafter sees
        temperature = check_real("temperature", temperature, 0, low_open=True)
        smoothing = check_real("smoothing", smoothing, 0, 1)
        self.target = target
        self.memory = int(memory)
        self.temperature = temperature
        self.smoothing = smoothing

    @property
    def L(self) -> int:
        return self.target.L

    @property
    def V(self) -> int:
        return self.target.V

    def __repr__(self) -> str:
        return (f"MemoryDrafter(memory={self.memory}, temperature={self.temperature:g}, "
                f"smoothing={self.smoothing:g}, L={self.L}, V={self.V})")

    def _prefix(self, prefix) -> np.ndarray:
        s = np.asarray(prefix, dtype=np.int64).reshape(-1)
        if s.shape[0] >= self.L + 1:
            raise ValueError(f"prefix: length {s.shape[0]} exceeds L = {self.L}")
        if s.shape[0] and (s.min() < 0 or s.max() >= self.V):
            raise ValueError(f"prefix: tokens must lie in [0, {self.V})")
        return s

    def log_cond(self, prefix) -> np.ndarray:
        """float64 [V]: ``log q(. | prefix)`` for a prefix of length 0..L-1."""
        s = self._prefix(prefix)
        d = s.shape[0]
        if d >= self.L:
            raise ValueError(f"prefix: has length {d}; a next token exists only below L = {self.L}")
        lq, lp = self.target.log_q, self.target.log_pi
        j0 = max(0, d - self.memory)
        terms = lq[:, np.arange(j0, d), s[j0:]]  # [K, d - j0]: log p_{k,i}(s_i) over the window
        # suffix sums: tail[:, j - j0] = sum_{j <= i < d} log p_{k,i}(s_i); the last column is the empty window
        tail = np.concatenate([np.cumsum(terms[:, ::-1], axis=1)[:, ::-1], np.zeros((lq.shape[0], 1))], axis=1)
        log_w = lp[:, None] + tail  # [K, d - j0 + 1]
        alive = np.isfinite(logsumexp(log_w, axis=0))  # [d - j0 + 1]: window has positive probability
        j = int(np.argmax(alive))  # the longest window with positive probability (the empty one always is)
        w = log_w[:, j] - logsumexp(log_w[:, j])  # [K] posterior over the modes
        c = logsumexp(w[:, None] + lq[:, d, :], axis=0)  # [V]
        if self.temperature != 1.0:
            c = c / self.temperature
            c = c - logsumexp(c)
        if self.smoothing == 1.0:
            return np.full(self.V, -np.log(self.V))
        if self.smoothing > 0.0:
            c = np.logaddexp(np.log1p(-self.smoothing) + c, np.log(self.smoothing / self.V))  # [V]
        return c

    def log_prefix_prob(self, prefix) -> float:
        """``log Q(s) = sum_i log q(s_i | s_<i)``, the drafter's own probability of a prefix."""
        s = self._prefix(prefix)
        total = 0.0
        for i in range(s.shape[0]):
            total += float(self.log_cond(s[:i])[s[i]])
        return total


def _row(drafter, prefix: tuple[int, ...], V: int) -> np.ndarray:
    """The drafter's checked row log q(. | prefix) as float64 [V]."""
    raw = np.asarray(drafter.log_cond(prefix))
    where = f"drafter: log_cond({prefix})"
    if raw.dtype == object or not (np.issubdtype(raw.dtype, np.floating) or np.issubdtype(raw.dtype, np.integer)):
        raise ValueError(f"{where} returned dtype {raw.dtype}, expected float log-probabilities")
    if raw.shape != (V,):
        raise ValueError(f"{where} returned shape {raw.shape}, expected ({V},)")
    row = raw.astype(np.float64)
    if np.isnan(row).any():
        raise ValueError(f"{where} contains NaN")
    if np.isposinf(row).any():
        raise ValueError(f"{where} contains +inf (a probability of infinity)")
    if (row > pos_tol(raw.dtype)).any():
        raise ValueError(f"{where} has entries above 0 (probability > 1); return log-probabilities, not logits")
    return np.minimum(row, 0.0)  # round-off above 0 would let a child outscore its parent


def check_drafter(drafter, max_depth=None) -> tuple[int, int]:
    """(depth limit, V) of a drafter, checked: ``min(L, max_depth)`` and the vocabulary size."""
    L, V = getattr(drafter, "L", None), getattr(drafter, "V", None)
    for name, v in (("L", L), ("V", V)):
        check_int(f"drafter.{name}", v, 1)
    if not callable(getattr(drafter, "log_cond", None)):
        raise ValueError(f"drafter: {type(drafter).__name__} has no method log_cond(prefix) -> [V] log-probabilities")
    if max_depth is not None:
        check_int("max_depth", max_depth, 1)
        L = min(L, int(max_depth))
    return int(L), int(V)


#: how much of a missing row's remaining depth (L - its depth) the read-ahead of :func:`best_first`
#: charges against the nodes the search may still emit: its descendants, not seen yet, may come
#: before the nodes that follow it. 0 reads furthest ahead (fewest forwards, most rows read and
#: never used); 1 reads least. On the 0.5B Qwen target (N = 64, L = 16, six roots of HumanEval
#: answers, side by side: records/c3-2026-12-06/oracle_read_ahead.log) 0.5 took 0.46x the time of
#: the one-child-per-parent read-ahead before it, 0 took 0.62x: the same trees.
READ_AHEAD_CHARGE = 0.5


def best_first(drafter, L: int, V: int, N: int, lookahead: int = 0):
    """The first N prefixes (length <= L) in decreasing path score: parent, token, depth, score [N].

    Best-first search over concrete children: every emitted node's row is evaluated once and its
    best min(V, N) tokens sorted (by decreasing log q, then token id); the heap holds, for each parent, its best child
    not yet emitted (DDTree's sibling / first-child lattice, with one sorted list per parent
    instead of one per depth). Popping a child emits it and pushes its next sibling and its own
    first child. Children never outscore their parent, so every prefix not yet emitted is
    outranked by (or is) a heap entry: its nearest ancestor-or-earlier-sibling in the heap; the
    emission is therefore the exact order, and its first N nodes form the top-N tree. Heap keys
    (-score, parent's emission index, rank in the parent's row) realise the builders' tie rule.
    ``log_cond`` is called at most N times (the root and every emitted node shallower than L,
    but never for the last node).

    ``lookahead`` > 0, for a drafter with ``has_row(prefix)`` and ``prefetch(prefixes)`` (rows
    that cost one forward each, cheaper many at a time: the target itself, in
    :class:`mfd_theory.llm.measure.ceiling.TargetScorer`): before a node whose row the drafter
    does not hold yet is expanded, it is asked for that row together with up to ``lookahead``
    rows the search will want next as far as the held rows tell: the search is continued
    speculatively (a node whose row is held is expanded without being emitted) for as many nodes
    as it may still emit (each missing row met there charged :data:`READ_AHEAD_CHARGE` of its
    depth left), and the nodes met there shallower than L whose rows are missing are fetched, best
    first. Paths the target prefers all deepen in the same forward instead of one
    after another. The search and its result are the same; only the rows arrive in fewer, larger
    batches.
    """
    paths: list[tuple[int, ...]] = []
    parent = np.empty(N, dtype=np.int64)
    token = np.empty(N, dtype=np.int64)
    depth = np.empty(N, dtype=np.int64)
    score = np.empty(N)
    # per expanded parent (slot = emission index + 1, the root at 0): its score, its row sorted best first
    p_score: dict[int, float] = {}
    p_vals: dict[int, np.ndarray] = {}
    p_ids: dict[int, np.ndarray] = {}
    heap: list[tuple[float, int, int]] = []  # (-score, parent emission index (-1: root), rank)

    M = min(V, N)  # a parent never has more than N children in the tree
    batched = lookahead > 0 and callable(getattr(drafter, "prefetch", None)) and \
        callable(getattr(drafter, "has_row", None))

    # prefix -> (its best M values, their ids) for rows read ahead of their node's emission
    ahead: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    def best_m(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The row's first M tokens by (decreasing value, increasing id), without sorting all of it:
        every token tied with the M-th largest value is kept, then sorted, then cut to M."""
        got = ahead.pop(prefix, None)
        if got is not None:
            return got
        row = _row(drafter, prefix, V)
        cand = np.arange(V) if M == V else np.flatnonzero(row >= np.partition(row, V - M)[V - M])
        order = cand[np.lexsort((cand, -row[cand]))][:M]  # [M]
        return row[order], order

    def upcoming(left: int) -> list[tuple[int, ...]]:
        """The missing rows among the next ``left`` nodes of the search continued over the held rows
        (a held node's children join the continuation as if it had been emitted), shallower than L,
        best first, at most ``lookahead``. Only which rows are fetched together depends on it."""
        spec = [(k, n, paths[p] if p >= 0 else (), p_vals[p + 1], p_ids[p + 1], p_score[p + 1], r)
                for n, (k, p, r) in enumerate(heap)]
        heapq.heapify(spec)
        count, out = len(spec), []
        while spec and left > 0 and len(out) < lookahead:
            _, _, pre, vals, ids, ps, r = heapq.heappop(spec)
            left -= 1
            if r + 1 < ids.shape[0]:
                heapq.heappush(spec, (-(ps + float(vals[r + 1])), count, pre, vals, ids, ps, r + 1))
                count += 1
            node, s = pre + (int(ids[r]),), ps + float(vals[r])
            if len(node) >= L:
                continue
            if not drafter.has_row(node):
                out.append(node)
                # its unseen descendants may come before what follows: charge some of its depth left
                left -= READ_AHEAD_CHARGE * (L - len(node))
                continue
            if node not in ahead:
                ahead[node] = best_m(node)
            cv, ci = ahead[node]
            heapq.heappush(spec, (-(s + float(cv[0])), count, node, cv, ci, s, 0))
            count += 1
        return out

    def expand(slot: int, prefix: tuple[int, ...], s: float) -> None:
        if batched and not drafter.has_row(prefix):
            drafter.prefetch([prefix, *upcoming(N - slot)])
        vals, order = best_m(prefix)
        p_score[slot] = s
        p_vals[slot] = vals
        p_ids[slot] = order
        heapq.heappush(heap, (-(s + float(vals[0])), slot - 1, 0))

    if N > 0:
        expand(0, (), 0.0)
    for n in range(N):
        _, p, r = heapq.heappop(heap)
        slot = p + 1
        t = int(p_ids[slot][r])
        s = p_score[slot] + float(p_vals[slot][r])  # accumulated left to right from 0.0
        prefix = (paths[p] if p >= 0 else ()) + (t,)
        paths.append(prefix)
        parent[n], token[n], depth[n], score[n] = p, t, len(prefix), s
        if r + 1 < p_ids[slot].shape[0]:
            heapq.heappush(heap, (-(p_score[slot] + float(p_vals[slot][r + 1])), p, r + 1))
        if len(prefix) < L and n + 1 < N:
            expand(n + 1, prefix, s)
    return parent, token, depth, score
