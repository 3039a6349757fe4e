"""Slow, obviously correct twins of mfd_theory.chimeras (by enumeration of every prefix)."""

from __future__ import annotations

import itertools


def splices(a, b) -> set[tuple[int, ...]]:
    """Every sequence whose i-th token is a[i] or b[i]."""
    return set(itertools.product(*[sorted({int(x), int(y)}) for x, y in zip(a, b)]))


def score(log_q, s) -> float:
    return float(sum(log_q[i, t] for i, t in enumerate(s)))


def all_prefixes(L: int, V: int):
    for d in range(1, L + 1):
        yield from itertools.product(range(V), repeat=d)


def min_tree_paths(log_q, sequences, tol: float = 1e-9) -> set[tuple[int, ...]]:
    """Prefixes scoring above the weakest sequence, plus the sequences' own prefixes."""
    L, V = log_q.shape
    seqs = [tuple(int(t) for t in s) for s in sequences]
    t = min(score(log_q, s) for s in seqs)
    on_path = {s[:d] for s in seqs for d in range(1, L + 1)}
    return {p for p in all_prefixes(L, V) if score(log_q, p) > t + tol * (1 + abs(t)) or p in on_path}


def chimera_counts(paths, sequences) -> dict[str, int]:
    """Chimeras (prefix of no sequence) of a set of paths, split by full length and splice-ness."""
    seqs = [tuple(int(t) for t in s) for s in sequences]
    L = len(seqs[0])
    prefixes = {s[:d] for s in seqs for d in range(1, L + 1)}
    cols = [{s[i] for s in seqs} for i in range(L)]
    out = dict(full_length=0, shorter=0, full_length_splices=0, shorter_splices=0)
    for p in paths:
        if p in prefixes:
            continue
        full = len(p) == L
        is_splice = all(tok in cols[i] for i, tok in enumerate(p))
        out["full_length" if full else "shorter"] += 1
        if is_splice:
            out["full_length_splices" if full else "shorter_splices"] += 1
    return out


def splice_chimeras_above(log_q, a, b) -> tuple[int, int]:
    """(splices other than a, b scoring strictly above min(Q(a), Q(b)), splices tied with it)."""
    sa, sb = score(log_q, a), score(log_q, b)
    t = min(sa, sb)
    above = tied = 0
    for s in splices(a, b) - {tuple(int(x) for x in a), tuple(int(x) for x in b)}:
        x = score(log_q, s) - t
        if x > 1e-9:
            above += 1
        elif x >= -1e-9:
            tied += 1
    return above, tied


def exact_splice_counts(weights, a, b) -> tuple[int, int, bool]:
    """Exact twin of the two-future count for integer drafter weights [L, V] (q = w / row sum):
    rational arithmetic, so ties are exact. Returns (splices other than a, b strictly above
    t = min(Q(a), Q(b)), those equal to t, whether Q(a) == Q(b))."""
    from fractions import Fraction

    q = [[Fraction(int(w), int(sum(row))) for w in row] for row in weights]

    def Q(s):
        out = Fraction(1)
        for i, tok in enumerate(s):
            out *= q[i][tok]
        return out

    ta, tb = tuple(int(x) for x in a), tuple(int(x) for x in b)
    t = min(Q(ta), Q(tb))
    above = tied = 0
    for s in splices(a, b) - {ta, tb}:
        above += Q(s) > t
        tied += Q(s) == t
    return above, tied, Q(ta) == Q(tb)
