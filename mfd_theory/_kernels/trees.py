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
def _topk_rows(x, M, pos_tol):
    """Top-M entries of each row of x [K, L, V] (any float dtype) in one read.

    Returns vals [K, L, M] float64 sorted descending (ties: lower token id first), ids
    [K, L, M] int64, and a status code (NaN / +inf / positive log-prob found).
    A size-M min-heap per row: an element is compared with the heap's minimum and, for a peaked
    row, almost always rejected, so the pass costs little more than reading the row.
    """
    K, L, V = x.shape
    vals = np.empty((K, L, M))
    ids = np.empty((K, L, M), dtype=np.int64)
    hv = np.empty(M)
    hi = np.empty(M, dtype=np.int64)
    status = OK
    for k in range(K):
        for d in range(L):
            row = x[k, d]
            size = 0
            for t in range(V):
                v = np.float64(row[t])
                if v != v:
                    return vals, ids, HAS_NAN
                if v > pos_tol:
                    if v == np.inf:
                        return vals, ids, HAS_POSINF
                    status = HAS_POSITIVE
                if size < M:
                    # sift up into the min-heap (key: value, then larger id = smaller)
                    j = size
                    size += 1
                    while j > 0:
                        par = (j - 1) >> 1
                        if hv[par] > v or (hv[par] == v and hi[par] < t):
                            hv[j] = hv[par]
                            hi[j] = hi[par]
                            j = par
                        else:
                            break
                    hv[j] = v
                    hi[j] = t
                elif v > hv[0]:
                    # replace the minimum and sift down
                    j = 0
                    while True:
                        c = 2 * j + 1
                        if c >= M:
                            break
                        if c + 1 < M and (hv[c + 1] < hv[c] or (hv[c + 1] == hv[c] and hi[c + 1] > hi[c])):
                            c += 1
                        if hv[c] < v or (hv[c] == v and hi[c] > t):
                            hv[j] = hv[c]
                            hi[j] = hi[c]
                            j = c
                        else:
                            break
                    hv[j] = v
                    hi[j] = t
            # sort the M survivors: descending value, ascending id
            order = np.argsort(hi[:size])
            sv = hv[:size][order]
            si = hi[:size][order]
            order2 = np.argsort(-sv, kind="mergesort")  # stable: equal values keep id order
            for i in range(size):
                vals[k, d, i] = sv[order2[i]]
                ids[k, d, i] = si[order2[i]]
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
def _heap_before(k1, c1, s1, k2, c2, s2):
    """True when entry 1 must pop before entry 2 (max key, concrete first, then FIFO)."""
    if k1 != k2:
        return k1 > k2
    if c1 != c2:
        return c1 < c2
    return s1 < s2


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
    for k in range(K):
        W[0, k] = log_pi[k]

    cap = 4 * (N + 1) * (K + 1) + 16
    hk = np.empty(cap)  # key
    hc = np.empty(cap, dtype=np.int64)  # 0 concrete, 1 threshold, 2 exhausted threshold
    hp = np.empty(cap, dtype=np.int64)  # parent slot
    hu = np.empty(cap, dtype=np.int64)  # universe index (concrete only)
    hs = np.empty(cap, dtype=np.int64)  # insertion order
    size = 0
    seq = 0
    tmp = np.empty(K)

    # the root's first threshold entry
    if L > 0:
        for k in range(K):
            nv = list_val[k, 0, 0] if lens[k, 0] > 0 else bound[k, 0]
            tmp[k] = W[0, k] + nv
        key = _lse(tmp)
        hk[0] = key
        hc[0] = 1
        hp[0] = 0
        hu[0] = -1
        hs[0] = seq
        seq += 1
        size = 1

    n = 0
    status = OK
    while n < N and size > 0:
        # pop the top
        key = hk[0]
        kind = hc[0]
        p = hp[0]
        u0 = hu[0]
        size -= 1
        if size > 0:
            lk = hk[size]
            lc = hc[size]
            lp = hp[size]
            lu = hu[size]
            ls = hs[size]
            j = 0
            while True:
                c = 2 * j + 1
                if c >= size:
                    break
                if c + 1 < size and _heap_before(hk[c + 1], hc[c + 1], hs[c + 1], hk[c], hc[c], hs[c]):
                    c += 1
                if _heap_before(hk[c], hc[c], hs[c], lk, lc, ls):
                    hk[j] = hk[c]
                    hc[j] = hc[c]
                    hp[j] = hp[c]
                    hu[j] = hu[c]
                    hs[j] = hs[c]
                    j = c
                else:
                    break
            hk[j] = lk
            hc[j] = lc
            hp[j] = lp
            hu[j] = lu
            hs[j] = ls

        d = ndepth[p]  # depth of the parent; children live at list depth d
        npush = 0
        if kind == 0:
            # emit the node
            n += 1
            node = n
            parent[n - 1] = p - 1
            token[n - 1] = tok_u[d, u0]
            depth[n - 1] = d + 1
            score[n - 1] = key
            ndepth[node] = d + 1
            for k in range(K):
                W[node, k] = W[p, k] + G[k, d, u0]
                pos[node, k] = 0
            if d + 1 < L and n < N:
                for k in range(K):
                    nv = list_val[k, d + 1, 0] if lens[k, d + 1] > 0 else bound[k, d + 1]
                    tmp[k] = W[node, k] + nv
                npush = 1
                push_key0 = _lse(tmp)
                push_kind0 = 1
                push_p0 = node
                push_u0 = -1
            else:
                continue
        elif kind == 2:
            status = NEEDS_MORE
            break
        else:
            npush = 0
            push_key0 = 0.0
            push_kind0 = 0
            push_p0 = 0
            push_u0 = 0
        # make room for up to K + 1 pushes
        if size + K + 2 > cap:
            ncap = 2 * cap
            nhk = np.empty(ncap)
            nhc = np.empty(ncap, dtype=np.int64)
            nhp = np.empty(ncap, dtype=np.int64)
            nhu = np.empty(ncap, dtype=np.int64)
            nhs = np.empty(ncap, dtype=np.int64)
            nhk[:size] = hk[:size]
            nhc[:size] = hc[:size]
            nhp[:size] = hp[:size]
            nhu[:size] = hu[:size]
            nhs[:size] = hs[:size]
            hk, hc, hp, hu, hs = nhk, nhc, nhp, nhu, nhs
            cap = ncap
        if kind == 1:
            # one round of sorted access for parent p
            for k in range(K):
                i = pos[p, k]
                if i >= lens[k, d]:
                    continue
                u = list_u[k, d, i]
                seen = False
                for j2 in range(K):
                    if j2 != k and rank[j2, d, u] < pos[p, j2]:
                        seen = True
                        break
                pos[p, k] = i + 1
                if not seen:
                    for j2 in range(K):
                        tmp[j2] = W[p, j2] + G[j2, d, u]
                    ck = _lse(tmp)
                    # push concrete
                    j = size
                    size += 1
                    while j > 0:
                        par = (j - 1) >> 1
                        if _heap_before(ck, 0, seq, hk[par], hc[par], hs[par]):
                            hk[j] = hk[par]
                            hc[j] = hc[par]
                            hp[j] = hp[par]
                            hu[j] = hu[par]
                            hs[j] = hs[par]
                            j = par
                        else:
                            break
                    hk[j] = ck
                    hc[j] = 0
                    hp[j] = p
                    hu[j] = u
                    hs[j] = seq
                    seq += 1
            # the parent's new threshold
            exhausted = True
            for k in range(K):
                i = pos[p, k]
                if i < lens[k, d]:
                    exhausted = False
                    tmp[k] = W[p, k] + list_val[k, d, i]
                else:
                    tmp[k] = W[p, k] + bound[k, d]
            if exhausted and closed[d]:
                continue
            npush = 1
            push_key0 = _lse(tmp)
            push_kind0 = 2 if exhausted else 1
            push_p0 = p
            push_u0 = -1
        if npush == 1:
            j = size
            size += 1
            while j > 0:
                par = (j - 1) >> 1
                if _heap_before(push_key0, push_kind0, seq, hk[par], hc[par], hs[par]):
                    hk[j] = hk[par]
                    hc[j] = hc[par]
                    hp[j] = hp[par]
                    hu[j] = hu[par]
                    hs[j] = hs[par]
                    j = par
                else:
                    break
            hk[j] = push_key0
            hc[j] = push_kind0
            hp[j] = push_p0
            hu[j] = push_u0
            hs[j] = seq
            seq += 1
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
                o1 = np.argsort(out_ids[a, d])
                v1 = vals[a, d][o1]
                t1 = out_ids[a, d][o1]
                o2 = np.argsort(-v1, kind="mergesort")
                for i in range(k):
                    vals[a, d, i] = v1[o2[i]]
                    out_ids[a, d, i] = t1[o2[i]]
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
    # cells live in a pool (written once); the heap moves only (key, cell index)
    cp = np.empty(cap, dtype=np.int64)  # parent node
    cd = np.empty(cap, dtype=np.int64)  # depth index
    cr = np.empty(cap, dtype=np.int64)  # rank
    cb = np.empty(cap)  # parent's score
    hk = np.empty(cap)
    hi = np.empty(cap, dtype=np.int64)  # cell index; also the FIFO tie-break
    cp[0], cd[0], cr[0], cb[0] = -1, 0, 0, 0.0
    hk[0] = vals[0, 0]
    hi[0] = 0
    size = 1
    ncell = 1
    n = 0
    while n < N and size > 0:
        key = hk[0]
        c0 = hi[0]
        size -= 1
        if size > 0:
            lk = hk[size]
            li = hi[size]
            j = 0
            while True:
                c = 2 * j + 1
                if c >= size:
                    break
                if c + 1 < size and (hk[c + 1] > hk[c] or (hk[c + 1] == hk[c] and hi[c + 1] < hi[c])):
                    c += 1
                if hk[c] > lk or (hk[c] == lk and hi[c] < li):
                    hk[j] = hk[c]
                    hi[j] = hi[c]
                    j = c
                else:
                    break
            hk[j] = lk
            hi[j] = li
        p = cp[c0]
        d = cd[c0]
        r = cr[c0]
        parent[n] = p
        token[n] = ids[d, r]
        depth[n] = d + 1
        score[n] = key
        if r + 1 > used[d]:
            used[d] = r + 1
        node = n
        n += 1
        for which in range(2):
            if which == 0:
                if r + 1 >= k:
                    continue
                nk = cb[c0] + vals[d, r + 1]
                cp[ncell], cd[ncell], cr[ncell], cb[ncell] = p, d, r + 1, cb[c0]
            else:
                if d + 1 >= L:
                    continue
                nk = key + vals[d + 1, 0]
                cp[ncell], cd[ncell], cr[ncell], cb[ncell] = node, d + 1, 0, key
            j = size
            size += 1
            while j > 0:
                par = (j - 1) >> 1
                if nk > hk[par] or (nk == hk[par] and ncell < hi[par]):
                    hk[j] = hk[par]
                    hi[j] = hi[par]
                    j = par
                else:
                    break
            hk[j] = nk
            hi[j] = ncell
            ncell += 1
    return parent[:n], token[:n], depth[:n], score[:n], used
