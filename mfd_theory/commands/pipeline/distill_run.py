"""The torch half of ``mfd distill`` (:mod:`mfd_theory.commands.pipeline.distill`), and :func:`load_target`,
which ``mfd train-drafter`` and ``mfd eval`` load your target with too."""

from __future__ import annotations

from pathlib import Path

import torch

from mfd_theory.commands.pipeline._target import check_target_dir, say
from mfd_theory.llm.models.target import TargetModel
from mfd_theory.llm.training.dist import setup, teardown
from mfd_theory.llm.training.distill import check_context, distill_prompts, prompt_files_digest
from mfd_theory.validation import make_out_dir

__all__ = ["distill", "load_target", "torch_dtype"]


def torch_dtype(name: str, device: str):
    """The torch dtype of a ``--dtype`` value (auto: bfloat16 on CUDA, float32 on CPU)."""
    if name == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, name)


def load_target(directory, device: str = "cpu", dtype: str = "auto"):
    """(frozen HF causal LM, tokenizer) from a local directory; ValueError naming the problem."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = check_target_dir(str(directory), "target")
    try:
        tok = AutoTokenizer.from_pretrained(str(d))
    except Exception as exc:  # noqa: BLE001 - any loader failure is the directory's fault
        raise ValueError(f"target: cannot load the tokenizer in {d}: {exc}") from exc
    try:
        model = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch_dtype(dtype, device),
                                                     attn_implementation="sdpa")
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"target: cannot load the model in {d}: {exc}") from exc
    model = model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, tok


def distill(config, prompts: list, out_dir, progress: bool = True) -> dict:
    """Answer ``prompts`` (read and checked) with the target of ``config`` (a
    :class:`~mfd_theory.commands.pipeline.distill.DistillConfig`) into ``out_dir``; returns the manifest."""
    dist = setup(config.device)
    try:
        target, tok = load_target(config.target, dist.device, config.dtype)
        record = {"prompt_files": prompt_files_digest(list(config.prompts)), "max_new_tokens": config.max_new_tokens,
                  "temperature": config.temperature, "seed": config.seed, "enable_thinking": config.enable_thinking,
                  "dtype": str(next(target.parameters()).dtype).replace("torch.", "")}
        # the context check distill_prompts repeats, here before the output directory is made
        check_context(prompts, tok, config.enable_thinking, config.max_new_tokens, TargetModel(target).max_positions)
        out = make_out_dir(out_dir, "--out")
        manifest = distill_prompts(target, tok, prompts, out, max_new_tokens=config.max_new_tokens,
                                   temperature=config.temperature, seed=config.seed,
                                   enable_thinking=config.enable_thinking, config=record,
                                   shard_size=config.shard_size, dist=dist, progress=progress)
        say(dist, f"{manifest['n_sequences']} sequences, {manifest['n_response_tokens']} response tokens "
                  f"in {len(manifest['shards'])} shards")
        say(dist, f"wrote {Path(out) / 'manifest.json'}")
        return manifest
    finally:
        teardown(dist)
