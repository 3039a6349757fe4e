"""Slow, obviously correct twins of the theory core, for tiny V and L.

Everything here enumerates: every prefix of length 1..L over the vocabulary (or over the
candidate lists), scored one at a time in plain Python floats. Nothing is vectorised or clever,
so each function can be checked by reading it. Trees are handled as lists of token tuples
("paths"), the representation a reader would write down by hand.

Sizes: with V <= 4 and L <= 4 there are at most 4 + 16 + 64 + 256 = 340 prefixes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

Path = tuple[int, ...]

NEG_INF = float("-inf")


# ----------------------------------------------------------------------------- scalar helpers

def logsumexp(terms: Iterable[float]) -> float:
    terms = [float(t) for t in terms]
    if not terms:
        return NEG_INF
    m = max(terms)
    if m == NEG_INF:
        return NEG_INF
    return m + math.log(math.fsum(math.exp(t - m) for t in terms))


def exp_or_zero(x: float) -> float:
    return 0.0 if x == NEG_INF else math.exp(x)


# ----------------------------------------------------------------------------- enumeration

def all_prefixes(L: int, V: int) -> list[Path]:
    """Every non-empty token sequence of length <= L over range(V), shortest first."""
    out: list[Path] = []
    for d in range(1, L + 1):
        out.extend(itertools.product(range(V), repeat=d))
    return out


def candidate_prefixes(token_sets: Sequence[Sequence[int]]) -> list[Path]:
    """Every non-empty prefix whose i-th token is in token_sets[i]."""
    out: list[Path] = []
    for d in range(1, len(token_sets) + 1):
        out.extend(itertools.product(*[sorted(set(int(t) for t in s)) for s in token_sets[:d]]))
    return out


# ----------------------------------------------------------------------------- distributions

def log_prefix_prob(log_pi, log_q, prefix: Sequence[int]) -> float:
    """log sum_k pi_k prod_{i < len(prefix)} q_{k,i}(prefix_i); the empty prefix has log prob 0."""
    log_pi = np.asarray(log_pi, dtype=np.float64)
    log_q = np.asarray(log_q, dtype=np.float64)
    terms = []
    for k in range(log_pi.shape[0]):
        parts = [float(log_pi[k])] + [float(log_q[k, i, t]) for i, t in enumerate(prefix)]
        terms.append(math.fsum(parts) if NEG_INF not in parts else NEG_INF)
    return logsumexp(terms)


def product_score(log_q, prefix: Sequence[int]) -> float:
    """sum_i log q_i(prefix_i) for a single product log_q [L, V]."""
    log_q = np.asarray(log_q, dtype=np.float64)
    parts = [float(log_q[i, t]) for i, t in enumerate(prefix)]
    return NEG_INF if NEG_INF in parts else math.fsum(parts)


def marginals(log_pi, log_q) -> np.ndarray:
    """log of the per-position marginal sum_k pi_k q_{k,i}(v), shape [L, V]."""
    log_pi = np.asarray(log_pi, dtype=np.float64)
    log_q = np.asarray(log_q, dtype=np.float64)
    K, L, V = log_q.shape
    out = np.empty((L, V))
    for i in range(L):
        for v in range(V):
            out[i, v] = logsumexp(log_pi[k] + log_q[k, i, v] for k in range(K))
    return out


def futures_log_params(sequences, weights=None, vocab_size=None, noise=0.0):
    """(log_pi, log_q) of one mode per future: (1 - noise) on its token plus noise / V everywhere."""
    seqs = [list(map(int, s)) for s in sequences]
    F, L = len(seqs), len(seqs[0])
    V = vocab_size if vocab_size is not None else max(max(s) for s in seqs) + 1
    w = [1.0] * F if weights is None else [float(x) for x in weights]
    total = math.fsum(w)
    log_pi = np.array([math.log(x / total) if x > 0 else NEG_INF for x in w])
    log_q = np.empty((F, L, V))
    for f in range(F):
        for i in range(L):
            for v in range(V):
                p = (1.0 - noise) * (v == seqs[f][i]) + noise / V
                log_q[f, i, v] = math.log(p) if p > 0 else NEG_INF
    return log_pi, log_q


def node_log_probs(paths: Sequence[Path], log_pi, log_q) -> np.ndarray:
    return np.array([log_prefix_prob(log_pi, log_q, p) for p in paths], dtype=np.float64)


# ----------------------------------------------------------------------------- coverage family

def coverage(paths: Sequence[Path], log_pi, log_q) -> float:
    """C(T) = sum over nodes of P(prefix)."""
    return math.fsum(exp_or_zero(log_prefix_prob(log_pi, log_q, p)) for p in paths)


def depth_profile(paths: Sequence[Path], log_pi, log_q, L: int) -> np.ndarray:
    """P(accepted >= d) for d = 1..L: the mass of the depth-d nodes (the walk passes one of them)."""
    out = np.zeros(L)
    for d in range(1, L + 1):
        out[d - 1] = math.fsum(
            exp_or_zero(log_prefix_prob(log_pi, log_q, p)) for p in paths if len(p) == d
        )
    return out


def accepted_length(path_set: set[Path], sequence: Sequence[int]) -> int:
    """Tokens a tree walk accepts when the target draws `sequence`: its longest prefix in the tree."""
    d = 0
    while d < len(sequence) and tuple(sequence[: d + 1]) in path_set:
        d += 1
    return d


def acceptance_moments(paths: Sequence[Path], log_pi, log_q) -> tuple[float, float]:
    """(mean, variance) of the accepted length by brute force over every full block the target
    can draw: P(block) times the walk's accepted length for that block."""
    L, V = np.asarray(log_q).shape[1:]
    path_set = set(paths)
    probs, lens = [], []
    for block in itertools.product(range(V), repeat=L):
        probs.append(exp_or_zero(log_prefix_prob(log_pi, log_q, block)))
        lens.append(accepted_length(path_set, block))
    mean = math.fsum(p * x for p, x in zip(probs, lens))
    return mean, math.fsum(p * (x - mean) ** 2 for p, x in zip(probs, lens))


