"""Cost models: predicted speedup of tree-verified speculative decoding and the choice of budget.

One decoding step drafts (``t_draft``), verifies a tree of N nodes in one target forward
(``t_verify(N)``) and emits ``1 + accepted`` tokens (the bonus token included); autoregressive
decoding emits one token per target forward (``t_target``). With E[accepted] = C(T_N), the
coverage of the tree,

    speedup(N) = (1 + C(T_N)) * t_target / (t_draft + t_verify(N)).

``t_verify`` is a table (ms per verify forward vs tree size), measured by the real-model benchmark
(``results/verify_latency*.json``) or one of the default profiles shipped in ``mfd_theory/data``.
The defaults are ASSUMPTIONS (``assumption: true`` in the file), labelled as such in every figure
that uses them.

Budget choice, three ways:

* fixed: one N for every step, the one with the best mean throughput (:func:`best_fixed_budget`);
* per step, as CaDDTree does: add nodes best-first while the step's *predicted* throughput
  ``(1 + predicted covered mass) / (t_draft + t_verify(n))`` still rises (:func:`per_step_budget`);
* Sequoia's hardware-aware choice of size and depth under a positional acceptance vector
  (:func:`sequoia_choice`).

Latency file format (JSON)::

    {"name": str, "device": str, "model": str, "assumption": bool,
     "t_target_ms": float,        # one autoregressive target forward
     "t_draft_ms": float,         # one drafting pass (all positions, all modes)
     "tree_sizes": [int, ...],    # draft nodes N, root excluded, strictly increasing, >= 1
     "verify_ms": [float, ...],   # ms per verify forward of that tree, non-decreasing
     "note": str}                 # optional

A *measured round profile* (written by :func:`mfd_theory.llm.measure.profile.measure_round_profile`, from
``mfd bench decode`` and before every ``mfd e2e`` / ``mfd eval`` run) adds optional fields, so that
one round's cost is modelled term by term, as the decoding loop times it::

     "draw_ms": float,            # one token sampled from the target at T > 0 (walk and AR step)
     "draft_modes": [int, ...],   # drafter modes K, strictly increasing
     "draft_ms": [float, ...],    # ms per drafting pass with K modes, non-decreasing in K
     "overhead": [{"method": str, "K": int,
                   "tree_sizes": [int, ...],   # strictly increasing, >= 1
                   "tree_ms": [...], "walk_ms": [...], "commit_ms": [...],
                   "draft_ms": [...]}, ...],   # (draft_ms optional)
                                  # per (method, K): tree build + mask, greedy walk, KV commit, and
                                  # the drafting pass by N (it runs after a verify of N nodes)
     "context_probe": {"contexts": [int, ...], "tree_sizes": [int, ...],
                       "verify_ms": [[float, ...] per context]}  # does context length matter?

With them, ``t_target_ms`` is the autoregressive round as the loop times it (mask, forward, pick,
commit) and ``verify_ms`` the tree verify forward as the loop runs it (hidden states kept for the
drafter). One round then costs

    t_round(method, K, N, T) = t_draft(K, N) + t_tree(method, K, N) + t_verify(N) + t_walk(N)
                               + t_commit(method, K, N) + [T > 0] (1 + E[accepted]) draw_ms

(t_draft(K, N) from the (method, K) table's ``draft_ms`` when it has one, else the by-K table)

and an autoregressive round ``t_target_ms + [T > 0] draw_ms``. Old files (without these fields)
still load: their rounds cost ``t_draft + t_verify(N)`` as before.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "BudgetChoice",
    "OverheadTable",
    "PerRoundBudget",
    "cell_speedup",
    "isotonic",
    "length_factor",
    "LatencyProfile",
    "SequoiaChoice",
    "best_fixed_budget",
    "default_profile",
    "default_profile_names",
    "load_latency_profile",
    "per_step_budget",
    "per_step_speedup",
    "predicted_speedup",
    "sequoia_choice",
    "speedup",
]

_REQUIRED = ("name", "device", "model", "assumption", "t_target_ms", "t_draft_ms", "tree_sizes", "verify_ms")


def _is_real_number(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_)) \
        and math.isfinite(x)


def _positive_time(name: str, value) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a number of milliseconds, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected a number of milliseconds, got {value!r}") from exc
    if math.isnan(v):
        raise ValueError(f"{name}: is NaN (was it timed? write a measured value, or 0 to leave it out)")
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name}: must be finite and >= 0 ms, got {value!r}")
    return v


def _ms_list(name: str, values, n: int | None = None) -> tuple[float, ...]:
    """A list of finite, non-negative milliseconds (``n`` entries when given); names the bad entry."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
        raise ValueError(f"{name}: expected a list of milliseconds, got {values!r}")
    out = tuple(_positive_time(f"{name}[{i}]", v) for i, v in enumerate(values))
    if n is not None and len(out) != n:
        raise ValueError(f"{name}: has {len(out)} entries but the table has {n} sizes (missing N values?)")
    return out


