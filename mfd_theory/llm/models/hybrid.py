"""Hybrid targets: tree verification through Gated DeltaNet (GDN) layers, and their commit.

``HybridTree`` runs each GDN module of a Qwen3.5 / Qwen3.6 / Qwen3-Next target over the packed rows
of a *forest* (one tree per request, one request for the one-request decoder; every row from its
own root path's conv window and recurrent state) inside the model's own forward, and at commit
writes each request's state after its accepted path. Design, the commit designs and their
memory: docs/design.md ("Hybrid targets").
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import nn

__all__ = ["HYBRID_ARCHITECTURES", "GDN_COMMIT", "GdnRound", "HybridTree", "forest_gated_delta_rule",
           "gdn_state_bytes", "is_hybrid_cache", "tree_gated_delta_rule"]

# Hybrid causal LMs whose GDN modules read their state through the cache API used below
# (get_conv_state / get_recurrent_state / update_recurrent_state / is_recording_past).
HYBRID_ARCHITECTURES = ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen3NextForCausalLM")
# path: keep each row's delta-rule terms, compute the accepted path's last state at commit;
# replay: keep each layer's input rows, rerun the GDN modules over the accepted path at commit;
# select: compute every row's state during the verify, copy the last accepted one's at commit
GDN_COMMIT = ("path", "replay", "select")
# The model file's functions a GDN forward calls: the two sequence-level ones (the causal conv over
# a sequence, the chunked delta rule) are swapped during a verify pass for forest-aware ones built
# on the two one-token ones.
_MODEL_FUNCTIONS = ("causal_conv1d_fn", "torch_chunk_gated_delta_rule", "causal_conv1d_update", "l2norm")


def is_hybrid_cache(cache) -> bool:
    """True when any cache layer is a linear-attention (recurrent) layer."""
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    return any(isinstance(layer, LinearAttentionCacheLayerMixin) for layer in cache.layers)


def gdn_state_bytes(config) -> dict:
    """Bytes of GDN state per sequence for a hybrid config: recurrent ``Hv x Dk x Dv`` float32 and
    conv window ``conv_dim x kernel`` in the model dtype (2 bytes assumed), per layer and in total;
    and per verify row and layer what each commit design keeps: the input row (replay, model
    dtype) or the row's key, delta and path decay (path, float32)."""
    hv, dk, dv = config.linear_num_value_heads, config.linear_key_head_dim, config.linear_value_head_dim
    hk, kernel = config.linear_num_key_heads, config.linear_conv_kernel_dim
    n_gdn = sum(t == "linear_attention" for t in config.layer_types)
    rec = hv * dk * dv * 4
    conv = (2 * hk * dk + hv * dv) * kernel * 2
    return {"gdn_layers": n_gdn, "recurrent_per_layer": rec, "conv_per_layer": conv,
            "per_snapshot": n_gdn * (rec + conv), "input_row_per_layer": config.hidden_size * 2,
            "path_row_per_layer": hv * (dk + dv + 1) * 4 + (2 * hk * dk + hv * dv) * 2}