def chimera_mask(paths: Sequence[Path], log_pi, log_q, eps: float = 0.0) -> np.ndarray:
    return np.array(
        [exp_or_zero(log_prefix_prob(log_pi, log_q, p)) <= eps for p in paths], dtype=bool
    )


def splice_mask(paths: Sequence[Path], sequences) -> np.ndarray:
    """A node is a splice when each of its tokens equals the same position of some sequence."""
    seqs = [list(map(int, s)) for s in sequences]
    return np.array(
        [all(any(s[i] == t for s in seqs) for i, t in enumerate(p)) for p in paths], dtype=bool
    )


def spliced_chimera_mask(paths: Sequence[Path], sequences) -> np.ndarray:
    """A splice that is a prefix of no single sequence."""
    seqs = [tuple(map(int, s)) for s in sequences]
    follows = [any(s[:len(p)] == tuple(p) for s in seqs) for p in paths]
    return splice_mask(paths, sequences) & ~np.array(follows, dtype=bool)


# ----------------------------------------------------------------------------- tree structure

def ancestor_mask(paths: Sequence[Path]) -> np.ndarray:
    """[N+1, N+1], root first: mask[i, j] = node j is node i or one of its ancestors."""
    index = {p: i + 1 for i, p in enumerate(paths)}
    index[()] = 0
    n = len(paths) + 1
    mask = np.zeros((n, n), dtype=bool)
    for p, i in index.items():
        for d in range(len(p) + 1):
            mask[i, index[p[:d]]] = True
    return mask


def children(paths: Sequence[Path], i: int) -> list[int]:
    """Indices of the nodes whose parent is node i (i = -1: the root)."""
    parent_path = () if i == -1 else paths[i]
    return [j for j, p in enumerate(paths) if p[:-1] == parent_path and len(p) == len(parent_path) + 1]


def is_prefix_closed(paths: Sequence[Path]) -> bool:
    present = set(paths)
    return all(p[:-1] in present for p in paths if len(p) > 1)


# ----------------------------------------------------------------------------- builders

