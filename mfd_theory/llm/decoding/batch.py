"""Many requests at once: batched tree verification with a shared verify budget.

A batched round drafts every active request's block in one drafter call, verifies every request's
tree in **one** target forward, then walks and commits each request on its own:

* **cache layout** (:class:`BatchTarget`): each attention layer keeps one buffer
  ``[B, kv_heads, capacity, d]``; request b's committed rows are ``[0, L_b)`` of its batch row, and
  a verify pass writes its ``Q`` query rows at ``[L_b, L_b + Q)`` of the same row (a write at each
  request's own offset, not an append after the longest request). The keys a forward reads are the
  first ``max_b L_b + Q`` rows; a float additive mask ``[B, 1, Q, max L + Q]`` shows each query
  its own committed rows and its own tree ancestors, nothing of the padding. Commit moves each
  request's accepted rows down onto ``[L_b, L_b + accepted + 1)``, as the one-request
  :class:`~mfd_theory.llm.models.target.TargetModel` does: no copy of the cache, no padding that grows with
  the gap between long and short requests.
* **trees** of different sizes are padded to ``Q = max_b N_b + 1`` query rows; a padded row sees
  its own context and itself only, and its outputs are never read.
* **hybrid targets** (GDN + attention): attention and MLPs run batched; each GDN layer runs the
  one-request tree rule (:mod:`mfd_theory.llm.models.hybrid`) request by request inside the same forward,
  from that request's own conv window and recurrent state, and commit replays the accepted path
  per request. (A batched tree rule over a forest of B roots is the next step for GPUs.)
* **requests join and leave** (continuous batching): a new request is prefilled alone and its rows
  copied into a new batch row; a finished one's row is dropped. Each costs one copy of the batch's
  buffers, once per request, not per round.

Budget policies (:func:`speculative_generate_batch`):

``per_request``
    every request builds its tree at ``budget`` nodes (the one-request behaviour);
``global``
    one total of ``total_budget`` nodes per round (default ``budget`` times the active requests),
    spent on the global top prefixes over all requests (:func:`mfd_theory.allocation.allocate_global`):
    the expected number of accepted tokens of the batch is the sum of the trees' covered masses,
    and the drafter's prefix score is the package's stand-in for each prefix's mass;
``off``
    plain batched autoregressive decoding (no drafter call);
``auto``
    each round, the policy and size a :class:`mfd_theory.speedup.BatchPlan` predicts fastest for
    the current batch size.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mfd_theory.allocation import allocate_global

from mfd_theory.trees import chain_tree, mixture_tree, product_tree

from mfd_theory.llm.decoding.generate import (DecodeResult, RoundTimes, StepRecord, _check_count, _clock, _eos_set, _first_nodes, _prompt_ids,
                     _topk, _validate, children_map, positions_needed, round_metrics, sampling_probs, walk_tree)
from mfd_theory.llm.models.drafter import BlockDrafter, fold_modes, rope, block_mode_mask
from mfd_theory.llm.models.hybrid import plan_verify
from mfd_theory.llm.models.target import TargetModel

__all__ = ["POLICIES", "BatchTarget", "BatchRound", "BatchDecodeResult", "speculative_generate_batch"]

POLICIES = ("per_request", "global", "off", "auto")


# ---------------------------------------------------------------------------------------- target
@functools.lru_cache(maxsize=None)
def _row_layer_class():
    """A cache layer whose ``update`` writes each batch row's new keys at that row's own offset."""
    from transformers.cache_utils import DynamicLayer

    class RowLayer(DynamicLayer):
        owner: "BatchTarget"
        kv_index: int

        def update(self, key_states, value_states, *args, **kwargs):
            self.keys, self.values = self.owner._write(self.kv_index, key_states, value_states)
            self.is_initialized = True
            return self.keys, self.values

        def get_seq_length(self, *args, **kwargs) -> int:
            return self.owner.max_length

    return RowLayer


class _StateView:
    """One request's GDN state as the one-request hybrid code reads it (index 0 = this request)."""

    def __init__(self, conv: torch.Tensor, rec: torch.Tensor):
        self.conv_states = {0: conv}
        self.recurrent_states = {0: rec}


class _CacheView:
    def __init__(self, layers: dict):
        self.layers = layers


class _CtxProxy:
    """Stands for the verify context of the request whose GDN rows are running (the tree-aware
    functions of :class:`~mfd_theory.llm.models.hybrid.HybridTree` read their context through it)."""

    def __init__(self):
        object.__setattr__(self, "current", None)

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "current"), name)

    def __setattr__(self, name, value):
        setattr(object.__getattribute__(self, "current"), name, value)