# ------------------------------------------------------------------------------------ the rule
def forest_gated_delta_rule(q, k, v, g, beta, state0, ancestor):
    """The gated delta rule over B trees at once, each padded to Q rows: row i of tree b gives what
    the one-token rule gives after running from ``state0[b]`` along i's root path.

    Shapes: q, k [B, Q, Hk, Dk] (already L2-normalised when the model asks for it), v [B, Q, Hv,
    Dv], g, beta [B, Q, Hv] (0 on padded rows), state0 [B, Hv, Dk, Dv]; ``ancestor`` bool [B, Q, Q]
    (i sees j: j is i or an ancestor; a padded row sees itself only). Returns (out [B, Q, Hv, Dv]
    float32, and the terms any row's state is made of: k [B, Hv, Q, Dk], d [B, Hv, Q, Dv] and G
    [B, Hv, Q], float32; see :func:`path_states`).

    Along one path the rule S_i = e^{g_i} S_{i-1} + k_i d_i^T, d_i = beta_i (v_i - (e^{g_i} S_{i-1})^T k_i)
    unrolls, with G_i the sum of g over the path up to i, into
        d_i + beta_i sum_{j < i on the path} e^{G_i - G_j} (k_i . k_j) d_j = beta_i (v_i - e^{G_i} S0^T k_i)
        o_i = e^{G_i} S0^T q_i + sum_{j <= i on the path} e^{G_i - G_j} (q_i . k_j) d_j,
    so for a tree "the path" is the ancestor mask: a unit lower-triangular solve for d and one masked
    product for o, as in the chunked form of the rule with the causal mask replaced by ``ancestor``.
    """
    hv, dk = v.shape[2], k.shape[-1]
    rep = hv // k.shape[2]
    q = q.float().repeat_interleave(rep, dim=2).transpose(1, 2) * dk ** -0.5  # [B, Hv, Q, Dk]
    k = k.float().repeat_interleave(rep, dim=2).transpose(1, 2)  # [B, Hv, Q, Dk]
    v, g, beta = v.float().transpose(1, 2), g.float().transpose(1, 2), beta.float().transpose(1, 2)  # [B, Hv, Q, *]
    n = v.shape[2]
    anc = ancestor[:, None]  # [B, 1, Q, Q]
    G = torch.einsum("bhj,bij->bhi", g, ancestor.float())  # [B, Hv, Q]: sum of g over each row's path
    s0 = state0.float()  # [B, Hv, Dk, Dv]
    # e^{G_i - G_j} for j an ancestor-or-self of i, 0 elsewhere (masked before exp: no inf * 0)
    decay = (G[..., :, None] - G[..., None, :]).masked_fill(~anc, float("-inf")).exp()  # [B, Hv, Q, Q]
    eye = torch.eye(n, dtype=torch.bool, device=v.device)
    a = beta[..., None] * (k @ k.transpose(-1, -2)) * decay.masked_fill(eye, 0.0)  # strictly lower triangular
    eG = G.exp()[..., None]  # [B, Hv, Q, 1]
    rhs = beta[..., None] * (v - eG * (k @ s0))  # [B, Hv, Q, Dv]
    d = torch.linalg.solve_triangular(torch.eye(n, dtype=a.dtype, device=a.device) + a, rhs, upper=False,
                                      unitriangular=True)  # [B, Hv, Q, Dv]
    out = eG * (q @ s0) + ((q @ k.transpose(-1, -2)) * decay) @ d  # [B, Hv, Q, Dv]
    return out.transpose(1, 2), k, d, G


def path_states(k, d, G, ancestor, state0, rows) -> torch.Tensor:
    """The recurrent state after row ``rows[b]`` of tree b [B, Hv, Dk, Dv]:
    S_i = e^{G_i} S0 + sum_{j <= i on the path} e^{G_i - G_j} k_j d_j^T, from
    :func:`forest_gated_delta_rule`'s terms (k [B, Hv, Q, Dk], d [B, Hv, Q, Dv], G [B, Hv, Q])."""
    b = torch.arange(k.shape[0], device=k.device)
    gi = G[b, :, rows]  # [B, Hv]
    w = (gi[..., None] - G).masked_fill(~ancestor[b, rows][:, None], float("-inf")).exp()  # [B, Hv, Q]
    return gi.exp()[..., None, None] * state0.float() + torch.einsum("bhj,bhjk,bhjv->bhkv", w, k, d)


def tree_gated_delta_rule(q, k, v, g, beta, state0, ancestor, state_rows: torch.Tensor | None = None):
    """:func:`forest_gated_delta_rule` for one tree: q, k [n, Hk, Dk], v [n, Hv, Dv], g, beta [n, Hv],
    state0 [Hv, Dk, Dv], ``ancestor`` bool [n, n]. Returns (out [n, Hv, Dv] float32, the states after
    rows ``state_rows`` [R, Hv, Dk, Dv] float32, or None)."""
    out, kk, d, G = forest_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None], state0[None],
                                            ancestor[None])
    states = None
    if state_rows is not None:
        rows = torch.as_tensor(state_rows, device=v.device).reshape(-1)
        r = rows.numel()
        states = path_states(kk.expand(r, -1, -1, -1), d.expand(r, -1, -1, -1), G.expand(r, -1, -1),
                             ancestor[None].expand(r, -1, -1), state0[None].expand(r, -1, -1, -1), rows)
    return out[0], states


