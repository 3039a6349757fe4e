"""Kernels for mfd_theory.trees: top-M selection, candidate universes, exact best-first builder.

The builder is one algorithm for product (K = 1), mixture and best-mode (K > 1) scores, the
last two differing only in how a prefix's K per-mode log weights combine into its score
(``_score``: log sum_k pi_k exp(w_k), or max_k w_k). A global max-heap
holds two kinds of entries:

* a *concrete* child (parent p, token u) with its exact score, and
* a *threshold* entry for parent p whose key bounds the score of every child of p not yet seen
  (Fagin's threshold algorithm over the K per-mode sorted candidate lists of the child depth).

Popping a concrete entry emits it as a node: it scores at least as much as everything left in the
heap, and every unseen child of every parent is bounded by some threshold entry in the heap, so
the emission order is exactly decreasing score. Popping a threshold entry performs one round of
sorted access for its parent (one step down each mode's list), pushes the newly seen tokens as
concrete entries, and pushes the parent's new, lower threshold. For K = 1 this is DDTree's
sibling / first-child lattice.

Tie rule (every builder, every entry point): prefixes are emitted by decreasing score; among
equal scores, (1) the one whose parent was emitted first (the root counts as emitted before every
node), then (2) the one whose token ranks higher in the drafter's list at its position, then
(3) the lower token id. A list orders a position's tokens by decreasing log-probability, then
increasing id; for a mixture the rank is the best over the modes' lists (dense rows count as
complete lists). For siblings under a parent of finite score, equal scores mean equal
log-probabilities, so (2) reduces to the token id; (2) decides only where a score absorbs the
difference (a parent of probability zero). This is a total order in which a parent precedes a
tied child, so its top-N is prefix-closed and a smaller budget's tree is a prefix of a larger
one's emission. The heaps realise it with two tie-break words (class and parent slot; rank and
universe index, which follows token id); in the threshold search, a parent's threshold entry
pops before its concrete children of equal key, so every child tied with a concrete entry is
seen before it is emitted. A mixture whose modes all give a prefix the same log weight scores it with exactly that
weight (sum_k pi_k = 1), so duplicated modes reproduce the product tree bit for bit; a maximum
over equal weights is that weight too.
"""

import numpy as np
from numba import njit

NEG_INF = -np.inf

# status codes shared with the wrapper
OK = 0
HAS_NAN = 1
HAS_POSINF = 2
HAS_POSITIVE = 3
NEEDS_MORE = 4
ROUND_OFF = 6  # not an error: positive entries within the tolerance, which the caller clips


@njit(cache=True)
def _sort_by_value_then_id(v, t, out_v, out_t):
    """Write (v, t) into (out_v, out_t) by descending value, ascending id among equal values."""
    o1 = np.argsort(t)  # id order first, then a stable sort by value keeps it among ties
    v1 = v[o1]
    t1 = t[o1]
    o2 = np.argsort(-v1, kind="mergesort")
    for j in range(v.shape[0]):
        out_v[j] = v1[o2[j]]
        out_t[j] = t1[o2[j]]


# _topk_rows reads a row in blocks of SCREEN entries: the compare-and-count over one block
# vectorises, and a block with nothing at or above the threshold (almost all of them) is done.
SCREEN = 64
# the first pass folds a row into at least this many column maxima (2 M when that is larger)
MIN_COLUMNS = 256


@njit(cache=True)
def _select(a, n, kk):
    """The kk-th smallest of a[:n] (0-based), rearranging a[:n]: Hoare quickselect.

    numba's np.partition costs about ten times numpy's; this one is in place and allocates
    nothing. The scans are bounded, so a NaN (whose comparisons are all false) cannot run them
    off the range; the result is then meaningless, which the callers tolerate (see
    :func:`_column_threshold`).
    """
    lo = 0
    hi = n - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < a[lo]:
            a[mid], a[lo] = a[lo], a[mid]
        if a[hi] < a[lo]:
            a[hi], a[lo] = a[lo], a[hi]
        if a[hi] < a[mid]:
            a[hi], a[mid] = a[mid], a[hi]
        pivot = a[mid]
        i = lo
        j = hi
        while i <= j:
            while i <= hi and a[i] < pivot:
                i += 1
            while j >= lo and a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if kk <= j:
            hi = j
        elif kk >= i:
            lo = i
        else:
            break
    return a[kk]


