"""``mfd corpus``: its config and options are :mod:`mfd_theory.configs.pipeline.corpus`, its entry point
:func:`mfd_theory.runs.pipeline.entry.corpus_main`."""

from __future__ import annotations

from mfd_theory.configs.pipeline.corpus import CLI, CorpusConfig
from mfd_theory.runs.pipeline.entry import corpus_main as main

__all__ = ["CLI", "CorpusConfig", "main"]

if __name__ == "__main__":
    main()
