"""Block drafters in DFlash's architecture and checkpoint format, and the MFD mixture drafter.

``BlockDrafter`` (K = 1) and ``MFDDrafter`` (K modes) draft a block in one pass from the target's
fused hidden states, with a context cache kept in place across rounds (one request) or per batch
row (``BatchDraftContext``). Architecture: docs/background.md ("DFlash drafters", "Mixture
drafters"); checkpoint layout: docs/own-target.md; what decoding calls: ``protocol.Drafter``.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding

from mfd_theory.llm.models.fingerprint import target_fingerprint
from mfd_theory.llm.models.kv import KVBuffer
from mfd_theory.llm.models.protocol import DrafterBase
from mfd_theory.shipped_drafters import is_shipped_drafter, shipped_drafter

__all__ = ["BatchDraftContext", "BlockDrafter", "MFDDrafter", "DRAFTER_KINDS", "LAYER_LAYOUTS", "build_drafter",
           "load_drafter", "default_target_layer_ids", "drafter_from_checkpoint", "check_drafter_target",
           "attention_layout", "target_attention_layout", "decoder_layers", "final_norm"]

_CONFIG_COPY_KEYS = (
    "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "hidden_act", "rms_norm_eps", "max_position_embeddings", "vocab_size", "attention_bias",
    "rope_parameters", "rope_theta", "rope_scaling",
)


# Mask token of z-lab's published drafters, by the target tokenizer's vocabulary size.
_PUBLISHED_MASK_IDS = {151936: 151669, 248320: 248070}
_TARGET_ONLY_ROPE_KEYS = ("partial_rotary_factor", "mrope_section", "mrope_interleaved")
#: the index of a sharded checkpoint (tensor name -> shard file), as Hugging Face writes it
_INDEX = "model.safetensors.index.json"

# Drafter kinds defined in other modules (the Domino drafter of mfd_theory.llm.models.domino), by their
# ``kind`` and by their checkpoint ``architecture``. A BlockDrafter subclass that sets
# ``architecture`` registers itself here when its module loads; mfd_theory.llm's __init__ imports
# those modules, so the tables are complete whenever any part of mfd_theory.llm is imported. This
# keeps the dependency one way: those modules import this one, never the reverse.
_KIND_CLASSES: dict[str, type] = {}
_ARCH_CLASSES: dict[str, type] = {}


def _registered(table: dict[str, type], name: str, what: str) -> type:
    cls = table.get(name)
    if cls is None:  # only if mfd_theory.llm.models.domino failed to load
        raise ValueError(f"{what}: the module defining {name!r} drafters is not loaded")
    return cls


def _shards(state: dict[str, torch.Tensor], max_bytes: int | None) -> list[list[str]]:
    """Tensor names in save order, cut into consecutive shards of at most ``max_bytes`` each (a
    tensor larger than that gets a shard of its own); one shard without a limit."""
    if max_bytes is None:
        return [list(state)]
    shards: list[list[str]] = [[]]
    size = 0
    for name, v in state.items():
        nbytes = v.numel() * v.element_size()
        if shards[-1] and size + nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """DFlash's default: one draft layer -> [n // 2]; otherwise evenly spaced over 1..n-3, rounded."""
    n = int(num_target_layers)
    if num_draft_layers == 1:
        return [n // 2]
    lo, hi = 1, max(1, n - 3)
    ids = [round(lo + i * (hi - lo) / (num_draft_layers - 1)) for i in range(num_draft_layers)]
    return [min(max(0, i), n - 1) for i in ids]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [B, heads, T, d]; cos/sin [B, T, d]
    return x * cos[:, None] + _rotate_half(x) * sin[:, None]


def _fold_modes(x: torch.Tensor, modes: int) -> torch.Tensor:
    """[B*K, h, S, d] -> [B, h, K*S, d]: a sample's K blocks as one sequence of K*S rows, mode-major."""
    bk, h, s, d = x.shape
    return x.view(bk // modes, modes, h, s, d).transpose(1, 2).reshape(bk // modes, h, modes * s, d)


def block_mode_mask(modes: int, block: int, rep: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Additive mask [rep*K*S, K*S] over the block keys: mode k's queries see mode k's block only.

    Rows follow the folded query layout of :class:`_DraftAttention` (``rep`` query heads per kv
    head, then mode, then block position); columns the block keys (mode, then block position)."""
    mode = torch.arange(modes, device=device).repeat_interleave(block)  # [K*S]
    hidden = (mode[:, None] != mode[None, :]).repeat(rep, 1)  # [rep*K*S, K*S]
    return torch.zeros(hidden.shape, dtype=dtype, device=device).masked_fill_(hidden, torch.finfo(dtype).min)


class _DraftAttention(nn.Module):
    """Block queries attend, without a causal mask, to [context ; the block] keys of their mode.

    The K blocks of a sample share one copy of the context's keys/values: their queries are folded
    into one sequence of K*S rows, and the ``rep = heads / kv_heads`` query heads that read the same
    kv head are folded in as well ([B, kv_heads, rep*K*S, d]), so one SDPA call reads the context
    keys/values once, in place, for every mode and head (no ``repeat_interleave``, no per-mode
    concatenation). Each mode's block keys sit after the context; :func:`block_mode_mask` keeps
    the modes apart. (SDPA's ``enable_gqa`` does the head sharing too, but with a mask it was about
    1.8x slower than the fold on CPU, torch 2.13.)

    Drafting from the cache can instead attend mode by mode (``per_mode``): mode k's block keys are
    written right after the context and its queries attend [context ; its block] unmasked, K SDPA
    calls over the same in-place cache rows. On CPU attention is arithmetic-bound: every mode's
    queries score every context key either way, one call over the folded queries costs what K
    calls do, and the fold's mask only adds work (2-10% of a K = 4 round at context 4096 in
    ``mfd bench draft``). Where attention is memory-bound (a GPU at batch 1), the fold's single
    read of the context is what counts.
    """

    def __init__(self, config: Qwen3Config):
        super().__init__()
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"config: num_attention_heads ({self.num_heads}) must be a multiple of "
                             f"num_key_value_heads ({self.num_kv_heads})")
        self.rep = self.num_heads // self.num_kv_heads
        qkv_bias, o_bias, qk_norm = attention_layout(config)
        h, d = config.hidden_size, self.head_dim
        self.q_proj = nn.Linear(h, self.num_heads * d, bias=qkv_bias)  # [heads*d, H]
        self.k_proj = nn.Linear(h, self.num_kv_heads * d, bias=qkv_bias)  # [kvh*d, H]
        self.v_proj = nn.Linear(h, self.num_kv_heads * d, bias=qkv_bias)  # [kvh*d, H]
        self.o_proj = nn.Linear(self.num_heads * d, h, bias=o_bias)  # [H, heads*d]
        # Qwen3's per-head q / k norms; a Qwen2 or Llama layer has none, and then neither has this one
        # (parameterless identities: no tensors in the state dict or the checkpoint).
        norm = (lambda: Qwen3RMSNorm(d, eps=config.rms_norm_eps)) if qk_norm else nn.Identity
        self.q_norm = norm()
        self.k_norm = norm()

    def context_kv(self, ctx: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Keys/values of context features: they depend on the features only, so they are cacheable."""
        b, t, _ = ctx.shape
        k = self.k_norm(self.k_proj(ctx).view(b, t, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(ctx).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return _rope(k, cos, sin), v  # [B, kvh, t, d] each

    def forward(self, x, cos, sin, context, mask, modes: int = 1, offsets: list[int] | None = None,
                per_mode: bool = False):
        """x [B*K, S, H] (normalised block states, K blocks per sample sharing one context).

        ``offsets=None``: ``context`` is (ctx_k, ctx_v) [B, kvh, T, d], exactly the context, and the
        block keys are concatenated after them (training). Otherwise ``context`` is a
        :class:`~mfd_theory.llm.models.kv.KVBuffer` holding sample b's context in rows
        ``[0, offsets[b])`` with room for K*S rows after it: the block keys/values are written there
        and the keys read are the first ``max(offsets) + K*S`` rows, nothing is copied (one request
        is the case B = 1). ``mask``: additive [B | 1, 1, rep*K*S, keys] (context columns first) or
        None. ``per_mode`` (cache only, B = 1, no mask, room for S rows): modes one after another,
        see the class docstring."""
        bk, s, _ = x.shape
        b, d = bk // modes, self.head_dim
        q = self.q_norm(self.q_proj(x).view(bk, s, self.num_heads, d)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(bk, s, self.num_kv_heads, d)).transpose(1, 2)
        v = self.v_proj(x).view(bk, s, self.num_kv_heads, d).transpose(1, 2)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)  # [B*K, heads, S, d]
        if per_mode:
            return self.o_proj(self._attend_per_mode(q, k, v, context, offsets[0]))
        q = _fold_modes(q, modes).reshape(b, self.num_kv_heads, self.rep * modes * s, d)  # [B, kvh, rep*K*S, d]
        k, v = _fold_modes(k, modes), _fold_modes(v, modes)  # [B, kvh, K*S, d]
        if offsets is None:
            ctx_k, ctx_v = context
            keys, values = torch.cat([ctx_k, k], dim=2), torch.cat([ctx_v, v], dim=2)  # [B, kvh, T+K*S, d]
        else:
            same = all(o == offsets[0] for o in offsets)  # one slice write, or one row offset each
            context.write(offsets[0] if same else torch.tensor(offsets, device=x.device), k, v)
            keys, values = context.read(max(offsets) + modes * s)  # views of the cache
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=d ** -0.5)
        out = out.view(b, self.num_heads, modes, s, d).permute(0, 2, 3, 1, 4)  # [B, K, S, heads, d]
        return self.o_proj(out.reshape(bk, s, self.num_heads * d))  # [B*K, S, H]

    def _attend_per_mode(self, q, k, v, cache: KVBuffer, start: int) -> torch.Tensor:
        """q [K, heads, S, d], k/v [K, kvh, S, d] of one sample's K blocks; the cache [1, kvh,
        capacity, d] holds the context in rows [0, start). Returns [K, S, heads*d]."""
        modes, _, s, d = q.shape
        q = q.reshape(modes, self.num_kv_heads, self.rep * s, d)  # [K, kvh, rep*S, d]: GQA heads folded
        out = torch.empty_like(q)
        keys, values = cache.read(start + s)  # views: [context ; one block]
        for m in range(modes):
            cache.write(start, k[m:m + 1], v[m:m + 1])  # this mode's block keys overwrite the last one's
            out[m] = F.scaled_dot_product_attention(q[m:m + 1], keys, values, scale=d ** -0.5)[0]
        out = out.view(modes, self.num_heads, s, d).transpose(1, 2)  # [K, S, heads, d]
        return out.reshape(modes, s, self.num_heads * d)


class _DraftLayer(nn.Module):
    def __init__(self, config: Qwen3Config):
        super().__init__()
        self.self_attn = _DraftAttention(config)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, h, cos, sin, context, mask, modes=1, offsets=None, per_mode=False):
        """See :meth:`_DraftAttention.forward` for ``context``, ``offsets`` and ``per_mode``."""
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, context, mask, modes, offsets, per_mode)
        return h + self.mlp(self.post_attention_layernorm(h))


