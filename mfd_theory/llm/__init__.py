"""Real models: Hugging Face Qwen3 targets, DFlash-format block drafters, the MFD mixture drafter and
tree-verified speculative decoding. The only part of the package that imports torch/transformers
(install the ``llm`` extra).

Four rooms, each importing only the ones before it: ``models`` (target and drafters),
``decoding`` (the lossless loop, one request or a batch), ``training`` (data and the trainer),
``measure`` (evaluation, predictions, profiles). The names below are the ones most code needs.
"""

from mfd_theory.llm.models import BlockDrafter, DominoDrafter, MFDDrafter, TargetModel, build_drafter, load_drafter

__all__ = ["BlockDrafter", "DominoDrafter", "MFDDrafter", "TargetModel", "build_drafter", "load_drafter",
           "speculative_generate", "speculative_generate_batch", "DecodeResult", "StepRecord",
           "BatchDecodeResult"]

_DECODING = ("speculative_generate", "speculative_generate_batch", "DecodeResult", "StepRecord", "BatchDecodeResult")


def __getattr__(name):
    # decoding loads the numba tree builders: only when one of its names is asked for
    if name in _DECODING:
        import mfd_theory.llm.decoding as decoding

        return getattr(decoding, name)
    raise AttributeError(name)
