"""``mfd train-drafter``: its config and options are :mod:`mfd_theory.configs.pipeline.train_drafter`, its entry point
:func:`mfd_theory.runs.pipeline.entry.train_drafter_main` (shared with the drivers that run it as a step)."""

from __future__ import annotations

from mfd_theory.configs.pipeline.train_drafter import CLI, TrainDrafterConfig
from mfd_theory.runs.pipeline.entry import train_drafter_main as main

__all__ = ["CLI", "TrainDrafterConfig", "main"]

if __name__ == "__main__":
    main()
