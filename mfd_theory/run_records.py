"""What a run made, by its bits: the sha256 of every checkpoint and data file each step of a
resumable run wrote, and the comparison of two runs' records that names the first step whose bits
differ.

A step's record is ``{relative path: sha256}`` over the files under its output directory whose
names end in :data:`RECORDED_SUFFIXES` (checkpoints, tensors, token files): the files that hold
what the step computed. JSON files are left out: they carry wall times, dates and paths, which
differ between any two runs. A step's digest is the sha256 of its sorted ``path sha256`` lines, so
two steps with the same digest wrote the same bytes.

:func:`compare_records` walks the steps in the order the first run ran them; the first step whose
files differ is where two runs part (every later step reads what it wrote, so later differences
follow from it and are listed, not blamed).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

__all__ = ["RECORDED_SUFFIXES", "file_digests", "step_digest", "read_records", "compare_records"]

#: the files whose bits a record keeps: checkpoints, tensors and token files
RECORDED_SUFFIXES = (".safetensors", ".bin", ".pt", ".npy", ".npz", ".jsonl")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_digests(output: str | os.PathLike) -> dict[str, str]:
    """``{path relative to output: sha256}`` of every recorded file under ``output`` (a directory, or
    one file), in sorted order; ``{}`` when nothing is there."""
    root = Path(output)
    if root.is_file():
        return {root.name: _sha256(root)} if root.name.endswith(RECORDED_SUFFIXES) else {}
    if not root.is_dir():
        return {}
    found = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(RECORDED_SUFFIXES)
                   and not any(part.startswith(".") for part in p.relative_to(root).parts))
    return {p.relative_to(root).as_posix(): _sha256(p) for p in found}


def step_digest(files: dict[str, str]) -> str:
    """One sha256 over a step's ``{path: sha256}`` (order-free)."""
    return hashlib.sha256("".join(f"{k} {v}\n" for k, v in sorted(files.items())).encode()).hexdigest()


def read_records(run: str | os.PathLike) -> dict[str, dict[str, str]]:
    """The step records of a run: ``{step name: {path: sha256}}`` in the order the steps ran, from
    ``run`` (a run's output directory holding ``steps.json``, or that file itself). Raises
    ``ValueError`` naming the argument when there is no such file or it records no files."""
    path = Path(run)
    if path.is_dir():
        path = path / "steps.json"
    if not path.is_file():
        raise ValueError(f"run: no steps.json at {path} (give a run's output directory or its steps.json)")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"run: {path} is not JSON ({exc})") from None
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, dict):
        raise ValueError(f"run: {path} has no 'steps' table")
    out = {name: dict(s["files"]) for name, s in steps.items()
           if isinstance(s, dict) and s.get("done") and isinstance(s.get("files"), dict)}
    if not out:
        raise ValueError(f"run: {path} records no file hashes (a run made before step records were kept; rerun it)")
    return out


def compare_records(a: dict[str, dict[str, str]], b: dict[str, dict[str, str]]) -> dict:
    """Compare two runs' step records (as :func:`read_records` gives them).

    Returns ``{"steps": [...], "first_difference": name or None, "identical": bool}``; each step
    (in ``a``'s order, then ``b``'s steps that ``a`` lacks) is ``{"step", "status", "files"}`` with
    status "same" (every file of both, the same bytes), "differs" (``files``: the paths whose bytes
    or presence differ), "only in a" or "only in b"."""
    steps, first = [], None
    for name in [*a, *(n for n in b if n not in a)]:
        if name not in b or name not in a:
            entry = {"step": name, "status": "only in a" if name in a else "only in b", "files": []}
        else:
            fa, fb = a[name], b[name]
            diff = sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))
            entry = {"step": name, "status": "differs" if diff else "same", "files": diff}
        if entry["status"] != "same" and first is None:
            first = name
        steps.append(entry)
    return {"steps": steps, "first_difference": first, "identical": first is None}