def top_n_tree(score: Callable[[Path], float], prefixes: Sequence[Path], budget: int):
    """Grow the tree greedily from the root, always adding the best prefix whose parent is in it.

    Because a score never increases along a path, this is the top-`budget` set; it is
    prefix-closed by construction. Ties go to the shallower, then lexicographically smaller prefix.
    Returns (paths, scores) in emission order.
    """
    scores = {p: score(p) for p in prefixes}
    kids: dict[Path, list[Path]] = {}
    for p in prefixes:
        kids.setdefault(p[:-1], []).append(p)
    frontier = list(kids.get((), []))
    chosen: list[Path] = []
    while len(chosen) < budget and frontier:
        best = min(frontier, key=lambda p: (-scores[p], len(p), p))
        frontier.remove(best)
        chosen.append(best)
        frontier.extend(kids.get(best, []))
    return chosen, [scores[p] for p in chosen]


def product_tree(log_q, budget: int):
    log_q = np.asarray(log_q, dtype=np.float64)
    L, V = log_q.shape
    return top_n_tree(lambda p: product_score(log_q, p), all_prefixes(L, V), budget)


def mixture_tree(log_pi, log_q, budget: int):
    log_q = np.asarray(log_q, dtype=np.float64)
    _, L, V = log_q.shape
    return top_n_tree(lambda p: log_prefix_prob(log_pi, log_q, p), all_prefixes(L, V), budget)


def oracle_tree(log_pi, log_q, budget: int):
    """Top-N by the target's own prefix probability (same enumeration as mixture_tree)."""
    return mixture_tree(log_pi, log_q, budget)


def candidate_tables(values, token_ids) -> list[list[dict[int, float]]]:
    """Per mode and position, a dict token -> value. values/token_ids [K, L, k] (or [L, k])."""
    values = np.asarray(values, dtype=np.float64)
    token_ids = np.asarray(token_ids)
    if values.ndim == 2:
        values, token_ids = values[None], token_ids[None]
    K, L, _ = values.shape
    return [
        [{int(t): float(v) for t, v in zip(token_ids[k, i], values[k, i])} for i in range(L)]
        for k in range(K)
    ]


def candidate_score(log_pi, tables, prefix: Path) -> float:
    """Mixture score where a token absent from mode k's list at position i has q_k = 0 there."""
    terms = []
    for k, table in enumerate(tables):
        parts = [float(log_pi[k])] + [table[i].get(t, NEG_INF) for i, t in enumerate(prefix)]
        terms.append(NEG_INF if NEG_INF in parts else math.fsum(parts))
    return logsumexp(terms)


def tie_rule_order(log_q, budget: int, token_ids=None) -> list[Path]:
    """The first ``budget`` prefixes of a product score under the package's tie rule, in order.

    Order: decreasing score, then the parent's own position in this order (the root first), then
    the token's rank in its position's list (by decreasing log-prob, then id), then the token id;
    key(s) = (-score(s), key(parent), rank, token) with key(root) = () compares exactly so.
    Scores are accumulated left to right from 0.0 in float64, as the builders do, so float ties
    are the builders' ties. log_q [L, V]; with token_ids [L, k] the candidates.
    """
    log_q = np.asarray(log_q, dtype=np.float64)
    L = log_q.shape[0]
    if token_ids is None:
        table = [{v: float(log_q[i, v]) for v in range(log_q.shape[1])} for i in range(L)]
    else:
        table = [dict(zip((int(t) for t in token_ids[i]), (float(x) for x in log_q[i]))) for i in range(L)]
    keys: dict[Path, tuple] = {(): ()}
    scores: dict[Path, float] = {(): 0.0}
    level: list[Path] = [()]
    for i in range(L):
        ranked = sorted(table[i], key=lambda t: (-table[i][t], t))
        rank = {t: r for r, t in enumerate(ranked)}
        nxt = []
        for p in level:
            for t, x in table[i].items():
                s = p + (t,)
                scores[s] = scores[p] + x
                keys[s] = (-scores[s], keys[p], rank[t], t)
                nxt.append(s)
        level = nxt
    del keys[()]
    return sorted(keys, key=keys.__getitem__)[:budget]