def attention_layout(config: Any) -> tuple[bool, bool, bool]:
    """(q/k/v bias, o bias, q/k norms) of a draft layer with ``config``. ``attention_bias`` puts a
    bias on q/k/v, and on o unless ``o_proj_bias`` says otherwise (Qwen3's and Llama's meaning: one
    flag for all four; a Qwen2 target's drafter records ``o_proj_bias: false``); ``qk_norm``
    (default true, as in DFlash's Qwen3 layers and every checkpoint written before the key existed)."""
    qkv = bool(getattr(config, "attention_bias", False) or False)
    o_bias = getattr(config, "o_proj_bias", None)
    qk_norm = getattr(config, "qk_norm", None)
    return qkv, qkv if o_bias is None else bool(o_bias), True if qk_norm is None else bool(qk_norm)


def _first_module(hf: nn.Module, paths: tuple[str, ...], kind: type) -> nn.Module | None:
    """The first of the dotted attribute ``paths`` of ``hf`` that holds a ``kind``, else None."""
    for path in paths:
        mod = hf
        for part in path.split("."):
            mod = getattr(mod, part, None)
        if isinstance(mod, kind):
            return mod
    return None


def decoder_layers(hf: nn.Module) -> nn.ModuleList | None:
    """The decoder layers of a Hugging Face causal LM (``model.layers``, or ``layers`` of a bare
    backbone, or a multimodal model's ``language_model.layers``), None if it has none there."""
    return _first_module(hf, ("model.layers", "layers", "model.language_model.layers", "language_model.layers"),
                         nn.ModuleList)


def final_norm(hf: nn.Module) -> nn.Module | None:
    """The norm a Hugging Face causal LM applies after its last layer, before the LM head."""
    return _first_module(hf, ("model.norm", "norm", "model.language_model.norm", "language_model.norm"), nn.Module)


def target_attention_layout(hf: nn.Module, tcfg: Any) -> dict[str, bool]:
    """The target's attention layout as drafter config keys, read off its last layer with q/k/v/o
    projections: ``attention_bias`` (q/k/v biases: true for Qwen2), ``o_proj_bias``, ``qk_norm``
    (true for Qwen3, false for Qwen2 and Llama). A target without such a layer: its config's
    ``attention_bias`` and DFlash's q/k norms."""
    for layer in reversed(list(decoder_layers(hf) or [])):
        attn = getattr(layer, "self_attn", None)
        if attn is not None and all(isinstance(getattr(attn, n, None), nn.Linear)
                                    for n in ("q_proj", "k_proj", "v_proj", "o_proj")):
            return {"attention_bias": attn.q_proj.bias is not None, "o_proj_bias": attn.o_proj.bias is not None,
                    "qk_norm": isinstance(getattr(attn, "q_norm", None), nn.Module)
                    and any(True for _ in attn.q_norm.parameters())}
    bias = bool(getattr(tcfg, "attention_bias", False) or False)
    return {"attention_bias": bias, "o_proj_bias": bias, "qk_norm": True}


def _hf_model(target: Any) -> nn.Module:
    """Accept a TargetModel or a bare HF causal LM."""
    return getattr(target, "model", target) if not isinstance(target, nn.Module) else target


def _draft_value(cfg: Any, name: str, default: Any = None) -> Any:
    sub = getattr(cfg, "dflash_config", None) or {}
    if name in sub:
        return sub[name]
    return getattr(cfg, name, default)


