"""Real models: Hugging Face Qwen3 targets, DFlash-format block drafters, the MFD mixture drafter and
tree-verified speculative decoding. The only part of the package that imports torch/transformers
(install the ``llm`` extra).
"""

from mfd_theory.llm.drafter import BlockDrafter, MFDDrafter, build_drafter, load_drafter
from mfd_theory.llm.domino import DominoDrafter  # noqa: F401  (registers the dartree kind)
from mfd_theory.llm.target import TargetModel

__all__ = ["BlockDrafter", "MFDDrafter", "TargetModel", "build_drafter", "load_drafter",
           "speculative_generate", "DecodeResult", "StepRecord"]


def __getattr__(name):
    if name in ("speculative_generate", "DecodeResult", "StepRecord"):
        from mfd_theory.llm import decode

        return getattr(decode, name)
    raise AttributeError(name)
