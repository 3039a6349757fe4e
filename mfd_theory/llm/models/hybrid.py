"""Hybrid targets: tree verification through Gated DeltaNet (GDN) layers, and their commit.

``HybridTree`` runs each GDN module of a Qwen3.5 / Qwen3.6 / Qwen3-Next target over a tree's rows
(every row from its own root path's conv window and recurrent state) inside the model's own
forward, for one request or for each request of a batch, and writes the state after the accepted
path at commit. Design, both commit designs and their memory: docs/design.md ("Hybrid targets").
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

__all__ = ["HYBRID_ARCHITECTURES", "GDN_COMMIT", "GdnRound", "HybridTree", "gdn_state_bytes", "is_hybrid_cache"]

# Hybrid causal LMs whose GDN modules read their state through the cache API used below
# (get_conv_state / get_recurrent_state / update_recurrent_state / is_recording_past).
HYBRID_ARCHITECTURES = ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen3NextForCausalLM")
GDN_COMMIT = ("replay", "select")
# The model file's functions a GDN forward calls: the two sequence-level ones (the causal conv over
# a sequence, the chunked delta rule) are swapped during a verify pass for tree-aware ones built on
# the two one-token ones.
_MODEL_FUNCTIONS = ("causal_conv1d_fn", "torch_chunk_gated_delta_rule", "causal_conv1d_update", "l2norm")


def is_hybrid_cache(cache) -> bool:
    """True when any cache layer is a linear-attention (recurrent) layer."""
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    return any(isinstance(layer, LinearAttentionCacheLayerMixin) for layer in cache.layers)


def gdn_state_bytes(config) -> dict:
    """Bytes of GDN state per sequence for a hybrid config: recurrent ``Hv x Dk x Dv`` float32 and
    conv window ``conv_dim x kernel`` in the model dtype (2 bytes assumed), per layer and in total."""
    hv, dk, dv = config.linear_num_value_heads, config.linear_key_head_dim, config.linear_value_head_dim
    hk, kernel = config.linear_num_key_heads, config.linear_conv_kernel_dim
    n_gdn = sum(t == "linear_attention" for t in config.layer_types)
    rec = hv * dk * dv * 4
    conv = (2 * hk * dk + hv * dv) * kernel * 2
    return {"gdn_layers": n_gdn, "recurrent_per_layer": rec, "conv_per_layer": conv,
            "per_snapshot": n_gdn * (rec + conv), "input_row_per_layer": config.hidden_size * 2}


class _TreeCache:
    """The cache a GDN module sees during a verify pass: it serves the committed conv window and
    recurrent state, never writes them, and collects what the module produces for the nodes."""

    def __init__(self, ctx: "_Verify", idx: int, conv: torch.Tensor, rec: torch.Tensor):
        self.ctx, self.idx = ctx, idx
        self.conv, self.rec = conv.clone(), rec  # a single-token step updates its conv window in place
        self.new_rec = None

    def get_conv_state(self, layer_idx, state_idx=0):
        return self.conv

    def get_recurrent_state(self, layer_idx, state_idx=0):
        return self.rec

    def is_recording_past(self, layer_idx):
        return False

    def update_conv_state(self, new, layer_idx=None, state_idx=0, conv_kernel_size=None, **kwargs):
        # the module's next call is its conv over what this returns: committed window, then the nodes
        self.ctx.layer = self.idx
        return torch.cat([self.conv, new], dim=-1)  # [1, C, K + N+1]

    def update_recurrent_state(self, recurrent_states, layer_idx=None, state_idx=0, **kwargs):
        self.new_rec = recurrent_states
        return recurrent_states


@dataclass
class _Verify:
    """One verify pass: rows (0 = root, then the nodes) grouped by depth, each row's parent's
    position in the previous depth, and the columns of each row's conv window after the row
    (``window`` [N+1, K]: indices into [committed window (K columns) ; rows (N+1)])."""

    rows: list[torch.Tensor]
    parent_pos: list[torch.Tensor | None]
    window: torch.Tensor
    prev_window: torch.Tensor  # [N+1, K]: the window each row's conv step starts from (its parent's)
    ancestor: torch.Tensor  # bool [N+1, N+1]: row i sees row j (j is i or one of its ancestors)
    parent_row: torch.Tensor  # [N+1] (-1 for the root)
    layer: int = -1  # the GDN layer whose forward is running
    keep: torch.Tensor | None = None  # rows whose conv window and recurrent state are kept (None: none)
    conv_out: dict = field(default_factory=dict)  # per GDN layer: the kept rows' windows [R, C, K]
    rec_out: dict = field(default_factory=dict)  # per GDN layer: the kept rows' states [R, Hv, Dk, Dv]


def _plan_verify(parent, depth, kernel: int, device) -> _Verify:
    """From node arrays (``parent`` [N], -1 for the root's children; ``depth`` [N], 1-based)."""
    parent, depth = torch.as_tensor(parent).long().cpu(), torch.as_tensor(depth).long().cpu()
    n1 = parent.numel() + 1
    prow = torch.cat([torch.tensor([-1]), parent + 1])  # [N+1]
    d = torch.cat([torch.tensor([0]), depth])  # [N+1]
    pos = torch.empty(n1, dtype=torch.long)
    window = torch.empty((n1, kernel), dtype=torch.long)
    prev_window = torch.empty((n1, kernel), dtype=torch.long)
    committed = torch.arange(kernel)
    rows, ppos = [], []
    for k in range(int(d.max()) + 1):
        r = torch.nonzero(d == k).flatten()
        if r.numel() == 0:
            raise ValueError(f"tree: no node at depth {k} below deeper nodes (nodes must form a tree)")
        pos[r] = torch.arange(r.numel())
        before = committed.expand(r.numel(), kernel) if k == 0 else window[prow[r]]  # [B, K]
        prev_window[r] = before
        window[r] = torch.cat([before[:, 1:], kernel + r[:, None]], dim=1)  # slide by the row itself
        rows.append(r.to(device))
        ppos.append(None if k == 0 else pos[prow[r]].to(device))
    anc = torch.eye(n1, dtype=torch.bool)
    for r in rows[1:]:  # depth by depth: a row sees what its parent sees, and itself
        r = r.cpu()
        anc[r] |= anc[prow[r]]
    return _Verify(rows, ppos, window.to(device), prev_window.to(device), anc.to(device), prow.to(device))


def tree_gated_delta_rule(q, k, v, g, beta, state0, ancestor, state_rows: torch.Tensor | None = None):
    """The gated delta rule over a tree, all rows at once: row i's output is what the one-token rule
    gives after running from ``state0`` along i's root path (its ancestors, then i).

    Shapes: q, k [n, Hk, Dk] (already L2-normalised when the model asks for it), v [n, Hv, Dv],
    g, beta [n, Hv], state0 [Hv, Dk, Dv]; ``ancestor`` bool [n, n] (i sees j: j is i or an ancestor),
    rows list parents first. Returns (out [n, Hv, Dv] float32, the states after rows ``state_rows``
    [R, Hv, Dk, Dv] float32, or None).

    Along one path the rule S_i = e^{g_i} S_{i-1} + k_i d_i^T, d_i = beta_i (v_i - (e^{g_i} S_{i-1})^T k_i)
    unrolls, with G_i the sum of g over the path up to i, into
        d_i + beta_i sum_{j < i on the path} e^{G_i - G_j} (k_i . k_j) d_j = beta_i (v_i - e^{G_i} S0^T k_i)
        o_i = e^{G_i} S0^T q_i + sum_{j <= i on the path} e^{G_i - G_j} (q_i . k_j) d_j,
    so for a tree "the path" is the ancestor mask: a unit lower-triangular solve for d and one masked
    product for o, as in the chunked form of the rule with the causal mask replaced by ``ancestor``.
    """
    hv, dk = v.shape[1], k.shape[-1]
    rep = hv // k.shape[1]
    q = q.float().repeat_interleave(rep, dim=1).transpose(0, 1) * dk ** -0.5  # [Hv, n, Dk]
    k = k.float().repeat_interleave(rep, dim=1).transpose(0, 1)  # [Hv, n, Dk]
    v, g, beta = v.float().transpose(0, 1), g.float().t(), beta.float().t()  # [Hv, n, Dv], [Hv, n], [Hv, n]
    n = v.shape[1]
    G = g @ ancestor.t().float()  # [Hv, n]: sum of g over each row's path (its ancestors and itself)
    s0 = state0.float()  # [Hv, Dk, Dv]
    # e^{G_i - G_j} for j an ancestor-or-self of i, 0 elsewhere (masked before exp: no inf * 0)
    diff = (G[:, :, None] - G[:, None, :]).masked_fill(~ancestor, float("-inf"))
    decay = diff.exp()  # [Hv, n, n]
    strict = decay.masked_fill(torch.eye(n, dtype=torch.bool, device=v.device), 0.0)
    a = beta[:, :, None] * (k @ k.transpose(1, 2)) * strict  # [Hv, n, n] strictly lower triangular
    eG = G.exp()[:, :, None]  # [Hv, n, 1]
    rhs = beta[:, :, None] * (v - eG * (k @ s0))  # [Hv, n, Dv]
    eye = torch.eye(n, dtype=a.dtype, device=a.device)
    d = torch.linalg.solve_triangular(eye + a, rhs, upper=False, unitriangular=True)  # [Hv, n, Dv]
    out = eG * (q @ s0) + ((q @ k.transpose(1, 2)) * decay) @ d  # [Hv, n, Dv]
    states = None
    if state_rows is not None:  # S_i = e^{G_i} S0 + sum_{j <= i on the path} e^{G_i - G_j} k_j d_j^T
        w = decay[:, state_rows]  # [Hv, R, n]
        states = eG[:, state_rows, :, None] * s0[:, None] + torch.einsum("hij,hjk,hjv->hikv", w, k, d)
        states = states.transpose(0, 1)  # [R, Hv, Dk, Dv]
    return out.transpose(0, 1), states


class HybridTree:
    """The GDN side of a hybrid :class:`~mfd_theory.llm.models.target.TargetModel`.

    Built from the HF model and a fresh cache of it: validates that every linear-attention cache
    layer belongs to a GDN module this class can drive (ValueError naming what is not), and
    records which layers hold attention KV rows (``kv_layers``) for the usual compaction.

    It keeps no sequence state: a round is :meth:`start_round` (one per request), the model's
    forward inside :meth:`verifying`, then :meth:`commit` with the kept rows. A request's GDN state
    is passed explicitly, as ``(conv window [1, C, K], recurrent state [1, Hv, Dk, Dv])`` per GDN
    layer. ``gdn_commit``: "replay" keeps each layer's input rows and reruns the accepted path at
    commit; "select" keeps every row's state and copies the last accepted one's.
    """

    def __init__(self, hf_model: nn.Module, cache, gdn_commit: str = "replay"):
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
        # the model files whose GDN functions a verify pass swaps for tree-aware ones
        self._files = list({type(m).__module__: sys.modules[type(m).__module__] for m in self.gdn.values()}.values())
        for pymod in self._files:
            missing = [name for name in _MODEL_FUNCTIONS if not callable(getattr(pymod, name, None))]
            if missing:
                raise ValueError(f"hf_model: {pymod.__name__} lacks the GDN functions {missing}")

    # ------------------------------------------------------------------ verify
    def _functions(self, cur: "_Current", orig: dict) -> dict:
        """Tree-aware stand-ins for the model file's two sequence-level GDN functions over the rows
        of ``cur.plan`` (the conv keeps the file's own one-token conv step, batched over all rows)."""
        conv_update, l2norm = orig["causal_conv1d_update"], orig["l2norm"]

        def causal_conv1d_fn(hidden_states, weight, bias=None, activation=None, **kwargs):
            # hidden_states [1, C, K + N+1]: the committed window, then every row's pre-conv input
            ctx = cur.plan
            k = weight.shape[-1]
            ext = hidden_states[0]  # [C, K + N+1]
            state = ext[:, ctx.prev_window].permute(1, 0, 2).contiguous()  # [N+1, C, K] each row's parent window
            x = ext[:, k:].t()[:, :, None]  # [N+1, C, 1]
            out = conv_update(x, state, weight, bias, activation)  # [N+1, C, 1]; state -> the row's window
            if ctx.keep is not None:
                ctx.conv_out[ctx.layer] = state[ctx.keep]
            return torch.cat([ext[None, :, :k], out[:, :, 0].t()[None]], dim=-1)  # [1, C, K + N+1]

        def torch_chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None,
                                         output_final_state=False, use_qk_l2norm_in_kernel=False, **kwargs):
            # query/key [1, N+1, Hk, Dk], value [1, N+1, Hv, Dv], g/beta [1, N+1, Hv]
            ctx = cur.plan
            q, k = query[0], key[0]
            if use_qk_l2norm_in_kernel:  # the model file's own normalisation, in float32 as its kernels do
                q, k = l2norm(q.float(), dim=-1, eps=1e-6), l2norm(k.float(), dim=-1, eps=1e-6)
            out, states = tree_gated_delta_rule(q, k, value[0], g[0], beta[0], initial_state[0], ctx.ancestor,
                                                ctx.keep)
            if ctx.keep is not None:
                ctx.rec_out[ctx.layer] = states
            return out.to(query.dtype)[None], None

        return {"causal_conv1d_fn": causal_conv1d_fn, "torch_chunk_gated_delta_rule": torch_chunk_gated_delta_rule}

    @contextlib.contextmanager
    def _swapped(self, cur: "_Current"):
        """Inside the block the model files' sequence-level GDN functions are the tree-aware ones."""
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

    def _run(self, idx: int, module: nn.Module, state: tuple, cur: "_Current", plan: _Verify, hidden_states,
             **kwargs):
        """Module ``idx``'s own forward over rows ``hidden_states`` [1, R, H] of ``plan`` from the
        committed ``state`` (conv window, recurrent state), which it reads and leaves untouched."""
        cur.plan = plan
        tc = _TreeCache(plan, idx, state[0], state[1])
        out = type(module).forward(module, hidden_states, cache=tc, attention_mask=None, **kwargs)  # [1, R, H]
        if plan.keep is not None and hidden_states.shape[1] == 1:  # the model's own one-token step ran
            plan.conv_out[idx], plan.rec_out[idx] = tc.conv, tc.new_rec
        return out

    def start_round(self, parent, depth, device) -> "GdnRound":
        """One request's round over a tree given by node arrays ``parent`` [N] (-1: a child of the
        root) and ``depth`` [N] (1-based); empty arrays for a plain AR step."""
        plan = _plan_verify(parent, depth, self.kernel, device)
        # select keeps every row's state; replay keeps the root's (one snapshot), so a round that
        # accepts no draft token (every AR step) commits without rerunning anything
        plan.keep = torch.arange(len(parent) + 1 if self.gdn_commit == "select" else 1, device=device)
        return GdnRound(plan)

    @contextlib.contextmanager
    def verifying(self, rounds: list["GdnRound"], rows: list[int], states: Callable[[int, int], tuple]):
        """Inside the block, the model's forward over B requests' rows [B, Q, H] runs every GDN layer
        request by request: request b's first ``rows[b]`` rows (root, then its nodes) as the tree of
        ``rounds[b]``, from ``states(b, layer)`` (read, never written); padded rows give 0."""
        cur = _Current()
        replay = self.gdn_commit == "replay"

        def stand_in(idx, module):
            def run(b, hidden_states, kwargs):
                if replay:
                    rounds[b].inputs[idx] = hidden_states[0]  # [rows, H]: depends on each row's path only
                return self._run(idx, module, states(b, idx), cur, rounds[b].plan, hidden_states, **kwargs)

            def forward(hidden_states, cache=None, attention_mask=None, **kwargs):
                if len(rounds) == 1 and hidden_states.shape[1] == rows[0]:  # one request, no padded rows
                    return run(0, hidden_states, kwargs)
                out = torch.zeros_like(hidden_states)
                for b, n in enumerate(rows):
                    out[b: b + 1, :n] = run(b, hidden_states[b: b + 1, :n], kwargs)
                return out
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
    def commit(self, rnd: "GdnRound", keep_rows: list[int], state: Callable[[int], tuple]) -> None:
        """Write the GDN state after ``keep_rows`` (verify rows of ``rnd``: 0 = root, then the
        accepted nodes) into ``state(layer)`` = (conv window, recurrent state), in place."""
        if self.gdn_commit == "select" or len(keep_rows) == 1:
            plan, at = rnd.plan, keep_rows[-1]
        else:  # rerun the GDN modules over the accepted path only, keeping its last row's state
            p = len(keep_rows)
            dev = rnd.plan.window.device
            plan = _plan_verify(torch.arange(-1, p - 2), torch.arange(1, p), self.kernel, dev)  # a chain
            plan.keep, at = torch.tensor([p - 1], device=dev), 0
            rows = torch.tensor(keep_rows, device=dev)
            cur = _Current()
            with self._swapped(cur):
                for idx, module in self.gdn.items():
                    self._run(idx, module, state(idx), cur, plan, rnd.inputs[idx].index_select(0, rows)[None])
        for idx in self.gdn:
            conv, rec = state(idx)
            conv.copy_(plan.conv_out[idx][at: at + 1])  # [1, C, K]
            rec.copy_(plan.rec_out[idx][at: at + 1])  # [1, Hv, Dk, Dv]


@dataclass
class GdnRound:
    """One request's GDN side of one verify pass, handed back at commit: the plan over its tree's
    rows (and the states kept of them), and with "replay" each GDN layer's input rows [N+1, H]."""

    plan: _Verify
    inputs: dict = field(default_factory=dict)


class _Current:
    """The plan whose rows the swapped GDN functions serve (set before each module's forward)."""

    plan: _Verify | None = None
