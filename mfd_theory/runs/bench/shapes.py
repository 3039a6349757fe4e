"""The shapes of the random Qwen3 targets the benchmarks build (``mfd bench decode --preset``,
``mfd bench draft --preset``, ``mfd bench gpu-check --shape``): plain numbers, no torch import, so
that both halves of each command can read them."""

from __future__ import annotations

__all__ = ["SHAPES"]

SHAPES = {
    # name: (vocab, hidden, layers, heads, kv_heads, head_dim, intermediate)
    "micro": (64, 32, 2, 4, 2, 8, 64),  # for the smoke test
    "tiny": (2048, 256, 4, 4, 2, 64, 768),
    "small": (4096, 512, 8, 8, 4, 64, 1536),
    "qwen3-0.6b": (151936, 1024, 28, 16, 8, 128, 3072),
    "qwen3-4b": (151936, 2560, 36, 32, 8, 128, 9728),
    "qwen3-8b": (151936, 4096, 36, 32, 8, 128, 12288),
}
