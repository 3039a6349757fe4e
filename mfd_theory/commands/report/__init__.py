"""``mfd report``: rewrite the result blocks of docs/ from ``results/*.json`` (:mod:`.command`);
the blocks themselves are the library :mod:`mfd_theory.report`."""

from mfd_theory.commands.report.command import main

__all__ = ["main"]
