"""A product (K = 1), MFD (K > 1) or Domino (``--kind dartree``) drafter trained on a distilled data set.

``mfd train-drafter --target DIR --data DATA --out RUN`` trains a drafter for your target on what
``mfd distill`` wrote (checkpoints under ``RUN``, the drafter in ``RUN/drafter``; a rerun resumes
from the last checkpoint), from scratch or from a DFlash checkpoint (``--init-from``). It runs on
one process or under ``torchrun --nproc_per_node P -m mfd_theory.cli train-drafter ...`` (each rank
takes part of every batch). This module holds its config (no torch import); the input checks and the entry point are in
:mod:`mfd_theory.runs.pipeline.entry`, the work in :mod:`mfd_theory.runs.pipeline.train_drafter`. The three commands for your own target are
described in docs/own-target.md.
"""

from __future__ import annotations

import dataclasses

from mfd_theory.configs.options import Command, opt
from mfd_theory.configs.pipeline.local_target import TargetOptions

__all__ = ["TrainDrafterConfig", "CLI"]


@dataclasses.dataclass(frozen=True)
class TrainDrafterConfig(TargetOptions):
    data: str = opt("", "data set directory written by mfd distill, or a corpus written by mfd corpus "
                        "(read as --corpus-part says)", required=True)
    corpus_part: str = opt("instruct", "with a corpus as --data: instruct (its instructions answered by whole "
                                       "functions), code (windows of its code, teacher-forced) or both (half each)",
                           choices=("instruct", "code", "both"))
    max_tokens: int | None = opt(None, "with a corpus as --data: train on its first N tokens (whole sequences)",
                                 unset="all of its train split", ge=1)
    modes: int = opt(1, "K: 1 = product (DFlash) drafter, > 1 = MFD", ge=1)
    kind: str = opt("dflash", "dflash: a block drafter (product, or MFD with --modes > 1); dartree: a Domino "
                              "drafter (block drafter plus a path-correction head, decoded with method dartree)",
                    choices=("dflash", "dartree"))
    rank: int | None = opt(None, "with --kind dartree: the correction head's rank", unset="32, or the checkpoint's")
    block_size: int | None = opt(None, "block size", unset="16, or the --init-from one", ge=2)
    layers: int | None = opt(None, "draft layers", unset="1, or the --init-from one", ge=1)
    steps: int = opt(1000, "optimizer steps", ge=1)
    batch_size: int = opt(8, "sequences per micro-batch (all ranks together)", ge=1)
    grad_accum: int = opt(1, "micro-batches per optimizer step", ge=1)
    blocks_per_seq: int = opt(4, "training blocks drawn per sequence", ge=1)
    lr: float = opt(6e-4, "peak learning rate (cosine schedule)", gt=0)
    warmup: int | None = opt(None, "warm-up steps", unset="steps // 20", ge=0)
    balance: float = opt(0.1, "MFD load-balancing weight (the mixture objective's)", ge=0)
    objective: str = opt("mixture", "K > 1: mixture (the mixture likelihood, which trains pi) or wta (each block "
                                    "trains the mode that explains it best, the rule a best-mode tree ranks by; pi "
                                    "learns which mode wins)", choices=("mixture", "wta"))
    wta_eps: float = opt(0.05, "with --objective wta: share of each block spread over the modes that lost it "
                               "(0 lets a mode that never wins die)", ge=0, lt=1)
    weight_decay: float = opt(0.0, "AdamW's decoupled weight decay", ge=0)
    context: str = opt("per_block", "how a step's blocks read their context: shared (one pass over each "
                                    "sequence's context for all its blocks, a block-sparse mask; the same loss, "
                                    "faster) or per_block (a copy of the context for each block)",
                       choices=("per_block", "shared"))
    target_layers: tuple[int, ...] = opt((), "a new drafter's context: these target layers' hidden states "
                                             "(0-based; DFlash uses 5 spread over the target)",
                                         unset="DFlash's default for the draft layers", empty=True, ge=0)
    features_dir: str | None = opt(None, "keep the target's hidden states of the data in this directory as one "
                                         "bfloat16 file and reuse them in every later run on the same data, layers, "
                                         "target and numerics", unset="computed in memory for this run")
    ckpt_every: int = opt(100, "steps between checkpoints", ge=1)
    init_from: str | None = opt(None, "start from this DFlash checkpoint directory", unset="a new drafter")
    mask_token_id: int | None = opt(None, "the drafter's mask token id",
                                    unset="the tokenizer's mask token; without one, the id published drafters use "
                                          "for this vocabulary, else the last id, with a warning")
    draft_vocab: int = opt(0, "draft only the N tokens most frequent in the data's answers (ties to the lower id), "
                              "stored as d2t / t2d in the checkpoint (EAGLE-3's layout); 0: the whole vocabulary",
                           ge=0)
    init_layers: str = opt("random", "a new drafter's layers: random, or target (the D draft layers start as copies "
                                     "of the target's last D layers: attention, MLP, norms)",
                           choices=("random", "target"))
    mode_noise: float = opt(0.1, "with --init-from and K > 1: std of the mode embeddings relative to the target's "
                                 "embedding rms (0 starts exactly at the checkpoint, but identical modes then get "
                                 "identical gradients and never separate)", ge=0)

    def validate(self) -> None:
        super().validate()
        if self.kind == "dartree" and self.modes != 1:
            raise ValueError(f"--modes: a dartree (Domino) drafter has one mode, got --modes {self.modes}")
        if self.rank is not None and (self.kind != "dartree" or self.rank < 1):
            raise ValueError(f"--rank: an integer >= 1, and only with --kind dartree (got {self.rank}, kind {self.kind})")
        if self.init_from is not None and (self.draft_vocab or self.init_layers != "random"):
            raise ValueError("--draft-vocab / --init-layers: only for a new drafter (an --init-from checkpoint keeps "
                             "its own vocabulary and weights)")
        if self.init_from is not None and self.target_layers:
            raise ValueError("--target-layers: only for a new drafter (an --init-from checkpoint reads its own layers)")
        if self.draft_vocab == 1:
            raise ValueError("--draft-vocab: a draft vocabulary needs at least 2 tokens (0: the whole vocabulary)")
        if self.mask_token_id is not None and (self.mask_token_id < 0 or self.init_from is not None):
            raise ValueError(f"--mask-token-id: must be a token id >= 0 and is not used with "
                             f"--init-from (the checkpoint has its own), got {self.mask_token_id}")


CLI = Command("train-drafter", __name__, TrainDrafterConfig, __doc__, out=None,
              out_help="run directory (checkpoints; the drafter in OUT/drafter)", models=True)