def product_tree_candidates(values, token_ids, budget: int):
    """Exact top-N product tree within candidates: values [L, k], token_ids [L, k]."""
    tables = candidate_tables(values, token_ids)
    L = len(tables[0])
    prefixes = candidate_prefixes([list(tables[0][i]) for i in range(L)])
    return top_n_tree(lambda p: candidate_score([0.0], tables, p), prefixes, budget)


def mixture_tree_candidates(log_pi, values, token_ids, budget: int):
    """Exact top-N mixture tree; a prefix is a candidate when each token is in some mode's list."""
    tables = candidate_tables(values, token_ids)
    L = len(tables[0])
    token_sets = [sorted(set().union(*(tables[k][i] for k in range(len(tables))))) for i in range(L)]
    prefixes = candidate_prefixes(token_sets)
    return top_n_tree(lambda p: candidate_score(log_pi, tables, p), prefixes, budget)


def best_mode_tables(log_q, token_ids=None) -> list[list[dict[int, float]]]:
    """Per mode and position, token -> log q: every token of the dense rows log_q [K, L, V], or
    the candidates values [K, L, k] / token_ids [K, L, k]."""
    if token_ids is not None:
        return candidate_tables(log_q, token_ids)
    log_q = np.asarray(log_q, dtype=np.float64)
    K, L, V = log_q.shape
    return [[{v: float(log_q[k, i, v]) for v in range(V)} for i in range(L)] for k in range(K)]


def best_mode_score(tables, prefix: Path) -> float:
    """max_k sum_i log q_{k,i}(prefix_i); each mode's sum is taken left to right from 0.0, as the
    builders take it (so float ties are theirs), a token missing from a mode's table counting -inf."""
    best = NEG_INF
    for table in tables:
        w = 0.0
        for i, t in enumerate(prefix):
            w = w + table[i].get(t, NEG_INF)
        best = max(best, w)
    return best


def best_mode_prefixes(tables) -> list[Path]:
    """Every prefix over the union of the modes' tokens at each position."""
    L = len(tables[0])
    return candidate_prefixes([sorted(set().union(*(tab[i] for tab in tables))) for i in range(L)])


def best_mode_tree(log_q, budget: int, token_ids=None):
    """Top-N by the best-mode score, grown greedily from the root (top_n_tree's own tie order)."""
    tables = best_mode_tables(log_q, token_ids)
    return top_n_tree(lambda p: best_mode_score(tables, p), best_mode_prefixes(tables), budget)


def best_mode_tie_rule_order(log_q, budget: int, token_ids=None) -> list[Path]:
    """The first ``budget`` prefixes of the best-mode score under the package's tie rule, in order.

    key(s) = (-score(s), key(parent), best rank of s's token, token), key(root) = (): a token's
    rank in mode k's list at its position orders that list by decreasing log-prob, then id, and
    its best rank is the smallest over the modes whose list holds it. Every prefix is keyed and
    sorted, as :func:`tie_rule_order` does for one mode.
    """
    tables = best_mode_tables(log_q, token_ids)
    L = len(tables[0])
    best_rank: list[dict[int, int]] = []
    for i in range(L):
        r: dict[int, int] = {}
        for tab in tables:
            for pos, t in enumerate(sorted(tab[i], key=lambda t: (-tab[i][t], t))):
                r[t] = min(r.get(t, pos), pos)
        best_rank.append(r)
    keys: dict[Path, tuple] = {(): ()}
    for p in best_mode_prefixes(tables):  # shortest first: the parent is keyed already
        keys[p] = (-best_mode_score(tables, p), keys[p[:-1]], best_rank[len(p) - 1][p[-1]], p[-1])
    del keys[()]
    return sorted(keys, key=keys.__getitem__)[:budget]