def _size_list(name: str, values, low: int = 1) -> tuple[int, ...]:
    """Strictly increasing integers >= ``low``."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__") or len(values) == 0:
        raise ValueError(f"{name}: expected a non-empty list of integers, got {values!r}")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v) \
                or int(v) != v or v < low:
            raise ValueError(f"{name}[{i}]: must be an integer >= {low}, got {v!r}")
        out.append(int(v))
    if any(b <= a for a, b in zip(out, out[1:])):
        raise ValueError(f"{name}: must be strictly increasing, got {out}")
    return tuple(out)


def _monotone(name: str, sizes, times, what: str) -> None:
    d = np.diff(np.asarray(times, dtype=np.float64))
    if np.any(d < 0):
        i = int(np.flatnonzero(d < 0)[0])
        raise ValueError(f"{name}: not monotone: {times[i]:.4g} ms at {what}={sizes[i]} but {times[i + 1]:.4g} ms at "
                         f"{what}={sizes[i + 1]} (more work cannot take less time; re-measure, or fit a "
                         "monotone table with speedup.isotonic)")


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

    def __post_init__(self):
        if not isinstance(self.method, str) or not self.method:
            raise ValueError(f"method: expected a method name, got {self.method!r}")
        if isinstance(self.K, bool) or not isinstance(self.K, (int, np.integer)) or self.K < 1:
            raise ValueError(f"K: must be an integer >= 1, got {self.K!r}")
        sizes = _size_list("tree_sizes", self.tree_sizes)
        object.__setattr__(self, "tree_sizes", sizes)
        object.__setattr__(self, "K", int(self.K))
        for f in ("tree_ms", "walk_ms", "commit_ms"):
            object.__setattr__(self, f, _ms_list(f, getattr(self, f), len(sizes)))
        if len(self.draft_ms):
            object.__setattr__(self, "draft_ms", _ms_list("draft_ms", self.draft_ms, len(sizes)))

    def at(self, n) -> dict[str, float]:
        keys = ("tree", "walk", "commit", "draft") if self.draft_ms else ("tree", "walk", "commit")
        return {k: _interp(n, self.tree_sizes, getattr(self, f"{k}_ms")) for k in keys}

    def to_dict(self) -> dict[str, Any]:
        out = {"method": self.method, "K": self.K, "tree_sizes": list(self.tree_sizes),
               "tree_ms": list(self.tree_ms), "walk_ms": list(self.walk_ms), "commit_ms": list(self.commit_ms)}
        if self.draft_ms:
            out["draft_ms"] = list(self.draft_ms)
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
    # measured round profile (optional; see the module docstring)
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
        if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
            raise ValueError(f"K: must be an integer >= 1, got {K!r}")
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
        if not _is_real_number(n) or n < 1:
            raise ValueError(f"n: a tree needs at least one node, got {n!r}")
        if not _is_real_number(accepted) or accepted < 0:
            raise ValueError(f"accepted: must be finite and >= 0, got {accepted!r}")
        table = self.overhead_for(method, K)
        over = table.at(n) if table is not None else {"tree": 0.0, "walk": 0.0, "commit": 0.0}
        if build_n is not None and table is not None:
            if not _is_real_number(build_n) or build_n < n:
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
    """Read and validate a latency profile JSON file (format in the module docstring).

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


# ------------------------------------------------------------------------------- speedup
def _check_profile(profile) -> LatencyProfile:
    if not isinstance(profile, LatencyProfile):
        raise ValueError(f"profile: expected a LatencyProfile, got {type(profile).__name__}")
    return profile