@njit(cache=True)
def _column_threshold(row, M, cols):
    """A value with at least M distinct entries of ``row`` at or above it (-inf if none found).

    The row is cut into R segments of S >= 2 M entries; column j's maximum over the segments,
    max_r row[r S + j], is one entry of the row, and the S columns are distinct entries, so the
    M-th largest column maximum qualifies. With S >= 2 M it sits close to the row's own M-th
    largest value on any row whose large entries are not bunched into a few columns. The fold
    is an elementwise maximum over contiguous segments, a loop the compiler vectorises. ``cols``
    is scratch room for S values. A NaN can make the result meaningless, which is harmless: the
    screen never drops a NaN, so the caller reports it whatever the threshold.
    """
    V = row.shape[0]
    S = cols.shape[0]
    R = V // S
    if R < 2:
        cols[0] = -np.inf
        return cols[0]
    cols[:] = row[:S]
    r = 1
    while r + 3 < R:  # four segments per store into cols: a store per segment halves the speed
        s1 = row[r * S : (r + 1) * S]
        s2 = row[(r + 1) * S : (r + 2) * S]
        s3 = row[(r + 2) * S : (r + 3) * S]
        s4 = row[(r + 3) * S : (r + 4) * S]
        for j in range(S):
            a = s1[j]
            b = s2[j]
            c = s3[j]
            e = s4[j]
            m1 = a if a > b else b
            m2 = c if c > e else e
            m = m1 if m1 > m2 else m2
            o = cols[j]
            cols[j] = m if m > o else o
        r += 4
    while r < R:
        seg = row[r * S : (r + 1) * S]
        for j in range(S):
            a = seg[j]
            o = cols[j]
            cols[j] = a if a > o else o
        r += 1
    return _select(cols, S, S - M)


@njit(cache=True)
def _keep(v, thr, strict):
    """Screen test: v above the threshold (or at it unless strict), or NaN (never dropped)."""
    return not v <= thr if strict else not v < thr


@njit(cache=True)
def _next_block(row, blk, thr, strict):
    """The first block of SCREEN entries, from block ``blk`` on, with an entry the screen keeps,
    and how many it keeps there.

    Returns the number of full blocks (and 0) when there is none. A loop of its own, so that it
    stays a tight run of vector compares.
    """
    nblk = row.shape[0] // SCREEN
    while blk < nblk:
        seg = row[blk * SCREEN : (blk + 1) * SCREEN]
        c = 0  # two loops, so that each compiles to plain vector compares
        if strict:
            for j in range(SCREEN):
                c += not seg[j] <= thr
        else:
            for j in range(SCREEN):
                c += not seg[j] < thr
        if c:
            return blk, c
        blk += 1
    return nblk, 0


@njit(cache=True)
def _take(row, t, e, want, thr, strict, pos_tol, cv, ci, n, rst):
    """Append row[t:e]'s kept entries to the buffer, checking each, and stop after ``want`` of
    them (the screen's count); returns (n, row status)."""
    stop = n + want
    for j in range(t, e):
        if n == stop:
            break
        v = row[j]
        if _keep(v, thr, strict):
            if v != v:
                return n, HAS_NAN
            if v == np.inf:
                rst = HAS_POSINF
            elif v > pos_tol and (rst == OK or rst == ROUND_OFF):
                rst = HAS_POSITIVE
            elif v > 0 and rst == OK:
                rst = ROUND_OFF
            cv[n] = v
            ci[n] = j
            n += 1
    return n, rst


SIGN_BIT = np.int64(-(2**63))
LOW_63 = np.int64(2**63 - 1)


@njit(cache=True)
def _descending_order(v, n, order, key, key2, ord2):
    """order[:n]: the positions of v[:n] (float64) by decreasing value; equal values keep their
    order (a stable sort). key, key2, ord2: scratch of n int64.

    An LSD radix sort, a byte per pass, on the value's bits mapped to an integer whose unsigned
    order is the reverse of the value order (flip the magnitude bits of negatives, then all
    bits, then the sign bit). Passes where every key has the same byte are skipped, so float32
    values (29 zero low bits once widened) take five passes. No data-dependent branch, unlike a
    comparison sort of the same length. -0.0 is read as 0.0 (they compare equal).
    """
    bits = v.view(np.int64)
    for j in range(n):
        b = bits[j] if v[j] != 0.0 else np.int64(0)
        asc = b ^ LOW_63 if b < 0 else b  # signed order = value order
        key[j] = (~asc) ^ SIGN_BIT  # unsigned order = reverse value order
        order[j] = j
    count = np.empty(256, dtype=np.int64)
    for shift in range(0, 64, 8):
        count[:] = 0
        for j in range(n):
            count[(key[j] >> shift) & 255] += 1
        if count[(key[0] >> shift) & 255] == n:
            continue  # every key has this byte: the pass would not move anything
        total = 0
        for c in range(256):
            m = count[c]
            count[c] = total
            total += m
        for j in range(n):
            c = (key[j] >> shift) & 255
            key2[count[c]] = key[j]
            ord2[count[c]] = order[j]
            count[c] += 1
        key[:n] = key2[:n]
        order[:n] = ord2[:n]


