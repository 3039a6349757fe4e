"""The work of the synthetic sweeps (``mfd chimera-bound``, ``chimera-share``, ``mixture-gain``,
``path-gain``, ``best-mode``): their cells, stores and summaries; and what the cell stores share."""

from __future__ import annotations

import dataclasses
from typing import Any

from mfd_theory.results import to_jsonable

__all__ = ["cell_config", "cell_key"]


def cell_key(family: str, F: int, m: int | None, seed: int) -> str:
    """The file name of one stored cell (family, number of futures, disagreements, seed)."""
    return f"{family},F={F},m={m if m is not None else 0},seed={seed}"


def cell_config(config, sweep_fields: tuple[str, ...], cell_format: int | None = None) -> dict[str, Any]:
    """What a stored cell is valid for: ``config`` without the fields that only choose which cells
    run (``sweep_fields``), and the cells' layout ``cell_format`` when given (a cell stored under
    another config or layout is recomputed)."""
    d = to_jsonable(dataclasses.asdict(config))
    out = {k: v for k, v in d.items() if k not in sweep_fields}
    return out if cell_format is None else {**out, "cell_format": cell_format}