class BlockDrafter(nn.Module, DrafterBase):
    """DFlash-architecture block drafter (K = 1), an ``nn.Module`` with the
    :class:`~mfd_theory.llm.models.protocol.Drafter` members.

    A few Qwen3 layers with no embedding and no LM head of their own: the block's embeddings come
    from the target's ``embed_tokens`` and its logits from the target's ``lm_head``, *referenced*
    (not parameters, not in ``state_dict``, never trained). Context features are the target's
    ``hidden_states[i + 1]`` for ``i`` in ``target_layer_ids``, concatenated, projected by ``fc``
    and normalised by ``hidden_norm``. In every layer the keys and values come from [context
    features ; block states] and the queries from the block alone, without a causal mask (RoPE as
    in Qwen3; q/k norms and q/k/v/o biases as the config's ``qk_norm``, ``attention_bias`` and
    ``o_proj_bias`` say, :func:`attention_layout`); the context sits at positions 0..T-1 and the block ``[last committed
    token, MASK x L]`` at T..T+L, L = block_size - 1. A final ``norm`` and the ``lm_head`` give
    the L per-position distributions.

    Training: :meth:`train_forward`. Inference keeps the context's keys/values across rounds
    (:meth:`reset`, :meth:`draft_modes`); :meth:`batch_context` does the same for a batch.
    Attributes: ``block_size``, ``mask_token_id``, ``num_modes``, ``target_layer_ids``, ``config``
    (a Qwen3Config in DFlash's layout). Checkpoints: :meth:`save_pretrained`, :func:`load_drafter`.
    """

    num_modes = 1

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        arch = cls.__dict__.get("architecture")
        if arch is not None:
            _ARCH_CLASSES[arch] = cls
            _KIND_CLASSES[cls.kind] = cls

    def __init__(self, config: Qwen3Config, target: Any):
        super().__init__()
        hf = _hf_model(target)
        tcfg = hf.config.get_text_config() if hasattr(hf.config, "get_text_config") else hf.config
        self.config = config
        self.block_size = int(_draft_value(config, "block_size", 16))
        self.mask_token_id = _draft_value(config, "mask_token_id")
        ids = _draft_value(config, "target_layer_ids")
        n_target = int(getattr(config, "num_target_layers", None) or tcfg.num_hidden_layers)
        if ids is None:
            ids = default_target_layer_ids(n_target, config.num_hidden_layers)
        self.target_layer_ids = [int(i) for i in ids]
        # optional DFlash scalars (absent in the Qwen3 b16 drafters, where they are 1 / none)
        self.input_embedding_scale = float(_draft_value(config, "input_embedding_scale", 1.0) or 1.0)
        self.output_multiplier = float(_draft_value(config, "output_multiplier", 1.0) or 1.0)
        self.logit_softcap = float(_draft_value(config, "final_logit_softcapping", 0.0) or 0.0)
        layer_types = getattr(config, "layer_types", None) or []
        if getattr(config, "is_causal", False) or (
                getattr(config, "use_sliding_window", False) and "sliding_attention" in layer_types):
            raise ValueError("config: causal or sliding-window draft layers (DFlash2-style) are not supported")
        _check_compatible(self, config, tcfg)
        self.layers = nn.ModuleList([_DraftLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.fc = nn.Linear(len(self.target_layer_ids) * config.hidden_size, config.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        # Referenced, not owned: object.__setattr__ keeps them out of parameters() and state_dict().
        object.__setattr__(self, "_embed_tokens", hf.get_input_embeddings())
        object.__setattr__(self, "_lm_head", hf.get_output_embeddings())
        object.__setattr__(self, "_target", hf)  # for the fingerprint written with the checkpoint
        # K > 1 drafting: True folds the modes into one attention call (one read of the context),
        # False attends mode by mode, None picks by device (fold off CPU); see _DraftAttention.
        self.fold_modes: bool | None = None
        # A reduced draft vocabulary (EAGLE-3 / SpecForge's d2t / t2d): None drafts the whole one.
        self.register_buffer("d2t", None)
        self.register_buffer("t2d", None)
        self._reduced_output = False  # training: log-probs over the draft vocabulary only
        self._head_rows: tuple | None = None  # (key, weight rows, bias rows) of the draft vocabulary
        self.reset()

    # ------------------------------------------------------------------ shared pieces
    @property
    def L(self) -> int:
        return self.block_size - 1

    # ------------------------------------------------------------------ reduced draft vocabulary
    @property
    def draft_vocab(self) -> torch.Tensor | None:
        """Target token ids the drafter can draft, ascending [V'] (draft id i is target id
        ``i + d2t[i]``), or None when it drafts the target's whole vocabulary."""
        if self.d2t is None:
            return None
        return self.d2t + torch.arange(len(self.d2t), device=self.d2t.device)

    def set_draft_vocab(self, token_ids) -> None:
        """Draft only ``token_ids`` (target ids; sorted and made unique here): the logits are the
        target head's rows of those ids, every other token gets log-probability -inf and is never
        drafted. Stored as the buffers ``d2t`` (int64 [V'], draft id -> target id offset) and
        ``t2d`` (bool [V], the target ids drafted), EAGLE-3's and SpecForge's layout."""
        vocab = int(self.config.vocab_size)
        ids = torch.as_tensor(token_ids)
        if ids.dim() != 1 or ids.numel() < 2 or ids.is_floating_point() or ids.dtype == torch.bool:
            raise ValueError(f"draft_vocab: expected a 1-D list of at least 2 integer token ids, got "
                             f"{tuple(ids.shape)} of {ids.dtype}")
        ids = torch.unique(ids.long().cpu(), sorted=True)
        if int(ids[0]) < 0 or int(ids[-1]) >= vocab:
            raise ValueError(f"draft_vocab: token ids must lie in [0, {vocab}), got {int(ids[0])}..{int(ids[-1])}")
        dev = self.fc.weight.device
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[ids] = True
        self.register_buffer("d2t", (ids - torch.arange(len(ids))).to(dev))
        self.register_buffer("t2d", t2d.to(dev))
        self._head_rows = None

    def draft_index(self, target_ids: torch.Tensor) -> torch.Tensor:
        """Draft id of each target id (same shape), -1 for a token outside the draft vocabulary;
        the identity when the drafter drafts the whole vocabulary."""
        if self.t2d is None:
            return target_ids
        index = torch.cumsum(self.t2d.long(), 0) - 1  # [V]: draft id where t2d holds
        return torch.where(self.t2d[target_ids], index[target_ids], torch.full_like(target_ids, -1))

    def _draft_head(self, head) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The target head's weight (and bias) rows of the draft vocabulary, gathered once per
        head tensor, device and dtype."""
        weight = head.weight
        key = (weight.data_ptr(), weight.device, weight.dtype, self.d2t.data_ptr())
        if self._head_rows is None or self._head_rows[0] != key:
            ids = self.draft_vocab.to(weight.device)
            bias = getattr(head, "bias", None)
            rows = weight.detach().index_select(0, ids)
            self._head_rows = (key, rows, bias.detach().index_select(0, ids) if bias is not None else None)
        return self._head_rows[1], self._head_rows[2]

    def fuse_hidden(self, hidden_states) -> torch.Tensor:
        """Context features [B, T, H] from the target's HF ``hidden_states`` tuple."""
        n = len(hidden_states) - 1
        bad = [i for i in self.target_layer_ids if not 0 <= i < n]
        if bad:
            raise ValueError(f"hidden_states: has {n} layers, target_layer_ids {bad} are out of range")
        cat = torch.cat([hidden_states[i + 1] for i in self.target_layer_ids], dim=-1)
        cat = cat.to(self.fc.weight.dtype)
        return self.hidden_norm(self.fc(cat))  # [B, T, H]

    def _block_embeddings(self, block_ids: torch.Tensor) -> torch.Tensor:
        """[B, S] -> [B*K, S, H]: the target's embeddings (plus the mode embeddings for MFD)."""
        # detached: the target is frozen, gradients stop at its (shared) embedding table
        emb = F.embedding(block_ids, self._embed_tokens.weight.detach()).to(self.fc.weight.dtype)
        return emb * self.input_embedding_scale if self.input_embedding_scale != 1.0 else emb

    def _run(self, block_h, context: list, blk_pos, mask, offsets: list[int] | None = None, per_mode=False,
             modes: int | None = None):
        """Run the draft layers over block states [B*K, S, H]; ``context`` per layer: (keys, values)
        [B, kvh, T, d] shared by a sample's K modes (training), or a KVBuffer with the context of
        sample b in rows [0, offsets[b]) (see :meth:`_DraftAttention.forward`). ``modes``: the blocks
        per sample sharing its context (K unless given: the shared training pass gives blocks x K)."""
        cos, sin = self.rotary_emb(block_h, blk_pos)
        h = block_h
        for layer, ctx in zip(self.layers, context):
            h = layer(h, cos, sin, ctx, mask, self.num_modes if modes is None else modes, offsets, per_mode)
        return self.norm(h)  # [B*K, S, H]

    def _context_kv(self, ctx, ctx_pos):
        cos, sin = self.rotary_emb(ctx, ctx_pos)
        kv = [layer.self_attn.context_kv(ctx, cos, sin) for layer in self.layers]
        return [k for k, _ in kv], [v for _, v in kv]

    def _log_probs(self, h: torch.Tensor) -> torch.Tensor:
        head = self._lm_head  # the target's, frozen: gradients reach h but never the head
        if self.d2t is None:
            weight = head.weight.detach()
            bias = head.bias.detach() if getattr(head, "bias", None) is not None else None
        else:
            weight, bias = self._draft_head(head)  # [V', H]: only the draft vocabulary's rows
        # One 2-D matmul over all rows: a sliced 3-D input (h[:, 1:]) would go through a batched
        # matmul with the head broadcast per batch row, ~1.4x slower at K = 4 on CPU.
        rows = h.reshape(-1, h.shape[-1]).to(weight.dtype)  # [B*K*L, H]
        logits = F.linear(rows, weight, bias).float().view(*h.shape[:-1], -1)  # [..., V or V']
        if self.output_multiplier != 1.0:
            logits = logits * self.output_multiplier
        if self.logit_softcap > 0:
            logits = torch.tanh(logits / self.logit_softcap) * self.logit_softcap
        log_q = torch.log_softmax(logits, dim=-1)
        if self.d2t is None or self._reduced_output:
            return log_q
        return self.to_target_vocab(log_q)

    def to_target_vocab(self, log_q: torch.Tensor) -> torch.Tensor:
        """Log-probs over the draft vocabulary [..., V'] as log-probs over the target's [..., V]
        (-inf outside the draft vocabulary); unchanged when the drafter drafts the whole one."""
        if self.d2t is None:
            return log_q
        full = log_q.new_full((*log_q.shape[:-1], int(self.config.vocab_size)), float("-inf"))
        return full.index_copy_(-1, self.draft_vocab.to(log_q.device), log_q)

    def reduced_output(self, on: bool = True):
        """Context manager: inside it, the training forwards return log-probs over the draft
        vocabulary [..., V'] (label ids through :meth:`draft_index`), the cheap form a loss needs."""
        import contextlib

        @contextlib.contextmanager
        def scope():
            before, self._reduced_output = self._reduced_output, bool(on) and self.d2t is not None
            try:
                yield self
            finally:
                self._reduced_output = before
        return scope()

    def _readout(self, h: torch.Tensor, batch: int) -> torch.Tensor:
        """log pi [batch, K] from final block states [batch*K, S, H]."""
        return h.new_zeros(batch, 1, dtype=torch.float32)

    # ------------------------------------------------------------------ training
    def train_forward(self, ctx_feats: torch.Tensor, block_ids: torch.Tensor, ctx_valid: torch.Tensor | None = None):
        """Differentiable log-probs [B, block_size - 1, V] of block positions 1..block_size - 1.

        ``ctx_feats`` [B, T, H] from :meth:`fuse_hidden`; ``block_ids`` [B, block_size], the last
        committed token then ``mask_token_id``; ``ctx_valid`` (bool [B, T]) marks real context rows,
        padding on the left, each row's positions starting at its first valid row."""
        log_pi, log_q = self._train_modes(ctx_feats, block_ids, ctx_valid)
        return log_q[:, 0]  # [B, S-1, V]

    def _train_modes(self, ctx_feats, block_ids, ctx_valid):
        if ctx_feats.dim() != 3 or block_ids.dim() != 2 or ctx_feats.shape[0] != block_ids.shape[0]:
            raise ValueError("ctx_feats must be [B, T, H] and block_ids [B, block_size] with the same B")
        if block_ids.shape[1] < 2:
            raise ValueError("block_ids: a block needs at least 2 positions")
        b, t, _ = ctx_feats.shape
        s, k = block_ids.shape[1], self.num_modes
        dev = ctx_feats.device
        if ctx_valid is None:
            start = torch.zeros(b, dtype=torch.long, device=dev)
        else:
            if ctx_valid.shape != (b, t):
                raise ValueError(f"ctx_valid: expected shape {(b, t)}, got {tuple(ctx_valid.shape)}")
            start = t - ctx_valid.long().sum(dim=1)  # number of left-padding rows per sample
        ctx_pos = (torch.arange(t, device=dev)[None] - start[:, None]).clamp_min(0)  # [B, T]
        blk_pos = (t - start)[:, None] + torch.arange(s, device=dev)[None]  # [B, S]
        ctx_k, ctx_v = self._context_kv(ctx_feats, ctx_pos)  # per layer [B, kvh, T, d], shared by the K modes
        mask = None
        if ctx_valid is not None or k > 1:
            dtype, rep = self.fc.weight.dtype, self.layers[0].self_attn.rep
            ctx_cols = torch.zeros((b, rep * k * s, t), dtype=dtype, device=dev)  # [B, rep*K*S, T]
            if ctx_valid is not None:
                ctx_cols.masked_fill_(~ctx_valid.bool()[:, None, :], torch.finfo(dtype).min)
            blk_cols = block_mode_mask(k, s, rep, dtype, dev).expand(b, -1, -1)  # [B, rep*K*S, K*S]
            mask = torch.cat([ctx_cols, blk_cols], dim=2)[:, None]  # [B, 1, rep*K*S, T+K*S]
        h = self._run(self._block_embeddings(block_ids), list(zip(ctx_k, ctx_v)), blk_pos.repeat_interleave(k, dim=0),
                      mask)
        log_q = self._log_probs(h[:, 1:]).view(b, k, s - 1, -1)  # [B, K, S-1, V]
        return self._readout(h, b), log_q

    def train_forward_shared(self, ctx_feats: torch.Tensor, block_ids: torch.Tensor, starts: torch.Tensor):
        """:meth:`train_forward` of many blocks per sequence over one pass of each sequence's context.

        ``ctx_feats`` [B, W, H] (:meth:`fuse_hidden` of the sequences, positions 0..W-1), ``starts``
        [B, nb] the block starts t (1 <= t <= W), ``block_ids`` [B*nb, block_size] the blocks,
        sequence-major. Block (b, j) sees the context rows ``< starts[b, j]`` and its own positions,
        exactly what :meth:`train_forward` gives it from its own left-aligned copy of those rows (the
        positions are the same: t + i for block position i), but the context keys/values are made
        once per sequence and every block's queries go through one attention call per sequence, a
        block-sparse additive mask keeping the blocks apart. Returns [B*nb, block_size - 1, V]."""
        log_pi, log_q = self._train_modes_shared(ctx_feats, block_ids, starts)
        return log_q[:, 0]

    def _train_modes_shared(self, ctx_feats, block_ids, starts):
        if ctx_feats.dim() != 3 or starts.dim() != 2 or starts.shape[0] != ctx_feats.shape[0]:
            raise ValueError("ctx_feats must be [B, W, H] and starts [B, blocks] with the same B")
        b, w, _ = ctx_feats.shape
        nb, s, k = starts.shape[1], block_ids.shape[1], self.num_modes
        if block_ids.shape[0] != b * nb or s < 2:
            raise ValueError(f"block_ids: expected [{b * nb}, >= 2] (B x blocks), got {tuple(block_ids.shape)}")
        dev = ctx_feats.device
        pos = torch.arange(w, device=dev)[None].expand(b, w)
        ctx_k, ctx_v = self._context_kv(ctx_feats, pos)  # per layer [B, kvh, W, d], once per sequence
        dtype, rep = self.fc.weight.dtype, self.layers[0].self_attn.rep
        # query rows follow _DraftAttention's fold: (GQA head, block, mode, block position)
        seen = torch.arange(w, device=dev)[None, None, :] < starts[:, :, None]  # [B, nb, W]
        seen = seen[:, :, None, :].expand(b, nb, k * s, w).reshape(b, nb * k * s, w).repeat(1, rep, 1)
        ctx_cols = torch.zeros(seen.shape, dtype=dtype, device=dev).masked_fill_(~seen, torch.finfo(dtype).min)
        blk_cols = block_mode_mask(nb * k, s, rep, dtype, dev).expand(b, -1, -1)  # [B, rep*nb*K*S, nb*K*S]
        mask = torch.cat([ctx_cols, blk_cols], dim=2)[:, None]  # [B, 1, rep*nb*K*S, W + nb*K*S]
        blk_pos = starts.reshape(-1)[:, None] + torch.arange(s, device=dev)[None]  # [B*nb, S]
        h = self._run(self._block_embeddings(block_ids), list(zip(ctx_k, ctx_v)), blk_pos.repeat_interleave(k, dim=0),
                      mask, modes=nb * k)
        log_q = self._log_probs(h[:, 1:]).view(b * nb, k, s - 1, -1)  # [B*nb, K, S-1, V]
        return self._readout(h, b * nb), log_q

    def _write_context(self, cache: list[KVBuffer], feats: torch.Tensor, start: int | torch.Tensor,
                       valid: torch.Tensor | None = None) -> None:
        """Context keys/values of ``feats`` [B, t, H] at positions ``start + j`` (an int, or a
        tensor [B] of per-sample starts), written at those rows of every layer's buffer
        (only the rows ``valid`` [B, t] marks, if given)."""
        t = feats.shape[1]
        steps = torch.arange(t, device=feats.device)
        pos = (start + steps)[None] if not isinstance(start, torch.Tensor) else start[:, None] + steps[None]
        ks, vs = self._context_kv(feats, pos)  # per layer [B, kvh, t, d]
        for buf, a, b in zip(cache, ks, vs):
            buf.write(start, a, b, valid)

    # ------------------------------------------------------------------ inference
    def reset(self) -> None:
        """Forget the cached context (start of a new sequence); the buffers are kept for reuse."""
        self._cache_len = 0
        if not hasattr(self, "_cache"):
            self._cache: list[KVBuffer] = []  # per layer [1, kvh, capacity, d]
            self._mask_buf: torch.Tensor | None = None  # [rep*K*S, capacity] (K > 1 only)

    @property
    def cache_capacity(self) -> int:
        """Rows the preallocated context cache holds before it has to grow."""
        return self._cache[0].capacity if self._cache else 0

    def _reserve(self, rows: int, like: torch.Tensor) -> None:
        """Make the cache hold ``rows`` rows (growth at least doubles it, copying the cached rows once)."""
        if self._cache and (self._cache[0].dtype != like.dtype or self._cache[0].device != like.device):
            if self._cache_len:
                raise ValueError("drafter: moved to another dtype/device mid-sequence; call reset() first")
            self._cache, self._mask_buf = [], None  # moved since: reallocate
        attn = self.layers[0].self_attn
        if not self._cache:
            shape = like.new_empty((1, attn.num_kv_heads, 0, attn.head_dim))
            self._cache = [KVBuffer.like(shape, rows) for _ in self.layers]
            grew = True
        else:
            grew = any([buf.reserve(rows, used=self._cache_len) for buf in self._cache])
        if grew and self.num_modes > 1:
            # context columns stay 0 (visible); the block columns are rewritten every round
            self._mask_buf = like.new_zeros((attn.rep * self.num_modes * self.block_size, self.cache_capacity))
            self._block_mask = block_mode_mask(self.num_modes, self.block_size, attn.rep, like.dtype, like.device)

    @property
    def context_length(self) -> int:
        return self._cache_len

    @torch.no_grad()
    def draft_modes(self, new_ctx_feats: torch.Tensor, root_token: int):
        """Append new context features [1, t, H], draft one block after them: (log_pi [K], log_q [K, L, V])."""
        if new_ctx_feats.dim() != 3 or new_ctx_feats.shape[0] != 1:
            raise ValueError("new_ctx_feats: expected [1, t, H]")
        t = new_ctx_feats.shape[1]
        dev = new_ctx_feats.device
        if self._cache_len + t == 0:
            raise ValueError("new_ctx_feats: the drafter has no context yet (feed the prompt's features first)")
        k, s, n = self.num_modes, self.block_size, self._cache_len
        fold = k > 1 and (self.fold_modes if self.fold_modes is not None else dev.type != "cpu")
        # room for the new rows and, after them, the blocks' keys (scratch, overwritten next round):
        # all K blocks when folded, one at a time otherwise
        self._reserve(n + t + (k if fold else 1) * s, self.fc.weight)
        if t > 0:
            self._write_context(self._cache, new_ctx_feats, n)
            n = self._cache_len = n + t
        mask = None
        if k > 1:  # columns that held a block are context now: visible (in both ways of attending,
            # so every context column is cleared once and fold_modes may change mid-sequence)
            self._mask_buf[:, n - t:n] = 0
        if fold:
            self._mask_buf[:, n:n + k * s] = self._block_mask  # [rep*K*S, K*S]
            mask = self._mask_buf[:, :n + k * s]  # [rep*K*S, T+K*S], a view
        block_ids = torch.full((1, s), int(self.mask_token_id), dtype=torch.long, device=dev)
        block_ids[0, 0] = int(root_token)
        blk_pos = (n + torch.arange(s, device=dev))[None].expand(k, s)  # [K, S]
        h = self._run(self._block_embeddings(block_ids), self._cache, blk_pos, mask, offsets=[n],
                      per_mode=k > 1 and not fold)  # [K, S, H]
        return self._readout(h, 1)[0], self._log_probs(h[:, 1:])  # [K], [K, L, V]

    def batch_context(self) -> "BatchDraftContext":
        """The drafting state of a batch: one context cache row per request, drafted in one pass."""
        return BatchDraftContext(self)

    def draft(self, new_ctx_feats: torch.Tensor, root_token: int):
        """Block drafter: per-position log-probs [L, V]."""
        return self.draft_modes(new_ctx_feats, root_token)[1][0]

    # ------------------------------------------------------------------ checkpoints
    def save_pretrained(self, directory, *, dtype: torch.dtype | None = None,
                        max_shard_size: int | None = None) -> Path:
        """Write ``config.json`` and the weights (DFlash's names; ``mode_embed`` / ``mode_gate`` for
        MFD) to ``directory``: one ``model.safetensors``, or with ``max_shard_size`` (bytes) shards
        ``model-0000i-of-0000n.safetensors`` and the ``model.safetensors.index.json`` naming them,
        as Hugging Face shards a checkpoint. ``dtype`` casts the floating-point weights (e.g.
        ``torch.bfloat16``, as the released drafters are stored); default: as they are."""
        from safetensors.torch import save_file

        if max_shard_size is not None and (isinstance(max_shard_size, bool) or not isinstance(max_shard_size, int)
                                           or max_shard_size < 1):
            raise ValueError(f"max_shard_size: must be a number of bytes >= 1, got {max_shard_size!r}")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        cfg = self.config.to_dict()
        cfg["architectures"] = ["DFlashDraftModel"] if self.num_modes == 1 else ["MFDDraftModel"]
        cfg["block_size"] = self.block_size
        dcfg = dict(cfg.get("dflash_config") or {})
        dcfg.update(target_layer_ids=list(self.target_layer_ids), mask_token_id=int(self.mask_token_id),
                    block_size=self.block_size)
        if self.num_modes > 1:
            dcfg["num_modes"] = self.num_modes
        else:
            dcfg.pop("num_modes", None)
        if self.d2t is not None:
            cfg["draft_vocab_size"] = int(len(self.d2t))
        else:
            cfg.pop("draft_vocab_size", None)
        cfg["dflash_config"] = dcfg
        # Which target the drafter was built on: load_drafter refuses the checkpoint for another one.
        cfg["target_fingerprint"] = target_fingerprint(self._target)
        state = {name: p.detach().contiguous().cpu() for name, p in self.state_dict().items()
                 if not name.startswith("rotary_emb.")}
        if dtype is not None:
            state = {n: v.to(dtype) if v.is_floating_point() else v for n, v in state.items()}
            cfg["dtype"] = str(dtype).replace("torch.", "")
        for old in [directory / "model.safetensors", directory / _INDEX, *directory.glob("model-*-of-*.safetensors")]:
            old.unlink(missing_ok=True)  # a save in another layout must not leave the reader an older file
        shards = _shards(state, max_shard_size)
        if len(shards) == 1:
            save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
        else:
            weight_map = {}
            for i, names in enumerate(shards):
                fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
                save_file({n: state[n] for n in names}, str(directory / fname), metadata={"format": "pt"})
                weight_map.update({n: fname for n in names})
            total = sum(v.numel() * v.element_size() for v in state.values())
            (directory / _INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                                       indent=2) + "\n")
        (directory / "config.json").write_text(json.dumps(cfg, indent=2, default=str) + "\n")
        return directory

    @classmethod
    def from_pretrained(cls, directory, target: Any, dtype: torch.dtype | None = None) -> "BlockDrafter":
        """Load a DFlash-layout checkpoint (or an MFD one) from a local directory."""
        return load_drafter(directory, target, dtype=dtype)


class BatchDraftContext:
    """A block drafter's context cache for a batch (:meth:`BlockDrafter.batch_context`): per layer
    a :class:`~mfd_theory.llm.models.kv.KVBuffer` [B, kvh, capacity, d], request b's context in
    rows ``[0, lengths[b])`` of its batch row. A round appends each request's new context rows at
    its own offset and drafts all B blocks (K modes each) in one pass of the drafter's layers."""

    def __init__(self, drafter: BlockDrafter):
        self.d = drafter
        self.cache: list[KVBuffer] | None = None
        self.lengths: list[int] = []

    @torch.no_grad()
    def add(self, hidden_states, prompt_ids: list[int]) -> None:
        d = self.d
        if self.cache is None:
            attn = d.layers[0].self_attn
            shape = d.fc.weight.new_empty((1, attn.num_kv_heads, 0, attn.head_dim))
            self.cache = [KVBuffer.like(shape, batch=0) for _ in d.layers]
        for buf in self.cache:
            none = buf.keys.new_empty((1, buf.keys.shape[1], 0, buf.keys.shape[3]))  # the new row starts empty
            buf.append(none, none)
        self.lengths.append(0)
        self._append([None] * (len(self.lengths) - 1) + [d.fuse_hidden(hidden_states)])  # [1, T, H]

    def drop(self, keep: list[int]) -> None:
        if keep == list(range(len(self.lengths))):
            return
        if not keep:
            self.cache, self.lengths = None, []
            return
        idx = torch.tensor(keep, device=self.cache[0].device)
        for buf in self.cache:
            buf.select(idx)
        self.lengths = [self.lengths[i] for i in keep]

    def fuse(self, hidden_states) -> torch.Tensor:
        return self.d.fuse_hidden(hidden_states)

    def observe(self, row: int, tokens: list[int]) -> None:
        return None  # drafts from the context features alone

    def _append(self, feats: list) -> None:
        """Append each request's new context features [1, t_b, H] (None: nothing new)."""
        d = self.d
        ts = [0 if f is None else f.shape[1] for f in feats]
        tmax = max(ts)
        if tmax == 0:
            return
        dev = self.cache[0].device
        x = self.cache[0].keys.new_zeros((len(feats), tmax, d.config.hidden_size))  # [B, tmax, H]
        for b, f in enumerate(feats):
            if ts[b]:
                x[b, : ts[b]] = f[0]
        for buf in self.cache:
            buf.reserve(max(n + tmax for n in self.lengths))
        valid = torch.arange(tmax, device=dev)[None] < torch.tensor(ts, device=dev)[:, None]  # [B, tmax]
        d._write_context(self.cache, x, torch.tensor(self.lengths, device=dev), valid)
        self.lengths = [n + t for n, t in zip(self.lengths, ts)]

    @torch.no_grad()
    def draft(self, new_feats: list, roots: list[int]):
        """Append new context features (one [1, t_b, H] or None per request), then draft every
        request's block: (log_pi [B, K], log_q [B, K, L, V])."""
        d = self.d
        self._append(new_feats)
        bsz, k, s = len(self.lengths), d.num_modes, d.block_size
        dev = self.cache[0].device
        rep = d.layers[0].self_attn.rep
        n = torch.tensor(self.lengths, device=dev)
        end = max(self.lengths) + k * s
        for buf in self.cache:
            buf.reserve(end)
        block_ids = torch.full((bsz, s), int(d.mask_token_id), dtype=torch.long, device=dev)
        block_ids[:, 0] = torch.tensor([int(r) for r in roots], device=dev)
        blk_pos = (n[:, None] + torch.arange(s, device=dev)[None]).repeat_interleave(k, dim=0)  # [B*K, S]
        write = n[:, None] + torch.arange(k * s, device=dev)[None]  # [B, K*S]: the blocks' key rows
        # mask [B, 1, rep*K*S, end]: own context, then own blocks (mode k sees mode k's block)
        dtype = d.fc.weight.dtype
        cols = torch.arange(end, device=dev)
        vis = (cols[None, None] < n[:, None, None]).expand(bsz, rep * k * s, end).clone()
        blk_vis = block_mode_mask(k, s, rep, torch.float32, dev) == 0  # [rep*K*S, K*S]
        vis.scatter_(2, write[:, None, :].expand(bsz, rep * k * s, k * s), blk_vis.expand(bsz, -1, -1))
        mask = torch.zeros((bsz, 1, rep * k * s, end), dtype=dtype, device=dev)
        mask.masked_fill_(~vis[:, None], torch.finfo(dtype).min)
        h = d._run(d._block_embeddings(block_ids), self.cache, blk_pos, mask, offsets=self.lengths)  # [B*K, S, H]
        log_pi = d._readout(h, bsz)  # [B, K]
        log_q = d._log_probs(h[:, 1:]).view(bsz, k, s - 1, -1)  # [B, K, L, V]
        return log_pi, log_q


class MFDDrafter(BlockDrafter):
    """Mixture drafter: the block drafter's backbone plus K mode embeddings and a mode gate.

    ``mode_embed`` [K, H] is added to every input embedding of the block (K copies of the block run
    in one forward sharing the context keys/values); ``mode_gate`` [H] is a linear map from each
    mode's mean final normalised block state to its logit, ``log pi = log_softmax_k(mode_gate .
    mean_j h_{k,j})``. With K = 1 (and a zero mode embedding) it is exactly the block drafter.
    :meth:`train_forward` and :meth:`draft` return ``(log_pi, log_q)``.

    A checkpoint's gate of another shape (the released MFD drafters' linear gate, unused at
    inference) is kept as it was read, under its own names, and not used: ``gate_used`` is then
    False, ``gate_note`` says why, and the mixture weights are uniform (a best-mode tree needs
    none). The names before ``mode_embed`` / ``mode_gate`` (``mode_embeddings`` /
    ``weight_readout``) are still read, and still work as attributes. Layout and assumptions:
    docs/own-target.md ("MFD checkpoints as released")."""

    #: parameter names this class had before, and their names now (read in old checkpoints)
    legacy_parameter_names = {"mode_embeddings": "mode_embed", "weight_readout": "mode_gate"}

    def __init__(self, config: Qwen3Config, target: Any, num_modes: int | None = None):
        super().__init__(config, target)
        k = int(num_modes if num_modes is not None else _draft_value(config, "num_modes", 1))
        if k < 1:
            raise ValueError(f"num_modes: must be >= 1, got {k}")
        self.num_modes = k
        self.mode_embed = nn.Parameter(torch.zeros(k, config.hidden_size))  # [K, H]
        self.mode_gate = nn.Parameter(torch.zeros(config.hidden_size))  # [H]
        self.gate_used = True
        self.gate_note = "mode_gate [H]: each mode's logit is mode_gate . its mean final block state"

    @property
    def mode_embeddings(self) -> nn.Parameter:
        """``mode_embed`` under its former name."""
        return self.mode_embed

    @property
    def weight_readout(self) -> torch.Tensor:
        """``mode_gate`` under its former name."""
        if not self.gate_used:
            raise AttributeError("weight_readout: this drafter's mode_gate is a checkpoint's own, kept unused")
        return self.mode_gate

    def keep_foreign_gate(self, tensors: dict[str, torch.Tensor], why: str) -> None:
        """Hold a checkpoint's gate tensors (names relative to ``mode_gate``, "" for the bare
        name) as buffers under their own names, unused: the mixture weights become uniform."""
        del self.mode_gate
        if not tensors:
            self.mode_gate = None
        elif set(tensors) == {""}:
            self.register_buffer("mode_gate", tensors[""].detach().clone())
        else:
            self.mode_gate = _buffer_tree(tensors)
        self.gate_used = False
        self.gate_note = why

    def _block_embeddings(self, block_ids):
        b, s = block_ids.shape
        emb = super()._block_embeddings(block_ids)  # [B, S, H]
        emb = emb[:, None] + self.mode_embed[None, :, None, :].to(emb.dtype)  # [B, K, S, H]
        return emb.reshape(b * self.num_modes, s, -1)  # [B*K, S, H]

    def _readout(self, h, batch):
        if not self.gate_used:  # uniform weights: a best-mode tree needs none, a mixture tree gets 1/K each
            return h.new_full((batch, self.num_modes), -math.log(self.num_modes), dtype=torch.float32)
        pooled = h.float().mean(dim=1).view(batch, self.num_modes, -1)  # [B, K, H]
        return torch.log_softmax(pooled @ self.mode_gate.float(), dim=-1)  # [B, K]

    def train_forward(self, ctx_feats, block_ids, ctx_valid=None):
        """(log_pi [B, K], log_q [B, K, block_size - 1, V])."""
        return self._train_modes(ctx_feats, block_ids, ctx_valid)

    def train_forward_shared(self, ctx_feats, block_ids, starts):
        """(log_pi [B*nb, K], log_q [B*nb, K, block_size - 1, V]): see :meth:`BlockDrafter.train_forward_shared`."""
        return self._train_modes_shared(ctx_feats, block_ids, starts)

    def draft(self, new_ctx_feats, root_token):
        return self.draft_modes(new_ctx_feats, root_token)


def _buffer_tree(tensors: dict[str, torch.Tensor]) -> nn.Module:
    """A module holding ``tensors`` (dotted names) as persistent buffers at those names."""
    root = nn.Module()
    for name, value in tensors.items():
        *path, leaf = name.split(".")
        mod = root
        for part in path:
            if not hasattr(mod, part):
                mod.add_module(part, nn.Module())
            mod = getattr(mod, part)
        mod.register_buffer(leaf, value.detach().clone())
    return root


def _check_compatible(drafter: BlockDrafter, config, tcfg) -> None:
    if drafter.block_size < 2:
        raise ValueError(f"block_size: must be >= 2 (one committed token plus drafts), got {drafter.block_size}")
    if config.hidden_size != tcfg.hidden_size:
        raise ValueError(f"hidden_size: drafter has {config.hidden_size}, target has {tcfg.hidden_size}")
    if config.vocab_size != tcfg.vocab_size:
        raise ValueError(f"vocab_size: drafter has {config.vocab_size}, target has {tcfg.vocab_size}")
    if drafter.mask_token_id is None or not 0 <= int(drafter.mask_token_id) < tcfg.vocab_size:
        raise ValueError(f"mask_token_id: {drafter.mask_token_id} is not a token of the target's vocabulary")
    n = tcfg.num_hidden_layers
    built_for = getattr(config, "num_target_layers", None)
    if built_for is not None and int(built_for) != int(n):
        raise ValueError(f"num_target_layers: the drafter was built for a {built_for}-layer target, "
                         f"this target has {n} layers")
    bad = [i for i in drafter.target_layer_ids if not 0 <= i < n]
    if bad or not drafter.target_layer_ids:
        raise ValueError(f"target_layer_ids: {drafter.target_layer_ids} must be non-empty layer ids in [0, {n})")


def _drafter_config(tcfg, block_size: int, num_layers: int, target_layer_ids, mask_token_id, num_modes: int,
                    layout: dict[str, bool] | None = None):
    """The drafter's Qwen3Config; ``layout`` (``attention_bias`` / ``o_proj_bias`` / ``qk_norm``)
    overrides the attention layout, default Qwen3's with the target config's ``attention_bias``."""
    src = tcfg.to_dict()
    kw = {key: src[key] for key in _CONFIG_COPY_KEYS if key in src and src[key] is not None}
    bias = bool(kw.get("attention_bias", False))
    kw.update({"attention_bias": bias, "o_proj_bias": bias, "qk_norm": True}, **(layout or {}))
    if isinstance(kw.get("rope_parameters"), dict):
        # Hybrid targets rotate part of each head (and Qwen3.5 sections it for images); the draft
        # layers are Qwen3 layers with full rotary, as in the published Qwen3.5 drafters.
        kw["rope_parameters"] = {k: v for k, v in kw["rope_parameters"].items() if k not in _TARGET_ONLY_ROPE_KEYS}
    if "head_dim" not in kw:
        # Qwen2's config has no head_dim (its attention divides hidden_size by the heads); Qwen3Config
        # would fill in its own 128 instead of the target's head size.
        kw["head_dim"] = int(tcfg.hidden_size) // int(tcfg.num_attention_heads)
    dcfg = {"target_layer_ids": list(target_layer_ids), "mask_token_id": int(mask_token_id), "block_size": block_size}
    if num_modes > 1:
        dcfg["num_modes"] = num_modes
    cfg = Qwen3Config(num_hidden_layers=num_layers, **kw)
    cfg.block_size = block_size
    cfg.num_target_layers = tcfg.num_hidden_layers
    cfg.dflash_config = dcfg
    cfg.use_sliding_window = False
    return cfg


DRAFTER_KINDS = ("dflash", "dartree")
#: a new drafter's attention layout: the target's (a true copy of its layers fits), or DFlash's Qwen3 layer
LAYER_LAYOUTS = ("target", "qwen3")


def build_drafter(target: Any, block_size: int, num_layers: int, num_modes: int = 1, seed: int = 0, *,
                  mask_token_id: int | None = None, target_layer_ids: list[int] | None = None,
                  kind: str = "dflash", rank: int | None = None, draft_vocab=None,
                  layout: str = "target") -> BlockDrafter:
    """A randomly initialised drafter sized to ``target`` (BlockDrafter if num_modes == 1, else MFD).

    ``kind="dartree"`` builds a Domino drafter (:mod:`mfd_theory.llm.models.domino`): the same backbone
    plus a path-correction head of ``rank`` (default ``domino.DEFAULT_RANK``); it has one mode.

    ``mask_token_id`` defaults to the id z-lab's published drafters use for the target's tokenizer
    (151669 for Qwen3's 151,936-token vocabulary, 248070 for Qwen3.5/3.6's 248,320), otherwise to
    the last id of the vocabulary. ``draft_vocab`` (target token ids) restricts what it drafts
    (:meth:`BlockDrafter.set_draft_vocab`). Hybrid targets (Qwen3.5, Qwen3-Next) get the same Qwen3 draft
    layers; ``target_layer_ids`` index the hybrid stack's ``hidden_states`` as for Qwen3.
    Placed on the target's device and dtype.

    ``layout="target"`` (default) shapes the draft layers' attention as the target's
    (:func:`target_attention_layout`): a Qwen2 target's drafter has q/k/v biases, no o bias and no
    q/k norms, a Qwen3 target's has q/k norms and no biases, so the drafter can start as a true copy
    of the target's last layers (``init_layers_from_target``). ``layout="qwen3"``: DFlash's Qwen3
    layer whatever the target (q/k norms; biases only if the target config's ``attention_bias``).
    """
    hf = _hf_model(target)
    tcfg = hf.config.get_text_config() if hasattr(hf.config, "get_text_config") else hf.config
    if int(block_size) < 2:
        raise ValueError(f"block_size: must be >= 2, got {block_size}")
    if int(num_layers) < 1:
        raise ValueError(f"num_layers: must be >= 1, got {num_layers}")
    if int(num_modes) < 1:
        raise ValueError(f"num_modes: must be >= 1, got {num_modes}")
    if not isinstance(kind, str) or kind not in DRAFTER_KINDS:
        raise ValueError(f"kind: must be one of {DRAFTER_KINDS}, got {kind!r}")
    if kind == "dartree" and int(num_modes) != 1:
        raise ValueError(f"num_modes: a dartree (Domino) drafter has one mode, got {num_modes}")
    if kind != "dartree" and rank is not None:
        raise ValueError(f"rank: only a dartree drafter has a correction rank (kind is {kind!r})")
    if not isinstance(layout, str) or layout not in LAYER_LAYOUTS:
        raise ValueError(f"layout: must be one of {LAYER_LAYOUTS}, got {layout!r}")
    ids = target_layer_ids or default_target_layer_ids(tcfg.num_hidden_layers, int(num_layers))
    default_mask = _PUBLISHED_MASK_IDS.get(int(tcfg.vocab_size), tcfg.vocab_size - 1)
    mask_id = default_mask if mask_token_id is None else int(mask_token_id)
    cfg = _drafter_config(tcfg, int(block_size), int(num_layers), ids, mask_id, int(num_modes),
                          target_attention_layout(hf, tcfg) if layout == "target" else None)
    param = next(hf.parameters())
    gen = torch.Generator().manual_seed(int(seed))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        if kind == "dartree":
            drafter = _registered(_KIND_CLASSES, kind, "kind")(cfg, hf, rank)
        else:
            drafter = MFDDrafter(cfg, hf, int(num_modes)) if num_modes > 1 else BlockDrafter(cfg, hf)
    std = float(getattr(cfg, "initializer_range", 0.02))
    for name, p in drafter.named_parameters():
        if name.endswith("norm.weight"):
            continue
        if name == "mode_gate":  # zero: uniform mixture weights to start
            continue
        p.data.copy_(torch.randn(p.shape, generator=gen) * std)
    if draft_vocab is not None:
        drafter.set_draft_vocab(draft_vocab)
    return drafter.to(device=param.device, dtype=param.dtype)


def load_drafter(directory, target: Any, dtype: torch.dtype | None = None) -> BlockDrafter:
    """Read config.json + safetensors (DFlash names) from ``directory`` (or the shipped drafter of
    that name, ``mfd drafter list``); MFD if it has mode tensors,
    a Domino drafter (:mod:`mfd_theory.llm.models.domino`) if its architecture is ``DominoDraftModel``.

    Weights: ``model.safetensors``, or the shards a ``model.safetensors.index.json`` names (as a
    sharded Hugging Face save writes them), in any float dtype (the released drafters are bf16);
    the drafter is cast to ``dtype`` (default: the target's). An MFD checkpoint holds ``mode_embed``
    [K, H] (K is its first dimension; a ``num_modes`` in the config must agree) and a
    ``mode_gate``: one of shape [H] (or [1, H], a linear map to one logit) is this package's
    per-mode gate and sets the mixture weights; any other is kept unused, with a warning, and the
    weights are uniform (``gate_used`` False). The names written before, ``mode_embeddings`` and
    ``weight_readout``, are read as those. docs/own-target.md ("MFD checkpoints as released")."""
    if not Path(directory).exists() and is_shipped_drafter(str(directory)):
        directory = shipped_drafter(str(directory), "directory")
    directory = Path(directory)
    cfg_path = directory / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"directory: no config.json in {directory}")
    raw = json.loads(cfg_path.read_text())
    arch = (raw.get("architectures") or ["DFlashDraftModel"])[0]
    if arch not in ("DFlashDraftModel", "MFDDraftModel", "DominoDraftModel") and not isinstance(
            raw.get("dflash_config"), dict):
        raise ValueError(f"directory: architecture {arch!r} is not a DFlash block drafter")
    state = _read_weights(directory)
    state = {k[len("model."):] if k.startswith("model.") else k: v for k, v in state.items()}
    state = {MFDDrafter.legacy_parameter_names.get(k, k): v for k, v in state.items()}
    block_size = raw.get("block_size", (raw.get("dflash_config") or {}).get("block_size", 16))
    cfg = Qwen3Config(**{k: v for k, v in raw.items() if k not in ("architectures", "target_fingerprint")})
    cfg.block_size = int(block_size)
    cfg.dflash_config = dict(raw.get("dflash_config") or {})
    if "num_target_layers" in raw:
        cfg.num_target_layers = raw["num_target_layers"]
    hf = _hf_model(target)
    gate_note = None
    if arch == "DominoDraftModel":
        drafter: BlockDrafter = _registered(_ARCH_CLASSES, arch, "directory")(cfg, hf)
    elif "mode_embed" in state:
        num_modes = _checked_num_modes(state["mode_embed"], raw, cfg.hidden_size)
        drafter = MFDDrafter(cfg, hf, num_modes)
        gate_note = _take_gate(drafter, state, cfg.hidden_size)
    else:
        drafter = BlockDrafter(cfg, hf)
    state = {k: v for k, v in state.items() if not k.startswith("rotary_emb.")}
    _take_draft_vocab(drafter, state, raw, directory)
    missing, unexpected = drafter.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.startswith("rotary_emb.")]
    if missing or unexpected:
        raise ValueError(f"directory: checkpoint does not match DFlash's layout (missing {missing}, "
                         f"unexpected {unexpected})")
    _check_fingerprint(directory, raw, hf)
    if gate_note is not None:
        warnings.warn(f"{directory}: {gate_note}", stacklevel=2)
    param = next(hf.parameters())
    return drafter.to(device=param.device, dtype=dtype or param.dtype)


