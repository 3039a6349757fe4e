"""Two futures: the 2^(m-1) - 1 chimera bound, made checkable.

The splices of two futures, the smallest product tree holding them
(:func:`min_product_tree_containing`), chimera counts of any tree (:func:`count_chimeras`),
instances where the bound is tight or far from it, and the O(2^m) count from scores alone that
the verification runs. The theorem and its proof: docs/chimeras.md, section 1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from mfd_theory._kernels import chimeras as _k
from mfd_theory.chimeras._check import _check_log_q, _check_pair, _check_sequences
from mfd_theory.coverage import chimera_mask, splice_mask
from mfd_theory.distributions import MixtureOfProducts
from mfd_theory.trees import DraftTree
from mfd_theory.validation import check_int

__all__ = ["TIE_TOL", "TIGHT_M_MAX", "ChimeraCount", "chimera_lower_bound", "count_chimeras",
           "min_product_tree_containing", "on_sequence_paths", "splice_chimeras_from_scores", "splices",
           "tight_instance", "worst_instance"]

#: Relative tolerance below which two log-scores count as tied (sums of ~10 float64 logs are
#: exact to ~1e-15 relative; anything closer than 1e-9 is a tie by construction, not by chance).
TIE_TOL = 1e-9
TIGHT_M_MAX = 24  # tight_instance's near-tie gap 2^-(m-1) stays >= 20x the tie tolerance


def chimera_lower_bound(m: int) -> int:
    """2^(m-1) - 1: the full-length chimeras any product-ranked tree holding two futures a, b holds,
    where m is the number of positions where a and b disagree, when both futures have positive
    drafter probability and Q(a) != Q(b) (docs/chimeras.md, section 1)."""
    m = check_int("m", m, 1)
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
    log_q : array [L, V] or a one-mode MixtureOfProducts
        The drafter's per-position log-probabilities; a MixtureOfProducts with K = 1, such as
        ``target.marginals()``, stands for its rows (as :func:`~mfd_theory.trees.product_tree` takes it).
    sequences : int array [F, L], or a MixtureOfProducts
        Full-length sequences (the target's futures) that the tree must hold; a MixtureOfProducts
        stands for each mode's most likely sequence.
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
    max_nodes = check_int("max_nodes", max_nodes, 1)
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
        seqs = _check_sequences(target, name="target")
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
    m = check_int("m", m, 1)
    L = check_int("L", L, m)
    V = check_int("V", V, 2)
    seed = check_int("seed", seed, 0)
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
    m = check_int("m", m, 1)
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
    ``log_q``: rows [L, V] or a one-mode MixtureOfProducts, as :func:`min_product_tree_containing`.

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
