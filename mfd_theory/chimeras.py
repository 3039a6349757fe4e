"""Chimeras in product-ranked draft trees: the 2^(m-1) - 1 bound, made checkable.

A product drafter scores a prefix s by Q(s) = prod_i q_i(s_i) and DDTree keeps the top-N
prefixes. Let the target have two futures a, b (full length L) that disagree in m positions. A
*splice* of a and b takes, at every position, the token of a or the token of b: there are 2^m of
them, a and b included; the other 2^m - 2 are *chimeras*, prefixes the target never produces.

**Theorem.** If min(Q(a), Q(b)) > 0, every product-ranked tree that holds both a and b holds at
least 2^(m-1) - 1 full-length chimeras, whatever the tie-break, unless Q(a) = Q(b). When
Q(a) = Q(b) the bound still holds unless some complementary pair of splices (below) has
Q(s) = Q(s') = Q(a).

The condition is needed: a future the drafter gives probability 0 scores 0 like every other
impossible prefix, and a tie-break can keep it without any chimera. With q_1 = (1, 0),
q_2 = (0, 1), a = (1, 0) and b = (0, 1), the top-4 set {(0), (0, 1), (1), (1, 0)} holds both
futures and no chimera, though m = 2 (:func:`splice_chimeras_from_scores` reports such cases).

*Proof.* Pair each splice s with its complement s' (s' takes b's token wherever s takes a's and
vice versa). At a position where a and b agree both s and s' carry the shared token, and at a
disagreement position one carries a's token and the other b's, so
Q(s) * Q(s') = Q(a) * Q(b) and max(Q(s), Q(s')) >= sqrt(Q(a) Q(b)) >= t := min(Q(a), Q(b)).
A top-N tree holding a and b holds every prefix scoring strictly above t: it holds whichever of
a, b scores t, and a top-N set holds every prefix that outscores one of its members. If
Q(a) != Q(b) and t > 0, the geometric mean lies strictly above the smaller of the two (with
t = 0 it is 0 itself), so
max(Q(s), Q(s')) >= sqrt(Q(a) Q(b)) > t and the better splice of every pair is in the tree,
with no condition on how other ties are broken. If Q(a) = Q(b) = t, a pair can miss the tree
only when both of its splices score exactly t (otherwise the better one is above t). So, in
both cases stated, the tree holds at least one splice of each of the 2^(m-1) complementary
pairs. One pair is {a, b}; each of the other 2^(m-1) - 1 pairs contributes a distinct chimera
(distinct pairs are disjoint). QED

The bound is tight: when a and b nearly tie and no proper sub-sum of the log-ratios
log q_i(a_i) / q_i(b_i) falls between 0 and log Q(a)/Q(b), exactly one splice of each pair is
kept (:func:`tight_instance`). When a beats b at every disagreement position, every splice
outscores b and all 2^m - 2 chimeras are kept (:func:`worst_instance`). With Q(a) = Q(b) the
bound can fail: if q_i(a_i) = q_i(b_i) at every disagreement position, all splices tie with a and
b and a tie-break that favours the futures keeps no chimera at all (:func:`verify_bound` with
``grid`` reports how often this happens, and that other ties never break it).

For F >= 3 futures the same argument applies to any set of splices whose columns rearrange the
columns of some of the futures (their scores multiply to the futures' product, so one of them
scores at least t). :func:`min_chimeras_multi` turns these constraints into a lower bound (a
minimum hitting set, solved as an integer program by HiGHS: computer-assisted, as the solver's
optimality is not independently certified) and searches drafters for the observed minimum; see
docs/chimeras.md for what is proven by hand, what is computer-assisted and what is only observed.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Any

import numpy as np

from mfd_theory._kernels import chimeras as _k
from mfd_theory.coverage import chimera_mask, splice_mask
from mfd_theory.distributions import MixtureOfProducts
from mfd_theory.trees import DraftTree

__all__ = [
    "BoundCheck",
    "ChimeraCount",
    "MultiFutureMinimum",
    "all_patterns",
    "canonical_pattern",
    "chimera_lower_bound",
    "column_pattern",
    "column_types",
    "conjectured_min_all_distinct",
    "count_chimeras",
    "futures_from_pattern",
    "min_chimeras_multi",
    "pairwise_bound",
    "min_product_tree_containing",
    "splice_chimeras_from_scores",
    "splices",
    "tight_instance",
    "verify_bound",
    "worst_instance",
]

#: Relative tolerance below which two log-scores count as tied (sums of ~10 float64 logs are
#: exact to ~1e-15 relative; anything closer than 1e-9 is a tie by construction, not by chance).
TIE_TOL = 1e-9
TIGHT_M_MAX = 24  # tight_instance's near-tie gap 2^-(m-1) stays >= 20x the tie tolerance


# ----------------------------------------------------------------------------- validation


def _as_tokens(name: str, x: Any, V: int | None = None) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name}: expected integer token ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name}: contains negative token ids")
    if V is not None and arr.size and arr.max() >= V:
        raise ValueError(f"{name}: token {int(arr.max())} lies outside the vocabulary [0, {V})")
    return arr


def _check_pair(a: Any, b: Any, V: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = _as_tokens("a", a, V)
    b = _as_tokens("b", b, V)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"a, b: expected 1-D sequences, got shapes {a.shape} and {b.shape}")
    if a.shape != b.shape:
        raise ValueError(f"a, b: sequences of unequal length ({a.shape[0]} and {b.shape[0]})")
    pos = np.flatnonzero(a != b)  # [m]
    if pos.size == 0:
        raise ValueError("a, b: the futures are identical (m = 0); there is nothing to splice")
    return a, b, pos


def _check_sequences(sequences: Any, L: int | None = None, V: int | None = None) -> np.ndarray:
    try:
        seqs = np.asarray(sequences)
    except ValueError as exc:  # ragged input
        raise ValueError(f"sequences: sequences of unequal length ({exc})") from exc
    if seqs.dtype == object:
        raise ValueError("sequences: sequences of unequal length (or not integer tokens)")
    seqs = _as_tokens("sequences", seqs, V)
    if seqs.ndim == 1:
        seqs = seqs[None, :]
    if seqs.ndim != 2 or seqs.shape[0] == 0 or seqs.shape[1] == 0:
        raise ValueError(f"sequences: expected a non-empty [F, L] array, got shape {seqs.shape}")
    if L is not None and seqs.shape[1] != L:
        raise ValueError(f"sequences: have length {seqs.shape[1]} but the drafter has L = {L} positions")
    return seqs


def _check_log_q(log_q: Any) -> np.ndarray:
    lq = np.asarray(log_q, dtype=np.float64)
    if lq.ndim != 2 or lq.shape[0] < 1 or lq.shape[1] < 1:
        raise ValueError(f"log_q: expected a [L, V] array of log-probabilities, got shape {lq.shape}")
    if np.isnan(lq).any():
        raise ValueError("log_q: contains NaN")
    if np.isposinf(lq).any() or (lq > 1e-9).any():
        raise ValueError("log_q: has entries above 0 (probability > 1); pass log-probabilities")
    return np.minimum(lq, 0.0)  # round-off above 0 would let a child outscore its parent


def _check_int(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    value = int(value)
    if value < lo or (hi is not None and value > hi):
        span = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name}: must be {span}, got {value}")
    return value


# ----------------------------------------------------------------------------- two futures


def chimera_lower_bound(m: int) -> int:
    """2^(m-1) - 1: full-length chimeras any product tree holding two m-disagreeing futures holds
    (when both futures have positive drafter probability and Q(a) != Q(b); see the module doc)."""
    m = _check_int("m", m, 1)
    return (1 << (m - 1)) - 1


def splices(a: Any, b: Any, V: int | None = None) -> np.ndarray:
    """The 2^m full-length sequences that agree with ``a`` or ``b`` at every position.

    Row k takes a's token at the j-th disagreement position when bit j of k is set, so row 0 is
    b, row 2^m - 1 is a, and rows k and (2^m - 1) ^ k are complements. int64 [2^m, L].
    """
    a, b, pos = _check_pair(a, b, V)
    m = pos.size
    if m > 24:
        raise ValueError(f"a, b: m = {m} disagreements give 2^{m} splices, too many to list")
    bits = (np.arange(1 << m)[:, None] >> np.arange(m)[None, :]) & 1  # [2^m, m]
    out = np.repeat(b[None, :], 1 << m, axis=0)  # [2^m, L]
    out[:, pos] = np.where(bits == 1, a[pos][None, :], b[pos][None, :])
    return out


def _sequence_scores(lq: np.ndarray, seqs: np.ndarray) -> np.ndarray:
    return lq[np.arange(lq.shape[0])[None, :], seqs].sum(axis=1)  # [F]


def min_product_tree_containing(
    log_q: Any, sequences: Any, max_nodes: int = 2_000_000, tie_tol: float = TIE_TOL
) -> DraftTree:
    """The smallest top-N product tree (DDTree's ranking) that holds every given sequence.

    Parameters
    ----------
    log_q : array [L, V]
        The drafter's per-position log-probabilities.
    sequences : int array [F, L]
        Full-length sequences (the target's futures) that the tree must hold.
    max_nodes : int
        Refuse (ValueError) instead of building a larger tree.
    tie_tol : float
        Log-scores within ``tie_tol * (1 + |t|)`` of the threshold t count as tied with it.

    Returns
    -------
    DraftTree
        Every prefix scoring above t = min over the sequences of Q(s), plus the sequences and
        their prefixes, in best-first order (score descending, shallower first on ties). Prefixes
        that tie with t but lead to no sequence are left out: the smallest tree any tie-break can
        give. Barring ties this is exactly ``product_tree(log_q, N)`` with N = its size.
    """
    lq = _check_log_q(log_q)
    L, V = lq.shape
    seqs = _check_sequences(sequences, L=L, V=V)
    max_nodes = _check_int("max_nodes", max_nodes, 1)
    scores = _sequence_scores(lq, seqs)  # [F]
    if np.isneginf(scores).any():
        k = int(np.flatnonzero(np.isneginf(scores))[0])
        i = int(np.flatnonzero(np.isneginf(lq[np.arange(L), seqs[k]]))[0])
        raise ValueError(
            f"sequences: sequence {k} has probability zero under the drafter (log_q[{i}, {int(seqs[k, i])}]"
            " = -inf): it ties with every other impossible prefix, so no smallest product tree holding it "
            "is defined, and the chimera bound needs min(Q(a), Q(b)) > 0"
        )
    t = float(scores.min())
    tol = tie_tol * (1.0 + abs(t))
    order = np.argsort(-lq, axis=1, kind="stable")  # [L, V]
    vals = np.ascontiguousarray(np.take_along_axis(lq, order, axis=1))
    ids = np.ascontiguousarray(order.astype(np.int64))
    cap = max_nodes + 1
    parent = np.empty(cap, dtype=np.int64)
    token = np.empty(cap, dtype=np.int64)
    depth = np.empty(cap, dtype=np.int64)
    score = np.empty(cap, dtype=np.float64)
    n = _k._prefixes_above(vals, ids, t - tol, cap, parent, token, depth, score)
    if n == _k.OVERFLOW:
        raise ValueError(
            f"max_nodes: more than {max_nodes} prefixes score at least the weakest sequence; "
            "raise max_nodes or give the sequences more drafter probability"
        )
    parent, token, depth, score = parent[:n], token[:n], depth[:n], score[:n]
    on_path = on_sequence_paths(parent, token, depth, seqs).any(axis=0)  # [n]
    keep = (score > t + tol) | on_path  # tied prefixes off every sequence are left out
    return _subtree(parent, token, depth, score, keep)


def on_sequence_paths(parent, token, depth, seqs) -> np.ndarray:
    """bool [F, N]: node n's prefix is a prefix of sequence f (parents must precede children)."""
    F = seqs.shape[0]
    N = parent.shape[0]
    on = np.zeros((F, N), dtype=np.bool_)
    if N == 0:
        return on
    for d in range(1, int(depth.max()) + 1):
        idx = np.flatnonzero(depth == d)
        match = seqs[:, d - 1][:, None] == token[idx][None, :]  # [F, n_d]
        par = parent[idx]
        up = np.where(par[None, :] >= 0, on[:, np.maximum(par, 0)], True)  # [F, n_d]
        on[:, idx] = match & up
    return on


def _subtree(parent, token, depth, score, keep) -> DraftTree:
    """Keep the marked nodes (a prefix-closed subset) and store them best-first."""
    idx = np.flatnonzero(keep)
    order = idx[np.lexsort((depth[idx], -score[idx]))]  # score descending, shallower first
    new = np.full(parent.shape[0], -1, dtype=np.int64)
    new[order] = np.arange(order.size)
    par = parent[order]
    new_par = np.where(par >= 0, new[np.maximum(par, 0)], -1)
    return DraftTree(new_par, token[order], depth[order], score[order])


@dataclasses.dataclass(frozen=True)
class ChimeraCount:
    """Chimeras of a tree for a target with several futures.

    A node is a chimera when its target prefix probability is 0, or at most ``eps`` as
    :func:`count_chimeras` was asked (for exact futures: its prefix is a prefix of no future),
    and a splice when each of its tokens agrees with the same
    position of some future. ``full_length`` and ``shorter`` count chimeras of depth L and
    below L; the ``_splices`` fields count those chimeras that are also splices.
    """

    n_nodes: int
    full_length: int  # chimeras of depth L
    shorter: int  # chimeras of depth < L
    full_length_splices: int  # chimeras of depth L that are splices (what the bound counts)
    shorter_splices: int

    @property
    def total(self) -> int:
        return self.full_length + self.shorter

    @property
    def share(self) -> float:
        return self.total / self.n_nodes if self.n_nodes else 0.0


def count_chimeras(tree: DraftTree, target: Any, eps: float = 0.0) -> ChimeraCount:
    """Count the chimeras of ``tree`` for ``target``, the arguments :func:`chimera_mask` takes.

    ``target`` is the futures [F, L] of an exact-futures target, or a
    :class:`~mfd_theory.distributions.MixtureOfProducts`: then chimeras are the nodes of target
    prefix probability at most ``eps`` and splices are taken against each mode's most likely
    sequence (its future, for targets built by ``MixtureOfProducts.futures`` or
    :mod:`mfd_theory.synthetic`). The default ``eps = 0`` counts nodes of probability exactly
    zero, which a noisy target (noise > 0 gives every prefix some probability) never has: pass
    a small ``eps`` there, e.g. a bound on the probability the noise alone gives a prefix.
    With futures only ``eps = 0`` is meaningful (their weights are not given).
    """
    if not isinstance(tree, DraftTree):
        raise ValueError(f"tree: expected a DraftTree, got {type(tree).__name__}")
    if isinstance(target, MixtureOfProducts):
        seqs = np.argmax(target.log_q, axis=2)  # [K, L]: each mode's most likely sequence
        chim = chimera_mask(tree, target, eps) if len(tree) else np.zeros(0, dtype=np.bool_)
        L = target.L
    else:
        if eps != 0:
            chimera_mask(DraftTree([], []), target, eps)  # refuses eps with futures, naming it
        seqs = _check_sequences(target)
        L = seqs.shape[1]
        if tree.max_depth > L:
            raise ValueError(f"sequences: length {L} is shorter than the tree's depth {tree.max_depth}")
        chim = ~on_sequence_paths(tree.parent, tree.token, tree.depth, seqs).any(axis=0)  # [N]
    spl = splice_mask(tree, seqs) if len(tree) else np.zeros(0, dtype=np.bool_)
    full = tree.depth == L
    return ChimeraCount(
        n_nodes=len(tree),
        full_length=int((chim & full).sum()),
        shorter=int((chim & ~full).sum()),
        full_length_splices=int((chim & full & spl).sum()),
        shorter_splices=int((chim & ~full & spl).sum()),
    )


def _two_future_setup(m: int, L: int, V: int, seed: int):
    m = _check_int("m", m, 1)
    L = _check_int("L", L, m)
    V = _check_int("V", V, 2)
    seed = _check_int("seed", seed, 0)
    if m > 30:
        raise ValueError(f"m: at most 30 supported (2^m splices), got {m}")
    rng = np.random.default_rng(seed)
    pos = np.sort(rng.choice(L, size=m, replace=False))
    a = rng.integers(0, V, size=L).astype(np.int64)
    b = a.copy()
    b[pos] = (a[pos] + rng.integers(1, V, size=m)) % V
    return m, L, V, rng, pos, a, b


def _marginals_from_ratios(L, V, pos, a, b, d, other_mass=1e-3) -> np.ndarray:
    """log_q [L, V]: q(a_i) / q(b_i) = exp(d_j) at disagreement positions, a's token near 1 elsewhere.

    Tokens that are neither a's nor b's share ``other_mass`` per position, small enough that no
    non-splice sequence reaches the weaker future's score.
    """
    q = np.zeros((L, V))  # [L, V]
    other = other_mass if V > 2 else 0.0
    agree = np.setdiff1d(np.arange(L), pos)
    q[agree, :] = other_mass / (V - 1)
    q[agree, a[agree]] = 1.0 - other_mass
    if pos.size:
        q[pos, :] = other / max(V - 2, 1)
        share = 1.0 / (1.0 + np.exp(-d))  # q(a) / (q(a) + q(b))
        q[pos, a[pos]] = (1.0 - other) * share
        q[pos, b[pos]] = (1.0 - other) * (1.0 - share)
    return np.log(q)


def tight_instance(m: int, L: int = 15, V: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A drafter and two futures for which the bound is attained exactly.

    Returns ``(log_q [L, V], a [L], b [L])``: a and b disagree in m positions and the smallest
    product tree holding both has exactly 2^(m-1) - 1 full-length chimeras. Construction: the
    log-ratios d_j = log q(a_j)/q(b_j) at m - 1 of the positions are delta * (+-2^k) (distinct
    powers of two with random signs, so distinct subsets have distinct non-zero sums), and the
    last one makes the futures nearly tie, sum_j d_j = +-delta / 2. Then no proper sub-sum lies
    between 0 and the futures' log-ratio, and exactly one splice of each complementary pair
    clears the threshold.

    ``m`` is at most :data:`TIGHT_M_MAX` = 24. The near-tie gap delta / 2 = 2^-(m-1) nats shrinks
    with m while the spread sum |d_j| stays about 4 nats, and the package counts log-scores within
    ``TIE_TOL * (1 + sum |d_j|)`` (about 5e-9) of the threshold as tied; at m = 24 the gap
    (1.2e-7) is still 20 times that tolerance, from m = 29 on it is below it. Widening the gap
    instead would widen the spread with it (the powers of two span 2^(m-1) gaps), so the ratio of
    gap to relative tolerance cannot be kept above one beyond m ~ 28 whatever delta is.
    """
    m = _check_int("m", m, 1)
    if m > TIGHT_M_MAX:
        raise ValueError(f"m: at most {TIGHT_M_MAX} for tight_instance (its near-tie gap 2^-(m-1) "
                         f"must stay above the tie tolerance), got {m}")
    m, L, V, rng, pos, a, b = _two_future_setup(m, L, V, seed)
    delta = 2.0 / (1 << (m - 1))  # keeps sum |d_j| <= ~4 nats whatever m
    d = np.zeros(m)
    if m > 1:
        exps = rng.permutation(m - 1)
        signs = rng.choice([-1.0, 1.0], size=m - 1)
        d[1:] = delta * signs * (2.0 ** exps)
    eps = delta / 2 * rng.choice([-1.0, 1.0])
    d[0] = eps - d[1:].sum()
    perm = rng.permutation(m)  # which disagreement position gets the balancing ratio
    return _marginals_from_ratios(L, V, pos, a, b, d[perm]), a, b


def worst_instance(m: int, L: int = 15, V: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A drafter and two futures whose smallest product tree holds all 2^m - 2 splice chimeras.

    Future a beats b at every disagreement position (d_j > 0, generic values), so every splice
    outscores b, the weaker future. Returns ``(log_q [L, V], a, b)``.
    """
    m, L, V, rng, pos, a, b = _two_future_setup(m, L, V, seed)
    d = rng.uniform(0.5, 1.5, size=m) * (2.0 / m)  # [m], sum ~2 nats
    return _marginals_from_ratios(L, V, pos, a, b, d), a, b


def splice_chimeras_from_scores(log_q: Any, a: Any, b: Any) -> tuple[int, int]:
    """Full-length splice chimeras of the smallest product tree holding a and b, from scores alone.

    Returns ``(above, tied)``: splices other than a and b scoring strictly above
    t = min(Q(a), Q(b)) (always in the tree) and those tied with t (in it or not depending on the
    tie-break). This is the O(2^m) count :func:`verify_bound` runs on every instance.

    A future with probability zero (some ``log_q`` entry on it is -inf) gives t = 0, outside the
    theorem: then ``above`` counts the splices of positive probability and ``tied`` those of
    probability zero, and ``above`` can fall below 2^(m-1) - 1 (with q_1 = (1, 0),
    q_2 = (0, 1), a = (1, 0), b = (0, 1) it is 0).
    """
    lq = _check_log_q(log_q)
    L, V = lq.shape
    a, b, pos = _check_pair(a, b, V)
    if a.shape[0] != L:
        raise ValueError(f"a, b: have length {a.shape[0]} but the drafter has L = {L} positions")
    if pos.size > 30:
        raise ValueError(f"a, b: m = {pos.size} is too large to enumerate 2^m splices")
    la, lb = lq[pos, a[pos]], lq[pos, b[pos]]
    if np.isneginf(lq[np.arange(L), a]).any() or np.isneginf(lq[np.arange(L), b]).any():
        # t = 0: a splice is above t exactly when it has positive probability, which it has when
        # the shared tokens do and, at each disagreement position, the token it takes does
        shared_ok = not np.isneginf(lq[np.flatnonzero(a == b), a[a == b]]).any()
        fa, fb = ~np.isneginf(la), ~np.isneginf(lb)
        positive = int(np.prod(fa.astype(object) + fb.astype(object))) if shared_ok else 0
        positive -= int(shared_ok and fa.all()) + int(shared_ok and fb.all())  # a and b themselves
        return positive, (1 << pos.size) - 2 - positive
    d = la - lb  # [m] log-ratio of a's token to b's at each disagreement position
    sums = np.empty(1 << pos.size)
    above, tied, _ = _k._count_two_future_splices(d, TIE_TOL, sums)
    return int(above), int(tied)


# ----------------------------------------------------------------------------- verification


@dataclasses.dataclass
class BoundCheck:
    """Outcome of :func:`verify_bound`.

    ``instances`` counts instances checked against the bound: all with Q(a) != Q(b), whatever
    other ties they have; those with Q(a) = Q(b) (within twice the tie tolerance) are set aside
    and counted in ``ties``. ``violations`` counts checked instances with fewer than
    2^(m-1) - 1 full-length splice chimeras when every tie is broken in the futures' favour (the
    theorem says 0). ``other_ties`` counts checked instances where some splice ties with t (ties
    the theorem shows harmless). ``by_m[m]`` holds, per m: ``bound``, ``instances``, ``min`` and
    ``max`` observed chimeras (ties broken for / against the futures), ``min_slack``
    (min - bound), ``violations``, ``ties``, ``other_ties``, and, for the set-aside instances,
    ``tie_min`` / ``tie_max`` (chimeras when every tie is broken for / against the futures) and
    ``tie_violations`` (those below the bound with ties broken for the futures).
    """

    instances: int
    violations: int
    ties: int
    by_m: dict[int, dict[str, Any]]
    seconds: float
    config: dict[str, Any]
    other_ties: int = 0

    @property
    def rate(self) -> float:
        """Instances drawn per second."""
        total = self.instances + self.ties
        return total / self.seconds if self.seconds > 0 else float("inf")

    @property
    def min_slack(self) -> dict[int, int]:
        return {m: row["min_slack"] for m, row in self.by_m.items() if row["instances"]}

    def table(self) -> list[dict[str, Any]]:
        """The tightness table: one row per m (m, bound, observed minimum, observed maximum)."""
        return [dict(m=m, **row) for m, row in sorted(self.by_m.items())]


def verify_bound(
    n_instances: int = 100_000,
    seed: int = 0,
    m_min: int = 1,
    m_max: int = 10,
    L_max: int = 12,
    V_max: int = 8,
    alpha: float = 1.0,
    near_tie_frac: float = 0.5,
    grid: int = 0,
) -> BoundCheck:
    """Check the bound on random instances; returns a :class:`BoundCheck`.

    Each instance draws m in [m_min, m_max], L in [m, max(m, L_max)], V in [2, V_max], drafter
    marginals per position from Dirichlet(alpha), and two futures differing in m random
    positions; a fraction ``near_tie_frac`` re-weights one disagreement position so the futures
    nearly tie (where the bound is tight). It then counts the full-length splices that score at
    least t = min(Q(a), Q(b)), i.e. the full-length splice chimeras of the smallest product tree
    holding both futures (:func:`min_product_tree_containing`, which the tests compare this count
    with). Only instances where the futures tie, Q(a) = Q(b), are set aside (``ties``); every
    other instance is checked with its ties broken in favour of the futures, the case the
    theorem covers.

    With ``grid > 0`` the marginals are drawn from integer weights 1..grid instead, so exact
    ties are frequent; the set-aside instances are reported with their chimera counts when ties
    are broken in favour of the futures (``tie_min``) and against them (``tie_max``).
    """
    n = _check_int("n_instances", n_instances, 1)
    seed = _check_int("seed", seed, 0)
    m_min = _check_int("m_min", m_min, 1, 20)
    m_max = _check_int("m_max", m_max, m_min, 20)
    L_max = _check_int("L_max", L_max, 1)
    V_max = _check_int("V_max", V_max, 2)
    grid = _check_int("grid", grid, 0)
    if not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha: must be finite and > 0, got {alpha}")
    if not 0.0 <= near_tie_frac <= 1.0:
        raise ValueError(f"near_tie_frac: must lie in [0, 1], got {near_tie_frac}")
    out_m = np.empty(n, dtype=np.int64)
    out_above = np.empty(n, dtype=np.int64)
    out_tied = np.empty(n, dtype=np.int64)
    out_kind = np.empty(n, dtype=np.int64)
    out_ftie = np.empty(n, dtype=np.bool_)  # the futures tie: Q(a) = Q(b)
    # compile outside the timed region so the rate measures the check, not numba
    _k._verify_kernel(1, 1, 1, 1, 2, 1.0, 0.0, 0, TIE_TOL, 0, out_m[:1], out_above[:1], out_tied[:1], out_kind[:1],
                      out_ftie[:1])
    t0 = time.perf_counter()
    _k._verify_kernel(n, m_min, m_max, L_max, V_max, float(alpha), float(near_tie_frac), grid, TIE_TOL,
                      seed, out_m, out_above, out_tied, out_kind, out_ftie)
    seconds = time.perf_counter() - t0
    by_m: dict[int, dict[str, Any]] = {}
    total_checked = total_viol = total_ties = total_other = 0
    for m in range(m_min, m_max + 1):
        sel = out_m == m
        bound = chimera_lower_bound(m)
        tied = sel & out_ftie  # Q(a) = Q(b): outside the theorem, set aside
        checked = sel & ~out_ftie  # every other instance, whatever its other ties
        low = out_above[checked]  # ties broken for the futures: only strictly-above splices
        row: dict[str, Any] = dict(
            bound=bound,
            instances=int(checked.sum()),
            min=int(low.min()) if low.size else None,
            max=int((out_above + out_tied)[checked].max()) if low.size else None,
            min_slack=int(low.min()) - bound if low.size else None,
            violations=int((low < bound).sum()),
            ties=int(tied.sum()),
            other_ties=int((checked & (out_tied > 0)).sum()),
            near_tie_instances=int((checked & (out_kind == 1)).sum()),
            min_generic=int(out_above[checked & (out_kind == 0)].min()) if (checked & (out_kind == 0)).any() else None,
        )
        if tied.any():
            row["tie_min"] = int(out_above[tied].min())
            row["tie_max"] = int((out_above + out_tied)[tied].max())
            row["tie_violations"] = int((out_above[tied] < bound).sum())
        by_m[m] = row
        total_checked += row["instances"]
        total_viol += row["violations"]
        total_ties += row["ties"]
        total_other += row["other_ties"]
    config = dict(n_instances=n, seed=seed, m_min=m_min, m_max=m_max, L_max=L_max, V_max=V_max,
                  alpha=float(alpha), near_tie_frac=float(near_tie_frac), grid=grid, tie_tol=TIE_TOL)
    return BoundCheck(total_checked, total_viol, total_ties, by_m, seconds, config, total_other)


# ----------------------------------------------------------------------------- F >= 3 futures
#
# Only positions where the futures disagree matter: a full-length splice takes at every such
# position one of the futures' tokens there, and positions where all futures agree add the same
# log-probability to every splice. A drafter can push every other token as low as it likes, so
# the minimum number of full-length chimeras is a question about the splice grid alone:
# the smallest number of grid points, other than the futures, scoring at least min_f Q(f) under
# some per-position weighting w.
#
# Rearrangement lemma (proven, generalises the pairing above): if splices s_1..s_r have, at every
# position, the same multiset of tokens as futures f_1..f_r, then prod Q(s_k) = prod Q(f_k) >= t^r,
# so barring ties one s_k scores above t and is in the tree. Every such set that contains no future
# must therefore contain a chimera of the tree: the minimum hitting set of these sets is a proven
# lower bound. A drafter found by search that keeps exactly that many chimeras proves it exact.


def _partition_label(col: np.ndarray) -> str:
    """'01|2': futures 0 and 1 share a token at this position, future 2 has another."""
    blocks: dict[int, list[int]] = {}
    for f, tok in enumerate(col.tolist()):
        blocks.setdefault(tok, []).append(f)
    parts = sorted(("".join(str(f) for f in b) for b in blocks.values()), key=lambda s: (s[0], s))
    return "|".join(parts)


def column_pattern(futures: Any) -> dict[str, int]:
    """The disagreement pattern of F futures [F, L]: column type -> number of positions.

    A column type is the partition of the futures by their token at that position, written like
    '01|2' (futures 0 and 1 agree, 2 differs); positions where all agree are not counted.
    For two futures the pattern is {'0|1': m}.
    """
    seqs = _check_sequences(futures)
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
    F = len(members) if F is None else _check_int("F", F, 2)
    cols = []
    for lab, n in pattern.items():
        _check_int(f"pattern[{lab!r}]", n, 0)
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
    seqs = _check_sequences(futures)
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
    seqs = _check_sequences(futures)
    if len({tuple(r) for r in seqs.tolist()}) != seqs.shape[0]:
        raise ValueError("futures: contains identical rows")
    if seqs.shape[0] < 2:
        raise ValueError("futures: need at least two futures")
    grid = _Grid(seqs)
    if grid.G > 200_000:
        raise ValueError(f"futures: the splice grid has {grid.G} points; too many to search")
    sets = _rearrangement_sets(grid, max_sets) if lower_bound else []
    lower = _min_hitting_set(sets, grid.G) if lower_bound else None
    observed, w = _search(grid, _check_int("n_trials", n_trials, 1), _check_int("seed", seed, 0))
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
    (``python -m mfd_theory.commands.chimera_exact``) and the sweep of ``chimera_bound``;
    see docs/chimeras.md.
    """
    F = _check_int("F", F, 2)
    m = _check_int("m", m, 1)
    return sum(k ** (m - 1) - 1 for k in range(2, F + 1))


def column_types(F: int) -> list[str]:
    """Every partition of futures 0..F-1 into >= 2 blocks, as column-type labels ('01|2', ...)."""
    F = _check_int("F", F, 2, 8)
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
    for tot in range(1, _check_int("max_columns", max_columns, 1) + 1):
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