def speedup(coverage, budget, profile: LatencyProfile, draft_passes=1):
    """Predicted speedup over autoregressive decoding: (1 + C) t_target / (t_draft + t_verify(N)).

    ``coverage`` and ``budget`` broadcast (scalars or arrays); ``draft_passes`` multiplies
    t_draft (1 for a block drafter; the depth for an autoregressive drafter like Sequoia's).
    """
    profile = _check_profile(profile)
    c = np.asarray(coverage, dtype=np.float64)
    if np.any(~np.isfinite(c)) or np.any(c < 0):
        raise ValueError("coverage: must be finite and >= 0 (expected accepted tokens)")
    n = np.asarray(budget, dtype=np.float64)
    out = (1.0 + c) * profile.t_target_ms / profile.step_ms(n, draft_passes)
    return float(out) if np.ndim(out) == 0 else out


predicted_speedup = speedup


def length_factor(accepted: float, accepted_var: float, new_tokens: int) -> float:
    """The share of the long-run rate a finite generation keeps: M / (M + E[excess]).

    A prompt decodes ``new_tokens`` = M tokens after the first, in rounds of X = 1 + accepted
    tokens; the last round is cut where the M-th token is reached (the loop shortens its tree),
    so the rounds are those of the uncut process up to the first partial sum >= M, and by Wald's
    identity E[rounds] = (M + E[excess]) / E[X]. For integer X the excess over M has, for M
    large, P(excess = k) = P(X > k) / E[X], hence E[excess] = (E[X^2] - E[X]) / (2 E[X]), with
    E[X^2] = Var[X] + E[X]^2. Autoregressive decoding (X = 1) has no excess.
    """
    if not _is_real_number(accepted) or accepted < 0:
        raise ValueError(f"accepted: must be finite and >= 0, got {accepted!r}")
    if not _is_real_number(accepted_var) or accepted_var < 0:
        raise ValueError(f"accepted_var: must be finite and >= 0, got {accepted_var!r}")
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, (int, np.integer)) or new_tokens < 1:
        raise ValueError(f"new_tokens: must be an integer >= 1, got {new_tokens!r}")
    mu = 1.0 + accepted
    excess = (accepted_var + mu * mu - mu) / (2.0 * mu)
    return new_tokens / (new_tokens + excess)


def cell_speedup(accepted: float, method: str, K: int, budget, profile: LatencyProfile, temperature: float = 0.0,
                 accepted_var: float | None = None, new_tokens: int | None = None, build_budget=None) -> float:
    """Predicted speedup of one decoding cell over autoregressive decoding on the same machine:

        (1 + E[accepted]) * t_ar(T) / t_round(method, K, N, T)   [* length_factor]

    with the round's terms from ``profile`` (:meth:`LatencyProfile.round_ms`). ``accepted`` is the
    expected accepted length per round (the trees' predicted covered mass, or a measured mean);
    with ``new_tokens`` (tokens decoded per prompt after the first) and ``accepted_var`` the
    finite-length correction :func:`length_factor` is applied. ``build_budget``: see
    :meth:`LatencyProfile.round_ms` (``build_n``), for trees cut each round by a budget rule.
    """
    profile = _check_profile(profile)
    if method == "ar":
        return 1.0
    if not _is_real_number(accepted) or accepted < 0:
        raise ValueError(f"accepted: must be finite and >= 0, got {accepted!r}")
    parts = profile.round_ms(method, K, budget, temperature, accepted, build_budget)
    s = (1.0 + accepted) * profile.t_ar(temperature) / sum(parts.values())
    if new_tokens is not None:
        s *= length_factor(accepted, 0.0 if accepted_var is None else accepted_var, new_tokens)
    return float(s)


class BudgetChoice(NamedTuple):
    budget: int
    speedup: float
    speedups: np.ndarray  # [len(budgets)]: speedup at every candidate budget
    budgets: np.ndarray  # [len(budgets)]


def _coverage_curves(curves) -> np.ndarray:
    c = np.asarray(curves, dtype=np.float64)
    if c.ndim == 1:
        c = c[None]
    if c.ndim != 2 or c.shape[1] < 2:
        raise ValueError(
            f"coverage_curves: expected [n_steps, max_budget + 1] (entry N = coverage of the N-node "
            f"tree, entry 0 = 0), got shape {np.shape(curves)}"
        )
    if np.any(~np.isfinite(c)) or np.any(c < 0):
        raise ValueError("coverage_curves: must be finite and >= 0")
    return c