# ------------------------------------------------------------------------------------ the plan
@dataclass
class _Forest:
    """One verify pass over B trees, their rows packed one tree after another (each tree's root
    first, then its nodes): row r is row ``local[r]`` of tree ``tree[r]``. ``window`` [R, K]: the
    columns of each row's conv window after the row, ``prev_window`` [R, K] the window its own
    step starts from (its parent's, or its request's committed window), both indices into
    [committed windows (B x K columns) ; the rows (R)]. ``pad`` [B, Q]: the packed row of each
    tree row, R for padding; ``ancestor`` bool [B, Q, Q] per tree (a padded row sees itself)."""

    start: np.ndarray  # [B + 1]: tree b's rows are start[b]:start[b + 1]
    window: torch.Tensor
    prev_window: torch.Tensor
    pad: torch.Tensor  # [B, Q]
    flat: torch.Tensor  # [R]: each packed row's place in the [B * Q] padded layout
    ancestor: torch.Tensor  # [B, Q, Q]
    layer: int = -1  # the GDN layer whose forward is running
    mode: str = "path"
    conv_in: dict = field(default_factory=dict)  # per GDN layer: [C, B*K + R] the conv's input columns
    terms: dict = field(default_factory=dict)  # per GDN layer: (k, d, G) of forest_gated_delta_rule
    states: dict = field(default_factory=dict)  # "select": per GDN layer, every row's state [B, Hv, Q, Dk, Dv]
    step: dict = field(default_factory=dict)  # one row, the model's own one-token step: (conv, rec) after it

    @property
    def batch(self) -> int:
        return self.start.shape[0] - 1

    @property
    def rows(self) -> int:
        return int(self.start[-1])


def _plan_forest(parents: list, kernel: int, device, depths: list | None = None) -> _Forest:
    """From each tree's ``parent`` [N_b] (-1 for the root's children; empty for no tree) and, when
    known, its ``depth`` [N_b] (1-based; else read off the parents)."""
    B = len(parents)
    sizes = np.array([len(p) + 1 for p in parents], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(sizes)])
    R, Q = int(start[-1]), int(sizes.max())
    tree = np.repeat(np.arange(B), sizes)  # [R]
    local = np.arange(R) - start[tree]
    par = np.full(R, -1, dtype=np.int64)  # packed parent row, -1 for the roots
    depth = np.zeros(R, dtype=np.int64)
    for b, p in enumerate(parents):
        if len(p):  # node i of tree b is row start[b] + 1 + i; parent -1 is the root's row start[b]
            par[start[b] + 1: start[b + 1]] = start[b] + 1 + np.asarray(p, dtype=np.int64)
            if depths is not None:
                depth[start[b] + 1: start[b + 1]] = np.asarray(depths[b], dtype=np.int64)
    if depths is None:
        for r in range(R):  # parents precede children
            if par[r] >= 0:
                depth[r] = depth[par[r]] + 1
    prev = np.empty((R, kernel), dtype=np.int64)
    window = np.empty((R, kernel), dtype=np.int64)
    anc = np.zeros((B, Q, Q), dtype=bool)
    anc[:, np.arange(Q), np.arange(Q)] = True
    for k in range(int(depth.max()) + 1):  # depth by depth over the whole forest
        r = np.flatnonzero(depth == k)
        prev[r] = (tree[r, None] * kernel + np.arange(kernel)[None]) if k == 0 else window[par[r]]
        window[r] = np.concatenate([prev[r][:, 1:], B * kernel + r[:, None]], axis=1)  # slide by the row itself
        if k:
            anc[tree[r], local[r]] |= anc[tree[r], local[par[r]]]  # a row sees what its parent sees
    pad = np.full((B, Q), R, dtype=np.int64)
    pad[tree, local] = np.arange(R)
    to = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
    return _Forest(start, to(window), to(prev), to(pad), to(tree * Q + local), to(anc))


def _plan_verify(parent, depth, kernel: int, device) -> _Forest:
    """One tree's plan (a forest of one)."""
    return _plan_forest([np.asarray(parent)], kernel, device, [np.asarray(depth)])


