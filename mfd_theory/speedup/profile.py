"""Latency profiles: what one decoding round costs on a machine, by term and by tree size.

:class:`LatencyProfile` (AR forward, drafting, the verify-vs-tree-size table, and optionally the
measured round's other terms in :class:`OverheadTable`), reading and writing its JSON file, the
shipped (assumed) profiles, and :func:`isotonic` for noisy tables. File format and cost model:
docs/cost-model.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from mfd_theory.speedup._check import _monotone, _ms_list, _positive_time, _size_list
from mfd_theory.validation import check_int, check_real, is_real

__all__ = ["LatencyProfile", "OverheadTable", "default_profile", "default_profile_names", "isotonic",
           "load_latency_profile"]

_REQUIRED = ("name", "device", "model", "assumption", "t_target_ms", "t_draft_ms", "tree_sizes", "verify_ms")


def _interp(x, sizes, values) -> np.ndarray | float:
    """Piecewise-linear in N through the table; constant below the first size, the last segment's
    slope above the last (one size: constant)."""
    xs = np.asarray(sizes, dtype=np.float64)
    ys = np.asarray(values, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    out = np.interp(x, xs, ys)
    if xs.size > 1:
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        out = np.where(x > xs[-1], ys[-1] + slope * (x - xs[-1]), out)
    return float(out) if out.ndim == 0 else out


def isotonic(values, weights=None) -> np.ndarray:
    """The non-decreasing sequence nearest to ``values`` in (weighted) least squares.

    Pool-adjacent-violators: a measured latency table that dips by timing noise is replaced by the
    closest monotone one (which, unlike a running maximum, does not inflate later entries)."""
    y = np.asarray(values, dtype=np.float64).reshape(-1)
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    if y.size == 0 or w.shape != y.shape or np.any(~np.isfinite(y)) or np.any(~(w > 0)):
        raise ValueError("values: need a non-empty finite sequence (and positive weights of the same length)")
    means, wts, counts = [], [], []
    for yi, wi in zip(y, w):
        means.append(yi)
        wts.append(wi)
        counts.append(1)
        while len(means) > 1 and means[-2] > means[-1]:  # merge the violating pair into one block
            m2, w2, c2 = means.pop(), wts.pop(), counts.pop()
            m1, w1, c1 = means.pop(), wts.pop(), counts.pop()
            means.append((m1 * w1 + m2 * w2) / (w1 + w2))
            wts.append(w1 + w2)
            counts.append(c1 + c2)
    return np.repeat(means, counts)


@dataclasses.dataclass(frozen=True)
class OverheadTable:
    """Per (method, K): the round's work outside the two forwards, in ms, by tree size N."""

    method: str
    K: int
    tree_sizes: tuple[int, ...]
    tree_ms: tuple[float, ...]  # tree build + attention mask
    walk_ms: tuple[float, ...]  # the lossless walk (greedy: one argmax over the verified rows)
    commit_ms: tuple[float, ...]  # keep the accepted rows of the KV cache
    # optional: the drafting pass of this (method, K) by N (after a verify of N nodes the next
    # drafting pass runs on a colder cache); empty: the profile's drafting-by-K table
    draft_ms: tuple[float, ...] = ()
    # optional: the walk of a sampled round (T > 0) without its draws, by N: it runs no argmax over
    # the verified rows, so it costs less than the greedy walk; empty: the greedy walk is used
    walk_sampled_ms: tuple[float, ...] = ()

    def __post_init__(self):
        if not isinstance(self.method, str) or not self.method:
            raise ValueError(f"method: expected a method name, got {self.method!r}")
        check_int("K", self.K, 1)
        sizes = _size_list("tree_sizes", self.tree_sizes)
        object.__setattr__(self, "tree_sizes", sizes)
        object.__setattr__(self, "K", int(self.K))
        for f in ("tree_ms", "walk_ms", "commit_ms"):
            object.__setattr__(self, f, _ms_list(f, getattr(self, f), len(sizes)))
        for f in ("draft_ms", "walk_sampled_ms"):
            if len(getattr(self, f)):
                object.__setattr__(self, f, _ms_list(f, getattr(self, f), len(sizes)))

    def at(self, n, sampled: bool = False) -> dict[str, float]:
        """The terms at tree size ``n``; ``sampled``: the walk of a sampled round (without its draws,
        which the caller adds per accepted token) where the table has one."""
        keys = ("tree", "walk", "commit", "draft") if self.draft_ms else ("tree", "walk", "commit")
        out = {k: _interp(n, self.tree_sizes, getattr(self, f"{k}_ms")) for k in keys}
        if sampled and self.walk_sampled_ms:
            out["walk"] = _interp(n, self.tree_sizes, self.walk_sampled_ms)
        return out

    def to_dict(self) -> dict[str, Any]:
        out = {"method": self.method, "K": self.K, "tree_sizes": list(self.tree_sizes),
               "tree_ms": list(self.tree_ms), "walk_ms": list(self.walk_ms), "commit_ms": list(self.commit_ms)}
        for f in ("draft_ms", "walk_sampled_ms"):
            if getattr(self, f):
                out[f] = list(getattr(self, f))
        return out


