"""``mfd tau``: its config and options are :mod:`mfd_theory.configs.pipeline.tau`, its entry point
:func:`mfd_theory.runs.pipeline.entry.tau_main`."""

from __future__ import annotations

from mfd_theory.configs.pipeline.tau import CLI, TauConfig
from mfd_theory.runs.pipeline.entry import tau_main as main

__all__ = ["CLI", "TauConfig", "main"]

if __name__ == "__main__":
    main()