def _take_draft_vocab(drafter: BlockDrafter, state: dict, raw: dict, directory: Path) -> None:
    """A checkpoint's reduced draft vocabulary (``d2t`` and ``t2d``, both or neither, consistent
    with each other and with ``draft_vocab_size``) set on ``drafter`` before its weights load."""
    has = [n for n in ("d2t", "t2d") if n in state]
    if not has:
        if raw.get("draft_vocab_size") not in (None, raw.get("vocab_size")):
            raise ValueError(f"directory: {directory} says draft_vocab_size {raw['draft_vocab_size']} but holds no d2t")
        return
    if len(has) == 1:
        raise ValueError(f"directory: {directory} holds {has[0]} without {({'d2t', 't2d'} - set(has)).pop()}")
    d2t, t2d = state["d2t"].long(), state["t2d"].bool()
    ids = d2t + torch.arange(len(d2t))
    if t2d.shape != (int(drafter.config.vocab_size),) or int(t2d.sum()) != len(ids) or (
            len(ids) and not bool(t2d[ids.clamp(0, len(t2d) - 1)].all())) or not bool((ids[1:] > ids[:-1]).all()):
        raise ValueError(f"directory: {directory}'s d2t ({len(d2t)} ids) and t2d ({int(t2d.sum())} set of "
                         f"{t2d.numel()}) do not describe the same ascending draft vocabulary")
    if raw.get("draft_vocab_size") not in (None, len(ids)):
        raise ValueError(f"directory: {directory} says draft_vocab_size {raw['draft_vocab_size']}, its d2t has {len(ids)}")
    drafter.set_draft_vocab(ids)
    state["d2t"], state["t2d"] = drafter.d2t.cpu(), drafter.t2d.cpu()