def _round_time(profile: LatencyProfile, n, method: str | None, K: int, temperature: float, accepted=None):
    """ms per round at tree size(s) ``n``: ``step_ms`` (draft + verify) without ``method``, the
    whole measured round (:meth:`LatencyProfile.round_ms`) with it."""
    if method is None:
        return profile.step_ms(n)
    n = np.asarray(n, dtype=np.float64)
    acc = np.zeros(n.shape) if accepted is None else np.asarray(accepted, dtype=np.float64)
    table = profile.overhead_for(method, K)
    parts = table.at(n) if table is not None else {}  # the terms of round_ms, vectorised
    draft = parts.pop("draft", profile.t_draft(K))
    draw = profile.draw_ms if temperature > 0 else 0.0
    out = np.asarray(draft + sum(parts.values()) + profile.t_verify(n) + (1.0 + acc) * draw, dtype=np.float64)
    return float(out) if out.ndim == 0 else out


def best_fixed_budget(coverage_curves, profile: LatencyProfile, budgets=None, *, method: str | None = None,
                      K: int = 1, temperature: float = 0.0) -> BudgetChoice:
    """The single budget with the highest throughput over a set of steps.

    ``coverage_curves`` [S, M + 1]: entry [s, N] is C(T_N) at step s (one step: a 1-D curve).
    Every step pays the same time at a fixed N, so throughput is the mean of (1 + C) over steps
    divided by that time. ``budgets`` restricts the candidates (default 1..M). With ``method``
    (and the drafter's ``K``, the ``temperature``) the time is the measured round's
    (:meth:`LatencyProfile.round_ms`: drafting, tree, verify, walk, commit) and the baseline the
    measured AR round, as :func:`cell_speedup` has them; without, draft + verify over t_target.
    """
    profile = _check_profile(profile)
    c = _coverage_curves(coverage_curves)  # [S, M + 1]
    M = c.shape[1] - 1
    cand = np.arange(1, M + 1) if budgets is None else np.asarray(budgets, dtype=np.int64).reshape(-1)
    if cand.size == 0 or np.any(cand < 1) or np.any(cand > M):
        raise ValueError(f"budgets: must be non-empty integers in [1, {M}]")
    cov = c[:, cand].mean(axis=0)  # [len(cand)]
    if method is None:
        s = speedup(cov, cand, profile)
    else:
        s = (1.0 + cov) * profile.t_ar(temperature) / _round_time(profile, cand, method, K, temperature, cov)
    i = int(np.argmax(s))
    return BudgetChoice(int(cand[i]), float(s[i]), np.asarray(s), cand)


def per_step_budget(node_gains, profile: LatencyProfile, max_budget: int | None = None, *,
                    method: str | None = None, K: int = 1, temperature: float = 0.0) -> int:
    """CaDDTree's per-step choice: grow the tree best-first while predicted throughput rises.

    ``node_gains`` [M]: the predicted probability mass each successive node adds (in the order
    the builder emits them; for a drafter, its own Q of each node's prefix). Starting from one
    node, node n + 1 is added while
    ``(1 + G(n + 1)) / step_ms(n + 1) > (1 + G(n)) / step_ms(n)``, G the running sum of gains.
    With ``method`` (``K``, ``temperature``) the round time is the measured round's, as in
    :func:`best_fixed_budget`.
    """
    profile = _check_profile(profile)
    g = np.asarray(node_gains, dtype=np.float64).reshape(-1)
    if g.size == 0:
        raise ValueError("node_gains: is empty")
    if np.any(~np.isfinite(g)) or np.any(g < 0):
        raise ValueError("node_gains: must be finite and >= 0")
    M = g.size if max_budget is None else min(g.size, int(max_budget))
    if M < 1:
        raise ValueError(f"max_budget: must be >= 1, got {max_budget}")
    n = np.arange(1, M + 1)
    gain = np.cumsum(g[:M])  # [M]
    thr = (1.0 + gain) / _round_time(profile, n, method, K, temperature, gain)  # [M]
    falls = np.flatnonzero(np.diff(thr) <= 0)
    return int(falls[0] + 1) if falls.size else M