class _ForestCache:
    """The cache a GDN module sees during a verify pass: it serves the committed conv windows and
    recurrent states of all B requests ([B, C, K], [B, Hv, Dk, Dv]), never writes them, and records
    what a single-row pass (the model's own one-token step) produces."""

    def __init__(self, plan: _Forest, idx: int, conv: torch.Tensor, rec: torch.Tensor):
        self.plan, self.idx = plan, idx
        self.conv, self.rec = conv.clone(), rec  # a one-token step updates its conv window in place
        self.new_rec = None

    def get_conv_state(self, layer_idx, state_idx=0):
        return self.conv

    def get_recurrent_state(self, layer_idx, state_idx=0):
        return self.rec

    def is_recording_past(self, layer_idx):
        return False

    def update_conv_state(self, new, layer_idx=None, state_idx=0, conv_kernel_size=None, **kwargs):
        # the module's next call is its conv over what this returns: committed windows, then the rows
        self.plan.layer = self.idx
        c = self.conv.shape[1]
        return torch.cat([self.conv.permute(1, 0, 2).reshape(1, c, -1), new], dim=-1)  # [1, C, B*K + R]

    def update_recurrent_state(self, recurrent_states, layer_idx=None, state_idx=0, **kwargs):
        self.new_rec = recurrent_states
        return recurrent_states


