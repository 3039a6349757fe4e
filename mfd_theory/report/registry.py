"""Every report block by name: :data:`BLOCKS` maps a block's name to the results files it is made
from and the function that writes it. Which Markdown file holds each block is
:data:`mfd_theory.report_files.BLOCK_FILES`; the marker syntax is in :mod:`.markers`.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from mfd_theory.report import (bench, checks, e2e, front, headline, natural, own_target, real, real_drafters,
                               round_chimeras, scaling, shipped, theory)
from mfd_theory.report.inputs import Results

__all__ = ["BLOCKS", "Block", "block_inputs"]


class Block(NamedTuple):
    """A report block: made by ``make`` from its results file ``file`` (relative to the results
    directory) and the files in ``also``; it is skipped unless every one of them exists."""

    file: str
    make: Callable[[Results], str]
    also: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        return (self.file, *self.also)


#: block name -> its files and its function; a block's function is named after the block, and the
#: ``-hybrid`` / preset variants reuse one function on another run's file
BLOCKS: dict[str, Block] = {
    "core-table": Block("core_table.json", theory.core_table),
    "chimera-bound": Block("chimera_bound.json", theory.chimera_bound),
    "chimera-share": Block("chimera_share.json", theory.chimera_share),
    "mixture-gain": Block("mixture_gain.json", theory.mixture_gain),
    "path-gain": Block("path_gain.json", theory.path_gain),
    "best-mode": Block("best_mode.json", theory.best_mode),
    "e2e": Block("end_to_end.json", e2e.e2e),
    "e2e-gains": Block("end_to_end.json", e2e.e2e_gains),
    "e2e-hf": Block("end_to_end.json", e2e.e2e_hf),
    "e2e-dartree": Block("end_to_end.json", e2e.e2e_dartree),
    "e2e-replicated": Block("end_to_end.json", e2e.e2e_replicated),
    "e2e-replicated-hybrid": Block("hybrid/end_to_end.json", e2e.e2e_replicated),
    "e2e-ceiling": Block("end_to_end.json", e2e.e2e_ceiling),
    "speedup-check": Block("end_to_end.json", checks.speedup_check),
    "prediction-check": Block("end_to_end.json", checks.prediction_check),
    "prediction-check-hybrid": Block("hybrid/end_to_end.json", checks.prediction_check),
    "bench-trees": Block("bench_trees.json", bench.bench_trees),
    "bench-fit": Block("bench_fit.json", bench.bench_fit),
    "bench-decode": Block("bench_decode.json", bench.bench_decode),
    "own-target": Block("own_target/eval/eval.json", own_target.own_target),
    "bench-decode-hybrid": Block("bench_decode_qwen3_5.json", bench.bench_decode),
    "bench-draft-micro": Block("bench_draft_micro.json", bench.bench_draft),
    "bench-draft-tiny": Block("bench_draft_tiny.json", bench.bench_draft),
    "e2e-hybrid": Block("hybrid/end_to_end.json", e2e.e2e_hybrid),
    # K = 8 (the released drafters' K), a run of its own beside the default one (experiments/e2e/k8.toml)
    "e2e-k8": Block("e2e_k8/end_to_end.json", e2e.e2e_hybrid),
    "e2e-replicated-k8": Block("e2e_k8/end_to_end.json", e2e.e2e_replicated),
    "e2e-ceiling-k8": Block("e2e_k8/end_to_end.json", e2e.e2e_ceiling),
    "e2e-k8-hybrid": Block("hybrid_k8/end_to_end.json", e2e.e2e_hybrid),
    "e2e-replicated-k8-hybrid": Block("hybrid_k8/end_to_end.json", e2e.e2e_replicated),
    "natural": Block("natural/natural.json", natural.natural),
    "real": Block("real/real.json", real.real),
    # the default preset (experiments/real/default.toml): the full lossless check, 12 prompts per domain
    "real-default": Block("real-default/real.json", real.real),
    "real-drafters": Block("real-drafters/real_drafters.json", real_drafters.real_drafters),
    # the real target's questions, one verdict each (mfd real-drafters, with mfd real's check when present)
    "real-headline": Block("real-drafters/real_drafters.json", real_drafters.real_headline),
    # the recipe comparison (experiments/real_drafters/recipe.toml)
    "real-recipe": Block("real-recipe/real_recipe.json", real_drafters.real_recipe),
    # C3 over decoding rounds (mfd tau --preset c3): the shipped drafters on the first 8 HumanEval problems
    "real-c3": Block("c3/he8-s16/tau.json", round_chimeras.real_c3),
    # the data-scaling curve (mfd scaling): tau against training tokens, MFD's gain at each size
    "real-scaling": Block("scaling/scaling.json", scaling.real_scaling),
    "bench-batch": Block("bench_batch.json", bench.bench_batch),
    "bench-batch-hybrid": Block("bench_batch_qwen3_5.json", bench.bench_batch),
    "headline": Block("end_to_end.json", headline.headline, also=headline.HEADLINE_FILES),
    # the shipped drafters on all of HumanEval (mfd tau --preset reproduce, make reproduce's drafter step)
    "real-shipped": Block("shipped/tau.json", shipped.real_shipped),
    # the front page's few rows, one per claim (README.md): what make reproduce's three runs found
    "front": Block("shipped/tau.json", front.front, also=front.FRONT_FILES),
}


def block_inputs(name: str) -> tuple[str, ...]:
    """The results files (relative to the results directory) that block ``name`` is made from."""
    return BLOCKS[name].files
