"""Hybrid targets: tree verification through Gated DeltaNet (GDN) layers, and their commit.

Qwen3.5 / Qwen3.6 (``Qwen3_5ForCausalLM``, ``Qwen3_5MoeForCausalLM``) and Qwen3-Next
(``Qwen3NextForCausalLM``) interleave full-attention layers with GDN linear-attention layers
(``config.layer_types``). A GDN layer keeps no per-token keys and values: per sequence it carries a
*conv window* (the last ``kernel`` pre-convolution inputs, ``[1, conv_dim, kernel]``) and a
*recurrent state* ``S [1, Hv, Dk, Dv]`` (float32), advanced per token by the gated delta rule
``S <- exp(g) S;  S <- S + k (beta (v - S^T k))^T;  o = S^T q``. Attention layers can look at a tree
through an ancestor mask; a recurrence cannot: every node needs the window and the state of *its
own* root path. So during a tree-verification forward each GDN module is run by
:class:`HybridTree` depth by depth instead of once over the sequence:

* the nodes of one depth form a batch of one-token sequences; each starts from its parent's conv
  window and recurrent state (the root from the committed ones in the cache);
* the batch goes through the module's *own* forward (the model's projections, its
  ``causal_conv1d_update`` and ``torch_recurrent_gated_delta_rule``, its gated norm and output
  projection), handed a small stand-in cache (:class:`_DepthCache`) that serves the parents'
  states and collects the nodes' new ones. No model code is copied, and the per-token math is
  exactly what the model runs when it decodes one token, so every node's output equals the
  sequential forward of its path;
* sequential steps per GDN layer = tree depth + 1 (root included), not the number of nodes.

Attention layers, embeddings, norms, MLPs (dense or MoE) and the LM head run unchanged inside the
model's own forward with the usual float ancestor mask; only the GDN modules' ``forward`` is
swapped for the duration of the verify call (restored in a ``finally``).

Commit writes the GDN state of the last accepted node into the cache. Two designs (``gdn_commit``):

``"replay"`` (default)
    keep each GDN layer's *input* rows of the verify pass (``[N+1, H]`` per layer, the model's
    dtype) and, at commit, run every GDN module once over the accepted path ``[root, accepted...]``
    (at most L+1 tokens) from the round's starting state with the real cache: the module's own
    cached multi-token path updates conv window and recurrent state in place. A node's GDN inputs
    depend only on its path, so these are exactly the inputs a sequential forward of the accepted
    tokens would feed the layer: no other layer is rerun. During verify only two depths of
    recurrent states are alive per layer (parents and children).
``"select"``
    keep every node's conv window and recurrent state of every GDN layer, and copy the last
    accepted node's into the cache: no recomputation, but ``(N+1) x Hv x Dk x Dv`` float32 per GDN
    layer held until commit (about 9 GiB for a 64-node tree on a Qwen3.5-27B-shaped stack).

Both give the committed sequence's state up to float rounding (the replay runs HF's chunked
kernel over the path, the tree the per-token one); ``experiments/bench_decode`` times both.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["HYBRID_ARCHITECTURES", "GDN_COMMIT", "HybridTree", "gdn_state_bytes", "is_hybrid_cache"]

# Hybrid causal LMs whose GDN modules read their state through the cache API used below
# (get_conv_state / get_recurrent_state / update_recurrent_state / is_recording_past).
HYBRID_ARCHITECTURES = ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen3NextForCausalLM")
GDN_COMMIT = ("replay", "select")


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


class _DepthCache:
    """The cache a GDN module sees while one depth of the tree runs through it: the parents' conv
    windows ``[B, conv_dim, kernel]`` (updated in place by the module's conv step into the nodes'
    windows) and recurrent states ``[B, Hv, Dk, Dv]``; it collects the nodes' new states."""

    def __init__(self, conv: torch.Tensor, rec: torch.Tensor):
        self.conv, self.rec, self.new_rec = conv, rec, None

    def get_conv_state(self, layer_idx, state_idx=0):
        return self.conv

    def get_recurrent_state(self, layer_idx, state_idx=0):
        return self.rec

    def is_recording_past(self, layer_idx):
        return False

    def update_recurrent_state(self, recurrent_states, layer_idx=None, state_idx=0, **kwargs):
        self.new_rec = recurrent_states
        return recurrent_states

    def update_conv_state(self, *args, **kwargs):  # only reached by multi-token inputs, never here
        raise RuntimeError("tree verification feeds GDN layers one token per node")


@dataclass
class _Depths:
    """Rows of one verify pass grouped by depth (row 0 = root): per depth the rows, and for each row
    the position of its parent within the previous depth's rows."""

    rows: list[torch.Tensor]
    parent_pos: list[torch.Tensor | None]
    parent_row: torch.Tensor  # [N+1] (-1 for the root)


