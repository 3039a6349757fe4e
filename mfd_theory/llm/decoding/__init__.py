"""Lossless tree-verified decoding, one request (``generate.py``) or many at once (``batch.py``).

A round drafts a block, builds the method's tree (``trees.py``), verifies it in one target forward,
walks it by the lossless rule (``sampling.py``), commits the accepted path and records it
(``metrics.py``, ``records.py``); ``round.py`` holds a request's part, shared by both loops, and
``warmup.py`` runs every piece once before anything is timed. Plain sampling of many prompts at
once, without a drafter (self-distillation data): ``generate_batch.py``. The rule: docs/background.md.
"""

from mfd_theory.llm.decoding.batch import (POLICIES, BatchDecodeResult, BatchRound, BatchTarget,
                                           speculative_generate_batch)
from mfd_theory.llm.decoding.generate import (DEAD_EPS, METHODS, DecodeResult, StepRecord, build_tree,
                                              sampling_probs, speculative_generate, walk_tree)
from mfd_theory.llm.decoding.generate_batch import generate_batch
from mfd_theory.llm.decoding.trees import SCORERS
from mfd_theory.llm.decoding.warmup import warm_up

__all__ = ["BatchDecodeResult", "BatchRound", "BatchTarget", "DEAD_EPS", "DecodeResult", "METHODS", "POLICIES", "SCORERS",
           "StepRecord", "build_tree", "generate_batch", "sampling_probs", "speculative_generate",
           "speculative_generate_batch", "walk_tree", "warm_up"]
