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
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "profile") -> "LatencyProfile":
        if not isinstance(d, dict):
            raise ValueError(f"{source}: expected a JSON object, got {type(d).__name__}")
        missing = [k for k in _REQUIRED if k not in d]
        if missing:
            raise ValueError(f"{source}: lacks the fields {missing}")
        return cls(
            name=d["name"], device=d["device"], model=d["model"], assumption=d["assumption"],
            t_target_ms=d["t_target_ms"], t_draft_ms=d["t_draft_ms"],
            tree_sizes=tuple(d["tree_sizes"]) if isinstance(d["tree_sizes"], list) else d["tree_sizes"],
            verify_ms=tuple(d["verify_ms"]) if isinstance(d["verify_ms"], list) else d["verify_ms"],
            note=d.get("note", ""),
        )

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


def best_fixed_budget(coverage_curves, profile: LatencyProfile, budgets=None) -> BudgetChoice:
    """The single budget with the highest throughput over a set of steps.

    ``coverage_curves`` [S, M + 1]: entry [s, N] is C(T_N) at step s (one step: a 1-D curve).
    Every step pays the same time at a fixed N, so throughput is the mean of (1 + C) over steps
    divided by that time. ``budgets`` restricts the candidates (default 1..M).
    """
    profile = _check_profile(profile)
    c = _coverage_curves(coverage_curves)  # [S, M + 1]
    M = c.shape[1] - 1
    cand = np.arange(1, M + 1) if budgets is None else np.asarray(budgets, dtype=np.int64).reshape(-1)
    if cand.size == 0 or np.any(cand < 1) or np.any(cand > M):
        raise ValueError(f"budgets: must be non-empty integers in [1, {M}]")
    s = speedup(c[:, cand].mean(axis=0), cand, profile)  # [len(cand)]
    i = int(np.argmax(s))
    return BudgetChoice(int(cand[i]), float(s[i]), np.asarray(s), cand)


def per_step_budget(node_gains, profile: LatencyProfile, max_budget: int | None = None) -> int:
    """CaDDTree's per-step choice: grow the tree best-first while predicted throughput rises.

    ``node_gains`` [M]: the predicted probability mass each successive node adds (in the order
    the builder emits them; for a drafter, its own Q of each node's prefix). Starting from one
    node, node n + 1 is added while
    ``(1 + G(n + 1)) / step_ms(n + 1) > (1 + G(n)) / step_ms(n)``, G the running sum of gains.
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
    thr = (1.0 + np.cumsum(g[:M])) / profile.step_ms(n)  # [M]
    falls = np.flatnonzero(np.diff(thr) <= 0)
    return int(falls[0] + 1) if falls.size else M


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
