"""Batched decoding's cost model: measured (or predicted) round times by batch size, policy and
nodes (:class:`BatchCell`, :class:`BatchProfile`), the best policy per batch size
(:class:`BatchPlan`), and a profile predicted from a one-request verify table
(:func:`batch_rows_profile`). Model: docs/cost-model.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mfd_theory.speedup._check import _size_list
from mfd_theory.speedup.profile import LatencyProfile
from mfd_theory.validation import check_int, check_real, is_real

__all__ = ["BATCH_POLICIES", "BatchCell", "BatchPlan", "BatchProfile", "batch_rows_profile"]

BATCH_POLICIES = ("off", "per_request", "global", "proportional")
SHARED_POLICIES = ("global", "proportional")  # nodes are the round's total


@dataclasses.dataclass(frozen=True)
class BatchCell:
    """One measured batched round: ``batch_size`` requests under ``policy`` with ``nodes`` (per
    request for "per_request", the round's total for "global" and "proportional", 0 for "off"); ``round_ms`` the mean
    round (draft + tree + verify + walk + commit) over rounds that held all ``batch_size``
    requests; ``query_rows`` the mean rows per request of its verify forward (root and nodes; the
    batched verify packs the trees, so these are the trees' own rows)."""

    batch_size: int
    policy: str
    nodes: int
    round_ms: float
    query_rows: float = 1.0
    rounds: int = 0  # rounds averaged
    # the round's terms (ms; they sum to round_ms when measured): the batched drafting pass, the one
    # target forward over B x query_rows rows, and the rest (trees, walks, commits)
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    other_ms: float = 0.0

    def __post_init__(self):
        check_int("batch_size", self.batch_size, 1, integral_floats=True)
        if self.policy not in BATCH_POLICIES:
            raise ValueError(f"policy: must be one of {BATCH_POLICIES}, got {self.policy!r}")
        check_int("nodes", self.nodes, 0)
        if (self.policy == "off") != (self.nodes == 0):
            raise ValueError(f"nodes: policy {self.policy!r} with nodes={self.nodes} (0 exactly when off)")
        check_real("round_ms", self.round_ms, 0, low_open=True)


class BatchProfile:
    """Round times of batched decoding by (batch size, policy, nodes), as measured by
    :func:`mfd_theory.llm.measure.profile.measure_batch_profile` (or assumed: ``assumption``).

    The cost model of a batch: a round of B requests costs ``round_ms(B, policy, nodes)`` and emits
    ``B (1 + E[accepted per request])`` tokens, so the predicted throughput is
    ``1000 B (1 + a) / round_ms`` tokens/s (:meth:`tokens_per_s`). Between measured batch sizes the
    round time is interpolated linearly in B; outside them it is refused."""

    def __init__(self, cells, *, name: str = "batch_profile", device: str = "", model: str = "",
                 method: str = "", K: int = 1, assumption: bool = False, note: str = ""):
        cells = tuple(c if isinstance(c, BatchCell) else BatchCell(**c) for c in cells)
        if not cells:
            raise ValueError("cells: the batch profile is empty")
        keys = [(c.batch_size, c.policy, c.nodes) for c in cells]
        if len(set(keys)) != len(keys):
            raise ValueError("cells: a (batch_size, policy, nodes) measured twice")
        self.cells, self.name, self.device, self.model = cells, name, device, model
        self.method, self.K, self.assumption, self.note = method, int(K), bool(assumption), note

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({c.batch_size for c in self.cells})

    def candidates(self, batch_size: int) -> list[tuple[str, int]]:
        """The (policy, nodes) measured at ``batch_size``."""
        return sorted((c.policy, c.nodes) for c in self.cells if c.batch_size == batch_size)

    def _cell(self, b: int, policy: str, nodes: int) -> BatchCell | None:
        return next((c for c in self.cells if (c.batch_size, c.policy, c.nodes) == (b, policy, nodes)), None)

    def round_ms(self, batch_size, policy: str, nodes: int) -> float:
        """ms per round; ``nodes`` for "global" is the per-request share times B at each measured B
        (the cells store totals, so they are matched by share: total / B)."""
        sizes = self.batch_sizes
        if not is_real(batch_size) or not sizes[0] <= batch_size <= sizes[-1]:
            raise ValueError(f"batch_size: {batch_size!r} is outside the measured batch sizes {sizes}")

        def at(b):
            n = nodes * b // batch_size if policy in SHARED_POLICIES else nodes
            c = self._cell(b, policy, int(n))
            if c is None:
                raise ValueError(f"policy/nodes: ({policy!r}, {n}) was not measured at batch size {b}")
            return c.round_ms

        lo = max(b for b in sizes if b <= batch_size)
        hi = min(b for b in sizes if b >= batch_size)
        if lo == hi:
            return at(lo)
        w = (batch_size - lo) / (hi - lo)
        return (1 - w) * at(lo) + w * at(hi)

    def tokens_per_s(self, batch_size, policy: str, nodes: int, accepted: float) -> float:
        """Predicted throughput: ``1000 B (1 + accepted) / round_ms`` (accepted per request per round)."""
        check_real("accepted", accepted, 0)
        return 1000.0 * batch_size * (1.0 + accepted) / self.round_ms(batch_size, policy, nodes)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "device": self.device, "model": self.model, "method": self.method, "K": self.K,
                "assumption": self.assumption, "note": self.note,
                "cells": [dataclasses.asdict(c) for c in self.cells]}

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "batch profile") -> "BatchProfile":
        if not isinstance(d, dict) or not isinstance(d.get("cells"), list):
            raise ValueError(f"{source}: expected an object with a list of cells")
        try:
            return cls(d["cells"], name=d.get("name", "batch_profile"), device=d.get("device", ""),
                       model=d.get("model", ""), method=d.get("method", ""), K=d.get("K", 1),
                       assumption=d.get("assumption", False), note=d.get("note", ""))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: {exc}") from exc


