"""One attention layer's keys and values for B sequences, kept in buffers that are written in place.

``KVBuffer`` is the only key/value store of the package: the target's cache layers, the batched
target's rows and both drafter caches (one request, a batch) keep their rows in one per layer.
Growth at least doubles the capacity, so appending rows costs amortised O(1) per row.
"""

from __future__ import annotations

import torch

__all__ = ["KVBuffer", "MIN_CAPACITY"]

MIN_CAPACITY = 256  # rows per sequence a fresh buffer holds


class KVBuffer:
    """Keys and values [B, kv_heads, capacity, d]: sequence b's rows ``[0, n_b)`` of batch row b.

    The owner keeps each sequence's length; the buffer only writes rows where it is told to, reads
    the first rows of every sequence (views, no copy), grows, and selects or appends batch rows.
    Fresh capacity is zero, so rows past a sequence's length that a batched read covers are finite
    numbers the caller's mask hides."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values  # [B, kvh, capacity, d] each

    @classmethod
    def like(cls, rows: torch.Tensor, capacity: int = 0, batch: int | None = None) -> "KVBuffer":
        """A zero buffer shaped for ``rows`` [B, kvh, *, d] (its dtype and device), holding at least
        ``capacity`` rows per sequence (never fewer than ``MIN_CAPACITY``), ``batch`` sequences (B)."""
        b, kvh, _, d = rows.shape
        shape = (b if batch is None else batch, kvh, max(int(capacity), MIN_CAPACITY), d)
        return cls(rows.new_zeros(shape), rows.new_zeros(shape))

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]

    @property
    def batch_size(self) -> int:
        return self.keys.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return self.keys.dtype

    @property
    def device(self) -> torch.device:
        return self.keys.device

    def fits(self, rows: torch.Tensor) -> bool:
        """Whether rows [B, kvh, *, d] can be written here as they are (batch, heads, width, dtype, device)."""
        k = self.keys
        return (k.shape[:2] == rows.shape[:2] and k.shape[3] == rows.shape[3] and k.dtype == rows.dtype
                and k.device == rows.device)

    def reserve(self, rows: int, used: int | None = None) -> bool:
        """Make room for ``rows`` rows per sequence. A growth copies the first ``used`` rows (all by
        default) once into buffers of ``max(rows, 2 * capacity, MIN_CAPACITY)`` rows; returns
        whether it grew."""
        if rows <= self.capacity:
            return False
        keep = self.capacity if used is None else int(used)
        cap = max(int(rows), 2 * self.capacity, MIN_CAPACITY)
        grown = []
        for old in (self.keys, self.values):
            new = old.new_zeros((*old.shape[:2], cap, old.shape[3]))
            new[:, :, :keep] = old[:, :, :keep]
            grown.append(new)
        self.keys, self.values = grown
        return True

    def write(self, start: int | torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
              valid: torch.Tensor | None = None) -> None:
        """Write ``keys`` / ``values`` [B, kvh, Q, d]: sequence b's Q rows at rows ``start + j``
        (``start`` an int, the same for every sequence) or ``start[b] + j`` (a tensor [B]).
        ``valid`` (bool [B, Q], per-sequence starts only): write only those rows."""
        if not isinstance(start, torch.Tensor):
            if valid is not None:
                raise ValueError("valid: only with per-sequence starts")
            q = keys.shape[2]
            self.keys[:, :, start:start + q] = keys
            self.values[:, :, start:start + q] = values
            return
        q = keys.shape[2]
        pos = start[:, None] + torch.arange(q, device=start.device)[None]  # [B, Q]
        if valid is None:
            rows = torch.arange(keys.shape[0], device=start.device)[:, None]
            self.keys[rows, :, pos] = keys.transpose(1, 2).to(self.keys.dtype)  # [B, Q, kvh, d]
            self.values[rows, :, pos] = values.transpose(1, 2).to(self.values.dtype)
        else:
            bi, ji = valid.nonzero(as_tuple=True)
            self.keys[bi, :, pos[bi, ji]] = keys[bi, :, ji].to(self.keys.dtype)  # [M, kvh, d]
            self.values[bi, :, pos[bi, ji]] = values[bi, :, ji].to(self.values.dtype)

    def scatter(self, batch_rows: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor,
                values: torch.Tensor) -> None:
        """Write packed rows: row r of ``keys`` / ``values`` [kvh, R, d] at row ``positions[r]`` of
        sequence ``batch_rows[r]`` ([R] each)."""
        self.keys[batch_rows, :, positions] = keys.transpose(0, 1).to(self.keys.dtype)  # [R, kvh, d]
        self.values[batch_rows, :, positions] = values.transpose(0, 1).to(self.values.dtype)

    def read(self, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows ``[0, end)`` of every sequence: views [B, kvh, end, d] of the buffers."""
        return self.keys[:, :, :end], self.values[:, :, :end]

    def move(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Per sequence b, copy rows ``src[b]`` onto rows ``dst[b]`` ([B, m] each); the sources are
        gathered first, so the two may overlap."""
        rows = torch.arange(src.shape[0], device=src.device)[:, None]
        for buf in (self.keys, self.values):
            buf[rows, :, dst] = buf[rows, :, src]

    def select(self, keep: torch.Tensor) -> None:
        """Keep batch rows ``keep`` (indices, in that order), drop the others."""
        self.keys, self.values = self.keys.index_select(0, keep), self.values.index_select(0, keep)

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """One more sequence as the last batch row, holding ``keys`` / ``values`` [1, kvh, n, d]: one
        copy of the buffers, at a capacity of at least ``max(n, capacity)``."""
        n = keys.shape[2]
        grown = []
        for old, rows in ((self.keys, keys), (self.values, values)):
            new = old.new_zeros((old.shape[0] + 1, old.shape[1], max(n, old.shape[2], MIN_CAPACITY), old.shape[3]))
            new[:-1, :, :old.shape[2]] = old
            new[-1, :, :n] = rows[0]
            grown.append(new)
        self.keys, self.values = grown
