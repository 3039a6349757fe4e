"""The target's own answers to prompt files (self-distillation data for a drafter).

``mfd distill --target DIR --prompts FILE.jsonl ... --out DATA`` answers every prompt with the
target (``--temperature 1`` keeps all of its futures) and writes the answers in shards plus
``manifest.json``; a rerun resumes, shard by shard. It runs on one process or under
``torchrun --nproc_per_node P -m mfd_theory.cli distill ...`` with the same bytes. This module holds its config (no torch import); the input checks and the entry point are in
:mod:`mfd_theory.runs.pipeline.entry`, the work in
:mod:`mfd_theory.runs.pipeline.distill`. The three commands for your own target are described in
docs/own-target.md.
"""

from __future__ import annotations

import dataclasses

from mfd_theory.configs.options import Command, opt
from mfd_theory.configs.pipeline.local_target import PROMPT_FORMAT, TargetOptions

__all__ = ["DistillConfig", "CLI"]


@dataclasses.dataclass(frozen=True)
class DistillConfig(TargetOptions):
    prompts: tuple[str, ...] = opt((), f"JSONL prompt files: {PROMPT_FORMAT}", required=True, split=False, empty=True)
    max_new_tokens: int = opt(256, "answer length cap per turn", ge=1)
    temperature: float = opt(1.0, "sampling temperature (1 keeps all the target's futures; 0 is greedy)", ge=0)
    enable_thinking: bool = opt(False, "chat template with thinking enabled")
    shard_size: int = opt(64, "prompts per shard (the unit of resuming)", ge=1)
    batch: int = opt(16, "sequences generated at once, turn by turn within a shard (the data do not depend on it, "
                         "up to float round-off)", ge=1)
    top_k: int = opt(0, "sample from the k likeliest tokens only (0: all)", ge=0)
    top_p: float = opt(1.0, "sample from the smallest set of likeliest tokens holding this mass (1: all)", gt=0, le=1)


CLI = Command("distill", __name__, DistillConfig, __doc__, out=None,
              out_help="output directory (shards + manifest.json)", models=True, examples=(
    "mfd distill --target /models/Qwen3-8B --prompts train.jsonl --out data/qwen3-8b --device cuda  # on a GPU",
    "mfd distill --target target --prompts a.jsonl b.jsonl --out data --max-new-tokens 40 --temperature 1  # two files",
    "torchrun --standalone --nproc_per_node 8 -m mfd_theory.cli distill --target /models/Qwen3-8B --prompts "
    "train.jsonl --out data/qwen3-8b --device cuda  # 8 GPUs, the same data",
))