class BatchTarget:
    """The target's batched state: per-request attention rows (and GDN states) in batch buffers.

    ``add(prompt)`` prefills one request alone through ``target`` and appends it as the last batch
    row; ``drop(keep)`` keeps the listed rows; ``verify(roots, trees)`` runs one forward over every
    row's [root, nodes]; ``commit(paths)`` keeps each row's root and accepted nodes."""

    def __init__(self, target: TargetModel):
        if not isinstance(target, TargetModel):
            target = TargetModel(target)
        self.target = target
        self.cache = target._new_cache()
        hyb = target.hybrid
        self.kv_layers = list(range(len(self.cache.layers))) if hyb is None else list(hyb.kv_layers)
        cls = _row_layer_class()
        for j, i in enumerate(self.kv_layers):
            layer = self.cache.layers[i]
            layer.__class__ = cls
            layer.owner, layer.kv_index = self, j
        self._k: list[torch.Tensor | None] = [None] * len(self.kv_layers)
        self._v: list[torch.Tensor | None] = [None] * len(self.kv_layers)
        self._conv: dict[int, torch.Tensor] = {}
        self._rec: dict[int, torch.Tensor] = {}
        self.lengths: list[int] = []
        self._write_pos: torch.Tensor | None = None
        self._pending: list[int] | None = None  # rows verified per request (root + nodes)
        self._parents: list[np.ndarray] = []
        self._hyb_ctx: list = []
        self._hyb_inputs: list[dict] = []

    @property
    def batch_size(self) -> int:
        return len(self.lengths)

    @property
    def max_length(self) -> int:
        return max(self.lengths) if self.lengths else 0

    # ------------------------------------------------------------------ membership
    @torch.no_grad()
    def add(self, ids: torch.Tensor, hidden: bool = True):
        """Prefill one request alone and append it: returns (next-token logits [V], hidden tuple)."""
        if self._pending is not None:
            raise ValueError("add: the last verification was not committed")
        t = self.target
        logits, hid = t.prefill(ids, hidden=hidden)
        n = t.length
        for j, i in enumerate(self.kv_layers):
            layer = t.cache.layers[i]
            self._k[j] = self._append_row(self._k[j], layer.keys[:, :, :n])
            self._v[j] = self._append_row(self._v[j], layer.values[:, :, :n])
        if t.hybrid is not None:
            for i in t.hybrid.gdn:
                layer = t.cache.layers[i]
                conv, rec = layer.conv_states[0], layer.recurrent_states[0]
                self._conv[i] = conv.clone() if i not in self._conv else torch.cat([self._conv[i], conv])
                self._rec[i] = rec.clone() if i not in self._rec else torch.cat([self._rec[i], rec])
        self.lengths.append(n)
        return logits, hid

    def _append_row(self, buf: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor:
        """buf [B, kvh, cap, d] plus one request's rows [1, kvh, n, d] as batch row B."""
        n = rows.shape[2]
        cap = max(n, buf.shape[2] if buf is not None else 0, 256)
        new = rows.new_zeros((1 if buf is None else buf.shape[0] + 1, rows.shape[1], cap, rows.shape[3]))
        if buf is not None:
            new[:-1, :, : buf.shape[2]] = buf
        new[-1, :, :n] = rows[0]
        return new

    def drop(self, keep: list[int]) -> None:
        """Keep batch rows ``keep`` (in that order), drop the others."""
        if self._pending is not None:
            raise ValueError("drop: the last verification was not committed")
        keep = [int(i) for i in keep]
        if keep == list(range(self.batch_size)):
            return
        if not keep:
            self._k = [None] * len(self.kv_layers)
            self._v = [None] * len(self.kv_layers)
            self._conv, self._rec, self.lengths = {}, {}, []
            return
        idx = torch.tensor(keep, device=self.target.device)
        self._k = [b.index_select(0, idx) for b in self._k]
        self._v = [b.index_select(0, idx) for b in self._v]
        self._conv = {i: c.index_select(0, idx) for i, c in self._conv.items()}
        self._rec = {i: r.index_select(0, idx) for i, r in self._rec.items()}
        self.lengths = [self.lengths[i] for i in keep]

    # ------------------------------------------------------------------ forward
    def _reserve(self, rows: int) -> None:
        for j, buf in enumerate(self._k):
            if rows > buf.shape[2]:
                cap = max(rows, 2 * buf.shape[2])
                for store in (self._k, self._v):
                    old = store[j]
                    new = old.new_zeros((*old.shape[:2], cap, old.shape[3]))
                    new[:, :, : old.shape[2]] = old
                    store[j] = new

    def _write(self, j: int, ks: torch.Tensor, vs: torch.Tensor):
        """Write a forward's rows [B, kvh, Q, d] at each request's offset; the keys it reads."""
        b, _, q, _ = ks.shape
        rows = torch.arange(b, device=ks.device)[:, None]
        self._k[j][rows, :, self._write_pos] = ks.transpose(1, 2).to(self._k[j].dtype)
        self._v[j][rows, :, self._write_pos] = vs.transpose(1, 2).to(self._v[j].dtype)
        end = self.max_length + q
        return self._k[j][:, :, :end], self._v[j][:, :, :end]

    @torch.no_grad()
    def verify(self, roots: list[int], trees: list, hidden: bool = True):
        """One forward over every request's [root, nodes] (padded to the largest tree):
        returns (logits [B, Q, V] float32, hidden_states tuple of [B, Q, H] or None)."""
        if self._pending is not None:
            raise ValueError("verify: the previous verification was not committed")
        bsz = self.batch_size
        if len(roots) != bsz or len(trees) != bsz:
            raise ValueError(f"verify: {bsz} requests in the batch, got {len(roots)} roots and {len(trees)} trees")
        t = self.target
        dev = t.device
        sizes = [0 if tr is None else len(tr) for tr in trees]
        q = max(sizes) + 1
        lengths = torch.tensor(self.lengths, device=dev)
        for b, tr in enumerate(trees):
            t._check_positions(self.lengths[b] + 1 + (int(tr.depth.max()) if sizes[b] else 0))
        ids = torch.zeros((bsz, q), dtype=torch.long)
        depth = torch.zeros((bsz, q), dtype=torch.long)
        anc = torch.zeros((bsz, q, q), dtype=torch.bool)
        anc[:, torch.arange(q), torch.arange(q)] = True  # padded rows see themselves
        for b, (root, tr) in enumerate(zip(roots, trees)):
            ids[b, 0] = int(root)
            if sizes[b]:
                n1 = sizes[b] + 1
                ids[b, 1:n1] = torch.from_numpy(np.asarray(tr.token, dtype=np.int64))
                depth[b, 1:n1] = torch.from_numpy(np.asarray(tr.depth, dtype=np.int64))
                anc[b, :n1, :n1] = torch.from_numpy(tr.ancestor_mask())
        ids, depth, anc = ids.to(dev), depth.to(dev), anc.to(dev)
        end = self.max_length + q
        self._reserve(end)
        cols = torch.arange(end, device=dev)
        vis = (cols[None, None, :] < lengths[:, None, None]).expand(bsz, q, end).clone()  # own context
        self._write_pos = lengths[:, None] + torch.arange(q, device=dev)[None]  # [B, Q]
        vis.scatter_(2, self._write_pos[:, None, :].expand(bsz, q, q), anc)
        mask = torch.zeros((bsz, 1, q, end), dtype=t.dtype, device=dev)
        mask.masked_fill_(~vis[:, None], torch.finfo(t.dtype).min)
        pos = lengths[:, None] + depth
        kwargs = {t._cache_name: self.cache}
        if t.hybrid is None:
            out = t.model(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=True,
                          output_hidden_states=hidden, **kwargs)
        else:
            with self._hybrid_verifying(trees, sizes):
                out = t.model(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=True,
                              output_hidden_states=hidden, **kwargs)
        self._pending = [s + 1 for s in sizes]
        self._parents = [np.asarray(tr.parent, dtype=np.int64) if s else np.empty(0, np.int64)
                         for tr, s in zip(trees, sizes)]
        return out.logits.float(), (out.hidden_states if hidden else None)

    @torch.no_grad()
    def commit(self, paths: list) -> None:
        """Keep each request's root and accepted nodes ``paths[b]`` (a chain from its root)."""
        if self._pending is None:
            raise ValueError("commit: nothing to commit (call verify first)")
        if len(paths) != self.batch_size:
            raise ValueError(f"commit: {self.batch_size} requests, got {len(paths)} paths")
        keeps = []
        for b, path in enumerate(paths):
            path = [int(i) for i in path]
            prev = -1
            for i in path:
                if not 0 <= i < self._pending[b] - 1 or int(self._parents[b][i]) != prev:
                    raise ValueError(f"paths[{b}]: {path} is not a chain from the root of request {b}'s tree")
                prev = i
            keeps.append([0] + [i + 1 for i in path])
        dev = self.target.device
        m = max(len(k) for k in keeps)
        lengths = torch.tensor(self.lengths, device=dev)[:, None]
        rel = torch.arange(m)[None].repeat(len(keeps), 1)
        for b, k in enumerate(keeps):
            rel[b, : len(k)] = torch.tensor(k)
        rel = rel.to(dev)
        if any(k != list(range(len(k))) for k in keeps):
            src, dst = lengths + rel, lengths + torch.arange(m, device=dev)[None]
            rows = torch.arange(len(keeps), device=dev)[:, None]
            for store in (self._k, self._v):
                for buf in store:
                    buf[rows, :, dst] = buf[rows, :, src]  # gathered first: overlap is safe
        if self.target.hybrid is not None:
            self._hybrid_commit(keeps)
        self.lengths = [n + len(k) for n, k in zip(self.lengths, keeps)]
        self._pending = None

    # ------------------------------------------------------------------ hybrid targets
    def _hybrid_verifying(self, trees, sizes):
        """GDN layers run the one-request tree rule request by request inside the batched forward."""
        hyb = self.target.hybrid
        dev = self.target.device
        proxy = _CtxProxy()
        plans = []
        for tr, s in zip(trees, sizes):
            parent = np.asarray(tr.parent) if s else np.zeros(0, np.int64)
            dep = torch.as_tensor(np.asarray(tr.depth, dtype=np.int64)) if s else torch.zeros(0, dtype=torch.long)
            ctx = plan_verify(parent, dep, hyb.kernel, dev)
            ctx.keep = torch.arange(s + 1 if hyb.gdn_commit == "select" else 1, device=dev)
            plans.append(ctx)
        self._hyb_ctx, self._hyb_inputs = plans, [{} for _ in plans]

        def stand_in(idx, module):
            def forward(hidden_states, cache=None, attention_mask=None, **kwargs):
                out = torch.zeros_like(hidden_states)
                for b, ctx in enumerate(plans):
                    rows = hidden_states[b: b + 1, : sizes[b] + 1]
                    if hyb.gdn_commit == "replay":
                        self._hyb_inputs[b][idx] = rows[0]
                    object.__setattr__(proxy, "current", ctx)
                    view = _StateView(self._conv[idx][b: b + 1], self._rec[idx][b: b + 1])
                    out[b: b + 1, : sizes[b] + 1] = hyb._run(idx, module, view, ctx, rows, **kwargs)
                return out
            return forward

        return hyb._standing_in(proxy, stand_in)

    def _hybrid_commit(self, keeps) -> None:
        hyb = self.target.hybrid
        for b, keep in enumerate(keeps):
            layers = {i: _StateView(self._conv[i][b: b + 1], self._rec[i][b: b + 1]) for i in hyb.gdn}
            hyb._ctx, hyb._inputs = self._hyb_ctx[b], self._hyb_inputs[b]
            hyb.commit(_CacheView(layers), keep)  # writes through the views into the batch rows
        self._hyb_ctx, self._hyb_inputs = [], []


# ---------------------------------------------------------------------------------------- drafter
class _BlockBatchDraft:
    """A block drafter's context cache for a batch: per layer [B, kv_heads, capacity, d], request b's
    context in rows [0, n_b) of its batch row; a round appends each request's new context rows at
    its own offset and drafts all B blocks (K modes each) in one pass."""

    def __init__(self, drafter: BlockDrafter):
        self.d = drafter
        self.k: list[torch.Tensor] | None = None
        self.v: list[torch.Tensor] | None = None
        self.n: list[int] = []

    def _reserve(self, rows: int) -> None:
        if rows > self.k[0].shape[2]:
            cap = max(rows, 2 * self.k[0].shape[2])
            for store in (self.k, self.v):
                for j, old in enumerate(store):
                    new = old.new_zeros((*old.shape[:2], cap, old.shape[3]))
                    new[:, :, : old.shape[2]] = old
                    store[j] = new

    @torch.no_grad()
    def add(self, hidden_states, prompt_ids) -> None:
        d = self.d
        attn = d.layers[0].self_attn
        like = d.fc.weight
        shape = (1, attn.num_kv_heads, 256, attn.head_dim)
        if self.k is None:
            self.k = [like.new_zeros(shape) for _ in d.layers]
            self.v = [like.new_zeros(shape) for _ in d.layers]
        else:
            self.k = [torch.cat([b, b.new_zeros((1, *b.shape[1:]))]) for b in self.k]
            self.v = [torch.cat([b, b.new_zeros((1, *b.shape[1:]))]) for b in self.v]
        self.n.append(0)
        feats = d.fuse_hidden(hidden_states)  # [1, T, H]
        self._append([None] * (len(self.n) - 1) + [feats])

    def drop(self, keep: list[int]) -> None:
        if keep == list(range(len(self.n))):
            return
        if not keep:
            self.k = self.v = None
            self.n = []
            return
        idx = torch.tensor(keep, device=self.k[0].device)
        self.k = [b.index_select(0, idx) for b in self.k]
        self.v = [b.index_select(0, idx) for b in self.v]
        self.n = [self.n[i] for i in keep]

    def fuse(self, hidden_states):
        return self.d.fuse_hidden(hidden_states)

    def _append(self, feats: list) -> None:
        """Append each request's new context features [1, t_b, H] (None: nothing new)."""
        d = self.d
        ts = [0 if f is None else f.shape[1] for f in feats]
        tmax = max(ts)
        if tmax == 0:
            return
        bsz = len(feats)
        dev = self.k[0].device
        x = self.k[0].new_zeros((bsz, tmax, d.config.hidden_size))
        for b, f in enumerate(feats):
            if ts[b]:
                x[b, : ts[b]] = f[0]
        n = torch.tensor(self.n, device=dev)
        pos = n[:, None] + torch.arange(tmax, device=dev)[None]  # [B, tmax]
        self._reserve(int(pos.max()) + 1)
        ks, vs = d._context_kv(x, pos)  # per layer [B, kvh, tmax, d]
        valid = torch.arange(tmax, device=dev)[None] < torch.tensor(ts, device=dev)[:, None]
        bi, ji = valid.nonzero(as_tuple=True)
        for buf_k, buf_v, a, c in zip(self.k, self.v, ks, vs):
            buf_k[bi, :, pos[bi, ji]] = a[bi, :, ji]
            buf_v[bi, :, pos[bi, ji]] = c[bi, :, ji]
        self.n = [a + t for a, t in zip(self.n, ts)]

    @torch.no_grad()
    def draft(self, new_feats: list, roots: list[int]):
        """Append new context features (one [1, t_b, H] or None per request), then draft every
        request's block: (log_pi [B, K], log_q [B, K, L, V])."""
        d = self.d
        self._append(new_feats)
        bsz, k, s = len(self.n), d.num_modes, d.block_size
        dev = self.k[0].device
        attn0 = d.layers[0].self_attn
        rep, hd = attn0.rep, attn0.head_dim
        n = torch.tensor(self.n, device=dev)
        end = int(n.max()) + k * s
        self._reserve(end)
        block_ids = torch.full((bsz, s), int(d.mask_token_id), dtype=torch.long, device=dev)
        block_ids[:, 0] = torch.tensor([int(r) for r in roots], device=dev)
        blk_pos = (n[:, None] + torch.arange(s, device=dev)[None]).repeat_interleave(k, dim=0)  # [B*K, S]
        write = n[:, None] + torch.arange(k * s, device=dev)[None]  # [B, K*S]: the blocks' key rows
        # mask [B, 1, rep*K*S, end]: own context, then own blocks (mode k sees mode k's block)
        dtype = d.fc.weight.dtype
        cols = torch.arange(end, device=dev)
        ctx_vis = (cols[None, None] < n[:, None, None]).expand(bsz, rep * k * s, end).clone()
        blk_vis = block_mode_mask(k, s, rep, torch.float32, dev) == 0  # [rep*K*S, K*S]
        ctx_vis.scatter_(2, write[:, None, :].expand(bsz, rep * k * s, k * s), blk_vis.expand(bsz, -1, -1))
        mask = torch.zeros((bsz, 1, rep * k * s, end), dtype=dtype, device=dev)
        mask.masked_fill_(~ctx_vis[:, None], torch.finfo(dtype).min)
        h = d._block_embeddings(block_ids)  # [B*K, S, H]
        cos, sin = d.rotary_emb(h, blk_pos)
        rows = torch.arange(bsz, device=dev)[:, None]
        for layer, buf_k, buf_v in zip(d.layers, self.k, self.v):
            a = layer.self_attn
            x = layer.input_layernorm(h)
            q = a.q_norm(a.q_proj(x).view(bsz * k, s, a.num_heads, hd)).transpose(1, 2)
            kk = a.k_norm(a.k_proj(x).view(bsz * k, s, a.num_kv_heads, hd)).transpose(1, 2)
            vv = a.v_proj(x).view(bsz * k, s, a.num_kv_heads, hd).transpose(1, 2)
            q, kk = rope(q, cos, sin), rope(kk, cos, sin)
            q = fold_modes(q, k).reshape(bsz, a.num_kv_heads, rep * k * s, hd)
            kk, vv = fold_modes(kk, k), fold_modes(vv, k)  # [B, kvh, K*S, d]
            buf_k[rows, :, write] = kk.transpose(1, 2)
            buf_v[rows, :, write] = vv.transpose(1, 2)
            o = F.scaled_dot_product_attention(q, buf_k[:, :, :end], buf_v[:, :, :end], attn_mask=mask,
                                               scale=hd ** -0.5)
            o = o.view(bsz, a.num_heads, k, s, hd).permute(0, 2, 3, 1, 4).reshape(bsz * k, s, a.num_heads * hd)
            h = h + a.o_proj(o)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        h = d.norm(h)
        log_pi = d._readout(h, bsz)  # [B, K]
        log_q = d._log_probs(h[:, 1:]).view(bsz, k, s - 1, -1)  # [B, K, L, V]
        return log_pi, log_q


class _SequentialDraft:
    """Any other drafter: one shallow copy per request, drafted one after another (a fallback for
    drafters without a batched form, e.g. the tests' oracle drafters)."""

    def __init__(self, drafter):
        self.proto = drafter
        self.rows: list = []
        self.ctx: list = []

    def add(self, hidden_states, prompt_ids) -> None:
        d = copy.copy(self.proto)
        d.reset()
        if hasattr(d, "observe_tokens"):
            d.observe_tokens(list(prompt_ids))
        self.rows.append(d)
        self.ctx.append(d.fuse_hidden(hidden_states))

    def drop(self, keep: list[int]) -> None:
        self.rows = [self.rows[i] for i in keep]
        self.ctx = [self.ctx[i] for i in keep]

    def observe(self, b: int, toks) -> None:
        if hasattr(self.rows[b], "observe_tokens"):
            self.rows[b].observe_tokens(toks)

    def fuse(self, hidden_states):
        return self.proto.fuse_hidden(hidden_states)

    def extend(self, feats: list) -> None:
        for b, f in enumerate(feats):
            if f is not None:
                self.ctx[b] = f if self.ctx[b] is None else torch.cat([self.ctx[b], f], dim=1)

    def draft(self, new_feats: list, roots: list[int]):
        self.extend(new_feats)
        pis, qs = [], []
        for b, (d, root) in enumerate(zip(self.rows, roots)):
            ctx, self.ctx[b] = self.ctx[b], None
            if ctx is None:  # nothing new since the last draft
                ctx = torch.zeros((1, 0, 1))
            lp, lq = d.draft_modes(ctx, root)
            pis.append(lp)
            qs.append(lq)
        return torch.stack(pis), torch.stack(qs)


def _draft_state(drafter):
    if type(drafter).__name__ == "DominoDrafter" or hasattr(drafter, "grow_tree") and isinstance(drafter, BlockDrafter):
        raise ValueError("drafter: batched decoding does not grow path-dependent (dartree) trees")
    if isinstance(drafter, BlockDrafter):
        return _BlockBatchDraft(drafter)
    return _SequentialDraft(drafter)


# ---------------------------------------------------------------------------------------- trees
def build_trees(method: str, log_pi: torch.Tensor, log_q: torch.Tensor, budget: int, depths: list[int]) -> list:
    """Every request's tree from one batched draft (log_pi [B, K], log_q [B, K, L, V]); request b's
    tree is cut to depth ``depths[b]`` (None where it is 0). The candidate cut runs once over all
    requests' rows; each tree equals :func:`~mfd_theory.llm.decoding.generate.build_tree` on that request alone
    (the cut is row by row, the builders the same)."""
    bsz = log_q.shape[0]
    trees: list = [None] * bsz
    live = [b for b in range(bsz) if depths[b] > 0]
    if not live:
        return trees
    k_cand = min(int(budget), log_q.shape[-1])
    if method == "chain":
        best = torch.argmax(log_pi, dim=1)  # [B]
        toks = torch.argmax(log_q[torch.arange(bsz), best], dim=-1).cpu().numpy()  # [B, L]
        for b in live:
            trees[b] = chain_tree(toks[b, : min(depths[b], int(budget))])
        return trees
    if method == "ddtree":
        marg = log_q[:, 0] if log_q.shape[1] == 1 else torch.logsumexp(log_pi[:, :, None, None] + log_q, dim=1)
        vals, ids = _topk(marg, k_cand)  # [B, L, k]
        for b in live:
            d = depths[b]
            trees[b] = product_tree(np.minimum(vals[b, :d], 0.0), budget, token_ids=ids[b, :d])
        return trees
    if method == "mfd":
        vals, ids = _topk(log_q, k_cand)  # [B, K, L, k]
        lp = log_pi.double().cpu().numpy()
        lp = lp - np.logaddexp.reduce(lp, axis=1, keepdims=True)
        for b in live:
            d = depths[b]
            trees[b] = mixture_tree(lp[b], np.minimum(vals[b, :, :d], 0.0), budget, token_ids=ids[b, :, :d])
        return trees
    raise ValueError(f"method: batched trees are built for 'chain', 'ddtree' and 'mfd', got {method!r}")


# ---------------------------------------------------------------------------------------- loop
@dataclass
class BatchRound(RoundTimes):
    """One batched round (times in seconds, shared by every request of the round)."""

    batch_size: int
    policy: str
    nodes: list[int]  # tree size per request
    accepted: list[int]  # draft tokens accepted (and emitted) per request
    emitted: list[int]
    predicted: list[float]  # exact E[accepted] per request under the decoding rule's conditionals
    t_prefill: float  # requests that joined before this round
    t_draft: float
    t_tree: float
    t_verify: float
    t_walk: float
    t_commit: float


@dataclass
class BatchDecodeResult:
    results: list[DecodeResult]  # one per prompt, in the prompts' order
    rounds: list[BatchRound] = field(default_factory=list)
    method: str = ""
    policy: str = ""
    t_total: float = 0.0
    latency: list[float] = field(default_factory=list)  # seconds from the start to each request's end

    @property
    def new_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.results)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.t_total if self.t_total > 0 else float("nan")

    @property
    def tau(self) -> float:
        """Tokens per request per round (bonus included), over every request-round."""
        per = [a + 1 for r in self.rounds for a in r.accepted]
        return float(np.mean(per)) if per else float("nan")


