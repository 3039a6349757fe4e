"""The old names of ``mfd distill``, ``mfd train-drafter`` and ``mfd eval``, kept for callers not yet
moved to the commands' own modules (:mod:`~mfd_theory.commands.distill`,
:mod:`~mfd_theory.commands.train_drafter`, :mod:`~mfd_theory.commands.eval` and their ``_run``
halves). Nothing is defined here; delete this module once nothing imports it.
"""

from __future__ import annotations

from mfd_theory.commands.distill import main as distill_main
from mfd_theory.commands.distill_run import load_target
from mfd_theory.commands.eval import main as eval_main
from mfd_theory.commands.eval_run import write_figures as _figures
from mfd_theory.commands.train_drafter import main as train_drafter_main

__all__ = ["distill_main", "eval_main", "load_target", "train_drafter_main", "_figures"]
