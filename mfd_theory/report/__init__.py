"""The report: every result block of docs/ made from ``results/*.json`` (the command is
:mod:`mfd_theory.commands.report`).

One module per topic writes the blocks (theory, e2e, checks, bench, natural, own_target,
headline); each block is ``block(results: Results) -> str`` and :data:`BLOCKS` maps its name to
its files and function. :mod:`.markers` rewrites a page's blocks.
"""

from __future__ import annotations

from pathlib import Path

from mfd_theory.report._text import value_with_spread
from mfd_theory.report.inputs import Results
from mfd_theory.report.markers import check_layout, render
from mfd_theory.report.own_target import own_target_summary
from mfd_theory.report.registry import BLOCKS, Block, block_inputs
from mfd_theory.formatting import speed_gain_text, tau_gain_text
from mfd_theory.report_files import BLOCK_FILES
from mfd_theory.results import Result

__all__ = ["BLOCKS", "BLOCK_FILES", "Block", "Results", "bench_batch_block", "block_inputs", "block_text",
           "check_layout", "natural_block", "own_target_block", "own_target_summary",
           "render", "speed_gain_text", "speedup_check_block", "tau_gain_text", "value_with_spread"]


def block_text(name: str, res: Result, source: str | Path | None = None) -> str:
    """Block ``name`` made from one result already in memory; ``source``: the file it was read
    from, for a block that also reads the files beside it (own-target)."""
    return BLOCKS[name].make(Results.holding(res, source))


# One-result shorthands of block_text, for the commands and tests that hold a loaded result.


def natural_block(res: Result) -> str:
    return block_text("natural", res)


def own_target_block(res: Result, source: str | Path | None = None) -> str:
    return block_text("own-target", res, source)


def speedup_check_block(res: Result) -> str:
    return block_text("speedup-check", res)


def bench_batch_block(res: Result) -> str:
    return block_text("bench-batch", res)
