"""Held-out perplexity of a causal LM on a token stream (``mfd natural``'s target)."""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["perplexity"]


@torch.no_grad()
def perplexity(model, stream: np.ndarray, seq_len: int, windows: int, seed: int = 0, batch: int = 8) -> dict:
    """exp(mean next-token cross-entropy) over ``windows`` windows of ``seq_len`` tokens at seeded
    starts in ``stream``, with the standard error of the mean loss over windows."""
    if len(stream) <= seq_len + 1:
        raise ValueError(f"stream: {len(stream)} tokens, need more than seq_len + 1 = {seq_len + 1}")
    rng = np.random.default_rng([seed, 7])
    starts = rng.integers(0, len(stream) - seq_len, size=windows)
    losses = []
    dev = next(model.parameters()).device
    for i in range(0, windows, batch):
        x = torch.from_numpy(np.stack([stream[s: s + seq_len] for s in starts[i: i + batch]])).to(dev)
        logits = model(input_ids=x).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                                reduction="none").view(x.shape[0], -1).mean(1)
        losses += nll.tolist()
    loss = np.asarray(losses)
    se = float(loss.std(ddof=1) / math.sqrt(len(loss))) if len(loss) > 1 else None
    return {"perplexity": float(np.exp(loss.mean())), "loss": float(loss.mean()), "loss_se": se,
            "windows": int(windows), "seq_len": int(seq_len)}