class HybridTree:
    """The GDN side of a hybrid :class:`~mfd_theory.llm.models.target.TargetModel`.

    Built from the HF model and a fresh cache of it: validates that every linear-attention cache
    layer belongs to a GDN module this class can drive (ValueError naming what is not), and
    records which layers hold attention KV rows (``kv_layers``) for the usual compaction.

    It keeps no sequence state: a round is :meth:`start_round` (B trees, one per request), the
    model's forward over their packed rows inside :meth:`verifying`, then :meth:`commit` with each
    request's kept rows. The requests' GDN state is passed explicitly, ``states(layer) -> (conv
    windows [B, C, K], recurrent states [B, Hv, Dk, Dv])``, read during the verify and written at
    commit. ``gdn_commit`` (``GDN_COMMIT``): "path" keeps each row's delta-rule terms and computes
    the accepted path's last state at commit; "replay" keeps each layer's input rows and reruns the
    modules over the accepted paths; "select" computes every row's state in the verify.
    """

    def __init__(self, hf_model: nn.Module, cache, gdn_commit: str = "path"):
        from transformers.cache_utils import DynamicLayer, LinearAttentionLayer

        arch = type(hf_model).__name__
        if arch not in HYBRID_ARCHITECTURES:
            raise ValueError(f"hf_model: architecture {arch} has linear-attention cache layers; tree verification "
                             f"supports the hybrids {list(HYBRID_ARCHITECTURES)}")
        if gdn_commit not in GDN_COMMIT:
            raise ValueError(f"gdn_commit: must be one of {GDN_COMMIT}, got {gdn_commit!r}")
        odd = sorted({type(layer).__name__ for layer in cache.layers
                      if type(layer) not in (DynamicLayer, LinearAttentionLayer)})
        if odd:
            raise ValueError(f"hf_model: cache layers {odd} are not supported (full attention and linear "
                             "attention only)")
        decoder = getattr(getattr(hf_model, "model", None), "layers", None)
        if decoder is None or len(decoder) != len(cache.layers):
            raise ValueError(f"hf_model: {arch} has no decoder layer list matching its {len(cache.layers)} cache layers")
        self.gdn: dict[int, nn.Module] = {}
        self.kv_layers: list[int] = []
        for i, layer in enumerate(cache.layers):
            if type(layer) is DynamicLayer:
                self.kv_layers.append(i)
                continue
            module = getattr(decoder[i], "linear_attn", None)
            if module is None or not type(module).__name__.endswith("GatedDeltaNet"):
                raise ValueError(f"hf_model: layer {i} has a linear-attention cache but no Gated DeltaNet module "
                                 f"({type(module).__name__})")
            self.gdn[i] = module
        self.gdn_commit = gdn_commit
        self.kernel = int(next(iter(self.gdn.values())).conv_kernel_size) if self.gdn else 0
        # the model files whose GDN functions a verify pass swaps for forest-aware ones
        self._files = list({type(m).__module__: sys.modules[type(m).__module__] for m in self.gdn.values()}.values())
        for pymod in self._files:
            missing = [name for name in _MODEL_FUNCTIONS if not callable(getattr(pymod, name, None))]
            if missing:
                raise ValueError(f"hf_model: {pymod.__name__} lacks the GDN functions {missing}")

    # ------------------------------------------------------------------ verify
    def _functions(self, cur: "_Current", orig: dict) -> dict:
        """Forest-aware stand-ins for the model file's two sequence-level GDN functions over the
        rows of ``cur.plan`` (the conv keeps the file's own one-token conv step, batched over all rows)."""
        conv_update, l2norm = orig["causal_conv1d_update"], orig["l2norm"]

        def causal_conv1d_fn(hidden_states, weight, bias=None, activation=None, **kwargs):
            # hidden_states [1, C, B*K + R]: the committed windows, then every row's pre-conv input
            plan = cur.plan
            k0 = plan.batch * weight.shape[-1]
            ext = hidden_states[0]  # [C, B*K + R]
            state = ext[:, plan.prev_window].permute(1, 0, 2).contiguous()  # [R, C, K] each row's parent window
            x = ext[:, k0:].t()[:, :, None]  # [R, C, 1]
            out = conv_update(x, state, weight, bias, activation)  # [R, C, 1]
            plan.conv_in[plan.layer] = ext  # a row's window after it is ext[:, window[row]]
            return torch.cat([ext[None, :, :k0], out[:, :, 0].t()[None]], dim=-1)  # [1, C, B*K + R]

        def torch_chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None,
                                         output_final_state=False, use_qk_l2norm_in_kernel=False, **kwargs):
            # query/key [1, R, Hk, Dk], value [1, R, Hv, Dv], g/beta [1, R, Hv]; initial_state [B, Hv, Dk, Dv]
            plan = cur.plan
            q, k = query[0], key[0]
            if use_qk_l2norm_in_kernel:  # the model file's own normalisation, in float32 as its kernels do
                q, k = l2norm(q.float(), dim=-1, eps=1e-6), l2norm(k.float(), dim=-1, eps=1e-6)

            def padded(x):  # [R, ...] -> [B, Q, ...], padded rows 0 (they add nothing to any path)
                return torch.cat([x, x.new_zeros((1, *x.shape[1:]))])[plan.pad]

            out, kk, d, G = forest_gated_delta_rule(padded(q), padded(k), padded(value[0]), padded(g[0]),
                                                    padded(beta[0]), initial_state, plan.ancestor)
            if plan.mode == "select":  # every row's state: S_i = e^{G_i} S0 + sum_j e^{G_i - G_j} k_j d_j^T
                decay = (G[..., :, None] - G[..., None, :]).masked_fill(~plan.ancestor[:, None],
                                                                      float("-inf")).exp()  # [B, Hv, Q, Q]
                plan.states[plan.layer] = (G.exp()[..., None, None] * initial_state.float()[:, :, None]
                                           + torch.einsum("bhij,bhjk,bhjv->bhikv", decay, kk, d))  # [B, Hv, Q, Dk, Dv]
            else:
                plan.terms[plan.layer] = (kk, d, G)
            out = out.reshape(-1, *out.shape[2:])[plan.flat]  # [R, Hv, Dv]
            return out.to(query.dtype)[None], None

        return {"causal_conv1d_fn": causal_conv1d_fn, "torch_chunk_gated_delta_rule": torch_chunk_gated_delta_rule}

    @contextlib.contextmanager
    def _swapped(self, cur: "_Current"):
        """Inside the block the model files' sequence-level GDN functions are the forest-aware ones."""
        saved = []
        try:
            for pymod in self._files:
                orig = {name: getattr(pymod, name) for name in _MODEL_FUNCTIONS}
                saved.append((pymod, orig))
                for name, fn in self._functions(cur, orig).items():
                    setattr(pymod, name, fn)
            yield
        finally:
            for pymod, orig in saved:
                for name, fn in orig.items():
                    setattr(pymod, name, fn)

    def _run(self, idx: int, module: nn.Module, state: tuple, cur: "_Current", plan: _Forest, hidden_states,
             **kwargs):
        """Module ``idx``'s own forward over the packed rows ``hidden_states`` [1, R, H] of ``plan``
        from the committed ``state`` (conv windows, recurrent states), which it reads and leaves."""
        cur.plan = plan
        tc = _ForestCache(plan, idx, state[0], state[1])
        out = type(module).forward(module, hidden_states, cache=tc, attention_mask=None, **kwargs)  # [1, R, H]
        if hidden_states.shape[1] == 1:  # the model's own one-token step ran (one request, no tree)
            plan.step[idx] = (tc.conv, tc.new_rec)
        return out

    def start_round(self, parents: list, device, depths: list | None = None) -> "GdnRound":
        """A round over B trees given by their ``parent`` arrays (-1: a child of the root; an empty
        array for a request verifying its root alone, an AR step) and ``depths`` (1-based)."""
        plan = _plan_forest(parents, self.kernel, device, depths)
        plan.mode = self.gdn_commit
        return GdnRound(plan)

    @contextlib.contextmanager
    def verifying(self, rnd: "GdnRound", states: Callable[[int], tuple]):
        """Inside the block, the model's forward over the round's packed rows [1, R, H] runs every GDN
        layer over the whole forest at once, from ``states(layer)`` (read, never written)."""
        cur = _Current()
        replay = self.gdn_commit == "replay"

        def stand_in(idx, module):
            def forward(hidden_states, cache=None, attention_mask=None, **kwargs):
                if replay:
                    rnd.inputs[idx] = hidden_states[0]  # [R, H]: depends on each row's path only
                return self._run(idx, module, states(idx), cur, rnd.plan, hidden_states, **kwargs)
            return forward

        try:
            with self._swapped(cur):
                for idx, module in self.gdn.items():
                    module.forward = stand_in(idx, module)
                yield
        finally:
            for module in self.gdn.values():
                module.__dict__.pop("forward", None)

    # ------------------------------------------------------------------ commit
    @torch.no_grad()
    def commit(self, rnd: "GdnRound", keeps: list, states: Callable[[int], tuple]) -> None:
        """Write each request's GDN state after its kept rows ``keeps[b]`` (rows of its tree: 0 = the
        root, then the accepted nodes, a chain) into ``states(layer)``, in place."""
        plan = rnd.plan
        dev = plan.window.device
        if len(keeps) != plan.batch:
            raise ValueError(f"keeps: {plan.batch} trees in the round, got {len(keeps)} kept paths")
        if self.gdn_commit == "replay" and any(len(k) > 1 for k in keeps):
            # rerun the GDN modules over the accepted paths only (a forest of chains), then commit that
            chains = [np.arange(-1, len(k) - 2) for k in keeps]
            sub = _plan_forest(chains, self.kernel, dev)
            sub.mode = "path"
            rows = torch.tensor([int(plan.start[b]) + int(r) for b, k in enumerate(keeps) for r in k], device=dev)
            cur = _Current()
            with self._swapped(cur):
                for idx, module in self.gdn.items():
                    self._run(idx, module, states(idx), cur, sub, rnd.inputs[idx].index_select(0, rows)[None])
            self._write(sub, [list(range(len(k))) for k in keeps], states)
            return
        self._write(plan, keeps, states)

    def _write(self, plan: _Forest, keeps: list, states) -> None:
        """The states after each tree's last kept row, from what the verify pass kept."""
        dev = plan.window.device
        last = torch.tensor([int(k[-1]) for k in keeps], device=dev)  # [B] each tree's last kept row
        packed = torch.as_tensor(plan.start[:-1], device=dev) + last  # [B]
        for idx in self.gdn:
            conv, rec = states(idx)
            if idx in plan.step:  # one row, the model's own step
                c, r = plan.step[idx]
                conv.copy_(c)
                rec.copy_(r)
                continue
            ext = plan.conv_in[idx]  # [C, B*K + R]
            conv.copy_(ext[:, plan.window[packed]].permute(1, 0, 2))  # [B, C, K]
            if plan.mode == "select":
                b = torch.arange(plan.batch, device=dev)
                rec.copy_(plan.states[idx][b, :, last])  # [B, Hv, Dk, Dv]
            else:
                kk, d, G = plan.terms[idx]
                rec.copy_(path_states(kk, d, G, plan.ancestor, rec, last))  # [B, Hv, Dk, Dv]


@dataclass
class GdnRound:
    """The GDN side of one verify pass, handed back at commit: the plan over its forest's rows (and
    what the pass kept of them), and with "replay" each GDN layer's input rows [R, H]."""

    plan: _Forest
    inputs: dict = field(default_factory=dict)


class _Current:
    """The plan whose rows the swapped GDN functions serve (set before each module's forward)."""

    plan: _Forest | None = None