@njit(cache=True)
def _compact(cv, ci, n, M, tmp):
    """Keep the top M of the n buffered entries (ties at the M-th value: lowest ids), in place.

    The buffer is in increasing id order and stays so. Returns the M-th largest value, the new
    threshold: a later entry equal to it can be dropped, since the M kept entries are at least
    as large and have lower ids. ``tmp`` is scratch room for n values.
    """
    tmp[:n] = cv[:n]
    kth = _select(tmp, n, n - M)
    above = 0
    for j in range(n):
        if cv[j] > kth:
            above += 1
    ties = M - above  # entries equal to kth that fit, taken by ascending id
    size = 0
    for j in range(n):
        v = cv[j]
        if v > kth or (v == kth and ties > 0):
            if v == kth:
                ties -= 1
            cv[size] = v
            ci[size] = ci[j]
            size += 1
    return kth


@njit(cache=True)
def _topk_rows(x, M, pos_tol, floor, todo):
    """Top-M entries of each row of x [K, L, V] (float32 or float64, read as they are), or of
    the rows marked in ``todo`` [K, L]; entries below ``floor`` [K, L] (the input's dtype, -inf
    for none) are not wanted.

    Returns vals [K, L, M] float64 sorted descending (ties: lower token id first), ids [K, L, M]
    int64, by_id [K, L, M] (the list positions in increasing token-id order), lens [K, L] (the
    entries each list holds: M, fewer when fewer are at or above the floor, 0 for rows not
    done) and a status code (NaN / +inf / positive log-prob found; within a row NaN wins over
    +inf over positive, and a row with NaN or +inf ends the scan; ROUND_OFF when the only
    positive entries lie within ``pos_tol``: the values are returned as they are, and the
    builders clip the rows and read them again).

    Per row: a first pass folds the row into column maxima and takes a threshold with at least
    M entries at or above it (:func:`_column_threshold`), or starts from the floor if any; a
    second pass, usually from cache, screens blocks of SCREEN entries against it with a compare
    that vectorises and appends the few entries at or above it, in id order, to a buffer. An entry
    below the threshold is never in the top M (or is below the floor), and NaN always passes
    the screen, so it is always found. A positive entry or +inf below the threshold means that
    M entries at or above it are positive or +inf too, and those are checked as they enter, so
    validation is complete; a floor can hide entries below it, so a row is first read without
    one (the builders read again, with a floor, only rows they have already checked). A full
    buffer is cut back to the top M (and the threshold raised); a stable sort by value of the
    final entries gives the tie rule's order.
    """
    K, L, V = x.shape
    vals = np.empty((K, L, M))
    ids = np.empty((K, L, M), dtype=np.int64)
    by_id = np.empty((K, L, M), dtype=np.int64)
    lens = np.zeros((K, L), dtype=np.int64)
    nblk = V // SCREEN  # full blocks; the tail is read entry by entry
    cap = 2 * M + SCREEN  # buffer room: a block can add up to SCREEN entries
    cv = np.empty(cap, dtype=x.dtype)  # buffered values, in the input's dtype (no upcast)
    ci = np.empty(cap, dtype=np.int64)
    tmp = np.empty(cap, dtype=x.dtype)
    cols = np.empty(max(2 * M, MIN_COLUMNS), dtype=x.dtype)
    sv = np.empty(M)
    order = np.empty(M, dtype=np.int64)
    key = np.empty(M, dtype=np.int64)
    key2 = np.empty(M, dtype=np.int64)
    ord2 = np.empty(M, dtype=np.int64)
    status = OK
    for k in range(K):
        for d in range(L):
            if not todo[k, d]:
                continue
            row = x[k, d]
            rst = OK
            thr = floor[k, d]
            if thr == -np.inf:  # otherwise the floor is the threshold: no first pass
                thr = _column_threshold(row, M, cols)
            strict = False
            n = 0
            blk, c = _next_block(row, 0, thr, strict)
            while blk < nblk:
                n, rst = _take(row, blk * SCREEN, (blk + 1) * SCREEN, c, thr, strict, pos_tol, cv, ci, n, rst)
                if rst == HAS_NAN:
                    return vals, ids, by_id, lens, rst
                if n + SCREEN > cap:
                    thr = _compact(cv, ci, n, M, tmp)
                    strict = True
                    n = M
                blk, c = _next_block(row, blk + 1, thr, strict)
            n, rst = _take(row, nblk * SCREEN, V, SCREEN, thr, strict, pos_tol, cv, ci, n, rst)  # the tail
            if rst == HAS_NAN:
                return vals, ids, by_id, lens, rst
            if rst == HAS_POSINF:
                return vals, ids, by_id, lens, rst
            if rst == HAS_POSITIVE:
                status = rst
            elif rst == ROUND_OFF and status == OK:
                status = rst
            if n > M:
                _compact(cv, ci, n, M, tmp)
                n = M
            for j in range(n):
                sv[j] = cv[j]
            _descending_order(sv, n, order, key, key2, ord2)  # stable: equal values keep id order
            for i in range(n):
                j = order[i]
                vals[k, d, i] = cv[j]
                ids[k, d, i] = ci[j]
                by_id[k, d, j] = i
            lens[k, d] = n
    return vals, ids, by_id, lens, status


