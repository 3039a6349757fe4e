"""The torch half of ``mfd bench train`` (:mod:`mfd_theory.commands.bench.bench_train`): one drafter
training step (forward, loss, backward) with each block's own copy of its context ("per_block",
:meth:`~mfd_theory.llm.models.drafter.BlockDrafter.train_forward` on
:func:`~mfd_theory.llm.training.train.left_align_context`) against one pass over each sequence's
context for all its blocks ("shared", :meth:`~mfd_theory.llm.models.drafter.BlockDrafter.train_forward_shared`),
on the same features, blocks and labels, interleaved, at several block counts per sequence."""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from mfd_theory.configs.options import keeps_torch_threads
from mfd_theory.llm.models.drafter import build_drafter
from mfd_theory.llm.models.target import load_local_target
from mfd_theory.llm.training.train import block_loss, default_gamma, left_align_context, position_weights
from mfd_theory.numerics import isa_flags, numerics_provenance
from mfd_theory.runs.bench.bench_generate import tiny_target

__all__ = ["measure"]


def _load(cfg):
    if cfg.target == "tiny":
        return tiny_target(cfg.seed), "a random tiny Qwen3 (4 layers, width 128, 512 tokens)"
    model, _ = load_local_target(cfg.target, "cpu", "float32")
    return model, cfg.target


def _step(drafter, ctx, block_ids, starts, labels, weights, shared: bool) -> float:
    """One forward, loss and backward; the loss."""
    drafter.zero_grad(set_to_none=True)
    nb = starts.shape[1]
    with drafter.reduced_output():
        if shared:
            out = drafter.train_forward_shared(ctx, block_ids, starts)
        else:
            c, valid = left_align_context(ctx.repeat_interleave(nb, 0), starts.reshape(-1))
            out = drafter.train_forward(c, block_ids, valid)
    loss, _ = block_loss(out, labels, weights)
    loss.backward()
    return float(loss.detach())


@keeps_torch_threads
def measure(cfg, progress: bool = True) -> dict:
    """Per block count: each path's seconds per step over ``repeats`` interleaved runs, the ratio of
    the fastest of each, and the largest difference of their losses (they must agree)."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model, what = _load(cfg)
    for p in model.parameters():
        p.requires_grad_(False)
    n_layers, vocab = int(model.config.num_hidden_layers), int(model.config.vocab_size)
    layers = list(cfg.target_layers) or None
    if layers and max(layers) >= n_layers:
        raise ValueError(f"--target-layers: the target has {n_layers} layers, got {max(layers)}")
    g = np.random.default_rng(cfg.seed)
    vocab_ids = np.sort(g.choice(vocab, size=min(cfg.draft_vocab, vocab), replace=False)) if cfg.draft_vocab else None
    drafter = build_drafter(model, cfg.block_size, cfg.layers, num_modes=cfg.modes, seed=cfg.seed,
                            target_layer_ids=layers, draft_vocab=None if vocab_ids is None else vocab_ids.tolist())
    drafter = drafter.float().train()
    ids = torch.from_numpy(g.integers(0, vocab if vocab_ids is None else len(vocab_ids), size=(cfg.batch, cfg.seq_len)))
    if vocab_ids is not None:
        ids = torch.from_numpy(vocab_ids)[ids]  # every label inside the draft vocabulary
    t0 = time.perf_counter()
    with torch.no_grad():
        hs = model.model(input_ids=ids, output_hidden_states=True).hidden_states
    feature_s = time.perf_counter() - t0
    ctx = drafter.fuse_hidden(hs).detach()
    bs, mask = cfg.block_size, int(drafter.mask_token_id)
    weights = position_weights(bs - 1, default_gamma(bs))
    rows = []
    for nb in cfg.blocks_per_seq:
        starts = torch.from_numpy(g.integers(1, cfg.seq_len - bs + 1, size=(cfg.batch, nb)))
        width = int(starts.max())
        offs = starts.reshape(-1)[:, None] + torch.arange(bs)[None]
        tokens = ids.repeat_interleave(nb, 0).gather(1, offs)  # [B*nb, bs]
        block_ids = torch.full_like(tokens, mask)
        block_ids[:, 0] = tokens[:, 0]
        labels = tokens[:, 1:] if drafter.d2t is None else drafter.draft_index(tokens[:, 1:])
        args = (ctx[:, :width], block_ids, starts, labels, weights)
        for shared in (False, True):  # warm-up
            _step(drafter, *args, shared)
        runs = {"per_block": [], "shared": []}
        losses = {}
        for rep in range(cfg.repeats):
            for name in runs:
                t0 = time.perf_counter()
                losses[name] = _step(drafter, *args, name == "shared")
                runs[name].append(time.perf_counter() - t0)
        best = {name: min(v) for name, v in runs.items()}
        rows.append({"blocks_per_seq": nb, "block_rows": cfg.batch * nb * bs * cfg.modes, "context_width": width,
                     "seconds": runs, "best_s": best, "ratio": best["per_block"] / best["shared"],
                     "loss": losses, "loss_difference": abs(losses["per_block"] - losses["shared"])})
        if progress:
            print(f"{nb} blocks a sequence: per_block {best['per_block']:.3f} s, shared {best['shared']:.3f} s "
                  f"({best['per_block'] / best['shared']:.2f}x)", flush=True)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"target": what, "feature_s": feature_s, "target_layer_ids": list(drafter.target_layer_ids),
            "rows": rows, "host": {**numerics_provenance(), "cpu_flags": isa_flags(), "cores": os.cpu_count()},
            "load_after": load}
