"""Result objects with provenance, saved atomically as JSON.

Every result file carries its config, seed, the git sha of the code that made it and the versions
of the packages that matter. Files are written to a temporary name in the same directory and then
renamed, so an interrupted run never leaves a half-written file behind. Sweeps store one file per
cell (:class:`ResultStore`) and skip cells that are already on disk, so a long sweep resumes.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mfd_theory.numerics import numerics_provenance

from mfd_theory.report_files import FIGURES, report_files

__all__ = [
    "Result",
    "ResultStore",
    "atomic_write_bytes",
    "atomic_write_text",
    "git_sha",
    "package_versions",
    "provenance",
    "to_jsonable",
    "wrote",
]

_UMASK = os.umask(0)
os.umask(_UMASK)

_PACKAGES = ("mfd_theory", "numpy", "scipy", "numba", "torch", "transformers", "matplotlib")


def git_sha(root: str | os.PathLike | None = None) -> str | None:
    """The commit of the working tree at ``root`` (default: the one this package was loaded from),
    with '+dirty' when a tracked file differs from that commit.

    The files ``mfd report`` writes (:func:`mfd_theory.report_files.report_files`: the README and
    the result pages under ``docs/``) and the tracked figures (``paper_figs/``) are left out of the
    dirty check, and only they: ``mfd reproduce`` rewrites them (each theory run draws its figures
    as it finishes, the report redraws them all at the end), so counting them would mark every
    later run '+dirty', and its closing ``mfd report --record`` would refuse the whole run (as it
    did a clean clone's on 2026-12-07, every result after the first figure-drawing step).
    Untracked files never count.
    """
    root = Path(__file__).resolve().parent.parent if root is None else Path(root)
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        if sha.returncode != 0:
            return None
        # the whole repository (":/" is its top), minus the report's files (relative to root)
        spec = [":/"] + [f":(exclude){name}" for name in (*report_files(), FIGURES)]
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", *spec],
            cwd=root, capture_output=True, text=True, timeout=10,
        )
        if dirty.returncode != 0:
            return None
        return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    out["python"] = platform.python_version()
    return out


def provenance() -> dict[str, Any]:
    return {
        "git_sha": git_sha(),
        "versions": package_versions(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "numerics": numerics_provenance(),
    }


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays, dataclasses, paths and tuples into plain JSON types.

    A missing value (NaN) becomes ``None`` (JSON ``null``), so a column read by pandas or any other
    JSON reader stays numeric. Infinities have no JSON number either: they are stored as the
    strings ``"inf"`` / ``"-inf"`` (rare in results; a value that can be infinite says so).
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        if np.isnan(f):
            return None
        if np.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _atomic_write(path: Path, payload: bytes) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"path: cannot create directory {path.parent}: {exc}") from exc
    if not os.access(path.parent, os.W_OK):
        raise ValueError(f"path: directory {path.parent} is not writable")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the usual mode
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_bytes(path: str | os.PathLike, payload: bytes) -> None:
    """Write ``payload`` to ``path`` via a temporary file and an atomic rename."""
    _atomic_write(Path(path), payload)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    _atomic_write(Path(path), text.encode("utf-8"))


def wrote(path: str | os.PathLike, replaced: bool = False) -> None:
    """Say that ``path`` was written (and whether it replaced an older file)."""
    print(f"wrote {path}" + (" (replaced)" if replaced else ""), flush=True)


@dataclasses.dataclass
class Result:
    """A named result: raw data plus the config and seed that produced it, with provenance.

    ``data`` holds raw counts and measurements (JSON-able after :func:`to_jsonable`); derived
    metrics are computed from it by whoever reads the file. Tables in ``data`` are lists of flat
    rows; a quantity measured at several budgets takes one row per budget (long format), not a
    list inside a row. ``seed``: the random seed, or for a sweep over seeds the list of seeds its
    cells ran with (each cell's own file records its seed); None only where nothing is random.
    """

    name: str
    config: dict[str, Any]
    data: dict[str, Any]
    seed: int | list[int] | None = None
    provenance: dict[str, Any] = dataclasses.field(default_factory=provenance)

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(dataclasses.asdict(self))

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        # allow_nan=False: the file is standard JSON (NaN was turned into null above)
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1, sort_keys=False, allow_nan=False) + "\n")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Result":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"path: no result file at {path}")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"path: {path} is not valid JSON ({exc})") from exc
        missing = {"name", "config", "data"} - set(raw)
        if missing:
            raise ValueError(f"path: {path} lacks the result fields {sorted(missing)}")
        return cls(
            name=raw["name"],
            config=raw["config"],
            data=raw["data"],
            seed=raw.get("seed"),
            provenance=raw.get("provenance", {}),
        )


_KEY_RE = re.compile(r"^[A-Za-z0-9_.=,+-]+$")


class ResultStore:
    """One JSON file per sweep cell under ``directory``; cells already saved are skipped.

    >>> store = ResultStore("results/chimera_share")           # doctest: +SKIP
    >>> res = store.get_or_compute("fam=a,N=64", lambda: Result(...))  # doctest: +SKIP
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        if not _KEY_RE.match(key):
            raise ValueError(f"key: {key!r} may only contain letters, digits and _.=,+-")
        return self.directory / f"{key}.json"

    def has(self, key: str) -> bool:
        return self.path(key).is_file()

    def save(self, key: str, result: Result) -> Path:
        return result.save(self.path(key))

    def load(self, key: str) -> Result:
        return Result.load(self.path(key))

    def keys(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.json"))

    def get_or_compute(self, key: str, compute: Callable[[], Result]) -> Result:
        """Load the cell if it is saved (a resumed sweep), otherwise compute and save it."""
        if self.has(key):
            try:
                return self.load(key)
            except ValueError:
                pass  # a corrupt cell (should not happen with atomic writes) is recomputed
        result = compute()
        self.save(key, result)
        return result