class PerRoundBudget:
    """A per-round tree size for the decoding loop, as CaDDTree chooses it: given the node gains
    of this round's tree (the drafter's probability of each node's prefix, best first), the
    number of nodes n that maximises the round's predicted throughput
    ``(1 + G(n)) / t_round(n)`` over n = 1..``max_budget`` (the measured round, G the running sum
    of gains). Unlike :func:`per_step_budget`, which stops at the first n where throughput falls,
    this takes the maximum over all n: a measured latency table has flat stretches and steps, so
    throughput can fall and rise again. The round times are computed once; a round pays a
    cumulative sum and an argmax."""

    def __init__(self, profile: LatencyProfile, method: str, K: int, temperature: float, max_budget: int):
        profile = _check_profile(profile)
        if isinstance(max_budget, bool) or not isinstance(max_budget, (int, np.integer)) or max_budget < 1:
            raise ValueError(f"max_budget: must be an integer >= 1, got {max_budget!r}")
        n = np.arange(1, int(max_budget) + 1)
        self.base = np.asarray(_round_time(profile, n, method, K, temperature), dtype=np.float64)  # [M], 0 accepted
        self.draw = profile.draw_ms if temperature > 0 else 0.0
        self.max_budget = int(max_budget)

    def __call__(self, node_gains) -> int:
        g = np.asarray(node_gains, dtype=np.float64).reshape(-1)[: self.max_budget]
        if g.size == 0:
            raise ValueError("node_gains: is empty")
        gain = np.cumsum(g)  # [M]
        thr = (1.0 + gain) / (self.base[: g.size] + gain * self.draw)  # [M]
        return int(np.argmax(thr)) + 1  # the smallest best n on ties


def per_step_speedup(predicted_gains, coverage_curves, profile: LatencyProfile, max_budget=None):
    """Speedup when every step picks its own budget by :func:`per_step_budget`.

    ``predicted_gains`` [S, M]: per step, each successive node's predicted mass (the drafter's
    view); ``coverage_curves`` [S, M + 1]: the true C(T_N) under the target. Returns
    (speedup, budgets [S]) with speedup = t_target * sum_s (1 + C_s(N_s)) / sum_s step_ms(N_s).
    """
    profile = _check_profile(profile)
    c = _coverage_curves(coverage_curves)
    g = np.asarray(predicted_gains, dtype=np.float64)
    if g.ndim == 1:
        g = g[None]
    if g.shape[0] != c.shape[0] or g.shape[1] > c.shape[1] - 1:
        raise ValueError(
            f"predicted_gains: shape {g.shape} does not match coverage_curves {c.shape} "
            "(need the same steps and at most max_budget nodes)"
        )
    chosen = np.array([per_step_budget(g[s], profile, max_budget) for s in range(g.shape[0])])
    tokens = 1.0 + c[np.arange(c.shape[0]), chosen]  # [S]
    total = tokens.sum() * profile.t_target_ms / np.sum(profile.step_ms(chosen))
    return float(total), chosen


class SequoiaChoice(NamedTuple):
    budget: int
    max_depth: int
    expected_accepted: float
    speedup: float
    speedups: np.ndarray  # [max_depth + 1, max_budget + 1] (nan where no tree fits)


def sequoia_choice(acceptance, profile: LatencyProfile, max_budget: int, max_depth: int,
                   draft: str = "block") -> SequoiaChoice:
    """Sequoia's hardware-aware choice of tree size and depth.

    For every N <= ``max_budget`` and D <= ``max_depth`` the best tree's expected accepted length
    A(N, D) comes from Sequoia's program (:func:`mfd_theory.sequoia.sequoia_values`); the choice
    maximises (1 + A) t_target / (passes * t_draft + t_verify(N)), with passes = 1 for a block
    drafter (``draft="block"``) or D for an autoregressive drafter (``draft="autoregressive"``,
    Sequoia's own setting: one draft forward per level).
    """
    from mfd_theory.sequoia import sequoia_values

    profile = _check_profile(profile)
    if draft not in ("block", "autoregressive"):
        raise ValueError(f"draft: must be 'block' or 'autoregressive', got {draft!r}")
    values = sequoia_values(acceptance, max_budget, max_depth)  # [D + 1, N + 1]
    D = np.arange(values.shape[0])[:, None]
    N = np.arange(values.shape[1])[None, :]
    passes = np.ones_like(D) if draft == "block" else D
    with np.errstate(invalid="ignore"):
        s = (1.0 + values) * profile.t_target_ms / (passes * profile.t_draft_ms + profile.t_verify(np.maximum(N, 1)))
    s = np.where(np.isfinite(values) & (N >= 1) & (D >= 1), s, np.nan)  # [D + 1, N + 1]
    d, n = np.unravel_index(int(np.nanargmax(s)), s.shape)
    return SequoiaChoice(int(n), int(d), float(values[d, n]), float(s[d, n]), s)


