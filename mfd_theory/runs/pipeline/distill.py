"""The torch half of ``mfd distill`` (:mod:`mfd_theory.commands.pipeline.distill`)."""

from __future__ import annotations

from pathlib import Path

from mfd_theory.runs.pipeline import say
from mfd_theory.llm.models.target import TargetModel, load_local_target
from mfd_theory.llm.training.dist import setup, teardown
from mfd_theory.llm.training.distill import check_context, distill_prompts, prompt_files_digest
from mfd_theory.validation import make_out_dir

__all__ = ["distill"]


def distill(config, prompts: list, out_dir, progress: bool = True) -> dict:
    """Answer ``prompts`` (read and checked) with the target of ``config`` (a
    :class:`~mfd_theory.commands.pipeline.distill.DistillConfig`) into ``out_dir``; returns the manifest."""
    dist = setup(config.device)
    try:
        target, tok = load_local_target(config.target, dist.device, config.dtype)
        record = {"prompt_files": prompt_files_digest(list(config.prompts)), "max_new_tokens": config.max_new_tokens,
                  "temperature": config.temperature, "seed": config.seed, "enable_thinking": config.enable_thinking,
                  "dtype": str(next(target.parameters()).dtype).replace("torch.", "")}
        # the context check distill_prompts repeats, here before the output directory is made
        check_context(prompts, tok, config.enable_thinking, config.max_new_tokens, TargetModel(target).max_positions)
        out = make_out_dir(out_dir, "--out")
        manifest = distill_prompts(target, tok, prompts, out, max_new_tokens=config.max_new_tokens,
                                   temperature=config.temperature, seed=config.seed,
                                   enable_thinking=config.enable_thinking, config=record,
                                   shard_size=config.shard_size, batch=config.batch, top_k=config.top_k,
                                   top_p=config.top_p, dist=dist, progress=progress)
        say(dist, f"{manifest['n_sequences']} sequences, {manifest['n_response_tokens']} response tokens "
                  f"in {len(manifest['shards'])} shard{'s' * (len(manifest['shards']) != 1)}")
        say(dist, f"wrote {Path(out) / 'manifest.json'}")
        return manifest
    finally:
        teardown(dist)
