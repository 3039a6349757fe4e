"""Plotting functions: each takes result objects (or their dicts) and returns a matplotlib Figure.

Topic modules: :mod:`.core` (coverage vs budget), :mod:`.chimeras`, :mod:`.mixture`, :mod:`.e2e`,
:mod:`.path`.
matplotlib is imported lazily inside the functions (it is an optional extra).
"""

import importlib

_TOPICS = ("core", "chimeras", "mixture", "e2e", "path")


def __getattr__(name):
    for topic in _TOPICS:
        try:
            mod = importlib.import_module(f"{__name__}.{topic}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{topic}":
                continue
            raise
        if hasattr(mod, name):
            return getattr(mod, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def save_figure(fig, path) -> str:
    """Save a figure (PNG, 150 dpi) atomically, creating the folder; returns the path.

    The file carries no version or date metadata, so the same figure gives the same bytes on
    every run (a tracked PNG changes only when what it shows changes).
    """
    import io
    from pathlib import Path

    from ..results import atomic_write_bytes

    path = Path(path)
    buf = io.BytesIO()
    fmt = path.suffix.lstrip(".") or "png"
    meta = {"Software": None} if fmt == "png" else {"Creator": None, "Producer": None, "CreationDate": None} \
        if fmt == "pdf" else None
    fig.savefig(buf, format=fmt, dpi=150, bbox_inches="tight", metadata=meta)
    atomic_write_bytes(path, buf.getvalue())
    return str(path)