def _read_weights(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of ``directory``'s checkpoint: the shards its index names (each checked to hold
    what the index says), else ``model.safetensors``, else every ``*.safetensors`` file there."""
    from safetensors.torch import load_file

    index = directory / _INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"directory: unreadable {index}: {exc}") from exc
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            if not (directory / shard).is_file():
                raise FileNotFoundError(f"directory: {index.name} names {shard}, which is not in {directory}")
            state.update(load_file(str(directory / shard)))
        absent = sorted(set(weight_map) - set(state))
        if absent:
            raise ValueError(f"directory: {index.name} lists tensors its shards do not hold: {absent[:4]}")
        return state
    single = directory / "model.safetensors"
    files = [single] if single.is_file() else sorted(directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"directory: no .safetensors files in {directory}")
    state = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def _checked_num_modes(mode_embed: torch.Tensor, raw: dict, hidden: int) -> int:
    """K from ``mode_embed`` [K, H]; a ``num_modes`` the config records (in ``dflash_config`` or at
    the top level) must be the same K."""
    if mode_embed.dim() != 2 or mode_embed.shape[1] != hidden:
        raise ValueError(f"directory: mode_embed has shape {list(mode_embed.shape)}, expected [K, {hidden}]")
    k = int(mode_embed.shape[0])
    for where, cfg in (("dflash_config.num_modes", raw.get("dflash_config") or {}), ("num_modes", raw)):
        if "num_modes" in cfg and int(cfg["num_modes"]) != k:
            raise ValueError(f"directory: config.json's {where} is {cfg['num_modes']}, mode_embed holds {k} modes")
    return k


def _take_gate(drafter: MFDDrafter, state: dict, hidden: int) -> str | None:
    """Move the checkpoint's gate into ``state`` as this drafter's ``mode_gate`` [H] when its shape
    is that map's ([H], or [1, H] without a bias); otherwise keep it on the drafter unused. Returns
    a note to warn with, or None when the gate is this package's own."""
    names = [k for k in state if k == "mode_gate" or k.startswith("mode_gate.")]
    if not names:
        drafter.keep_foreign_gate({}, "no mode_gate stored: uniform mixture weights")
        return f"no mode_gate in the checkpoint: the {drafter.num_modes} modes get uniform mixture weights"
    gate = {k[len("mode_gate."):] if k != "mode_gate" else "": state.pop(k) for k in names}
    if set(gate) in ({""}, {"weight"}) and tuple(next(iter(gate.values())).shape) in ((hidden,), (1, hidden)):
        state["mode_gate"] = next(iter(gate.values())).reshape(hidden)
        return None
    shapes = ", ".join(f"mode_gate{'.' + k if k else ''} {list(v.shape)}" for k, v in sorted(gate.items()))
    why = (f"{shapes} is not this package's per-mode gate (mode_gate [{hidden}]); kept with the weights but "
           "unused, so the modes get uniform mixture weights (a best-mode tree uses none)")
    drafter.keep_foreign_gate(gate, why)
    for k, v in gate.items():  # back in the state under their own names, so the strict load checks them
        state["mode_gate" + ("." + k if k else "")] = v
    return why