@njit(cache=True)
def _id_order(ids, lens):
    """by_id [K, L, M]: the positions of each list's entries in increasing token-id order."""
    K, L, M = ids.shape
    by_id = np.zeros((K, L, M), dtype=np.int64)
    for k in range(K):
        for d in range(L):
            by_id[k, d, : lens[k, d]] = np.argsort(ids[k, d, : lens[k, d]])
    return by_id


@njit(cache=True)
def _universe(ids, lens, by_id):
    """Union of the K candidate lists at each depth, with compact indices.

    ids [K, L, M], lens [K, L], by_id [K, L, M] (each list's positions in increasing id order,
    see :func:`_id_order`; the dense selection hands it over for free) -> tok_u [L, Umax] (sorted
    token ids, padded with -1), U [L], list_u [K, L, M] (compact index of each list entry), rank
    [K, L, Umax] (position of each universe token in mode k's list, M when absent). A K-way merge
    of the id-ordered lists, so no sort and no search.
    """
    K, L, M = ids.shape
    Umax = K * M
    tok_u = np.full((L, Umax), -1, dtype=np.int64)
    U = np.zeros(L, dtype=np.int64)
    list_u = np.full((K, L, M), -1, dtype=np.int64)
    rank = np.full((K, L, Umax), M, dtype=np.int64)
    ptr = np.empty(K, dtype=np.int64)
    for d in range(L):
        ptr[:] = 0
        u = 0
        while True:
            low = -1  # the smallest token id at the head of any list
            for k in range(K):
                if ptr[k] < lens[k, d]:
                    t = ids[k, d, by_id[k, d, ptr[k]]]
                    if low < 0 or t < low:
                        low = t
            if low < 0:
                break
            tok_u[d, u] = low
            for k in range(K):
                if ptr[k] < lens[k, d]:
                    i = by_id[k, d, ptr[k]]
                    if ids[k, d, i] == low:
                        list_u[k, d, i] = u
                        rank[k, d, u] = i
                        ptr[k] += 1
            u += 1
        U[d] = u
    return tok_u, U, list_u, rank


@njit(cache=True)
def _gather_full(x, tok_u, U, Umax):
    """G [K, L, Umax]: exact log q_k of each universe token, read from the full rows x [K, L, V]."""
    K, L, V = x.shape
    G = np.full((K, L, Umax), NEG_INF)
    for k in range(K):
        for d in range(L):
            for u in range(U[d]):
                G[k, d, u] = np.float64(x[k, d, tok_u[d, u]])
    return G


@njit(cache=True)
def _gather_candidates(vals, list_u, lens, Umax):
    """G [K, L, Umax] for candidate input: a token missing from mode k's list has q_k = 0."""
    K, L, M = vals.shape
    G = np.full((K, L, Umax), NEG_INF)
    for k in range(K):
        for d in range(L):
            for i in range(lens[k, d]):
                G[k, d, list_u[k, d, i]] = vals[k, d, i]
    return G


@njit(cache=True)
def _lse(a):
    m = NEG_INF
    for v in a:
        if v > m:
            m = v
    if m == NEG_INF:
        return NEG_INF
    s = 0.0
    for v in a:
        s += np.exp(v - m)
    return m + np.log(s)


@njit(cache=True)
def _mix(log_pi, w, tmp):
    """log sum_k pi_k exp(w_k); exactly w_0 when every mode agrees (the weights sum to one)."""
    K = w.shape[0]
    same = True
    for k in range(1, K):
        if w[k] != w[0]:
            same = False
            break
    if same:
        return w[0]
    for k in range(K):
        tmp[k] = log_pi[k] + w[k]
    return _lse(tmp)


@njit(cache=True)
def _best(w):
    """max_k w_k: the best-mode score of a prefix whose per-mode log weights are w [K]."""
    m = w[0]
    for k in range(1, w.shape[0]):
        if w[k] > m:
            m = w[k]
    return m


@njit(cache=True)
def _score(log_pi, w, tmp, best_mode):
    """The ranking score of a prefix (or threshold) from its per-mode log weights w [K]: the
    best mode's (``best_mode``) or the mixture's. Both are monotone in every w_k, which is all
    the threshold search needs."""
    if best_mode:
        return _best(w)
    return _mix(log_pi, w, tmp)