def top_m_rows(x, M: int, pos_tol: float):
    """Per row of x [K, L, V], its M largest entries in list order (decreasing value, then id).

    Returns (values [K][L][M], ids [K][L][M], status), status as the kernels report it: rows are
    scanned in order; within a row NaN beats +inf beats an entry above pos_tol; a row with NaN or
    +inf ends the scan, a positive entry is remembered.
    """
    x = np.asarray(x)
    K, L, V = x.shape
    values, ids, status = [], [], "ok"
    for k in range(K):
        values.append([])
        ids.append([])
        for d in range(L):
            row = [float(v) for v in x[k, d]]
            if any(math.isnan(v) for v in row):
                return values, ids, "nan"
            if any(v == math.inf for v in row):
                return values, ids, "posinf"
            if any(v > pos_tol for v in row):
                status = "positive"
            order = sorted(range(V), key=lambda t: (-row[t], t))[:M]
            values[k].append([row[t] for t in order])
            ids[k].append(order)
    return values, ids, status


# ----------------------------------------------------------------------------- the top-N rule

def top_n_violations(
    paths: Sequence[Path],
    score: Callable[[Path], float],
    prefixes: Sequence[Path],
    budget: int,
    tol: float,
) -> list[str]:
    """Everything wrong with `paths` as a top-`budget` tree under `score` (empty list: valid).

    The rule (ties allowed): the paths are distinct members of `prefixes`, prefix-closed,
    min(budget, len(prefixes)) many, and no excluded prefix whose parent is in the tree (or is
    the root) scores more than `tol` above the lowest included node.
    """
    problems: list[str] = []
    allowed = set(prefixes)
    present = set(paths)
    if len(present) != len(paths):
        problems.append(f"duplicate paths: {sorted(p for p in present if paths.count(p) > 1)}")
    outside = [p for p in paths if p not in allowed]
    if outside:
        problems.append(f"paths outside the candidate set: {outside[:5]}")
    want = min(budget, len(allowed))
    if len(present) != want:
        problems.append(f"size {len(present)}, expected min(N={budget}, #prefixes={len(allowed)}) = {want}")
    orphans = [p for p in paths if len(p) > 1 and p[:-1] not in present]
    if orphans:
        problems.append(f"not prefix-closed; parents missing for {orphans[:5]}")
    if present and not outside:
        lowest = min(score(p) for p in present)
        for p in allowed - present:
            if (len(p) == 1 or p[:-1] in present) and score(p) > lowest + tol:
                problems.append(
                    f"excluded frontier prefix {p} scores {score(p)!r} > lowest included {lowest!r}"
                )
                break
    return problems


# ----------------------------------------------------------------------------- comparison helpers

def assert_log_close(got, want, tol: float, what: str = "") -> None:
    """Log-values agree: exactly the same entries are -inf, the finite ones within `tol` (absolute)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    gi, wi = np.isneginf(got), np.isneginf(want)
    assert np.array_equal(gi, wi), (
        f"{what}: -inf pattern differs at {np.argwhere(gi != wi)[:5].tolist()}: "
        f"got {got[gi != wi][:5]}, want {want[gi != wi][:5]}"
    )
    both = ~gi
    diff = np.abs(got[both] - want[both])
    assert not np.isnan(got).any(), f"{what}: NaN in {got}"
    assert np.all(diff <= tol), (
        f"{what}: max |diff| {diff.max():.3g} > {tol:g}; "
        f"got {got[both][diff > tol][:5]}, want {want[both][diff > tol][:5]}"
    )


def tree_paths(tree) -> list[Path]:
    """A DraftTree's nodes as token tuples, rebuilt from parent/token (not via tree.paths())."""
    parent = np.asarray(tree.parent)
    token = np.asarray(tree.token)
    out: list[Path] = []
    for i in range(len(parent)):
        p, path = i, []
        for _ in range(len(parent) + 1):  # a cycle in `parent` would otherwise loop forever
            if p == -1:
                break
            path.append(int(token[p]))
            p = int(parent[p])
        out.append(tuple(reversed(path)))
    return out


# ----------------------------------------------------------------------------- path-dependent drafters

