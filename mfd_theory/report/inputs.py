"""What every report block is made from: :class:`Results`, the results files it reads.

A block is ``block(results: Results) -> str``. ``results.main`` is the block's own results file
(the first its :class:`~mfd_theory.report.registry.Block` names) and ``results[name]``
any file under the results directory; each file is loaded once per render and shared by the blocks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from mfd_theory.results import Result

__all__ = ["Results"]


class Results:
    """The results files under ``directory`` that one block reads: ``files`` (the first is its
    main file), loaded on first use into ``loaded`` (name -> :class:`Result`), which the blocks
    of one render share. ``directory`` None: only what ``loaded`` already holds can be read."""

    def __init__(self, directory: str | Path | None, files: Sequence[str] = (),
                 loaded: dict[str, Result] | None = None):
        self.directory = None if directory is None else Path(directory)
        self.files = tuple(files)
        self.loaded = {} if loaded is None else loaded

    @classmethod
    def holding(cls, res: Result, source: str | Path | None = None) -> Results:
        """One result already in memory, as its block's main file; ``source``: the file it was
        read from, so that a block can read the files its command wrote beside it."""
        if source is None:
            return cls(None, ("result.json",), {"result.json": res})
        source = Path(source)
        return cls(source.parent, (source.name,), {source.name: res})

    def reading(self, files: Sequence[str]) -> Results:
        """The same directory and loaded files, for a block that reads ``files``."""
        return Results(self.directory, files, self.loaded)

    def path(self, name: str) -> Path | None:
        """Where the file ``name`` lies (None for results held in memory only)."""
        return None if self.directory is None else self.directory / name

    def missing(self) -> list[str]:
        """The block's files that are neither loaded nor on disk."""
        return [f for f in self.files
                if f not in self.loaded and (self.directory is None or not (self.directory / f).is_file())]

    def __getitem__(self, name: str) -> Result:
        if name not in self.loaded:
            if self.directory is None:
                raise KeyError(f"{name}: not among the results held in memory ({sorted(self.loaded)})")
            self.loaded[name] = Result.load(self.directory / name)
        return self.loaded[name]

    @property
    def main(self) -> Result:
        """The block's own results file."""
        return self[self.files[0]]

    @property
    def main_path(self) -> Path | None:
        """Where the block's own results file lies (None when it is held in memory only)."""
        return self.path(self.files[0])