@njit(cache=True)
def _path_scores(log_pi, x, parent, token, depth, best_mode=False):
    """Mixture (or best-mode) log score of every node of a tree (parents before children) under
    x [K, L, V]."""
    K = x.shape[0]
    n = parent.shape[0]
    W = np.empty((n, K))  # per-mode log weight of each node's prefix
    out = np.empty(n)
    w = np.empty(K)
    tmp = np.empty(K)
    for i in range(n):
        p = parent[i]
        for k in range(K):
            w[k] = (W[p, k] if p >= 0 else 0.0) + np.float64(x[k, depth[i] - 1, token[i]])
            W[i, k] = w[k]
        out[i] = _score(log_pi, w, tmp, best_mode)
    return out


@njit(cache=True)
def _before(k1, a1, b1, k2, a2, b2):
    """Entry 1 pops before entry 2: larger key, then smaller first word, then smaller second."""
    if k1 != k2:
        return k1 > k2
    if a1 != a2:
        return a1 < a2
    return b1 < b2


@njit(cache=True)
def _heap_push(hk, ha, hb, size, key, a, b):
    """Insert (key, a, b) into a heap of ``size`` entries ordered by :func:`_before`."""
    j = size
    while j > 0:
        par = (j - 1) >> 1
        if _before(key, a, b, hk[par], ha[par], hb[par]):
            hk[j] = hk[par]
            ha[j] = ha[par]
            hb[j] = hb[par]
            j = par
        else:
            break
    hk[j] = key
    ha[j] = a
    hb[j] = b
    return size + 1


@njit(cache=True)
def _heap_pop(hk, ha, hb, size):
    """Remove the first entry; returns its key and words, and the new size."""
    key, a, b = hk[0], ha[0], hb[0]
    size -= 1
    if size > 0:  # the last entry takes the first place and sinks
        _heap_replace_top(hk, ha, hb, size, hk[size], ha[size], hb[size])
    return key, a, b, size


@njit(cache=True)
def _heap_replace_top(hk, ha, hb, size, key, a, b):
    """Remove the first entry and insert (key, a, b) in one pass down the heap (``size`` >= 1).

    Cheaper than a pop followed by a push: one sift instead of two.
    """
    j = 0
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and _before(hk[c + 1], ha[c + 1], hb[c + 1], hk[c], ha[c], hb[c]):
            c += 1
        if _before(hk[c], ha[c], hb[c], key, a, b):
            hk[j] = hk[c]
            ha[j] = ha[c]
            hb[j] = hb[c]
            j = c
        else:
            break
    hk[j] = key
    ha[j] = a
    hb[j] = b


@njit(cache=True)
def _heap_put(hk, ha, hb, size, pending, key, a, b):
    """Insert (key, a, b); with ``pending`` (the root holds an entry already taken) it replaces
    that entry instead. Returns the new size and False (nothing pending any more)."""
    if pending:
        _heap_replace_top(hk, ha, hb, size, key, a, b)
        return size, False
    return _heap_push(hk, ha, hb, size, key, a, b), False


