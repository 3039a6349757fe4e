"""Where ``mfd report`` writes: the Markdown file that holds each generated result block.

This table sits in the core, apart from :mod:`mfd_theory.report` (the blocks), so that
:mod:`mfd_theory.results` can read it without an import cycle: the ``+dirty`` mark of a result's
git sha ignores exactly the files listed here and the tracked figures (:data:`FIGURES`), since
``mfd reproduce`` rewrites them.
Paths are relative to the repository root.
"""

from __future__ import annotations

__all__ = ["BLOCK_FILES", "FIGURES", "report_files"]

README = "README.md"
RESULTS = "docs/results.md"
BENCHMARKS = "docs/benchmarks.md"
OWN_TARGET = "docs/own-target.md"
REAL = "docs/real-targets.md"

#: report block name -> the Markdown file (relative to the repository root) that holds it
BLOCK_FILES: dict[str, str] = {
    "headline": RESULTS,
    "core-table": RESULTS,
    "chimera-bound": RESULTS,
    "chimera-share": RESULTS,
    "mixture-gain": RESULTS,
    "path-gain": RESULTS,
    "best-mode": RESULTS,
    "e2e": RESULTS,
    "e2e-gains": RESULTS,
    "e2e-hf": RESULTS,
    "e2e-dartree": RESULTS,
    "e2e-replicated": RESULTS,
    "e2e-replicated-hybrid": RESULTS,
    "e2e-ceiling": RESULTS,
    "e2e-hybrid": RESULTS,
    "e2e-k8": RESULTS,
    "e2e-replicated-k8": RESULTS,
    "e2e-ceiling-k8": RESULTS,
    "e2e-k8-hybrid": RESULTS,
    "e2e-replicated-k8-hybrid": RESULTS,
    "speedup-check": RESULTS,
    "prediction-check": RESULTS,
    "prediction-check-hybrid": RESULTS,
    "natural": RESULTS,
    "real": REAL,
    "real-default": REAL,
    "real-drafters": REAL,
    "real-headline": REAL,
    "real-recipe": REAL,
    "real-c3": REAL,
    "real-scaling": REAL,
    "real-shipped": REAL,
    "bench-trees": BENCHMARKS,
    "bench-fit": BENCHMARKS,
    "bench-decode": BENCHMARKS,
    "bench-draft-micro": BENCHMARKS,
    "bench-draft-tiny": BENCHMARKS,
    "bench-decode-hybrid": BENCHMARKS,
    "bench-batch": BENCHMARKS,
    "bench-batch-hybrid": BENCHMARKS,
    "own-target": OWN_TARGET,
    "front": README,
}


#: the folder of the tracked figures: the runs of ``mfd reproduce`` draw into it as they finish, and
#: ``mfd report`` redraws it from the records at the end
FIGURES = "paper_figs"


def report_files() -> tuple[str, ...]:
    """Every file ``mfd report`` rewrites by default, each once, in a fixed order."""
    return tuple(dict.fromkeys(BLOCK_FILES.values()))
