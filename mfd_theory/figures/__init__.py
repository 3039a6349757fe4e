"""Plotting functions: each takes result objects (or their dicts) and returns a matplotlib Figure.

Topic modules: :mod:`.core` (coverage vs budget), :mod:`.chimeras`, :mod:`.mixture`, :mod:`.e2e`,
:mod:`.path`.
matplotlib is imported lazily inside the functions (it is an optional extra).
"""

import importlib
from pathlib import Path
from typing import NamedTuple

_TOPICS = ("core", "chimeras", "mixture", "e2e", "path", "batch")


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


class NotebookOutput(NamedTuple):
    """What a notebook draws and where (see :func:`notebook_output`)."""

    full: bool  #: True: draw the full results file; False: compute a small run
    fig_dir: Path  #: where its figures (and a small run's results) go
    note: str | None  #: "small run: ..." for a small run (printed, and stamped on each figure)


def notebook_output(results_file, small: bool = False) -> NotebookOutput:
    """Decide what a notebook draws from and where its figures go.

    With ``results_file`` present (written by the experiment's command or ``mfd reproduce``) and
    ``small`` false, the notebook draws that file into ``paper_figs/`` (beside ``results/``). Else
    (a fresh clone, or ``small`` asked for) it computes a small run and everything goes under
    ``results/notebook_small/``, so a small run never replaces a tracked figure.
    """
    results_file = Path(results_file)
    if results_file.is_file() and not small:
        return NotebookOutput(True, results_file.parent.parent / "paper_figs", None)
    why = "small size asked for" if small else f"no {results_file.parent.name}/{results_file.name}"
    return NotebookOutput(False, results_file.parent / "notebook_small",
                          f"small run: {why}, not the full results")


def save_figure(fig, path, note: str | None = None) -> str:
    """Save a figure (PNG, 150 dpi) atomically, creating the folder; returns the path.

    The file carries no version or date metadata, so the same figure gives the same bytes on
    every run (a tracked PNG changes only when what it shows changes). ``note`` (a small run's
    :attr:`NotebookOutput.note`) is written in red above the figure first.
    """
    import io

    from ..results import atomic_write_bytes

    if note:
        fig.text(0.5, 1.0, note, ha="center", va="bottom", color="tab:red", fontsize=9)
    path = Path(path)
    buf = io.BytesIO()
    fmt = path.suffix.lstrip(".") or "png"
    meta = {"Software": None} if fmt == "png" else {"Creator": None, "Producer": None, "CreationDate": None} \
        if fmt == "pdf" else None
    fig.savefig(buf, format=fmt, dpi=150, bbox_inches="tight", metadata=meta)
    atomic_write_bytes(path, buf.getvalue())
    return str(path)
