"""``mfd distill``: its config and options are :mod:`mfd_theory.configs.pipeline.distill`, its entry point
:func:`mfd_theory.runs.pipeline.entry.distill_main` (shared with the drivers that run it as a step)."""

from __future__ import annotations

from mfd_theory.configs.pipeline.distill import CLI, DistillConfig
from mfd_theory.runs.pipeline.entry import distill_main as main

__all__ = ["CLI", "DistillConfig", "main"]

if __name__ == "__main__":
    main()