def path_speedup(coverage, budget, depth, profile: LatencyProfile, step_cost=1.0):
    """Predicted speedup of a path-dependent drafter's tree (DARTree-style), whose drafting is
    sequential in depth: a parent's children exist only once the parent is drafted.

    The block pass drafts depth 1; each further depth costs ``step_cost`` block passes (1: a full
    drafter forward per depth, as an autoregressive drafter pays; below 1: a light correction
    head over a backbone run once, as DARTree's Domino drafter does), so
    ``draft_passes = 1 + step_cost * (depth - 1)`` in :func:`speedup`. ``depth`` is the tree's
    depth (broadcasts with ``coverage`` and ``budget``).
    """
    d = np.asarray(depth, dtype=np.float64)
    if np.any(~np.isfinite(d)) or np.any(d < 1):
        raise ValueError("depth: tree depths must be finite and >= 1")
    c = np.asarray(step_cost, dtype=np.float64)
    if np.any(~np.isfinite(c)) or np.any(c < 0):
        raise ValueError(f"step_cost: must be finite and >= 0 (block passes per extra depth), got {step_cost!r}")
    return speedup(coverage, budget, profile, draft_passes=1.0 + c * (d - 1.0))


__all__ += ["path_speedup"]


# ------------------------------------------------------------------------------- batches
BATCH_POLICIES = ("off", "per_request", "global")


@dataclasses.dataclass(frozen=True)
class BatchCell:
    """One measured batched round: ``batch_size`` requests under ``policy`` with ``nodes`` (per
    request for "per_request", the round's total for "global", 0 for "off"); ``round_ms`` the mean
    round (draft + tree + verify + walk + commit) over rounds that held all ``batch_size``
    requests; ``query_rows`` the mean padded rows per request of its verify forward."""

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
        _size_list("batch_size", [self.batch_size])
        if self.policy not in BATCH_POLICIES:
            raise ValueError(f"policy: must be one of {BATCH_POLICIES}, got {self.policy!r}")
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, (int, np.integer)) or self.nodes < 0:
            raise ValueError(f"nodes: must be an integer >= 0, got {self.nodes!r}")
        if (self.policy == "off") != (self.nodes == 0):
            raise ValueError(f"nodes: policy {self.policy!r} with nodes={self.nodes} (0 exactly when off)")
        if not _is_real_number(self.round_ms) or self.round_ms <= 0:
            raise ValueError(f"round_ms: must be finite and > 0, got {self.round_ms!r}")


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
        if not _is_real_number(batch_size) or not sizes[0] <= batch_size <= sizes[-1]:
            raise ValueError(f"batch_size: {batch_size!r} is outside the measured batch sizes {sizes}")

        def at(b):
            n = nodes * b // batch_size if policy == "global" else nodes
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
        if not _is_real_number(accepted) or accepted < 0:
            raise ValueError(f"accepted: must be finite and >= 0, got {accepted!r}")
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
    nearest measured batch size at or below B (the smallest above when none is below)."""

    def __init__(self, profile: BatchProfile, accepted: dict):
        if not isinstance(profile, BatchProfile):
            raise ValueError(f"profile: expected a BatchProfile, got {type(profile).__name__}")
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
            self.table[b] = sorted(rows, key=lambda r: -r["tokens_per_s"])

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
        nodes = row["nodes"] * batch_size // b0 if row["policy"] == "global" else row["nodes"]
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


__all__ += ["BATCH_POLICIES", "BatchCell", "BatchProfile", "BatchPlan", "batch_rows_profile"]
