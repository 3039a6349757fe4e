"""Argument checks shared by the whole package (the core, ``llm`` and the commands).

Every check names the argument (a parameter name or a command-line flag) and says what was
expected and what came instead, in one line: ``budget: must be an integer >= 1, got 0``. It
raises ValueError, which the ``mfd`` command turns into exit status 2. Numbers: booleans are
never numbers here, and NaN or infinity is never a valid real.
"""

from __future__ import annotations

import math
import numbers
import os
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["FIGURE_SUFFIXES", "TOKENIZER_FILES", "check_choice", "check_device", "check_figure_file", "check_int",
           "check_model_dir", "check_out_dir", "check_out_file", "check_real", "is_real", "make_out_dir", "token_ids"]

#: a saved Hugging Face tokenizer holds at least one of these
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")

#: figure formats the commands write (matplotlib picks the format from the suffix)
FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


def is_real(x) -> bool:
    """A finite real number: an int (of any size) or a finite float, numpy scalars included, never a bool."""
    if isinstance(x, bool) or type(x).__name__ == "bool_" or not isinstance(x, numbers.Real):
        return False
    return isinstance(x, numbers.Integral) or math.isfinite(x)


def _bound(x) -> str:
    """A bound as a person reads it: integers whole (2**64 - 1 in full), reals in %g."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 10 ** 30 else f"{x:g}"


def _span(low, high, low_open=False, high_open=False) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{_bound(low)}, {_bound(high)}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {_bound(low)}"
    if high is not None:
        return f"{'<' if high_open else '<='} {_bound(high)}"
    return ""


def check_int(name: str, value, low: int | None = None, high: int | None = None, *,
              integral_floats: bool = False) -> int:
    """``value`` as an int in [low, high] (either bound may be None). ``integral_floats``: accept a
    float with an integer value (64.0), as a count read from a JSON file may be."""
    ok = is_real(value) and (isinstance(value, numbers.Integral) or (integral_floats and float(value).is_integer()))
    if ok:
        v = int(value)
        ok = (low is None or v >= low) and (high is None or v <= high)
    if not ok:
        span = _span(low, high)
        raise ValueError(f"{name}: must be an integer{' ' + span if span else ''}, got {value!r}")
    return v


def check_real(name: str, value, low: float | None = None, high: float | None = None, *,
               low_open: bool = False, high_open: bool = False) -> float:
    """``value`` as a finite float within the bounds (open or closed at each end)."""
    ok = is_real(value)
    if ok:
        v = float(value)
        ok = (low is None or (v > low if low_open else v >= low)) and \
             (high is None or (v < high if high_open else v <= high))
    if not ok:
        span = _span(low, high, low_open, high_open)
        raise ValueError(f"{name}: must be a finite number{' ' + span if span else ''}, got {value!r}")
    return v


def token_ids(name: str, x) -> np.ndarray:
    """``x`` as an int64 array of token ids, any shape: integers as they are, floats only when every
    value is finite and whole (2.0, not 2.5, NaN or infinity); anything else (objects, strings,
    booleans' dtype aside) is refused naming ``name`` and the dtype. Empty arrays pass. The range
    (negative ids, the vocabulary) is the caller's to check: its message names its own bound."""
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.integer) and arr.size:
        if not (np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr))):
            raise ValueError(f"{name}: expected integer token ids, got dtype {arr.dtype}")
    elif arr.dtype == object:
        raise ValueError(f"{name}: expected integer token ids, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def check_choice(name: str, value, choices):
    """``value`` if it is one of ``choices`` (compared with ==)."""
    if isinstance(value, (list, dict, set)) or value not in tuple(choices):
        raise ValueError(f"{name}: must be one of {', '.join(map(str, choices))}; got {value!r}")
    return value


def check_device(name: str, value, *, auto: bool = False) -> str:
    """A torch device name: cpu, cuda or cuda:N (and auto, CUDA when available, where ``auto``).
    Whether the device exists is for the torch side to say."""
    ok = isinstance(value, str) and (value in ("cpu", "cuda") or (auto and value == "auto")
                                     or (value.startswith("cuda:") and value[5:].isdigit()))
    if not ok:
        allowed = ("auto, " if auto else "") + "cpu, cuda or cuda:N"
        raise ValueError(f"{name}: must be {allowed}, got {value!r}")
    return value


# ------------------------------------------------------------------------------------ output paths
def check_out_dir(path: str | os.PathLike, option: str = "--out") -> Path:
    """An output directory, checked without creating it: not a file, and creatable and writable.

    The nearest folder that exists must accept a new entry: a scratch folder is made in it and
    removed again (permission bits alone say nothing for root, nor for /proc and read-only mounts).
    Nothing is left behind, so a command refused by a later check leaves no empty directory.
    """
    p = Path(path)
    if str(path) == "":
        raise ValueError(f"{option}: needs a directory")
    if p.exists() and not p.is_dir():
        raise ValueError(f"{option}: {p} exists and is not a directory")
    anc = p
    while not anc.exists():
        anc = anc.parent
    if not anc.is_dir():
        raise ValueError(f"{option}: {anc} is not a directory, so {p} cannot be created")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".mfd-write-check-", dir=anc))
    except OSError as exc:
        what = "written to" if anc == p else f"created ({anc} does not accept new entries)"
        raise ValueError(f"{option}: {p} cannot be {what}: {exc.strerror or exc}") from None
    return p


def check_model_dir(path: str | os.PathLike, option: str, tokenizer: bool = True) -> Path:
    """A local Hugging Face model directory: it exists, is a directory, holds ``config.json`` and,
    with ``tokenizer``, a saved tokenizer (ValueError naming ``option`` and what is missing).
    Nothing is downloaded here, so a name like ``Qwen/Qwen3-8B`` is refused unless such a
    folder exists."""
    d = Path(path)
    if str(path) == "":
        raise ValueError(f"{option}: needs a local model directory")
    if not d.exists():
        raise ValueError(f"{option}: {d} does not exist (give a local model directory: config, weights, tokenizer)")
    if not d.is_dir():
        raise ValueError(f"{option}: {d} is a file, not a model directory (config, weights, tokenizer)")
    if not (d / "config.json").is_file():
        raise ValueError(f"{option}: no config.json in {d}")
    if tokenizer and not any((d / f).is_file() for f in TOKENIZER_FILES):
        raise ValueError(f"{option}: {d} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                         "save it there with tokenizer.save_pretrained")
    return d


def make_out_dir(path: str | os.PathLike, option: str = "--out") -> Path:
    """Create the output directory (once every check has passed) and prove it writable."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"{option}: cannot write to {p}: {exc.strerror or exc}") from None
    return p


def check_out_file(path: str | os.PathLike, option: str) -> Path:
    """A file to write: not a directory, and its folder can be created and written."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{option}: {p} is a directory, expected a file path")
    check_out_dir(p.parent if str(p.parent) else ".", option)
    return p


def check_figure_file(path: str | os.PathLike, option: str = "--figure") -> Path:
    """A figure file to write: :func:`check_out_file` plus a suffix in :data:`FIGURE_SUFFIXES`."""
    p = Path(path)
    if p.suffix.lower() not in FIGURE_SUFFIXES:
        raise ValueError(f"{option}: {p.name} must end in {', '.join(FIGURE_SUFFIXES)} (the figure's format)")
    return check_out_file(p, option)
