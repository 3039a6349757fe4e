"""What ``mfd distill``, ``mfd train-drafter`` and ``mfd eval`` share: the options that name your
local target (directory, device, dtype, seed) and the check of that directory, with no torch
import, so that both halves of each command (``X.py`` and ``X_run.py``) can use them. The
commands are described in docs/own-target.md.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from mfd_theory.validation import check_device
from mfd_theory.commands._cli import Checked, opt

__all__ = ["DTYPES", "TOKENIZER_FILES", "TargetOptions", "check_target_dir", "say"]

DTYPES = ("auto", "float32", "bfloat16", "float16")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclasses.dataclass(frozen=True)
class TargetOptions(Checked):
    """The options of every command that loads your target; a command's config adds its own."""

    target: str = opt("", "local Hugging Face target directory (with its tokenizer)", required=True)
    device: str = opt("auto", "auto (CUDA when available), cpu, cuda (each torchrun rank takes its GPU) or cuda:N")
    dtype: str = opt("auto", "target weights' dtype (auto: bfloat16 on CUDA, float32 on CPU)", choices=DTYPES)
    seed: int = opt(0, "random seed")

    def validate(self) -> None:
        # the spelling only: whether CUDA is there is asked when the process group starts
        check_device("--device", self.device, auto=True)


def check_target_dir(path: str, flag: str = "--target") -> Path:
    """A local Hugging Face model directory with a config and a tokenizer (ValueError naming ``flag``)."""
    d = Path(path)
    if not (d / "config.json").is_file():
        raise ValueError(f"{flag}: no config.json in {d}")
    if not any((d / f).is_file() for f in TOKENIZER_FILES):
        raise ValueError(f"{flag}: {d} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                         "save it there with tokenizer.save_pretrained")
    return d


def say(dist, msg: str) -> None:
    """Print on the main process only (every torchrun rank runs the same code)."""
    if dist is None or dist.main:
        print(msg, flush=True)
