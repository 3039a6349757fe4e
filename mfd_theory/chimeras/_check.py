"""Argument checks shared by the chimera modules: token sequences, a pair of futures, a
drafter's log-probabilities. Each names the argument it refuses.

Every function of :mod:`mfd_theory.chimeras` takes the same input types:

* a drafter (``log_q``): per-position log-probabilities [L, V] (float64, float32 or float16), or a
  :class:`~mfd_theory.distributions.MixtureOfProducts` with K = 1 such as ``target.marginals()``,
  as :func:`mfd_theory.trees.product_tree` takes it;
* futures (``sequences``, ``futures``, ``target``): integer token ids [F, L] (an array or nested
  lists; one sequence [L] is one future), or a MixtureOfProducts, which stands for each mode's
  most likely sequence (its future, for targets built by ``MixtureOfProducts.futures`` or
  :mod:`mfd_theory.synthetic`), as :func:`~mfd_theory.chimeras.count_chimeras` takes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mfd_theory.distributions import MixtureOfProducts
from mfd_theory.validation import token_ids


def _as_tokens(name: str, x: Any, V: int | None = None) -> np.ndarray:
    arr = token_ids(name, x)
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


def _mode_sequences(target: MixtureOfProducts) -> np.ndarray:
    """int64 [K, L]: each mode's most likely sequence."""
    return np.argmax(target.log_q, axis=2).astype(np.int64)


def _check_sequences(sequences: Any, L: int | None = None, V: int | None = None, name: str = "sequences") -> np.ndarray:
    if isinstance(sequences, MixtureOfProducts):
        sequences = _mode_sequences(sequences)
    try:
        seqs = np.asarray(sequences)
    except ValueError as exc:  # ragged input
        raise ValueError(f"{name}: sequences of unequal length ({exc})") from exc
    if seqs.dtype == object:
        raise ValueError(f"{name}: sequences of unequal length (or not integer tokens)")
    seqs = _as_tokens(name, seqs, V)
    if seqs.ndim == 1:
        seqs = seqs[None, :]
    if seqs.ndim != 2 or seqs.shape[0] == 0 or seqs.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty [F, L] array, got shape {seqs.shape}")
    if L is not None and seqs.shape[1] != L:
        raise ValueError(f"{name}: have length {seqs.shape[1]} but the drafter has L = {L} positions")
    return seqs


def _check_log_q(log_q: Any) -> np.ndarray:
    if isinstance(log_q, MixtureOfProducts):
        if log_q.K != 1:
            raise ValueError(f"log_q: a MixtureOfProducts with K = {log_q.K} modes is not a product drafter; pass "
                             "its per-position marginals (target.marginals()) or one mode's rows")
        log_q = log_q.log_q[0]  # [L, V]
    try:
        lq = np.asarray(log_q, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"log_q: expected a [L, V] array of log-probabilities or a one-mode MixtureOfProducts, "
                         f"got {type(log_q).__name__}") from None
    if lq.ndim != 2 or lq.shape[0] < 1 or lq.shape[1] < 1:
        raise ValueError(f"log_q: expected a [L, V] array of log-probabilities, got shape {lq.shape}")
    if np.isnan(lq).any():
        raise ValueError("log_q: contains NaN")
    if np.isposinf(lq).any() or (lq > 1e-9).any():
        raise ValueError("log_q: has entries above 0 (probability > 1); pass log-probabilities")
    return np.minimum(lq, 0.0)  # round-off above 0 would let a child outscore its parent