def memory_log_cond(log_pi, log_q, prefix: Sequence[int], memory: int, temperature: float = 1.0,
                    smoothing: float = 0.0) -> list[float]:
    """log q(. | prefix) of a MemoryDrafter, one token at a time in plain floats.

    Window: the last `memory` tokens; back off to the longest suffix of it that some mode gives
    positive probability (the empty suffix always works). Posterior over modes from that window
    alone, mix the modes' rows at the next position, temper by 1/temperature, mix with uniform.
    """
    log_pi = np.asarray(log_pi, dtype=np.float64)
    log_q = np.asarray(log_q, dtype=np.float64)
    K, _, V = log_q.shape
    d = len(prefix)

    def window_log_weights(j: int) -> list[float]:
        """log pi_k + sum_{j <= i < d} log q_{k,i}(prefix_i), per mode."""
        out = []
        for k in range(K):
            parts = [float(log_pi[k])] + [float(log_q[k, i, prefix[i]]) for i in range(j, d)]
            out.append(NEG_INF if NEG_INF in parts else math.fsum(parts))
        return out

    for j in range(max(0, d - memory), d + 1):  # longest window first; j = d is the empty one
        log_w = window_log_weights(j)
        if logsumexp(log_w) != NEG_INF:
            break
    total = logsumexp(log_w)
    probs = [math.fsum(exp_or_zero(log_w[k] - total) * exp_or_zero(float(log_q[k, d, x])) for k in range(K))
             for x in range(V)]
    if temperature != 1.0:
        powered = [p ** (1.0 / temperature) if p > 0 else 0.0 for p in probs]
        z = math.fsum(powered)
        probs = [p / z for p in powered]
    probs = [(1.0 - smoothing) * p + smoothing / V for p in probs]
    return [math.log(p) if p > 0 else NEG_INF for p in probs]


def path_score(cond: Callable[[Path], Sequence[float]], prefix: Path) -> float:
    """sum_i log q(prefix_i | prefix_<i), accumulated left to right from 0.0 as the builder does."""
    s = 0.0
    for i, t in enumerate(prefix):
        s = s + float(cond(tuple(prefix[:i]))[t])
    return s


def path_tie_rule_order(cond: Callable[[Path], Sequence[float]], L: int, V: int, budget: int) -> list[Path]:
    """The first `budget` prefixes under a path-dependent drafter, by the package's tie rule.

    key(s) = (-score(s), key(parent), rank of s's token in the parent's row, token), the row
    ranked by decreasing value then id; key(root) = (). Every prefix is scored and sorted.
    """
    keys: dict[Path, tuple] = {(): ()}
    scores: dict[Path, float] = {(): 0.0}
    for p in all_prefixes(L, V):  # shortest first, so the parent is keyed already
        row = [float(x) for x in cond(p[:-1])]
        ranked = sorted(range(V), key=lambda t: (-row[t], t))
        scores[p] = scores[p[:-1]] + row[p[-1]]
        keys[p] = (-scores[p], keys[p[:-1]], ranked.index(p[-1]), p[-1])
    del keys[()]
    return sorted(keys, key=keys.__getitem__)[:budget]


def command_time_estimates_slow(profile: LatencyProfile, *, answers: int, answer_tokens: int, eval_prompts: int,
                                eval_tokens: int, methods: dict) -> dict:
    """Twin of :func:`mfd_theory.speedup.estimates.command_time_estimates`: the same estimate as a sum over every token and every round, one at a time."""
    distill_ms = 0.0
    for _ in range(answers):
        for _ in range(answer_tokens):
            distill_ms += profile.t_target_ms
    eval_ms = {"ar": 0.0}
    for _ in range(eval_prompts):
        for _ in range(eval_tokens):
            eval_ms["ar"] += profile.t_target_ms
    for name, (method, K, n, tau) in methods.items():
        rounds = eval_prompts * eval_tokens / tau
        parts = profile.round_ms(method, K, n)
        eval_ms[name] = rounds * (parts["draft"] + parts["tree"] + parts["verify"] + parts["walk"] + parts["commit"])
    return {"distill_h": distill_ms / 3_600_000.0, "eval_h": {k: v / 3_600_000.0 for k, v in eval_ms.items()}}