@dataclass
class _Req:
    index: int
    ids: torch.Tensor
    gen: torch.Generator
    result: DecodeResult
    root: int = 0
    done: bool = False
    feats: Any = None  # fused context rows [1, t, H] to feed the drafter next round
    pending: list = field(default_factory=list)  # (AR round, batch row) of rows not fused yet
    t_start: float = 0.0


def _check_policy(policy, plan) -> None:
    if policy not in POLICIES:
        raise ValueError(f"policy: must be one of {POLICIES}, got {policy!r}")
    if policy == "auto" and (plan is None or not callable(getattr(plan, "choose", None))):
        raise ValueError("plan: policy 'auto' needs a plan with choose(batch_size) -> (policy, nodes), "
                         "e.g. mfd_theory.speedup.BatchPlan")


@torch.no_grad()
def speculative_generate_batch(target, drafter, prompts, max_new_tokens: int, method: str, budget: int = 64,
                               policy: str = "per_request", temperature: float = 0.0, top_p: float = 1.0,
                               seed: int = 0, *, total_budget: int | None = None, max_batch: int | None = None,
                               eos_token_id=None, metrics: bool = True, plan=None,
                               keep_trees: bool = False, node_cap: int | None = None) -> BatchDecodeResult:
    """Decode every prompt of ``prompts`` in one batch; lossless for every request and policy.

    ``prompts``: a list of prompts, each in any form :func:`~mfd_theory.llm.decoding.generate.speculative_generate`
    takes (they may differ in length). ``method``: "ar", "chain", "ddtree" or "mfd" ("dartree" trees
    are not batched). ``policy`` (see the module docstring): "per_request" (each tree ``budget``
    nodes), "global" (``total_budget`` nodes per round, default ``budget`` x active requests, by the
    global top-N), "off" (batched AR), "auto" (``plan.choose(B)`` each round). ``max_batch``: at most
    this many requests decode at once; the others join as requests finish (continuous batching).
    Request i samples with its own generator seeded ``seed + i``. Greedy output of every request
    equals what that prompt alone decodes to (and HF ``generate``)."""
    if not isinstance(target, TargetModel):
        target = TargetModel(target)
    if method == "dartree":
        raise ValueError("method: 'dartree' grows each tree depth by depth with the drafter; batched decoding "
                         "supports 'ar', 'chain', 'ddtree' and 'mfd'")
    _check_policy(policy, plan)
    _validate(target, drafter if method != "ar" else None, method, budget, temperature, top_p, max_new_tokens)
    if total_budget is not None:
        _check_count("total_budget", total_budget, 1)
    if max_batch is not None:
        _check_count("max_batch", max_batch, 1)
    if node_cap is not None:
        _check_count("node_cap", node_cap, 1)
    for name, value in (("total_budget", total_budget), ("node_cap", node_cap)):
        if value is not None and policy not in ("global", "auto"):
            raise ValueError(f"{name}: only the global policy shares a budget (policy {policy!r} would ignore it)")
    _check_count("seed", seed, 0, 2 ** 63 - 1)
    if isinstance(prompts, (str, bytes)) or not hasattr(prompts, "__len__") or len(prompts) == 0:
        raise ValueError(f"prompts: expected a non-empty list of prompts, got {type(prompts).__name__}")
    reqs: list[_Req] = []
    for i, p in enumerate(prompts):
        try:
            ids = _prompt_ids(p)
        except ValueError as exc:
            raise ValueError(f"prompts[{i}]: {exc}") from exc
        if ids.dim() == 2 and ids.shape[0] == 1:
            ids = ids[0]
        if ids.dim() != 1 or ids.numel() == 0 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
            raise ValueError(f"prompts[{i}]: expected a non-empty sequence of integer token ids, got shape "
                             f"{tuple(ids.shape)} dtype {ids.dtype}")
        if int(ids.min()) < 0 or int(ids.max()) >= target.vocab_size:
            raise ValueError(f"prompts[{i}]: token ids must lie in [0, {target.vocab_size})")
        need = positions_needed(ids.numel(), max_new_tokens)
        if target.max_positions is not None and need > target.max_positions:
            raise ValueError(f"prompts[{i}]: a {ids.numel()}-token prompt plus {int(max_new_tokens)} new tokens needs "
                             f"{need} positions, beyond the target's context of {target.max_positions}")
        gen = torch.Generator().manual_seed(int(seed) + i)
        reqs.append(_Req(i, ids, gen, DecodeResult(tokens=[], method=method, prompt_len=int(ids.numel()))))
    eos = _eos_set(target, eos_token_id)
    dev = target.device
    speculate = method != "ar" and policy != "off"
    bt = BatchTarget(target)
    draft = _draft_state(drafter) if speculate else None  # "off" never drafts: no drafter state
    out = BatchDecodeResult(results=[r.result for r in reqs], method=method, policy=policy,
                            latency=[float("nan")] * len(reqs))
    waiting = list(reqs)
    active: list[_Req] = []
    off_rounds: list = []  # hidden states of AR rounds under "auto", until every request fused its rows
    limit = int(max_batch) if max_batch is not None else len(reqs)

    def draw(r: _Req, row: torch.Tensor) -> int:
        if temperature == 0:
            return int(torch.argmax(row))
        p = sampling_probs(row, temperature, top_p).cpu()
        return int(torch.multinomial(p, 1, generator=r.gen))

    def finish(r: _Req, now: float) -> None:
        r.done = True
        r.result.t_total = now - r.t_start
        out.latency[r.index] = now - t0

    t0 = _clock(dev)
    while waiting or active:
        ta = _clock(dev)
        while waiting and len(active) < limit:  # join: prefill alone, then one more batch row
            r = waiting.pop(0)
            r.t_start = _clock(dev)
            logits0, hidden = bt.add(r.ids, hidden=draft is not None)
            if draft is not None:
                draft.add(hidden, r.ids.tolist())
            r.root = draw(r, logits0)
            r.result.tokens.append(r.root)
            r.result.t_prefill = _clock(dev) - r.t_start
            if r.root in eos or max_new_tokens <= 1:
                r.result.stopped_by = "eos" if r.root in eos else "max_new_tokens"
                finish(r, _clock(dev))
                bt.drop(list(range(bt.batch_size - 1)))
                if draft is not None:
                    draft.drop(list(range(len(active))))
            else:
                active.append(r)
        if not active:
            continue
        bsz = len(active)
        cur_policy, nodes = policy, budget
        if policy == "auto":
            cur_policy, nodes = plan.choose(bsz)
        spec = speculate and cur_policy != "off"
        tb = _clock(dev)
        t_prefill = tb - ta
        trees: list = [None] * bsz
        if spec:
            for r in active:  # rows of AR rounds since the last draft, after any older fused rows
                if r.pending:
                    late = draft.fuse(tuple(torch.cat([off_rounds[k][i][b: b + 1, :1] for k, b in r.pending], dim=1)
                                            for i in range(len(off_rounds[0]))))
                    r.feats = late if r.feats is None else torch.cat([r.feats, late], dim=1)
                    r.pending = []
            if not any(r.pending for r in active):
                off_rounds.clear()
            log_pi, log_q = draft.draft([r.feats for r in active], [r.root for r in active])
            for r in active:
                r.feats = None
        tc = _clock(dev)
        if spec:
            n_total = None
            if cur_policy == "global":  # a plan names the total; otherwise total_budget or budget per request
                n_total = (int(nodes) if policy == "auto" else
                           int(total_budget) if total_budget is not None else int(budget) * bsz)
            cap = None
            if n_total is not None:
                cap = int(node_cap) if node_cap is not None else 2 * -(-n_total // bsz)
            build_n = min(n_total, cap) if n_total is not None else int(nodes)
            depths = []
            for b, r in enumerate(active):
                depth = int(max_new_tokens) - len(r.result.tokens) - 1
                if target.max_positions is not None:
                    depth = min(depth, target.max_positions - 1 - bt.lengths[b])
                depths.append(min(max(depth, 0), log_q.shape[2]))
            trees = build_trees(method, log_pi, log_q, build_n, depths)
            if n_total is not None:
                counts = allocate_global([t.log_score if t is not None else np.empty(0) for t in trees], n_total,
                                         cap=cap)
                trees = [None if t is None or c == 0 else _first_nodes(t, int(c)) for t, c in zip(trees, counts)]
        td = _clock(dev)
        logits, hidden = bt.verify([r.root for r in active], trees, hidden=draft is not None)
        te = _clock(dev)
        paths, emitted_all = [], []
        greedy = torch.argmax(logits, dim=-1).tolist() if temperature == 0 else None
        for b, r in enumerate(active):
            children = children_map(trees[b])
            if greedy is not None:
                path, bonus = walk_tree(children, lambda i, b=b: greedy[b][i])
            else:
                path, bonus = walk_tree(children, lambda i, b=b, r=r: draw(r, logits[b, i]))
            paths.append(path)
            emitted_all.append([int(trees[b].token[i]) for i in path] + [bonus])
        tf = _clock(dev)
        preds = []
        for b, r in enumerate(active):
            n = 0 if trees[b] is None else len(trees[b])
            dec, predicted, covered, var, dead, splices = round_metrics(trees[b], logits[b, : n + 1], temperature,
                                                                        top_p, metrics)
            preds.append(predicted)
            r._rec = (n, predicted, covered, var, dead, splices, dec)
        tg = _clock(dev)
        counts_emitted = []
        for b, r in enumerate(active):
            count = 0
            for tok in emitted_all[b]:
                r.result.tokens.append(tok)
                count += 1
                if tok in eos:
                    r.result.stopped_by = "eos"
                    r.done = True
                    break
                if len(r.result.tokens) >= max_new_tokens:
                    r.done = True
                    break
            counts_emitted.append(count)
        bt.commit(paths)
        if draft is not None:  # the committed rows' context features, fed to the drafter next round
            going = [b for b, r in enumerate(active) if not r.done]
            if going and spec:  # gather every kept row of every request, then fuse them in one call
                keeps = [[0] + [i + 1 for i in paths[b]] for b in going]
                b_idx = torch.tensor([b for b, k in zip(going, keeps) for _ in k], device=dev)
                r_idx = torch.tensor([i for k in keeps for i in k], device=dev)
                fused = draft.fuse(tuple(h[b_idx, r_idx][None] for h in hidden))[0]  # [rows, H]
                start = 0
                for b, k in zip(going, keeps):
                    active[b].feats = fused[start: start + len(k)][None]
                    start += len(k)
            elif going:  # an AR round ("auto" chose off): the round's hidden states are kept once, each
                # request notes where its root row is; they are fused when drafting resumes
                off_rounds.append(hidden)
                for b in going:
                    active[b].pending.append((len(off_rounds) - 1, b))
            if isinstance(draft, _SequentialDraft):
                for b in going:
                    draft.observe(b, [active[b].root] + emitted_all[b][:-1])
        for b, r in enumerate(active):
            r.root = emitted_all[b][-1]
        th = _clock(dev)
        keep_rows = [b for b, r in enumerate(active) if not r.done]
        for b, r in enumerate(active):
            n, predicted, covered, var, dead, splices, dec = r._rec
            r.result.steps.append(StepRecord(
                tree_size=n, accepted=min(len(paths[b]), counts_emitted[b]), emitted=counts_emitted[b],
                predicted=predicted, covered_mass=covered, dead_share=dead, dead_splices=splices,
                t_draft=tc - tb, t_tree=td - tc, t_verify=te - td, t_walk=tf - te, t_commit=th - tg,
                tree=trees[b] if keep_trees else None, node_log_cond=dec if keep_trees else None,
                predicted_var=var))
            if r.done:
                finish(r, th)
        out.rounds.append(BatchRound(
            batch_size=bsz, policy=cur_policy if spec else "off", nodes=[0 if t is None else len(t) for t in trees],
            accepted=[s.accepted for s in (r.result.steps[-1] for r in active)], emitted=counts_emitted,
            predicted=preds, t_prefill=t_prefill, t_draft=tc - tb, t_tree=td - tc, t_verify=te - td,
            t_walk=tf - te, t_commit=th - tg))
        if len(keep_rows) < bsz:
            bt.drop(keep_rows)
            if draft is not None:
                draft.drop(keep_rows)
            active = [active[b] for b in keep_rows]
    out.t_total = _clock(dev) - t0
    return out