class BatchPlan:
    """The predicted best (policy, nodes) per batch size, from a :class:`BatchProfile` and predicted
    acceptance ``accepted[(B, policy, nodes)]`` (draft tokens accepted per request per round; "off"
    accepts 0). ``choose(B)`` (the ``auto`` policy of batched decoding) takes the prediction at the
    nearest measured batch size at or below B (the smallest above when none is below).

    ``margin``: a shared policy ("global", "proportional") is chosen only when it is predicted
    faster than the best unshared cell by more than this relative margin; otherwise the best
    unshared cell leads the table. A shared budget's gain must survive the whole decode's
    dynamics (docs/benchmarks.md), so a plan that only breaks even is not worth its risk."""

    def __init__(self, profile: BatchProfile, accepted: dict, *, margin: float = 0.0):
        if not isinstance(profile, BatchProfile):
            raise ValueError(f"profile: expected a BatchProfile, got {type(profile).__name__}")
        self.margin = check_real("margin", margin, 0, 1)
        self.profile = profile
        self.table: dict[int, list[dict]] = {}
        for b in profile.batch_sizes:
            rows = []
            for policy, nodes in profile.candidates(b):
                a = 0.0 if policy == "off" else accepted.get((b, policy, nodes))
                if a is None:
                    continue  # no acceptance prediction for this cell: not a candidate
                rows.append({"policy": policy, "nodes": nodes, "accepted": float(a),
                             "tokens_per_s": profile.tokens_per_s(b, policy, nodes, float(a))})
            if not rows:
                raise ValueError(f"accepted: no prediction for any cell measured at batch size {b}")
            rows.sort(key=lambda r: -r["tokens_per_s"])
            plain = [r for r in rows if r["policy"] not in SHARED_POLICIES]
            if rows[0]["policy"] in SHARED_POLICIES and plain and \
                    rows[0]["tokens_per_s"] <= (1 + self.margin) * plain[0]["tokens_per_s"]:
                rows.remove(plain[0])
                rows.insert(0, plain[0])  # the shared cell's lead is within the margin
            self.table[b] = rows

    def best(self, batch_size: int) -> dict:
        sizes = sorted(self.table)
        below = [b for b in sizes if b <= batch_size]
        return self.table[below[-1] if below else sizes[0]][0]

    def choose(self, batch_size: int) -> tuple[str, int]:
        """(policy, nodes): nodes per request for "per_request", the round's total for "global"
        (scaled from the measured share when B is not a measured size)."""
        sizes = sorted(self.table)
        below = [b for b in sizes if b <= batch_size]
        b0 = below[-1] if below else sizes[0]
        row = self.table[b0][0]
        nodes = row["nodes"] * batch_size // b0 if row["policy"] in SHARED_POLICIES else row["nodes"]
        return row["policy"], max(int(nodes), 1) if row["policy"] != "off" else 0

    def crossover(self) -> int | None:
        """The smallest measured batch size from which "off" is predicted fastest at every larger
        measured size (None when speculation is predicted to pay at the largest)."""
        sizes = sorted(self.table)
        off = [self.table[b][0]["policy"] == "off" for b in sizes]
        if not off[-1]:
            return None
        i = len(off) - 1
        while i > 0 and off[i - 1]:
            i -= 1
        return sizes[i]


def batch_rows_profile(profile: LatencyProfile, batch_sizes, budgets, *, global_rows=None) -> BatchProfile:
    """A batch profile *predicted* from a one-request verify table (e.g. the packaged GPU one): a
    round of B requests with N nodes each is costed as one drafting pass plus a verify forward of
    ``B (N + 1)`` rows read off ``t_verify(B (N + 1) - 1)``, and an AR round of B requests as
    ``t_verify(B - 1)`` (``t_target_ms`` at B = 1). This assumes the forward's cost depends on its
    total rows only (weights read once per forward; per-request KV reads and the drafting pass's
    growth with B ignored): an ASSUMPTION, labelled as such. A padded batch verifies every request
    at the largest tree's rows: ``global_rows[(B, N)]`` gives the mean rows per request of the
    global policy at B N nodes (a property of the allocation, e.g. a measured profile's
    ``query_rows``; default N + 1, as if the shares were even)."""
    cells = []
    for b in _size_list("batch_sizes", batch_sizes):
        ar = profile.t_target_ms if b == 1 else max(profile.t_target_ms, float(profile.t_verify(b - 1)))
        cells.append(BatchCell(b, "off", 0, ar))
        for n in _size_list("budgets", budgets):
            ms = profile.t_draft_ms + float(profile.t_verify(b * (n + 1) - 1))
            cells.append(BatchCell(b, "per_request", n, ms, query_rows=n + 1))
            q = float((global_rows or {}).get((b, n), n + 1))
            ms_g = profile.t_draft_ms + float(profile.t_verify(max(b * q - 1, 1)))
            cells.append(BatchCell(b, "global", n * b, ms_g, query_rows=q))
    return BatchProfile(cells, name=f"{profile.name} (rows model)", device=profile.device, model=profile.model,
                        assumption=True, note="predicted from a one-request verify table by total rows; " +
                        (profile.note or ""))