@njit(cache=True)
def _grown(a, n):
    """A copy of ``a`` with room for ``n`` entries (n > len(a))."""
    out = np.empty(n, dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


# Tie-break words of a heap entry: a = parent slot << CLASS_BITS | class, b = token rank <<
# RANK_SHIFT | universe index (ranks and indices < 2^31). At equal keys entries pop by parent slot
# first (the tie rule's first criterion); within one parent a threshold entry pops before its
# concrete children, since an unseen child may outrank a seen one, and an exhausted entry after
# them, since a token beyond every list ranks below every listed one.
CLASS_BITS = 2
CLASS_MASK = (1 << CLASS_BITS) - 1
RANK_SHIFT = 31
INDEX_MASK = (1 << RANK_SHIFT) - 1
# entry classes of the mixture search, in the order they pop at equal keys and parent
THRESHOLD = 0
CONCRETE = 1
EXHAUSTED = 2


@njit(cache=True)
def _mixture_tree(log_pi, G, list_u, list_val, lens, rank, tok_u, closed, bound, budget, best_mode=False):
    """Exact best-first top-``budget`` prefixes under the mixture score (``best_mode``: the
    best-mode score max_k log Q_k, for which log_pi is not read).

    log_pi [K]; G [K, L, Umax]; list_u / list_val [K, L, M]; lens [K, L]; rank [K, L, Umax];
    tok_u [L, Umax]; closed [L] (the universe holds every token that exists at that depth);
    bound [K, L] (upper bound of q_k for tokens beyond mode k's list). Returns parent, token,
    depth, log_score (length n) and a status (NEEDS_MORE: a parent ran past its lists at a depth
    that is not closed; the caller must enlarge M).
    """
    K, L, Umax = G.shape
    N = budget
    # node slot 0 is the root; nodes are 1..N
    W = np.empty((N + 1, K))  # per-mode log weight of each node's prefix (without pi)
    pos = np.zeros((N + 1, K), dtype=np.int64)  # sorted-access pointers, as a parent
    ndepth = np.zeros(N + 1, dtype=np.int64)
    parent = np.empty(N, dtype=np.int64)
    token = np.empty(N, dtype=np.int64)
    depth = np.empty(N, dtype=np.int64)
    score = np.empty(N)
    W[0, :] = 0.0

    cap = 4 * (N + 1) * (K + 1) + 16
    hk = np.empty(cap)  # heap: key
    ha = np.empty(cap, dtype=np.int64)  # heap: parent slot << CLASS_BITS | class
    hb = np.empty(cap, dtype=np.int64)  # heap: best rank << RANK_SHIFT | universe index
    size = 0
    tmp = np.empty(K)
    w = np.empty(K)

    for k in range(K):
        w[k] = list_val[k, 0, 0] if lens[k, 0] > 0 else bound[k, 0]
    size = _heap_push(hk, ha, hb, size, _score(log_pi, w, tmp, best_mode), THRESHOLD, 0)

    n = 0
    status = OK
    while n < N and size > 0:
        if size + K + 2 > hk.shape[0]:
            hk = _grown(hk, 2 * hk.shape[0])
            ha = _grown(ha, 2 * ha.shape[0])
            hb = _grown(hb, 2 * hb.shape[0])
        key, wa, wb = hk[0], ha[0], hb[0]
        pending = True  # the entry still sits at the root: the first entry pushed takes its place
        cls = wa & CLASS_MASK
        p = wa >> CLASS_BITS
        d = ndepth[p]  # depth of the parent; its children live at list depth d
        if cls == EXHAUSTED:
            status = NEEDS_MORE
            break
        if cls == CONCRETE:
            u = wb & INDEX_MASK
            n += 1
            parent[n - 1] = p - 1
            token[n - 1] = tok_u[d, u]
            depth[n - 1] = d + 1
            score[n - 1] = key
            ndepth[n] = d + 1
            for k in range(K):
                W[n, k] = W[p, k] + G[k, d, u]
            if d + 1 < L and n < N:
                for k in range(K):
                    w[k] = W[n, k] + (list_val[k, d + 1, 0] if lens[k, d + 1] > 0 else bound[k, d + 1])
                size, pending = _heap_put(hk, ha, hb, size, pending, _score(log_pi, w, tmp, best_mode),
                                          (n << CLASS_BITS) | THRESHOLD, 0)
            if pending:
                size = _heap_pop(hk, ha, hb, size)[3]
            continue
        # THRESHOLD: one round of sorted access for parent p (one step down each mode's list)
        for k in range(K):
            i = pos[p, k]
            if i >= lens[k, d]:
                continue
            u = list_u[k, d, i]
            seen = False
            for j in range(K):
                if j != k and rank[j, d, u] < pos[p, j]:
                    seen = True  # already reached through mode j's list
                    break
            pos[p, k] = i + 1
            if not seen:
                best = i
                for j in range(K):
                    w[j] = W[p, j] + G[j, d, u]
                    best = min(best, rank[j, d, u])
                size, pending = _heap_put(hk, ha, hb, size, pending, _score(log_pi, w, tmp, best_mode),
                                          (p << CLASS_BITS) | CONCRETE, (best << RANK_SHIFT) | u)
        exhausted = True
        for k in range(K):
            i = pos[p, k]
            if i < lens[k, d]:
                exhausted = False
                w[k] = W[p, k] + list_val[k, d, i]
            else:
                w[k] = W[p, k] + bound[k, d]
        if not (exhausted and closed[d]):  # else every child of p has been seen
            cls = EXHAUSTED if exhausted else THRESHOLD
            size, pending = _heap_put(hk, ha, hb, size, pending, _score(log_pi, w, tmp, best_mode),
                                      (p << CLASS_BITS) | cls, 0)
        if pending:
            size = _heap_pop(hk, ha, hb, size)[3]
    return parent[:n], token[:n], depth[:n], score[:n], status


@njit(cache=True)
def _prepare_candidates(values, ids, pos_tol):
    """Validate and sort candidate lists values/ids [K, L, k] -> float64 values, int64 ids, status.

    Rows already in the tie rule's order (descending value, ascending id among equal values) are
    copied as they are; rows sorted by value whose equal values are not in id order (torch.topk
    leaves them in any order) have only those runs put in id order; other rows are sorted.
    Status: NaN, +inf, positive log-prob, or 5 for a negative token id. Values above 0 within
    ``pos_tol`` (round-off) are clipped to 0 before the sort, so ties they form follow the rule.
    """
    K, L, k = values.shape
    vals = np.empty((K, L, k))
    out_ids = np.empty((K, L, k), dtype=np.int64)
    for a in range(K):
        for d in range(L):
            ok = True  # in the tie rule's order
            by_value = True  # sorted by value, ties in any order
            for i in range(k):
                v = np.float64(values[a, d, i])
                t = np.int64(ids[a, d, i])
                if v != v:
                    return vals, out_ids, HAS_NAN
                if v > pos_tol:
                    return vals, out_ids, HAS_POSINF if v == np.inf else HAS_POSITIVE
                if t < 0:
                    return vals, out_ids, 5
                vals[a, d, i] = min(v, 0.0)
                out_ids[a, d, i] = t
                if i > 0 and vals[a, d, i - 1] < v:
                    ok = by_value = False
                elif i > 0 and vals[a, d, i - 1] == v and out_ids[a, d, i - 1] > t:
                    ok = False
            if by_value and not ok:
                _ids_in_order_within_ties(vals[a, d], out_ids[a, d])
            elif not ok:
                _sort_by_value_then_id(vals[a, d].copy(), out_ids[a, d].copy(), vals[a, d], out_ids[a, d])
    return vals, out_ids, OK


@njit(cache=True)
def _ids_in_order_within_ties(v, t):
    """t sorted ascending within each run of equal values of v (v already non-increasing): an
    insertion sort, cheap because runs of equal float values are short."""
    for i in range(1, v.shape[0]):
        x = t[i]
        j = i
        while j > 0 and v[j - 1] == v[i] and t[j - 1] > x:
            t[j] = t[j - 1]
            j -= 1
        t[j] = x


@njit(cache=True)
def _has_duplicates(row):
    s = np.sort(row)
    for i in range(1, s.shape[0]):
        if s[i] == s[i - 1]:
            return True
    return False


@njit(cache=True)
def _lists_have_duplicates(ids, lens):
    """True when some mode's list at some depth repeats a token id (ids [K, L, M], lens [K, L])."""
    K, L, M = ids.shape
    for a in range(K):
        for d in range(L):
            if _has_duplicates(ids[a, d, : lens[a, d]]):
                return True
    return False


@njit(cache=True)
def _product_lattice(vals, ids, lens, budget):
    """DDTree's builder for a product score: exact top-``budget`` prefixes.

    vals / ids [L, k]: each depth's candidates sorted descending, the first lens[d] of them
    valid at depth d (a depth with none ends every path there). A lattice cell (parent, depth,
    rank) is the rank-th best token of that depth under that parent; every parent shares the
    depth's list, so popping a cell and pushing its next sibling (rank + 1) and first child
    (depth + 1, rank 0) emits prefixes in exactly decreasing score, ties by the module's rule
    (earlier-emitted parent, then rank, which orders equal values by token id).
    Returns parent, token, depth, log_score and the number of list entries used per depth (so
    the caller can check for duplicate ids where they matter).
    """
    L = vals.shape[0]
    N = budget
    parent = np.empty(N, dtype=np.int64)
    token = np.empty(N, dtype=np.int64)
    depth = np.empty(N, dtype=np.int64)
    score = np.empty(N)
    used = np.zeros(L, dtype=np.int64)
    cap = 2 * N + 2
    # a cell is (parent node p, rank r); its depth and base score are the parent's, so the heap's
    # tie-break words (p + 1, r) are all there is to store
    hk = np.empty(cap)
    ha = np.empty(cap, dtype=np.int64)  # parent slot p + 1 (0 = root)
    hb = np.empty(cap, dtype=np.int64)  # rank
    size = _heap_push(hk, ha, hb, 0, vals[0, 0], 0, 0) if lens[0] > 0 else 0
    n = 0
    while n < N and size > 0:
        key, slot, r = hk[0], ha[0], hb[0]  # the best cell; it leaves the heap below
        p = slot - 1
        d = depth[p] if p >= 0 else 0  # list depth of the cell = the parent's 1-based depth
        base = score[p] if p >= 0 else 0.0
        parent[n] = p
        token[n] = ids[d, r]
        depth[n] = d + 1
        score[n] = key
        used[d] = max(used[d], r + 1)
        node = n
        n += 1
        if r + 1 < lens[d]:  # next sibling, in the emitted cell's place
            _heap_replace_top(hk, ha, hb, size, base + vals[d, r + 1], p + 1, r + 1)
        else:
            size = _heap_pop(hk, ha, hb, size)[3]
        if d + 1 < L and lens[d + 1] > 0:  # first child
            size = _heap_push(hk, ha, hb, size, key + vals[d + 1, 0], node + 1, 0)
    return parent[:n], token[:n], depth[:n], score[:n], used


@njit(cache=True)
def _ancestor_mask(parent):
    """bool [N+1, N+1], root first: row i+1 marks node i, its ancestors and the root."""
    N = parent.shape[0]
    mask = np.zeros((N + 1, N + 1), dtype=np.bool_)
    mask[0, 0] = True
    for n in range(N):
        mask[n + 1, 0] = True
        a = n
        while a >= 0:
            mask[n + 1, a + 1] = True
            a = parent[a]
    return mask


@njit(cache=True)
def _candidate_trees(log_pi, values, ids, budgets, depths, pos_tol):
    """Every request's tree from candidate lists, in one call: the work of the candidate path of
    the one-request builders (``product_tree`` / ``mixture_tree`` with ``token_ids``), request by
    request.

    log_pi [B, K] (each row normalised), values / ids [B, K, L, k], budgets [B] (>= 1), depths
    [B] (0..L; 0 gives no tree). Returns parent, token, depth, log_score (the trees one after
    another), offsets [B + 1] (request b's nodes are ``offsets[b]:offsets[b + 1]``) and a
    status: OK, a list error of :func:`_prepare_candidates`, or 7 (a duplicate token id in a list).
    """
    B, K, L, W = values.shape
    total = 0
    for b in range(B):
        total += budgets[b] if depths[b] > 0 else 0
    parent = np.empty(total, dtype=np.int64)
    token = np.empty(total, dtype=np.int64)
    depth = np.empty(total, dtype=np.int64)
    score = np.empty(total)
    offsets = np.zeros(B + 1, dtype=np.int64)
    n = 0
    for b in range(B):
        d = depths[b]
        offsets[b] = n
        if d == 0:
            continue
        vals, tok, status = _prepare_candidates(values[b, :, :d], ids[b, :, :d], pos_tol)
        if status != OK:
            offsets[b + 1:] = n
            return parent[:n], token[:n], depth[:n], score[:n], offsets, status
        if K == 1:
            lens1 = np.full(d, W, dtype=np.int64)
            N = budgets[b]
            prod, cnt = 1, 0
            for _ in range(d):  # the prefixes that exist, capped at the budget
                prod *= W
                cnt += prod
                if cnt >= N:
                    break
            N = min(N, cnt)
            p, t, dd, s, used = _product_lattice(vals[0], tok[0], lens1, N)
            used2 = np.empty((1, d), dtype=np.int64)
            used2[0] = used
            if _lists_have_duplicates(tok, used2):
                offsets[b + 1:] = n
                return parent[:n], token[:n], depth[:n], score[:n], offsets, 7
        else:
            lens = np.full((K, d), W, dtype=np.int64)
            if _lists_have_duplicates(tok, lens):
                offsets[b + 1:] = n
                return parent[:n], token[:n], depth[:n], score[:n], offsets, 7
            by_id = _id_order(tok, lens)
            tok_u, U, list_u, rank = _universe(tok, lens, by_id)
            N = budgets[b]
            prod, cnt = 1, 0
            for j in range(d):
                prod *= U[j]
                cnt += prod
                if cnt >= N or prod == 0:
                    break
            N = min(N, cnt)
            G = _gather_candidates(vals, list_u, lens, tok_u.shape[1])
            closed = np.ones(d, dtype=np.bool_)
            bound = np.full((K, d), NEG_INF)
            p, t, dd, s, _ = _mixture_tree(log_pi[b], G, list_u, vals, lens, rank, tok_u, closed, bound, N)
        m = p.shape[0]
        parent[n:n + m] = p
        token[n:n + m] = t
        depth[n:n + m] = dd
        score[n:n + m] = s
        n += m
    offsets[B] = n
    return parent[:n], token[:n], depth[:n], score[:n], offsets, OK


@njit(cache=True)
def _greedy_walks(parent, token, offsets, nxt, row_start):
    """Every tree's greedy walk at once: from the root, follow the child whose token is the
    target's next token at the current row (``nxt[row_start[b] + node + 1]``), until none is.

    parent / token: the trees' nodes one after another (tree b's are offsets[b]:offsets[b+1], parents
    local, -1 for the root). Returns (path lengths [B], the paths' local node indices one after
    another, the bonus token of each tree [B])."""
    B = offsets.shape[0] - 1
    lens = np.zeros(B, dtype=np.int64)
    path = np.empty(offsets[B] + 1, dtype=np.int64)
    bonus = np.empty(B, dtype=np.int64)
    m = 0
    for b in range(B):
        o, n = offsets[b], offsets[b + 1] - offsets[b]
        node = -1
        while True:
            x = nxt[row_start[b] + node + 1]
            child = -1
            for j in range(node + 1, n):  # children come after their parent
                if parent[o + j] == node and token[o + j] == x:
                    child = j
                    break
            if child < 0:
                bonus[b] = x
                break
            path[m] = child
            m += 1
            lens[b] += 1
            node = child
    return lens, path[:m], bonus
