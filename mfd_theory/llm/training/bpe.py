"""The byte-level BPE tokenizer the package trains for its natural-text target (``mfd natural``)."""

from __future__ import annotations

__all__ = ["train_bpe"]


def train_bpe(texts: list[str], vocab_size: int):
    """Byte-level BPE over the full 256-byte alphabet (no held-out byte can be lost), with the
    package's special tokens; a ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from mfd_theory.llm.training.corpus import EOS_TOKEN, MASK_TOKEN

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TOKEN, MASK_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN,
                                   mask_token=MASK_TOKEN, model_max_length=10**9)
