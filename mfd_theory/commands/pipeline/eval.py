"""``mfd eval``: its config and options are :mod:`mfd_theory.configs.pipeline.eval`, its entry point
:func:`mfd_theory.runs.pipeline.entry.eval_main` (shared with the drivers that run it as a step)."""

from __future__ import annotations

from mfd_theory.configs.pipeline.eval import CLI, EvalConfig
from mfd_theory.runs.pipeline.entry import eval_main as main

__all__ = ["CLI", "EvalConfig", "main"]

if __name__ == "__main__":
    main()