def _depths(parent: torch.Tensor, depth: torch.Tensor, device) -> _Depths:
    """From node arrays (``parent`` [N], -1 for the root's children; ``depth`` [N], 1-based)."""
    parent, depth = torch.as_tensor(parent).long().cpu(), torch.as_tensor(depth).long().cpu()
    n1 = parent.numel() + 1
    prow = torch.cat([torch.tensor([-1]), parent + 1])  # [N+1]
    d = torch.cat([torch.tensor([0]), depth])  # [N+1]
    pos = torch.empty(n1, dtype=torch.long)
    rows, ppos = [], []
    for k in range(int(d.max()) + 1):
        r = torch.nonzero(d == k).flatten()
        if r.numel() == 0:
            raise ValueError(f"tree: no node at depth {k} below deeper nodes (nodes must form a tree)")
        pos[r] = torch.arange(r.numel())
        rows.append(r.to(device))
        ppos.append(None if k == 0 else pos[prow[r]].to(device))
    return _Depths(rows, ppos, prow)


class HybridTree:
    """The GDN side of a hybrid :class:`~mfd_theory.llm.target.TargetModel`.

    Built from the HF model and a fresh cache of it: validates that every linear-attention cache
    layer belongs to a GDN module this class can drive (ValueError naming what is not), and
    records which layers hold attention KV rows (``kv_layers``) for the usual compaction.
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
        self._inputs: dict[int, torch.Tensor] = {}  # replay: GDN input rows of the last verify
        self._conv: dict[int, torch.Tensor] = {}  # select: every node's conv window
        self._rec: dict[int, torch.Tensor] = {}  # select: every node's recurrent state

    # ------------------------------------------------------------------ verify
    def _tree_forward(self, idx: int, module: nn.Module, kv_cache, dep: _Depths):
        """The stand-in ``forward`` of GDN module ``idx`` for one verify pass."""
        cls_forward = type(module).forward
        select = self.gdn_commit == "select"

        def forward(hidden_states, cache=None, attention_mask=None, **kwargs):
            h = hidden_states[0]  # [N+1, H]
            layer = kv_cache.layers[idx]
            conv0, rec0 = layer.conv_states[0], layer.recurrent_states[0]  # [1, C, K], [1, Hv, Dk, Dv]
            out = torch.empty_like(h)
            conv_all = conv0.new_empty((h.shape[0], *conv0.shape[1:]))  # [N+1, C, K]
            recs = [] if select else None
            prev_rec = rec0
            for k, rows in enumerate(dep.rows):
                if k == 0:
                    conv, rec = conv0.clone(), rec0
                else:
                    prow = dep.rows[k - 1][dep.parent_pos[k]]
                    conv, rec = conv_all[prow], prev_rec[dep.parent_pos[k]]  # gathered copies
                dc = _DepthCache(conv, rec)
                o = cls_forward(module, h[rows][:, None], cache=dc, attention_mask=None, **kwargs)  # [B, 1, H]
                out[rows] = o[:, 0]
                conv_all[rows] = dc.conv  # the module's conv step moved each window on by the node
                prev_rec = dc.new_rec  # [B, Hv, Dk, Dv] float32
                if select:
                    recs.append((rows, prev_rec))
            if select:
                rec_all = prev_rec.new_empty((h.shape[0], *prev_rec.shape[1:]))  # [N+1, Hv, Dk, Dv]
                for rows, r in recs:
                    rec_all[rows] = r
                self._conv[idx], self._rec[idx] = conv_all, rec_all
            else:
                self._inputs[idx] = h
            return out[None]  # [1, N+1, H]

        return forward

    @contextlib.contextmanager
    def verifying(self, cache, parent: torch.Tensor, depth: torch.Tensor, device):
        """Inside the block, the model's forward over ``[root, nodes...]`` runs every GDN module
        depth by depth over the tree (node arrays ``parent`` [N], ``depth`` [N]; empty for a plain
        AR step). The cache's GDN states are read, never written."""
        dep = _depths(parent, depth, device)
        self._inputs, self._conv, self._rec = {}, {}, {}
        try:
            for idx, module in self.gdn.items():
                module.forward = self._tree_forward(idx, module, cache, dep)
            yield
        finally:
            for module in self.gdn.values():
                module.__dict__.pop("forward", None)

    # ------------------------------------------------------------------ commit
    @torch.no_grad()
    def commit(self, cache, keep_rows: list[int]) -> None:
        """Write the GDN state after ``keep_rows`` (verify rows: 0 = root, then the accepted nodes)."""
        if self.gdn_commit == "select":
            last = keep_rows[-1]
            for idx in self.gdn:
                layer = cache.layers[idx]
                layer.conv_states[0].copy_(self._conv[idx][last: last + 1])
                layer.recurrent_states[0].copy_(self._rec[idx][last: last + 1])
        else:
            rows = torch.tensor(keep_rows, device=next(iter(self._inputs.values())).device)
            for idx, module in self.gdn.items():
                # the module's own cached path: conv window and recurrent state advance in place
                module(self._inputs[idx].index_select(0, rows)[None], cache=cache)  # [1, P, H]
        self._inputs, self._conv, self._rec = {}, {}, {}
