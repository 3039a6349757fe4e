"""Whether a K-mode drafter checkpoint (the released MFD drafters, or one of yours) is read as it was trained.

``mfd check-modes --target DIR --drafter MFD_DIR --reference DFLASH_DIR --prompts FILE.jsonl --out OUT``
answers a few prompts greedily with the target and, at every answer position, drafts each mode's
greedy chain and the chain of the DFlash drafter the checkpoint was initialised from: if the mode
embeddings entered the drafter wrongly, the modes would accept far less than that drafter, or
draft the same chains. Prints the numbers and the verdict, writes ``OUT/check_modes.json``, and
exits 1 when the check fails (0 when it holds or is inconclusive). The config and the input checks
live here (no torch import); the work is in :mod:`mfd_theory.runs.pipeline.check_modes`.
What is assumed, and why this checks it: docs/own-target.md ("MFD checkpoints as released").
"""

from __future__ import annotations

import dataclasses

from mfd_theory.configs.options import Command, opt
from mfd_theory.configs.pipeline.local_target import PROMPT_FORMAT, TargetOptions, check_target_dir, checkpoint_dir

__all__ = ["CheckModesConfig", "main"]


@dataclasses.dataclass(frozen=True)
class CheckModesConfig(TargetOptions):
    drafter: str = opt("", "the K-mode drafter to check: its checkpoint (or train-drafter run) directory, or a shipped drafter's name (mfd drafter list)",
                       required=True)
    reference: str | None = opt(None, "the DFlash checkpoint directory of the drafter's initialisation",
                                unset="none: only whether the modes differ is checked")
    prompts: tuple[str, ...] = opt((), f"JSONL prompt files (first turns are used): {PROMPT_FORMAT}", required=True,
                                   split=False, empty=True)
    max_prompts: int = opt(8, "prompts per data set, after a shuffle with seed 0", ge=1)
    new_tokens: int = opt(64, "greedy answer length per prompt (every position with a whole block after it "
                              "is a block start)", ge=1)
    tolerance: float = opt(0.25, "fail when the modes' mean accepted length is under (1 - tolerance) times the "
                                 "reference's", ge=0, le=1)
    enable_thinking: bool = opt(False, "chat template with thinking enabled")


CLI = Command("check-modes", __name__, CheckModesConfig, __doc__, out=None,
              out_help="output directory (check_modes.json)", models=True)


def main(argv: list[str] | None = None) -> int:
    """``mfd check-modes``; returns the exit status (1: the check fails)."""
    return CLI.main(argv, _run)


def _run(config: CheckModesConfig, opts) -> int:
    from mfd_theory.llm.training.prompts import read_prompt_files, shuffle_take

    prompts = shuffle_take(read_prompt_files(config.prompts), config.max_prompts)  # read before a model
    drafter = checkpoint_dir(config.drafter, "--drafter")
    reference = checkpoint_dir(config.reference, "--reference") if config.reference is not None else None
    check_target_dir(config.target)
    from mfd_theory.runs.pipeline.check_modes import check

    return check(config, prompts, drafter, reference, opts)
