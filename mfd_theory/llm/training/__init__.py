"""Data and training: corpora, prompt files, the target's own answers, and the drafter trainer.

``corpus.py`` (the synthetic multi-future corpus and its tokenizer), ``natural_corpus.py`` (Python's
standard library as text), ``prompts.py`` (JSONL prompt files), ``distill.py`` (the target's
answers to prompts), ``train.py`` (one resumable loop for targets, draft LMs and drafters),
``dist.py`` (torch.distributed set-up for ``torchrun``).
"""

from mfd_theory.llm.training.distill import distill_prompts, load_distill_data
from mfd_theory.llm.training.prompts import Prompt, read_prompt_files
from mfd_theory.llm.training.train import (DrafterTrainConfig, LMConfig, LMTrainConfig, block_loss, config_hash,
                                           train_drafter, train_lm)

__all__ = ["DrafterTrainConfig", "LMConfig", "LMTrainConfig", "Prompt", "block_loss", "config_hash",
           "distill_prompts", "load_distill_data", "read_prompt_files", "train_drafter", "train_lm"]
