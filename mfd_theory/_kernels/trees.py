"""Kernels for mfd_theory.trees: top-M selection, candidate universes, exact best-first builder.

The builder is one algorithm for product (K = 1) and mixture (K > 1) scores. A global max-heap
holds two kinds of entries:

* a *concrete* child (parent p, token u) with its exact score, and
* a *threshold* entry for parent p whose key bounds the score of every child of p not yet seen
  (Fagin's threshold algorithm over the K per-mode sorted candidate lists of the child depth).

Popping a concrete entry emits it as a node: it scores at least as much as everything left in the
heap, and every unseen child of every parent is bounded by some threshold entry in the heap, so
the emission order is exactly decreasing score. Popping a threshold entry performs one round of
sorted access for its parent (one step down each mode's list), pushes the newly seen tokens as
concrete entries, and pushes the parent's new, lower threshold. For K = 1 this is DDTree's
sibling / first-child lattice. Ties at equal keys go concrete-first, then first-in-first-out.
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


@njit(cache=True)
def _row_status(row, pos_tol):
    """Classify a row that failed the fast check: NaN first, then +inf, then positive entries."""
    status = OK
    for t in range(row.shape[0]):
        v = row[t]
        if v != v:
            return HAS_NAN
        if v == np.inf:
            status = HAS_POSINF
        elif v > pos_tol and status == OK:
            status = HAS_POSITIVE
    return status


@njit(cache=True)
def _topk_rows(x, M, pos_tol):
    """Top-M entries of each row of x [K, L, V] (any float dtype), without sorting a row.

    Returns vals [K, L, M] float64 sorted descending (ties: lower token id first), ids
    [K, L, M] int64, and a status code (NaN / +inf / positive log-prob found).

    Two light passes per row. Pass 1 takes the maximum of each of M equal chunks (and a running
    sum, which turns NaN if any entry is NaN): the smallest chunk maximum t0 is a lower bound on
    the M-th largest value, because the M chunk maxima are M distinct entries >= t0. Pass 2
    gathers the entries >= t0 (for a peaked row a small fraction) and a quickselect over them
    finds the M-th largest value; ties at that value are taken by ascending id.
    """
    K, L, V = x.shape
    vals = np.empty((K, L, M))
    ids = np.empty((K, L, M), dtype=np.int64)
    cv = np.empty(V)  # candidates of one row
    ci = np.empty(V, dtype=np.int64)
    sv = np.empty(M)  # the M selected
    si = np.empty(M, dtype=np.int64)
    status = OK
    chunk = V // M
    for k in range(K):
        for d in range(L):
            row = x[k, d]
            # pass 1: chunk maxima, the row's maximum, and a NaN / +inf detector
            t0 = np.inf
            rmax = -np.inf
            acc = 0.0
            for c in range(M):
                m = row[c * chunk]
                for t in range(c * chunk, (c + 1) * chunk):
                    v = row[t]
                    acc += v
                    m = max(m, v)
                t0 = min(t0, np.float64(m))
                rmax = max(rmax, np.float64(m))
            for t in range(M * chunk, V):
                acc += row[t]
                rmax = max(rmax, np.float64(row[t]))
            if acc != acc or acc == np.inf or rmax > pos_tol:
                st = _row_status(row, pos_tol)
                if st == HAS_NAN or st == HAS_POSINF:
                    return vals, ids, st
                status = st
            # pass 2: gather the entries that can be in the top M (in index order), then select
            n = 0
            for t in range(V):
                v = np.float64(row[t])
                if v >= t0:
                    cv[n] = v
                    ci[n] = t
                    n += 1
            kth = np.partition(cv[:n], n - M)[n - M]  # the M-th largest value
            size = 0
            for j in range(n):  # everything above kth, then ties at kth by ascending id
                if cv[j] > kth:
                    sv[size] = cv[j]
                    si[size] = ci[j]
                    size += 1
            for j in range(n):
                if size == M:
                    break
                if cv[j] == kth:
                    sv[size] = cv[j]
                    si[size] = ci[j]
                    size += 1
            _sort_by_value_then_id(sv, si, vals[k, d], ids[k, d])
    return vals, ids, status


@njit(cache=True)
def _universe(ids, lens):
    """Union of the K candidate lists at each depth, with compact indices.

    ids [K, L, M], lens [K, L] -> tok_u [L, Umax] (sorted token ids, padded with -1),
    U [L], list_u [K, L, M] (compact index of each list entry), rank [K, L, Umax]
    (position of each universe token in mode k's list, M when absent).
    """
    K, L, M = ids.shape
    Umax = K * M
    tok_u = np.full((L, Umax), -1, dtype=np.int64)
    U = np.zeros(L, dtype=np.int64)
    list_u = np.full((K, L, M), -1, dtype=np.int64)
    rank = np.full((K, L, Umax), M, dtype=np.int64)
    buf = np.empty(Umax, dtype=np.int64)
    for d in range(L):
        c = 0
        for k in range(K):
            for i in range(lens[k, d]):
                buf[c] = ids[k, d, i]
                c += 1
        s = np.sort(buf[:c])
        u = 0
        for i in range(c):
            if i == 0 or s[i] != s[i - 1]:
                tok_u[d, u] = s[i]
                u += 1
        U[d] = u
        for k in range(K):
            for i in range(lens[k, d]):
                j = np.searchsorted(tok_u[d, :u], ids[k, d, i])
                list_u[k, d, i] = j
                rank[k, d, j] = i
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
def _heap_push(hk, ht, size, key, tb):
    """Insert into a max-heap of ``size`` entries ordered by key, then by the smaller tie-break
    ``tb`` (class << ENTRY_BITS | entry index: older entries and lower classes first)."""
    j = size
    while j > 0:
        par = (j - 1) >> 1
        if key > hk[par] or (key == hk[par] and tb < ht[par]):
            hk[j] = hk[par]
            ht[j] = ht[par]
            j = par
        else:
            break
    hk[j] = key
    ht[j] = tb
    return size + 1


@njit(cache=True)
def _heap_pop(hk, ht, size):
    """Remove the top entry; returns its key and tie-break, and the new size."""
    key, tb = hk[0], ht[0]
    size -= 1
    if size > 0:
        lk, lt = hk[size], ht[size]
        j = 0
        while True:
            c = 2 * j + 1
            if c >= size:
                break
            if c + 1 < size and (hk[c + 1] > hk[c] or (hk[c + 1] == hk[c] and ht[c + 1] < ht[c])):
                c += 1
            if hk[c] > lk or (hk[c] == lk and ht[c] < lt):
                hk[j] = hk[c]
                ht[j] = ht[c]
                j = c
            else:
                break
        hk[j] = lk
        ht[j] = lt
    return key, tb, size


@njit(cache=True)
def _grown(a, n):
    """A copy of ``a`` with room for ``n`` entries (n > len(a))."""
    out = np.empty(n, dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


# entry classes of the mixture search, in the order they pop at equal keys
CONCRETE = 0
THRESHOLD = 1
EXHAUSTED = 2
ENTRY_BITS = 40
ENTRY_MASK = (1 << ENTRY_BITS) - 1


@njit(cache=True)
def _mixture_tree(log_pi, G, list_u, list_val, lens, rank, tok_u, closed, bound, budget):
    """Exact best-first top-``budget`` prefixes under the mixture score.

    log_pi [K]; G [K, L, Umax]; list_u / list_val [K, L, M]; lens [K, L]; rank [K, L, Umax];
    tok_u [L, Umax]; closed [L] (the universe holds every token that exists at that depth);
    bound [K, L] (upper bound of q_k for tokens beyond mode k's list). Returns parent, token,
    depth, log_score (length n) and a status (NEEDS_MORE: a parent ran past its lists at a depth
    that is not closed; the caller must enlarge M).
    """
    K, L, Umax = G.shape
    N = budget
    # node slot 0 is the root; nodes are 1..N
    W = np.empty((N + 1, K))  # per-mode log weight of each node's prefix
    pos = np.zeros((N + 1, K), dtype=np.int64)  # sorted-access pointers, as a parent
    ndepth = np.zeros(N + 1, dtype=np.int64)
    parent = np.empty(N, dtype=np.int64)
    token = np.empty(N, dtype=np.int64)
    depth = np.empty(N, dtype=np.int64)
    score = np.empty(N)
    W[0, :] = log_pi

    cap = 4 * (N + 1) * (K + 1) + 16
    hk = np.empty(cap)  # heap: key
    ht = np.empty(cap, dtype=np.int64)  # heap: class << ENTRY_BITS | entry index
    ep = np.empty(cap, dtype=np.int64)  # entry: parent slot
    eu = np.empty(cap, dtype=np.int64)  # entry: universe index of a concrete child
    size = 0
    nent = 0
    tmp = np.empty(K)

    for k in range(K):
        tmp[k] = W[0, k] + (list_val[k, 0, 0] if lens[k, 0] > 0 else bound[k, 0])
    ep[0], eu[0] = 0, -1
    size = _heap_push(hk, ht, size, _lse(tmp), (THRESHOLD << ENTRY_BITS) | 0)
    nent = 1

    n = 0
    status = OK
    while n < N and size > 0:
        if nent + K + 2 > ep.shape[0]:
            ep = _grown(ep, 2 * ep.shape[0])
            eu = _grown(eu, 2 * eu.shape[0])
        if size + K + 2 > hk.shape[0]:
            hk = _grown(hk, 2 * hk.shape[0])
            ht = _grown(ht, 2 * ht.shape[0])
        key, tb, size = _heap_pop(hk, ht, size)
        cls = tb >> ENTRY_BITS
        e = tb & ENTRY_MASK
        p = ep[e]
        d = ndepth[p]  # depth of the parent; its children live at list depth d
        if cls == EXHAUSTED:
            status = NEEDS_MORE
            break
        if cls == CONCRETE:
            u = eu[e]
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
                    tmp[k] = W[n, k] + (list_val[k, d + 1, 0] if lens[k, d + 1] > 0 else bound[k, d + 1])
                ep[nent], eu[nent] = n, -1
                size = _heap_push(hk, ht, size, _lse(tmp), (THRESHOLD << ENTRY_BITS) | nent)
                nent += 1
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
                for j in range(K):
                    tmp[j] = W[p, j] + G[j, d, u]
                ep[nent], eu[nent] = p, u
                size = _heap_push(hk, ht, size, _lse(tmp), (CONCRETE << ENTRY_BITS) | nent)
                nent += 1
        exhausted = True
        for k in range(K):
            i = pos[p, k]
            if i < lens[k, d]:
                exhausted = False
                tmp[k] = W[p, k] + list_val[k, d, i]
            else:
                tmp[k] = W[p, k] + bound[k, d]
        if exhausted and closed[d]:
            continue  # every child of p has been seen
        ep[nent], eu[nent] = p, -1
        cls = EXHAUSTED if exhausted else THRESHOLD
        size = _heap_push(hk, ht, size, _lse(tmp), (cls << ENTRY_BITS) | nent)
        nent += 1
    return parent[:n], token[:n], depth[:n], score[:n], status


@njit(cache=True)
def _prepare_candidates(values, ids, pos_tol):
    """Validate and sort candidate lists values/ids [K, L, k] -> float64 values, int64 ids, status.

    Rows already sorted by descending value (torch.topk's order; equal values in any order) are
    copied as they are; other rows are sorted (descending value, ascending id among ties). Status: NaN, +inf, positive log-prob, or 5 for
    a negative token id.
    """
    K, L, k = values.shape
    vals = np.empty((K, L, k))
    out_ids = np.empty((K, L, k), dtype=np.int64)
    for a in range(K):
        for d in range(L):
            ok = True
            for i in range(k):
                v = np.float64(values[a, d, i])
                t = np.int64(ids[a, d, i])
                if v != v:
                    return vals, out_ids, HAS_NAN
                if v > pos_tol:
                    return vals, out_ids, HAS_POSINF if v == np.inf else HAS_POSITIVE
                if t < 0:
                    return vals, out_ids, 5
                vals[a, d, i] = v
                out_ids[a, d, i] = t
                if i > 0 and vals[a, d, i - 1] < v:
                    ok = False
            if not ok:
                _sort_by_value_then_id(vals[a, d].copy(), out_ids[a, d].copy(), vals[a, d], out_ids[a, d])
    return vals, out_ids, OK


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
def _product_lattice(vals, ids, budget):
    """DDTree's builder for a product score: exact top-``budget`` prefixes.

    vals / ids [L, k]: each depth's candidates sorted descending. A lattice cell (parent, depth,
    rank) is the rank-th best token of that depth under that parent; every parent shares the
    depth's list, so popping a cell and pushing its next sibling (rank + 1) and first child
    (depth + 1, rank 0) emits prefixes in exactly decreasing score (ties first-in-first-out).
    Returns parent, token, depth, log_score and the number of list entries used per depth (so
    the caller can check for duplicate ids where they matter).
    """
    L, k = vals.shape
    N = budget
    parent = np.empty(N, dtype=np.int64)
    token = np.empty(N, dtype=np.int64)
    depth = np.empty(N, dtype=np.int64)
    score = np.empty(N)
    used = np.zeros(L, dtype=np.int64)
    cap = 2 * N + 2
    # cells live in a pool written once; the heap moves only (key, cell index)
    cp = np.empty(cap, dtype=np.int64)  # parent node
    cd = np.empty(cap, dtype=np.int64)  # depth index
    cr = np.empty(cap, dtype=np.int64)  # rank
    cb = np.empty(cap)  # the parent's score
    hk = np.empty(cap)
    ht = np.empty(cap, dtype=np.int64)  # the cell index: first-in-first-out among ties
    cp[0], cd[0], cr[0], cb[0] = -1, 0, 0, 0.0
    size = _heap_push(hk, ht, 0, vals[0, 0], 0)
    ncell = 1
    n = 0
    while n < N and size > 0:
        key, c0, size = _heap_pop(hk, ht, size)
        p, d, r = cp[c0], cd[c0], cr[c0]
        parent[n] = p
        token[n] = ids[d, r]
        depth[n] = d + 1
        score[n] = key
        used[d] = max(used[d], r + 1)
        node = n
        n += 1
        if r + 1 < k:  # next sibling
            cp[ncell], cd[ncell], cr[ncell], cb[ncell] = p, d, r + 1, cb[c0]
            size = _heap_push(hk, ht, size, cb[c0] + vals[d, r + 1], ncell)
            ncell += 1
        if d + 1 < L:  # first child
            cp[ncell], cd[ncell], cr[ncell], cb[ncell] = node, d + 1, 0, key
            size = _heap_push(hk, ht, size, key + vals[d + 1, 0], ncell)
            ncell += 1
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
