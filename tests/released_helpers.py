"""Checkpoints in the layout of the released MFD drafters, written by the package's own code.

What the public model cards give: a DFlash drafter config (``block_size``, ``num_target_layers``,
``dflash_config: {target_layer_ids, mask_token_id}``), bf16 weights without the target's embedding
or LM head, ``mode_embed`` [K, H] and a linear gate ``mode_gate`` that inference does not use. Its
shape is not published; ``write_released`` stores it as a linear layer from H to K
(``mode_gate.weight`` [K, H]), and can store the package's own [H] gate instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

INDEX = "model.safetensors.index.json"


def write_released(drafter, directory, *, shard_bytes: int | None = None, gate: str = "linear", seed: int = 0) -> Path:
    """Save ``drafter`` (an MFDDrafter) in bf16 with ``save_pretrained`` (sharded if ``shard_bytes``),
    then make it look like a released checkpoint: a DFlash config with no ``num_modes`` and no target
    fingerprint, and ``gate`` "linear" (``mode_gate.weight`` [K, H], random), "own" (the package's
    [H] gate, kept) or "none" (no gate stored)."""
    directory = Path(directory)
    drafter.save_pretrained(directory, dtype=torch.bfloat16, max_shard_size=shard_bytes)
    cfg = json.loads((directory / "config.json").read_text())
    cfg.pop("target_fingerprint")
    cfg["dflash_config"].pop("num_modes")
    cfg["dflash_config"].pop("block_size")
    cfg["architectures"] = ["DFlashDraftModel"]
    (directory / "config.json").write_text(json.dumps(cfg, indent=2))
    index = directory / INDEX
    weight_map = json.loads(index.read_text())["weight_map"] if index.is_file() else None
    shard = weight_map["mode_gate"] if weight_map else "model.safetensors"
    tensors = load_file(str(directory / shard))
    if gate != "own":
        del tensors["mode_gate"]
        if weight_map:
            del weight_map["mode_gate"]
    if gate == "linear":
        k, h = drafter.mode_embed.shape
        g = torch.Generator().manual_seed(seed)
        tensors["mode_gate.weight"] = (0.02 * torch.randn(k, h, generator=g)).to(torch.bfloat16)
        if weight_map:
            weight_map["mode_gate.weight"] = shard
    save_file(tensors, str(directory / shard), metadata={"format": "pt"})
    if weight_map:
        index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2))
    return directory


def rename_tensors(directory, names: dict[str, str]) -> None:
    """Rename tensors of a single-file checkpoint in place (``names``: old -> new)."""
    path = Path(directory) / "model.safetensors"
    tensors = load_file(str(path))
    save_file({names.get(k, k): v for k, v in tensors.items()}, str(path), metadata={"format": "pt"})