def _check_fingerprint(directory: Path, raw: dict, hf) -> None:
    """Refuse a checkpoint whose recorded target fingerprint is not this target's.

    Drafters saved by this package record it (``target_fingerprint`` in config.json, and
    ``target_fingerprint.json`` beside the weights for trained ones); third-party DFlash
    checkpoints have none and are checked by shapes and layer count only.
    """
    saved = raw.get("target_fingerprint")
    fp_path = directory / "target_fingerprint.json"
    if saved is None and fp_path.is_file():
        try:
            saved = json.loads(fp_path.read_text())["target"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"directory: unreadable {fp_path}: {exc}") from exc
    if saved is None:
        return
    mine = target_fingerprint(hf)
    if saved != mine:
        raise ValueError(f"directory: the drafter in {directory} was trained for another target "
                         f"(fingerprint {saved}, this target's is {mine})")


def _same_table(a: torch.Tensor, b: torch.Tensor) -> bool:
    # The same tensor, or (rarely) an equal copy: a drafter built on an identical reload is fine.
    return a is b or (a.shape == b.shape and a.device == b.device and a.dtype == b.dtype and torch.equal(a, b))


def check_drafter_target(drafter: Any, target_hf: nn.Module) -> None:
    """Refuse a drafter object built on another target: its referenced embedding and LM-head
    tables must be this target's, and its ``num_target_layers`` this target's layer count."""
    emb = getattr(drafter, "_embed_tokens", None)
    head = getattr(drafter, "_lm_head", None)
    if emb is not None and not _same_table(emb.weight, target_hf.get_input_embeddings().weight):
        raise ValueError("drafter: built on another target (its input embedding table is not this target's)")
    if head is not None and not _same_table(head.weight, target_hf.get_output_embeddings().weight):
        raise ValueError("drafter: built on another target (its LM head is not this target's)")
    cfg = getattr(drafter, "config", None)
    built_for = getattr(cfg, "num_target_layers", None) if cfg is not None else None
    tcfg = target_hf.config.get_text_config() if hasattr(target_hf.config, "get_text_config") else target_hf.config
    if built_for is not None and int(built_for) != int(tcfg.num_hidden_layers):
        raise ValueError(f"drafter: built for a {built_for}-layer target, this target has "
                         f"{tcfg.num_hidden_layers} layers")


