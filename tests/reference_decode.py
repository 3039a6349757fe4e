"""Slow, obviously correct twins of decoding's top-k candidate selection, the Domino tree search
and the in-place key/value buffer."""

from __future__ import annotations

import numpy as np
import torch


def slow_topk(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of the last axis: the k largest (value, id) pairs, descending value, ascending id on ties."""
    lead = x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1])
    vals = np.empty((flat.shape[0], k))
    ids = np.empty((flat.shape[0], k), dtype=np.int64)
    for r, row in enumerate(flat):
        best = sorted(range(len(row)), key=lambda t: (-float(row[t]), t))[:k]
        vals[r] = [float(row[t]) for t in best]
        ids[r] = best
    return vals.reshape(*lead, k), ids.reshape(*lead, k)


def slow_path_tree(drafter, root: int, log_q, budget: int) -> dict[tuple[int, ...], float]:
    """The exact top-``budget`` prefixes under a Domino drafter's corrected path scores, best first.

    Plain best-first search over *every* child (the whole vocabulary) of every expanded node, each
    node's corrected distribution recomputed along its own path, one path at a time
    (``drafter.corrected_log_probs``). Returns {path: score}; ties go to the first pushed."""
    import heapq

    depth_max, vocab = log_q.shape
    heap: list = []
    count = 0

    def push_children(path, score):
        nonlocal count
        if len(path) >= depth_max:
            return
        lp = drafter.corrected_log_probs(root, path, log_q).double().tolist()
        for tok in range(vocab):
            heapq.heappush(heap, (-(score + min(lp[tok], 0.0)), count, path + (tok,)))
            count += 1

    out: dict[tuple[int, ...], float] = {}
    push_children((), 0.0)
    while heap and len(out) < budget:
        neg, _, path = heapq.heappop(heap)
        out[path] = -neg
        push_children(path, -neg)
    return out


class SlowKV:
    """Slow twin of :class:`mfd_theory.llm.models.kv.KVBuffer`: each sequence's keys and values as
    a dict {row: [kvh, d] tensor}, every operation one row at a time."""

    def __init__(self):
        self.k: list[dict] = []
        self.v: list[dict] = []

    def append(self, keys, values):
        self.k.append({j: keys[0, :, j].clone() for j in range(keys.shape[2])})
        self.v.append({j: values[0, :, j].clone() for j in range(values.shape[2])})

    def write(self, starts, keys, values, valid=None):
        for b, start in enumerate(starts):
            for j in range(keys.shape[2]):
                if valid is None or bool(valid[b, j]):
                    self.k[b][start + j] = keys[b, :, j].clone()
                    self.v[b][start + j] = values[b, :, j].clone()

    def move(self, src, dst):
        for b in range(len(src)):
            rows_k = [self.k[b][int(s)] for s in src[b]]
            rows_v = [self.v[b][int(s)] for s in src[b]]
            for d, rk, rv in zip(dst[b], rows_k, rows_v):
                self.k[b][int(d)], self.v[b][int(d)] = rk, rv

    def select(self, keep):
        self.k, self.v = [self.k[i] for i in keep], [self.v[i] for i in keep]

    def rows(self, b, n):
        """Sequence b's first n rows: keys and values [kvh, n, d]."""
        return (torch.stack([self.k[b][j] for j in range(n)], dim=1),
                torch.stack([self.v[b][j] for j in range(n)], dim=1))
