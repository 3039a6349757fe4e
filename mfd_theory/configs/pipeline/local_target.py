"""What the pipeline commands (``mfd distill``, ``train-drafter``, ``eval``, ``ceiling``, ``check-modes``)
share: the options that name your local target (directory, device, dtype, seed, CPU threads), the
check of that directory and of a drafter checkpoint directory, with no torch import, so that each
command and its work (``mfd_theory.runs.pipeline.X``) can use them. The commands are described in
docs/own-target.md.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mfd_theory.shipped import check_target
from mfd_theory.shipped_drafters import is_shipped_drafter, near_drafter_names, shipped_drafter
from mfd_theory.validation import TOKENIZER_FILES, check_device
from mfd_theory.configs.options import Checked, numerics_opt, opt, seed_opt

__all__ = ["DTYPES", "PROMPT_FORMAT", "TOKENIZER_FILES", "TargetOptions", "check_target_dir", "checkpoint_dir"]

DTYPES = ("auto", "float32", "bfloat16", "float16")
#: the prompt-file format, as every --prompts help states it (mfd_theory.llm.training.prompts reads it)
PROMPT_FORMAT = ('one JSON object per line with exactly one of "prompt" (a string), "messages" (a list of '
                 '{"role", "content"} objects, ending on a user turn) or "turns" (a list of user turns, answered '
                 'one by one), optionally "id" and "dataset" (the file name when absent)')


@dataclasses.dataclass(frozen=True)
class TargetOptions(Checked):
    """The options of every command that loads your target; a command's config adds its own."""

    target: str = opt("", "local Hugging Face target directory (with its tokenizer), or a shipped target's name "
                          "(mfd target list), materialised once under $MFD_TARGETS_DIR or results/targets",
                      required=True)
    device: str = opt("auto", "auto (CUDA when available), cpu, cuda (each torchrun rank takes its GPU) or cuda:N")
    dtype: str = opt("auto", "target weights' dtype (auto: bfloat16 on CUDA; on a CPU float32, or bfloat16 under "
                             "--numerics fast where this host computes it faster)", choices=DTYPES)
    seed: int = seed_opt("random seed")
    # one thread by default: the same bits on any machine, and on a shared CPU the fast choice
    # (distill measured 10 s with one thread, 57-82 s with torch's default beside a busy neighbour)
    threads: int = opt(1, "torch CPU threads; 1 gives the same results on every machine, 0 leaves torch's default "
                          "(one per core)", ge=0)
    numerics: str | None = numerics_opt()

    def validate(self) -> None:
        # the spelling only: whether CUDA is there is asked when the process group starts
        check_device("--device", self.device, auto=True)


def check_target_dir(path: str, flag: str = "--target") -> Path | str:
    """A local Hugging Face model directory, or a shipped target's name
    (:func:`mfd_theory.shipped.check_target`)."""
    return check_target(path, flag)


def checkpoint_dir(path: str, flag: str = "--drafter") -> Path:
    """The drafter checkpoint in ``path`` (a train-drafter run directory holds it in ``drafter/``), or
    the shipped drafter of that name (:func:`mfd_theory.shipped_drafters.shipped_drafter`); ValueError naming ``flag`` when ``path`` does not exist, is a file, or holds no checkpoint."""
    d = Path(path)
    if str(path) != "" and not d.exists() and (is_shipped_drafter(str(path)) or near_drafter_names(str(path))):
        return shipped_drafter(str(path), flag)  # a mistyped shipped name is told the near ones
    if str(path) == "" or not d.exists():
        raise ValueError(f"{flag}: {path} does not exist (give a drafter checkpoint directory, the train-drafter "
                         "run directory that holds it in drafter/, or a shipped drafter's name: mfd drafter list)")
    if not d.is_dir():
        raise ValueError(f"{flag}: {path} is a file, not a drafter checkpoint directory")
    if (d / "drafter" / "config.json").is_file():
        d = d / "drafter"
    if not (d / "config.json").is_file():
        raise ValueError(f"{flag}: no drafter checkpoint (config.json) in {path}")
    return d
