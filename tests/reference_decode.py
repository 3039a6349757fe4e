"""Slow, obviously correct twin of decoding's top-k candidate selection."""

from __future__ import annotations

import numpy as np


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
