"""The drafters the repository ships for its real Qwen target, found by name and hash-checked.

One release at a time lives in the repository's ``drafters/`` folder (``$MFD_DRAFTERS_DIR``
overrides it): a directory per drafter in DFlash's checkpoint layout (``config.json``,
``model.safetensors`` in bfloat16, ``target_fingerprint.json``) and one ``RELEASE.json`` holding
each drafter's provenance (data hash, training config, git sha, numerics, host, training time, its
measured tau) and the sha256 of every file. ``mfd drafter pack`` writes them (a retrain replaces
the files), ``make drafters`` retrains the whole release from a clean clone, and every command that
takes a drafter directory also takes a shipped name (:func:`shipped_drafter`).

Torch-free: a command's config resolves a name before any model work; the checkpoint is read by
:func:`mfd_theory.llm.models.drafter.load_drafter`.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

from mfd_theory.shipped import file_sha256

__all__ = ["FORMAT", "MAX_DRAFTER_BYTES", "MAX_RELEASE_BYTES", "RELEASE_FILE", "drafters_dir", "file_sha256",
           "is_shipped_drafter", "near_drafter_names", "read_release", "release_bytes", "shipped_drafter", "shipped_drafter_names",
           "verify_drafter"]

FORMAT = "mfd-drafter-release-v1"
RELEASE_FILE = "RELEASE.json"
#: the caps of one shipped drafter and of the whole release (bytes of its files)
MAX_DRAFTER_BYTES = 40_000_000
MAX_RELEASE_BYTES = 100_000_000


def drafters_dir() -> Path:
    """Where the release lives: ``$MFD_DRAFTERS_DIR``, else ``drafters/`` beside the package (the
    repository's folder; an editable install finds it there)."""
    env = os.environ.get("MFD_DRAFTERS_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "drafters"


def read_release(directory: Path | None = None) -> dict:
    """The release's ``RELEASE.json`` (an empty release when there is none); ValueError when it is
    not a release file this package writes."""
    path = Path(directory or drafters_dir()) / RELEASE_FILE
    if not path.is_file():
        return {"format": FORMAT, "drafters": {}}
    try:
        rel = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not readable as JSON: {exc}") from exc
    if rel.get("format") != FORMAT or not isinstance(rel.get("drafters"), dict):
        raise ValueError(f"{path}: not a {FORMAT} file")
    return rel


def shipped_drafter_names(directory: Path | None = None) -> list[str]:
    return sorted(read_release(directory)["drafters"])


def is_shipped_drafter(name, directory: Path | None = None) -> bool:
    """True when ``name`` is a shipped drafter's name (not a path: no separator)."""
    if not isinstance(name, str) or not name or os.sep in name or "/" in name:
        return False
    try:
        return name in read_release(directory)["drafters"]
    except ValueError:
        return False


def near_drafter_names(name: str, directory: Path | None = None) -> list[str]:
    """The shipped names a mistyped ``name`` (no path separator) is close to."""
    if not isinstance(name, str) or not name or os.sep in name or "/" in name:
        return []
    try:
        return difflib.get_close_matches(name, shipped_drafter_names(directory), n=2, cutoff=0.6)
    except ValueError:
        return []


def release_bytes(entry: dict) -> int:
    return sum(int(f["bytes"]) for f in entry["files"].values())


def verify_drafter(name: str, directory: Path | None = None) -> list[str]:
    """The problems of shipped drafter ``name``'s files against the release (missing, size or sha256
    differing); empty when every file matches."""
    root = Path(directory or drafters_dir())
    entry = read_release(root)["drafters"][name]
    problems = []
    for fname, want in sorted(entry["files"].items()):
        path = root / name / fname
        if not path.is_file():
            problems.append(f"{fname} is missing")
        elif path.stat().st_size != int(want["bytes"]):
            problems.append(f"{fname} has {path.stat().st_size} bytes, the release says {want['bytes']}")
        elif file_sha256(path) != want["sha256"]:
            problems.append(f"{fname}'s sha256 differs from the release's")
    return problems


def shipped_drafter(name: str, flag: str = "--drafter", directory: Path | None = None) -> Path:
    """The checkpoint directory of shipped drafter ``name``, its files checked against the release's
    sha256; ValueError naming ``flag`` for an unknown name (with the near ones) or a damaged file."""
    root = Path(directory or drafters_dir())
    names = shipped_drafter_names(root)
    if name not in names:
        near = near_drafter_names(name, root)
        hint = f"; did you mean {' or '.join(near)}?" if near else ""
        listing = ", ".join(names) if names else f"none in {root}"
        raise ValueError(f"{flag}: {name} is neither a directory nor a shipped drafter (mfd drafter list: "
                         f"{listing}){hint}")
    problems = verify_drafter(name, root)
    if problems:
        raise ValueError(f"{flag}: shipped drafter {name} in {root} does not match its release: "
                         f"{'; '.join(problems)} (make drafters rebuilds the release; git checkout drafters/ "
                         "restores it)")
    return root / name
