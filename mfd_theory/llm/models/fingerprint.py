"""Which target a drafter belongs to: the HF model behind a target, and its fingerprint.

A drafter is trained for one target; its checkpoint records the target's fingerprint, and loading it
for another target is refused (:func:`mfd_theory.llm.models.drafter.load_drafter`).
"""

from __future__ import annotations

import hashlib
import json

import torch

__all__ = ["FINGERPRINT_VERSION", "hf_model", "target_fingerprint"]


def hf_model(target) -> torch.nn.Module:
    """The Hugging Face causal LM behind ``target`` (a TargetModel or the HF model itself)."""
    for attr in ("model", "hf_model", "hf"):
        inner = getattr(target, attr, None)
        if inner is not None and hasattr(inner, "lm_head"):
            return inner
    if hasattr(target, "lm_head"):
        return target
    raise ValueError("target: expected a TargetModel or a Hugging Face causal LM")


# Bumped whenever target_fingerprint changes what it hashes: cached drafters keyed by it retrain.
FINGERPRINT_VERSION = 2

# Values hashed per parameter tensor: all of a small one, an evenly strided sample of a large one.
_FINGERPRINT_SAMPLE = 4096


def target_fingerprint(target) -> str:
    """A short hash of the target's config and weights, stored with drafters trained for it.

    Independent of the dtype the weights were loaded in: every value is first rounded to bfloat16
    (the coarsest dtype targets are run in) and hashed as that number in float32, so the same
    checkpoint loaded in float32 or bfloat16 has one fingerprint. Every parameter tensor counts
    (name, shape and values), so a target whose decoder layers differ is another target. A tensor
    with more than 4096 values contributes a fixed, evenly strided sample of 4096 of them, which
    keeps the hash cheap on large models; a change confined to unsampled entries of one large
    tensor goes unnoticed (a fine-tune changes far more than that).
    """
    hf = hf_model(target)
    # Architecture numbers and weights only: loader-dependent config fields (name, dtype,
    # attention implementation) must not change the fingerprint of the same model.
    cfg = hf.config
    arch = [getattr(cfg, k, None) for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                                             "num_attention_heads", "num_key_value_heads",
                                             "intermediate_size")]
    h = hashlib.sha256(json.dumps([FINGERPRINT_VERSION, arch]).encode())
    with torch.no_grad():
        for name, t in sorted(hf.named_parameters(), key=lambda kv: kv[0]):
            flat = t.detach().reshape(-1)
            if flat.numel() > _FINGERPRINT_SAMPLE:
                # Integer indices: the same sample on every device.
                idx = torch.arange(_FINGERPRINT_SAMPLE, dtype=torch.int64, device=flat.device)
                flat = flat[idx * (flat.numel() - 1) // (_FINGERPRINT_SAMPLE - 1)]
            vals = flat.to(torch.bfloat16).float().cpu().numpy()
            h.update(json.dumps([name, list(t.shape)]).encode())
            h.update(vals.tobytes())
    return h.hexdigest()[:16]