def _context_probe(probe) -> dict | None:
    if probe is None:
        return None
    if not isinstance(probe, dict) or not {"contexts", "tree_sizes", "verify_ms"} <= set(probe):
        raise ValueError("context_probe: expected {contexts, tree_sizes, verify_ms}")
    ctx = _size_list("context_probe.contexts", probe["contexts"])
    sizes = _size_list("context_probe.tree_sizes", probe["tree_sizes"])
    rows = probe["verify_ms"]
    if not isinstance(rows, (list, tuple)) or len(rows) != len(ctx):
        raise ValueError(f"context_probe.verify_ms: expected one row per context ({len(ctx)})")
    table = [list(_ms_list(f"context_probe.verify_ms[{i}]", r, len(sizes))) for i, r in enumerate(rows)]
    return {"contexts": list(ctx), "tree_sizes": list(sizes), "verify_ms": table}


@dataclasses.dataclass(frozen=True)
class LatencyProfile:
    """Latencies of one (device, target, drafter): AR forward, drafting, verify-vs-tree-size table.

    ``t_verify(N)`` interpolates the table monotonically (PCHIP, which keeps a non-decreasing
    table non-decreasing), holds the first value below the smallest measured size, and continues
    the last segment's slope above the largest.
    """

    name: str
    device: str
    model: str
    assumption: bool
    t_target_ms: float
    t_draft_ms: float
    tree_sizes: tuple[int, ...]
    verify_ms: tuple[float, ...]
    note: str = ""
    # measured round profile (optional; docs/cost-model.md)
    draw_ms: float = 0.0
    draft_modes: tuple[int, ...] = ()
    draft_ms: tuple[float, ...] = ()
    overhead: tuple[OverheadTable, ...] = ()
    context_probe: dict | None = None

    def __post_init__(self):
        for f in ("name", "device", "model", "note"):
            if not isinstance(getattr(self, f), str):
                raise ValueError(f"{f}: expected a string, got {getattr(self, f)!r}")
        if not isinstance(self.assumption, (bool, np.bool_)):
            raise ValueError(f"assumption: expected true or false, got {self.assumption!r}")
        t_target = _positive_time("t_target_ms", self.t_target_ms)
        if t_target == 0:
            raise ValueError("t_target_ms: must be > 0 (it is the unit of speedup)")
        t_draft = _positive_time("t_draft_ms", self.t_draft_ms)
        try:
            sizes = np.asarray(self.tree_sizes, dtype=np.float64).reshape(-1)
            times = np.asarray(self.verify_ms, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"tree_sizes/verify_ms: expected lists of numbers ({exc})") from exc
        if sizes.size == 0 or times.size == 0:
            raise ValueError("tree_sizes/verify_ms: the latency table is empty")
        if sizes.size != times.size:
            raise ValueError(
                f"verify_ms: has {times.size} entries but tree_sizes has {sizes.size}"
            )
        if not np.all(np.isfinite(sizes)) or np.any(sizes != np.round(sizes)) or np.any(sizes < 1):
            raise ValueError("tree_sizes: must be integers >= 1 (draft nodes, root excluded)")
        if np.any(np.diff(sizes) <= 0):
            raise ValueError(f"tree_sizes: must be strictly increasing, got {sizes.astype(int).tolist()}")
        if not np.all(np.isfinite(times)) or np.any(times <= 0):
            raise ValueError("verify_ms: must be finite and > 0")
        if np.any(np.diff(times) < 0):
            i = int(np.flatnonzero(np.diff(times) < 0)[0])
            raise ValueError(
                f"verify_ms: the table is not monotone: {times[i]:.4g} ms at N={int(sizes[i])} but "
                f"{times[i + 1]:.4g} ms at N={int(sizes[i + 1])} (a larger tree cannot verify faster; "
                "re-measure or take a running maximum)"
            )
        object.__setattr__(self, "t_target_ms", t_target)
        object.__setattr__(self, "t_draft_ms", t_draft)
        object.__setattr__(self, "assumption", bool(self.assumption))
        object.__setattr__(self, "tree_sizes", tuple(int(s) for s in sizes))
        object.__setattr__(self, "verify_ms", tuple(float(t) for t in times))
        object.__setattr__(self, "draw_ms", _positive_time("draw_ms", self.draw_ms))
        if len(self.draft_modes) or len(self.draft_ms):
            modes = _size_list("draft_modes", self.draft_modes)
            draft = _ms_list("draft_ms", self.draft_ms, len(modes))
            _monotone("draft_ms", modes, draft, "K")
            object.__setattr__(self, "draft_modes", modes)
            object.__setattr__(self, "draft_ms", draft)
        tables = []
        for i, t in enumerate(self.overhead):
            if isinstance(t, dict):
                missing = [k for k in ("method", "K", "tree_sizes", "tree_ms", "walk_ms", "commit_ms") if k not in t]
                if missing:
                    raise ValueError(f"overhead[{i}]: lacks the fields {missing}")
            try:
                tables.append(t if isinstance(t, OverheadTable) else OverheadTable(**t))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"overhead[{i}].{exc}" if isinstance(exc, ValueError)
                                 else f"overhead[{i}]: {exc}") from exc
        keys = [(t.method, t.K) for t in tables]
        if len(set(keys)) != len(keys):
            raise ValueError(f"overhead: (method, K) listed twice in {keys}")
        object.__setattr__(self, "overhead", tuple(tables))
        object.__setattr__(self, "context_probe", _context_probe(self.context_probe))

    @property
    def measured_round(self) -> bool:
        """True when the profile models the whole round (drafting per K and the overhead)."""
        return bool(self.draft_modes) and bool(self.overhead)

    # --------------------------------------------------------------------------- costs
    def t_verify(self, n) -> np.ndarray | float:
        """ms per verify forward of a tree of ``n`` nodes (scalar or array)."""
        sizes = np.asarray(self.tree_sizes, dtype=np.float64)
        times = np.asarray(self.verify_ms, dtype=np.float64)
        x = np.asarray(n, dtype=np.float64)
        if np.any(~np.isfinite(x)) or np.any(x < 0):
            raise ValueError("n: tree sizes must be finite and >= 0")
        if sizes.size == 1:
            out = np.full_like(x, times[0])
        else:
            from scipy.interpolate import PchipInterpolator

            inside = PchipInterpolator(sizes, times, extrapolate=False)
            slope = (times[-1] - times[-2]) / (sizes[-1] - sizes[-2])
            xc = np.clip(x, sizes[0], sizes[-1])
            out = np.asarray(inside(xc), dtype=np.float64)
            out = np.where(x > sizes[-1], times[-1] + slope * (x - sizes[-1]), out)
        return float(out) if out.ndim == 0 else out

    def step_ms(self, n, draft_passes=1) -> np.ndarray | float:
        """ms per decoding step: ``draft_passes * t_draft + t_verify(n)``."""
        return np.asarray(draft_passes) * self.t_draft_ms + self.t_verify(n)

    def t_draft(self, K: int = 1) -> float:
        """ms per drafting pass of a K-mode drafter (the table, linear in K between its entries;
        without a table: ``t_draft_ms`` for every K)."""
        check_int("K", K, 1)
        if not self.draft_modes:
            return self.t_draft_ms
        return float(_interp(K, self.draft_modes, self.draft_ms))

    def t_ar(self, temperature: float = 0.0) -> float:
        """ms per autoregressive round as the loop times it (one sampled token more at T > 0)."""
        return self.t_target_ms + (self.draw_ms if temperature > 0 else 0.0)

    def overhead_for(self, method: str, K: int) -> OverheadTable | None:
        for t in self.overhead:
            if t.method == method and t.K == K:
                return t
        if self.overhead:
            raise ValueError(f"method/K: the profile {self.name!r} has no overhead table for ({method!r}, K={K}); "
                             f"it has {[(t.method, t.K) for t in self.overhead]}")
        return None

    def round_ms(self, method: str, K: int, n, temperature: float = 0.0, accepted: float = 0.0,
                 build_n=None) -> dict[str, float]:
        """One round's predicted time by term (ms): draft, tree, verify, walk, commit.

        ``method`` "ar" is the autoregressive round (all in ``verify``, the draw in ``walk``).
        ``accepted`` (the expected accepted length) counts the sampled draws of the walk at T > 0.
        ``build_n``: the size the tree is built at when a per-round rule then keeps only ``n`` of
        its nodes (the tree term is paid at ``build_n``, the rest at ``n``; default ``n``).
        """
        draw = self.draw_ms if temperature > 0 else 0.0
        if method == "ar":
            return {"draft": 0.0, "tree": 0.0, "verify": self.t_target_ms, "walk": draw, "commit": 0.0}
        if not is_real(n) or n < 1:
            raise ValueError(f"n: a tree needs at least one node, got {n!r}")
        check_real("accepted", accepted, 0)
        table = self.overhead_for(method, K)
        over = table.at(n, temperature > 0) if table is not None else {"tree": 0.0, "walk": 0.0, "commit": 0.0}
        if build_n is not None and table is not None:
            if not is_real(build_n) or build_n < n:
                raise ValueError(f"build_n: must be a number >= n ({n}), got {build_n!r}")
            over["tree"] = table.at(build_n)["tree"]
        return {"draft": over.get("draft", self.t_draft(K)), "tree": over["tree"], "verify": float(self.t_verify(n)),
                "walk": over["walk"] + (1.0 + accepted) * draw, "commit": over["commit"]}

    # --------------------------------------------------------------------------- io
    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "device": self.device,
            "model": self.model,
            "assumption": self.assumption,
            "note": self.note,
            "t_target_ms": self.t_target_ms,
            "t_draft_ms": self.t_draft_ms,
            "tree_sizes": list(self.tree_sizes),
            "verify_ms": list(self.verify_ms),
            **({"draw_ms": self.draw_ms} if self.draw_ms else {}),
            **({"draft_modes": list(self.draft_modes), "draft_ms": list(self.draft_ms)} if self.draft_modes else {}),
            **({"overhead": [t.to_dict() for t in self.overhead]} if self.overhead else {}),
            **({"context_probe": self.context_probe} if self.context_probe else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "profile") -> "LatencyProfile":
        if not isinstance(d, dict):
            raise ValueError(f"{source}: expected a JSON object, got {type(d).__name__}")
        missing = [k for k in _REQUIRED if k not in d]
        if missing:
            raise ValueError(f"{source}: lacks the fields {missing}")
        overhead = d.get("overhead", [])
        if not isinstance(overhead, list) or not all(isinstance(t, dict) for t in overhead):
            raise ValueError(f"{source}: overhead: expected a list of tables (objects)")
        try:
            return cls(
                name=d["name"], device=d["device"], model=d["model"], assumption=d["assumption"],
                t_target_ms=d["t_target_ms"], t_draft_ms=d["t_draft_ms"],
                tree_sizes=tuple(d["tree_sizes"]) if isinstance(d["tree_sizes"], list) else d["tree_sizes"],
                verify_ms=tuple(d["verify_ms"]) if isinstance(d["verify_ms"], list) else d["verify_ms"],
                note=d.get("note", ""), draw_ms=d.get("draw_ms", 0.0),
                draft_modes=tuple(d.get("draft_modes", ())), draft_ms=tuple(d.get("draft_ms", ())),
                overhead=tuple(overhead), context_probe=d.get("context_probe"),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: {exc}") from exc

    def save(self, path: str | os.PathLike) -> Path:
        from mfd_theory.results import atomic_write_text

        path = Path(path)
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @property
    def label(self) -> str:
        return f"{self.name} ({'ASSUMED' if self.assumption else 'measured'})"


def load_latency_profile(path: str | os.PathLike, make_monotone: bool = False) -> LatencyProfile:
    """Read and validate a latency profile JSON file (format: docs/cost-model.md).

    Extra keys (e.g. ``provenance``) are ignored. A measured table can dip by timing noise (a
    larger tree timed a hair faster); ``make_monotone=True`` replaces ``verify_ms`` by its running
    maximum and says so in the profile's ``note``; by default such a table is an error.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: no latency profile at {path}")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"path: {path} is not valid JSON ({exc})") from exc
    if make_monotone and isinstance(raw, dict) and isinstance(raw.get("verify_ms"), list):
        try:
            times = [float(t) for t in raw["verify_ms"]]
        except (TypeError, ValueError):
            times = None
        if times and all(math.isfinite(t) for t in times):
            fixed = np.maximum.accumulate(times).tolist()
            if fixed != times:
                raw = {**raw, "verify_ms": fixed,
                       "note": (raw.get("note", "") + " verify_ms replaced by its running maximum on load.").strip()}
    return LatencyProfile.from_dict(raw, source=str(path))


def default_profile_names() -> list[str]:
    """Names of the shipped (assumed) profiles: ``mfd_theory/data/latency_<name>.json``."""
    root = resources.files("mfd_theory") / "data"
    return sorted(
        p.name[len("latency_"):-len(".json")]
        for p in root.iterdir()
        if p.name.startswith("latency_") and p.name.endswith(".json")
    )


def default_profile(name: str = "h100_qwen3-8b") -> LatencyProfile:
    """A shipped latency profile (an ASSUMPTION, see its ``note``) by name."""
    names = default_profile_names()
    if name not in names:
        raise ValueError(f"name: no default latency profile {name!r}; shipped: {names}")
    res = resources.files("mfd_theory") / "data" / f"latency_{name}.json"
    raw = json.loads(res.read_text(encoding="utf-8"))
    return LatencyProfile.from_dict(raw, source=f"default profile {name}")



def _check_profile(profile) -> LatencyProfile:
    if not isinstance(profile, LatencyProfile):
        raise ValueError(f"profile: expected a LatencyProfile, got {type(profile).__name__}")
    return profile

