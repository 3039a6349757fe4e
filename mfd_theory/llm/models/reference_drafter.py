"""Slow, obviously correct twin of the drafter's attention and context cache (the first version).

Every mode gets its own concatenation [context keys ; its block keys], the key/value heads are
repeated for every query head that reads them (``repeat_interleave``), and the context cache is
concatenated whole every round. The drafter's weights and its shared pieces (rotary embedding,
block embeddings, MLP, norms, LM head, readout) are used as they are: only the attention and the
cache, which the fast drafter reorganises, are written out here. ``mfd bench draft`` times this
twin as the "before" path, and tests/test_llm_drafter_cache.py compares the fast drafter with it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mfd_theory.llm.models.drafter import _rope as rope


def slow_attention(attn, x, cos, sin, ctx_k, ctx_v, mask):
    """x [B, S, H] block states; ctx_k/ctx_v [B, kvh, T, d] (one copy per block); mask additive
    [B, 1, 1, T+S] or None."""
    b, s, _ = x.shape
    q = attn.q_norm(attn.q_proj(x).view(b, s, attn.num_heads, attn.head_dim)).transpose(1, 2)
    k = attn.k_norm(attn.k_proj(x).view(b, s, attn.num_kv_heads, attn.head_dim)).transpose(1, 2)
    v = attn.v_proj(x).view(b, s, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    k = torch.cat([ctx_k, k], dim=2)  # [B, kvh, T+S, d]
    v = torch.cat([ctx_v, v], dim=2)
    rep = attn.num_heads // attn.num_kv_heads
    if rep > 1:
        k = k.repeat_interleave(rep, dim=1)  # [B, heads, T+S, d]
        v = v.repeat_interleave(rep, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.head_dim ** -0.5)
    return attn.o_proj(out.transpose(1, 2).reshape(b, s, -1))  # [B, S, H]


def slow_run(drafter, block_h, ctx_k, ctx_v, blk_pos, mask):
    """The draft layers over block states [B*K, S, H], context keys/values [B*K, kvh, T, d]."""
    cos, sin = drafter.rotary_emb(block_h, blk_pos)
    h = block_h
    for layer, k, v in zip(drafter.layers, ctx_k, ctx_v):
        h = h + slow_attention(layer.self_attn, layer.input_layernorm(h), cos, sin, k, v, mask)
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    return drafter.norm(h)


class SlowDraftCache:
    """``reset`` / ``draft_modes`` of a drafter, with the whole cache concatenated every round and
    the context keys/values copied into every mode's concatenation."""

    def __init__(self, drafter):
        self.d = drafter
        self.reset()

    def reset(self):
        self.k = self.v = None
        self.n = 0

    @torch.no_grad()
    def draft_modes(self, new_ctx_feats, root_token):
        d = self.d
        t = new_ctx_feats.shape[1]
        dev = new_ctx_feats.device
        if t > 0:
            pos = torch.arange(self.n, self.n + t, device=dev)[None]
            ks, vs = d._context_kv(new_ctx_feats, pos)
            if self.k is None:
                self.k, self.v = ks, vs
            else:
                self.k = [torch.cat([a, b], dim=2) for a, b in zip(self.k, ks)]
                self.v = [torch.cat([a, b], dim=2) for a, b in zip(self.v, vs)]
            self.n += t
        k, s = d.num_modes, d.block_size
        block_ids = torch.full((1, s), int(d.mask_token_id), dtype=torch.long, device=dev)
        block_ids[0, 0] = int(root_token)
        blk_pos = (self.n + torch.arange(s, device=dev))[None].expand(k, s)  # [K, S]
        ctx_k = [x.expand(k, -1, -1, -1) for x in self.k]
        ctx_v = [x.expand(k, -1, -1, -1) for x in self.v]
        h = slow_run(d, d._block_embeddings(block_ids), ctx_k, ctx_v, blk_pos, None)  # [K, S, H]
        return d._readout(h, 1)[0], d._log_probs(h[:, 1:])  # [K], [K, L, V]


def slow_train_modes(drafter, ctx_feats, block_ids, ctx_valid=None):
    """(log_pi [B, K], log_q [B, K, S-1, V]) with the context repeated for every mode."""
    d = drafter
    b, t, _ = ctx_feats.shape
    s, k = block_ids.shape[1], d.num_modes
    dev = ctx_feats.device
    start = torch.zeros(b, dtype=torch.long, device=dev) if ctx_valid is None else t - ctx_valid.long().sum(dim=1)
    ctx_pos = (torch.arange(t, device=dev)[None] - start[:, None]).clamp_min(0)
    blk_pos = (t - start)[:, None] + torch.arange(s, device=dev)[None]
    ctx_k, ctx_v = d._context_kv(ctx_feats, ctx_pos)
    ctx_k = [x.repeat_interleave(k, dim=0) for x in ctx_k]  # [B*K, kvh, T, d]
    ctx_v = [x.repeat_interleave(k, dim=0) for x in ctx_v]
    mask = None
    if ctx_valid is not None:
        keep = torch.cat([ctx_valid.bool(), torch.ones(b, s, dtype=torch.bool, device=dev)], dim=1)
        mask = torch.zeros(keep.shape, dtype=d.fc.weight.dtype, device=dev)
        mask = mask.masked_fill(~keep, torch.finfo(mask.dtype).min)
        mask = mask.repeat_interleave(k, dim=0)[:, None, None, :]  # [B*K, 1, 1, T+S]
    h = slow_run(d, d._block_embeddings(block_ids), ctx_k, ctx_v, blk_pos.repeat_interleave(k, dim=0), mask)
    log_q = d._log_probs(h[:, 1:]).view(b, k, s - 1, -1)
    return d._readout(h, b), log_q