def drafter_from_checkpoint(directory, target: Any, num_modes: int = 1) -> BlockDrafter:
    """A drafter with ``num_modes`` modes initialised from a DFlash checkpoint in ``directory``.

    For ``num_modes`` > 1 the checkpoint's backbone is copied into an MFD drafter whose mode
    embeddings and gate are zero: every mode is then the checkpoint's block drafter and
    the mixture weights are uniform, so it drafts exactly the checkpoint's distributions.
    A checkpoint that already has modes must have ``num_modes`` of them.
    """
    base = load_drafter(directory, target)
    k = int(num_modes)
    if k < 1:
        raise ValueError(f"num_modes: must be >= 1, got {num_modes}")
    if base.num_modes == k:
        return base
    if base.num_modes != 1:
        raise ValueError(f"num_modes: the checkpoint in {directory} has {base.num_modes} modes, "
                         f"cannot start a {k}-mode drafter from it")
    cfg = base.config
    dcfg = dict(getattr(cfg, "dflash_config", None) or {})
    if k > 1:
        dcfg["num_modes"] = k
    cfg.dflash_config = dcfg
    hf = _hf_model(target)
    drafter = MFDDrafter(cfg, hf, k)
    state = {n: v for n, v in base.state_dict().items() if not n.startswith("rotary_emb.")}
    if base.d2t is not None:
        drafter.set_draft_vocab(base.draft_vocab)
    missing, unexpected = drafter.load_state_dict(state, strict=False)
    left = [m for m in missing if not m.startswith("rotary_emb.") and m not in ("mode_embed", "mode_gate")]
    if left or unexpected:
        raise ValueError(f"directory: checkpoint in {directory} does not fit an MFD drafter ({left}, {unexpected})")
    param = next(base.parameters())
    return drafter.to(device=param.device, dtype=param.dtype)
