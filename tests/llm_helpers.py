"""Tiny random Qwen3 models for the llm tests (no downloads)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402


def tiny_qwen3(vocab_size: int = 64, hidden_size: int = 32, num_layers: int = 4, seed: int = 0,
               attn: str = "eager", init_std: float = 0.2, eos_token_id: int | None = None,
               max_position_embeddings: int = 512) -> Qwen3ForCausalLM:
    """A random Qwen3ForCausalLM in float32, eval mode. ``init_std`` is large so that the target's
    conditionals are peaked enough for argmax to be far from ties."""
    cfg = Qwen3Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2, head_dim=hidden_size // 4,
        max_position_embeddings=max_position_embeddings, initializer_range=init_std,
        tie_word_embeddings=False, eos_token_id=eos_token_id, pad_token_id=None, bos_token_id=None,
        use_sliding_window=False,
    )
    cfg._attn_implementation = attn
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.pad_token_id = eos_token_id if eos_token_id is not None else 0
    return model
