"""A teacher-forced, self-distilled training corpus from the Python code installed on this machine.

``mfd corpus --target DIR --out CORPUS`` reads the standard library and site-packages, drops
copies, tiny, huge and generated files and every file that shares a 12-token span with HumanEval,
splits the rest by content hash into train / calib / eval, and writes the token ids (uint32
shards), the target's top-k next-token ids and log-probabilities at every position of fixed-length
windows (one forward a window, no generation), chat-formatted instructions made from the same
functions, and manifest.json with the corpus hash. A rerun resumes shard by shard; under
``torchrun --nproc_per_node P -m mfd_theory.cli corpus ...`` the ranks share the work and write the
same bytes. This module holds its config (no torch import); the entry point is in
:mod:`mfd_theory.runs.pipeline.entry`, the work in :mod:`mfd_theory.runs.pipeline.corpus` and
:mod:`mfd_theory.llm.training.code_corpus`. Usage and measurements: docs/real-targets.md ("The code
corpus").
"""

from __future__ import annotations

import dataclasses

from mfd_theory.configs.options import Command, opt
from mfd_theory.configs.pipeline.local_target import TargetOptions

__all__ = ["CorpusConfig", "CLI"]


@dataclasses.dataclass(frozen=True)
class CorpusConfig(TargetOptions):
    sources: tuple[str, ...] = opt(("stdlib", "site-packages"), "where the .py files come from: stdlib (without "
                                   "test/ and idlelib/), site-packages (this interpreter's) or a directory",
                                   split=False)
    min_bytes: int = opt(256, "drop files smaller than this (bytes)", ge=0)
    max_bytes: int = opt(1 << 20, "drop files larger than this (bytes)", ge=1)
    max_line_chars: int = opt(1000, "drop a file with a longer line (generated data, minified code)", ge=1)
    span: int = opt(12, "drop a file sharing this many consecutive tokens with a HumanEval prompt or solution",
                    ge=4)
    calib_fraction: float = opt(0.05, "share of files (by content hash) in the calib split", ge=0, lt=1)
    eval_fraction: float = opt(0.05, "share of files (by content hash) in the eval split", ge=0, lt=1)
    max_files: int = opt(0, "keep at most this many files, the first in content-hash order (0: all)", ge=0)
    shard_mib: float = opt(4.0, "source MiB per token shard (the unit of resuming the tokenization)", gt=0)
    window: int = opt(512, "tokens per teacher-forced window", ge=2)
    top_k: int = opt(8, "the target's top-k ids and log-probs stored at every position", ge=1)
    label_tokens: int = opt(1 << 20, "train tokens to label (whole windows, in stream order)", ge=0)
    heldout_label_tokens: int = opt(1 << 15, "calib and eval tokens to label, each", ge=0)
    chunk_windows: int = opt(8, "windows per label file (the unit of resuming the labels)", ge=1)
    batch: int = opt(1, "windows per target forward (the labels do not depend on it, up to float round-off)", ge=1)
    instructions: bool = opt(True, "also write chat-formatted instructions (signature + docstring -> function)")
    max_answer_tokens: int = opt(1024, "drop an instruction whose answer is longer (tokens)", ge=2)

    def validate(self) -> None:
        super().validate()
        if self.calib_fraction + self.eval_fraction >= 1:
            raise ValueError(f"--calib-fraction: with --eval-fraction must leave train files, got "
                             f"{self.calib_fraction} + {self.eval_fraction}")
        if self.max_bytes < self.min_bytes:
            raise ValueError(f"--max-bytes: must be >= --min-bytes ({self.min_bytes}), got {self.max_bytes}")


CLI = Command("corpus", __name__, CorpusConfig, __doc__, out=None,
              out_help="output directory (token, instruction and label shards, manifest.json)", models=True,
              examples=(
    "mfd corpus --target qwen2.5-coder-0.5b-instruct --out results/corpus  # the whole machine, 1 M labelled tokens",
    "mfd corpus --preset small --target qwen2.5-coder-0.5b-instruct --out results/corpus-small  # minutes",
    "torchrun --standalone --nproc_per_node 8 -m mfd_theory.cli corpus --target /models/Qwen3-8B --device cuda "
    "--out data/corpus  # 8 GPUs, the same bytes",
))
