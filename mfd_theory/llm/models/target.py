"""The target model adapter: prefill, one tree-verification forward, KV compaction.

``TargetModel`` wraps a Hugging Face causal LM that takes a 4D float attention mask (Qwen3 first;
hybrid Gated DeltaNet targets through ``hybrid.py``) and keeps its own cache, whose attention
layers write new rows in place (``models/kv.py``). A round is ``verify(root, tree)`` (logits
[N+1, V], root first) then ``commit(path)``, keeping the rows of the root and the accepted nodes.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from mfd_theory.llm.models.hybrid import HybridTree, is_hybrid_cache
from mfd_theory.llm.models.kv import KVBuffer

__all__ = ["TargetModel", "VerifyOutput", "ancestor_mask", "load_local_target", "tree_attention_mask"]

#: the names ``load_local_target`` takes for ``dtype`` ("auto": bfloat16 on CUDA; on a CPU, float32, or
#: bfloat16 under fast numerics where the host runs it faster: :mod:`mfd_theory.llm.models.dtype`)
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")


def load_local_target(directory, device: str = "cpu", dtype: str = "auto", attn_implementation: str = "sdpa"):
    """(frozen Hugging Face causal LM in eval mode on ``device``, its tokenizer) from a local
    directory or a shipped target's name (materialised once, :mod:`mfd_theory.llm.models.gguf`);
    nothing is downloaded. The directory is checked first, so a wrong path raises a
    ValueError naming it (``from_pretrained`` would take it for a hub repository id), and a
    loader failure is a ValueError naming the directory too. Wrap the model in
    :class:`TargetModel` to decode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mfd_theory.llm.models.dtype import resolve_dtype
    from mfd_theory.llm.models.gguf import resolve_target
    from mfd_theory.validation import check_choice, check_model_dir

    d = check_model_dir(resolve_target(str(directory)), "target")
    check_choice("dtype", dtype, DTYPE_NAMES)
    torch_dtype = resolve_dtype(dtype, device)
    try:
        tok = AutoTokenizer.from_pretrained(str(d), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any loader failure is the directory's fault
        raise ValueError(f"target: cannot load the tokenizer in {d}: {exc}") from exc
    try:
        model = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch_dtype, attn_implementation=attn_implementation,
                                                     local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"target: cannot load the model in {d}: {exc}") from exc
    model = model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, tok


@dataclass
class VerifyOutput:
    logits: torch.Tensor  # [N+1, V] float32: the target's next-token logits at the root and every node
    hidden_states: tuple | None  # HF hidden_states tuple, each [1, N+1, H] (None when not requested)


def tree_attention_mask(ancestor: np.ndarray | torch.Tensor, past_len: int, dtype: torch.dtype,
                        device: torch.device | str) -> torch.Tensor:
    """Float additive mask [1, 1, N+1, past_len + N+1] from an ancestor mask [N+1, N+1] (root first)."""
    anc = ancestor.to(device) if isinstance(ancestor, torch.Tensor) else torch.as_tensor(
        np.asarray(ancestor, dtype=bool), device=device)
    n1 = anc.shape[0]
    mask = torch.zeros((n1, past_len + n1), dtype=dtype, device=device)
    mask[:, past_len:].masked_fill_(~anc, torch.finfo(dtype).min)
    return mask[None, None]  # [1, 1, N+1, past+N+1]


def ancestor_mask(tree, device) -> torch.Tensor:
    """bool [N+1, N+1] (root first, row = query): the core's ``DraftTree.ancestor_mask()`` (a numba
    walk up the parents, microseconds at N = 1024), moved to ``device`` in one copy."""
    return torch.from_numpy(tree.ancestor_mask()).to(device)


@functools.lru_cache(maxsize=None)
def _in_place_layer_class():
    """A ``DynamicLayer`` that keeps its rows in a :class:`~mfd_theory.llm.models.kv.KVBuffer`.

    ``DynamicLayer.update`` concatenates the new rows to the cached ones, which copies the whole
    cache every forward (every verify round). This layer writes the new rows in place instead;
    ``keys`` / ``values`` are views of the buffer's first rows, so ``crop`` (a shorter view) and
    :meth:`TargetModel.commit`'s in-place row moves work on it unchanged. Growth copies the rows
    once into a buffer at least twice as long (amortised O(1) per row; up to 2x the cache memory).
    """
    from transformers.cache_utils import DynamicLayer

    class InPlaceLayer(DynamicLayer):
        kv: KVBuffer | None = None

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n, t = self.get_seq_length(), key_states.shape[-2]
            kv = self.kv
            # a fresh layer, or keys replaced behind our back (batch ops, offloading): a new buffer
            if kv is None or not kv.fits(key_states) or (n and self.keys.data_ptr() != kv.keys.data_ptr()):
                kv = self.kv = KVBuffer.like(key_states, max(n + t, 2 * n))
                if n:
                    kv.write(0, self.keys, self.values)
            else:
                kv.reserve(n + t, used=n)
            kv.write(n, key_states, value_states)
            self.keys, self.values = kv.read(n + t)  # views
            return self.keys, self.values

        def reset(self) -> None:
            self.kv = None
            super().reset()

    return InPlaceLayer


def _check_one_device(model: nn.Module) -> None:
    """Refuse a model spread over several devices (``device_map="auto"`` over GPUs, or with CPU /
    disk offload): cache compaction, hidden-state fusion and the step clock assume one device."""
    placed = getattr(model, "hf_device_map", None) or {}
    # accelerate records GPU i as the int i; "cuda:i" is the same device. The map and the
    # parameters are checked apart: a one-device map goes stale when the model is moved later.
    mapped = {f"cuda:{d}" if isinstance(d, int) else str(d) for d in placed.values()}
    held = {str(p.device) for p in model.parameters()}
    where = mapped if len(mapped) > 1 else held
    if len(where) > 1:
        raise ValueError(f"hf_model: spread over devices {sorted(where)} (device_map); tree verification "
                         "needs the whole target on one device: load it with device_map=None and .to(device)")


def _cache_kwarg(model: nn.Module) -> str:
    """The forward's name for the KV cache: ``cache`` in transformers 5.x (``past_key_values``, the
    older name, still reads but warns), ``past_key_values`` before. A wrapper whose forward only
    passes ``**kwargs`` on gets the name this transformers' own models take."""
    params = inspect.signature(model.forward).parameters
    if "cache" in params or "past_key_values" in params:
        return "cache" if "cache" in params else "past_key_values"
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        from transformers import Qwen3ForCausalLM

        return "cache" if "cache" in inspect.signature(Qwen3ForCausalLM.forward).parameters else "past_key_values"
    return "past_key_values"


class TargetModel:
    """A frozen HF causal LM with a KV cache that tree verification can compact in place.

    ``hf_model`` must accept a 4D float attention mask (checked by a two-token probe at
    construction: a model that ignores or rejects the mask raises ``ValueError``). Hybrids
    (Qwen3.5 / Qwen3-Next) are accepted; ``gdn_commit`` picks how their recurrent state is
    committed ("path", the default, "replay" or "select", see :mod:`mfd_theory.llm.models.hybrid`). ``cache_in_place``: the
    attention layers write each forward's rows into preallocated buffers instead of HF's
    concatenation, which copies the whole cache every round (see :func:`_in_place_layer_class`).

    Verification input is ``[root, node tokens...]`` at positions ``length + depth`` (the root has
    depth 0), and every query sees all cached context plus its own ancestors and itself, through a
    *float additive* mask (0 visible, dtype minimum hidden): transformers 5.x passes a 4D mask
    through unchanged and the eager kernel adds it to the scores, so a bool mask would be wrong.
    """

    def __init__(self, hf_model: nn.Module, check_mask: bool = True, gdn_commit: str = "path",
                 cache_in_place: bool = True):
        if not isinstance(hf_model, nn.Module) or not hasattr(hf_model, "config"):
            raise ValueError("hf_model: expected a Hugging Face causal LM (an nn.Module with a config)")
        self.model = hf_model.eval()
        cfg = hf_model.config.get_text_config() if hasattr(hf_model.config, "get_text_config") else hf_model.config
        self.config = cfg
        self.vocab_size = int(cfg.vocab_size)
        self.hidden_size = int(cfg.hidden_size)
        self.num_layers = int(cfg.num_hidden_layers)
        self.max_positions = int(getattr(cfg, "max_position_embeddings", 0) or 0) or None
        _check_one_device(hf_model)
        param = next(hf_model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self._cache_name = _cache_kwarg(hf_model)
        attn = getattr(cfg, "_attn_implementation", None) or getattr(hf_model.config, "_attn_implementation", None)
        # flash kernels take no 4D mask; flex attention compiles a block mask of its own and aborts
        # the process on a tree mask (refused before the probe below ever runs it)
        if attn is not None and ("flash" in str(attn) or "flex" in str(attn)):
            raise ValueError(f"hf_model: attention implementation {attn!r} cannot take a 4D tree mask; "
                             "load the model with attn_implementation='eager' or 'sdpa'")
        self.cache = None
        self.cache_in_place = bool(cache_in_place)
        self.length = 0  # committed tokens held in the cache
        self._pending = 0  # rows appended by the last verify, not yet committed
        self._pending_parent = np.empty(0, dtype=np.int64)  # the verified tree's parents (-1 = root)
        self._extended = False  # rows were added to the pending ones by extend (commit refused)
        self._gdn_round = None  # a hybrid's GDN side of the pending verification
        from transformers.cache_utils import DynamicLayer

        probe_cache = self.new_cache()
        self.hybrid = None  # the GDN side of a hybrid target (mfd_theory.llm.models.hybrid)
        if is_hybrid_cache(probe_cache):
            self.hybrid = HybridTree(hf_model, probe_cache, gdn_commit)
        odd = {type(layer).__name__ for layer in probe_cache.layers if type(layer) is not DynamicLayer}
        if odd and self.hybrid is None:  # sliding-window layers cannot be compacted row by row
            raise ValueError(f"hf_model: cache layers {sorted(odd)} are not supported (full attention only)")
        if check_mask and (self.hybrid is None or self.hybrid.kv_layers):
            self._probe_4d_mask()

    # ------------------------------------------------------------------ helpers
    def new_cache(self):
        """A fresh HF cache for this model (its layers as the model's config lays them out)."""
        from transformers import DynamicCache

        try:
            return DynamicCache(config=self.model.config)
        except TypeError:
            return DynamicCache()

    @torch.no_grad()
    def forward(self, ids, positions, mask, cache, hidden: bool, last_only: bool = False):
        """The model's forward over ``ids`` [B, Q] at ``positions`` [B, Q] with the additive ``mask``
        (or None: causal), reading and writing ``cache``; returns HF's output. ``last_only``: the
        logits of the last position only (a prefill that needs no others skips the head elsewhere)."""
        kwargs = {self._cache_name: cache}
        if last_only:
            kwargs["logits_to_keep"] = 1
        return self.model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True,
                          output_hidden_states=hidden, **kwargs)


    def _kv_layers(self):
        """The cache layers holding attention KV rows (all of them unless the target is a hybrid)."""
        if self.hybrid is None:
            return self.cache.layers
        return [self.cache.layers[i] for i in self.hybrid.kv_layers]

    def _gdn_state(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """GDN layer ``idx``'s committed (conv window [1, C, K], recurrent state [1, Hv, Dk, Dv])."""
        layer = self.cache.layers[idx]
        return layer.conv_states[0], layer.recurrent_states[0]

    def _probe_4d_mask(self) -> None:
        """Two tokens; hiding token 0 from token 1 must change token 1's logits."""
        ids = torch.tensor([[0, 1]], device=self.device)
        pos = torch.arange(2, device=self.device)[None]
        outs = []
        for anc in (np.array([[1, 0], [1, 1]], bool), np.array([[1, 0], [0, 1]], bool)):
            mask = tree_attention_mask(anc, 0, self.dtype, self.device)
            try:
                out = self.forward(ids, pos, mask, self.new_cache(), hidden=False)
            except Exception as exc:  # the model rejected the 4D mask
                raise ValueError(f"hf_model: cannot take a 4D attention mask ({type(exc).__name__}: {exc})") from exc
            outs.append(out.logits[0, 1].float())
        if torch.equal(outs[0], outs[1]):
            raise ValueError("hf_model: ignores a 4D attention mask (tree verification needs one)")

    def check_positions(self, end: int) -> None:
        """Refuse a sequence that would reach ``end`` positions, beyond the target's context."""
        if self.max_positions is not None and end > self.max_positions:
            raise ValueError(f"input_ids: sequence would reach {end} positions, beyond the target's "
                             f"context of {self.max_positions}")

    # ------------------------------------------------------------------ API
    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, hidden: bool = True):
        """Start a sequence: returns (next-token logits [V] float32, hidden_states tuple or None)."""
        ids = torch.as_tensor(input_ids, device=self.device)
        if ids.numel() and (ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex):
            raise ValueError(f"input_ids: token ids must be integers, got dtype {ids.dtype}")
        if ids.dim() == 1:
            ids = ids[None]
        if ids.dim() != 2 or ids.shape[0] != 1:
            raise ValueError(f"input_ids: expected one sequence [T] or [1, T], got shape {tuple(ids.shape)}")
        t = ids.shape[1]
        if t == 0:
            raise ValueError("input_ids: the prompt is empty")
        wide = ids.to(torch.float64)  # unsigned dtypes have no min/max kernels; any integer converts
        if float(wide.min()) < 0 or float(wide.max()) >= self.vocab_size:
            raise ValueError(f"input_ids: token ids must lie in [0, {self.vocab_size})")
        ids = ids.to(torch.int64)  # the embedding takes int64 ids only (int8 / uint8 / int16 crash in it)
        self.check_positions(t)
        self.cache = self.new_cache()
        if self.cache_in_place:
            from transformers.cache_utils import DynamicLayer

            grow = _in_place_layer_class()
            for layer in self.cache.layers:
                if type(layer) is DynamicLayer and not layer.is_initialized:
                    layer.__class__ = grow  # same state, in-place update (sliding/GDN layers untouched)
            if getattr(self.cache, "layer_class_to_replicate", None) is DynamicLayer:
                self.cache.layer_class_to_replicate = grow  # a cache built without a config adds layers lazily
        pos = torch.arange(t, device=self.device)[None]
        out = self.forward(ids, pos, None, self.cache, hidden)
        self.length, self._pending, self._extended = t, 0, False
        return out.logits[0, -1].float(), (out.hidden_states if hidden else None)

    def tree_mask(self, tree: Any = None) -> torch.Tensor:
        """The float additive mask [1, 1, N+1, length + N+1] for verifying ``tree`` next."""
        if tree is None or len(tree) == 0:
            return torch.zeros((1, 1, 1, self.length + 1), dtype=self.dtype, device=self.device)
        anc = ancestor_mask(tree, self.device)
        return tree_attention_mask(anc, self.length, self.dtype, self.device)

    @torch.no_grad()
    def verify(self, root_token: int, tree: Any = None, hidden: bool = True,
               mask: torch.Tensor | None = None) -> VerifyOutput:
        """One forward over [root, tree nodes]; ``tree=None`` (or empty) is a plain AR step.

        ``mask`` may be passed precomputed by :meth:`tree_mask` (decoding times it separately)."""
        if self.cache is None:
            raise ValueError("verify: call prefill first")
        if self._pending:
            raise ValueError("verify: the previous verification was not committed")
        n = 0 if tree is None else len(tree)
        self.check_positions(self.length + 1 + (int(np.max(tree.depth)) if n else 0))
        ids = torch.empty((1, n + 1), dtype=torch.long)
        ids[0, 0] = int(root_token)
        depth = torch.zeros(n + 1, dtype=torch.long)
        if n:
            ids[0, 1:] = torch.as_tensor(np.asarray(tree.token, dtype=np.int64))
            depth[1:] = torch.as_tensor(np.asarray(tree.depth, dtype=np.int64))
        if mask is None:
            mask = self.tree_mask(tree)
        if mask.shape != (1, 1, n + 1, self.length + n + 1):
            raise ValueError(f"mask: expected shape {(1, 1, n + 1, self.length + n + 1)}, got {tuple(mask.shape)}")
        pos = (self.length + depth).to(self.device)[None]
        if self.hybrid is None:
            out = self.forward(ids.to(self.device), pos, mask, self.cache, hidden)
        else:  # GDN layers run over the tree, each node from its own path's state
            parent = np.asarray(tree.parent) if n else np.zeros(0, np.int64)
            self._gdn_round = self.hybrid.start_round([parent], self.device, [depth[1:].numpy()])
            with self.hybrid.verifying(self._gdn_round, self._gdn_state):
                out = self.forward(ids.to(self.device), pos, mask, self.cache, hidden)
        self._pending = n + 1
        self._pending_parent = np.asarray(tree.parent, dtype=np.int64) if n else np.empty(0, dtype=np.int64)
        self._extended = False
        return VerifyOutput(out.logits[0].float(), out.hidden_states if hidden else None)

    @torch.no_grad()
    def extend(self, tokens, depth, visible) -> torch.Tensor:
        """More tree rows on top of the pending verification, kept pending with it: an oracle search
        deepens its tree forward after forward without running the rows it holds again.

        ``tokens`` [n] at ``depth`` [n] (>= 1; the pending root is depth 0, so a node sits at
        position length + depth), each row seeing the committed context, the pending rows that
        ``visible[:, :pending]`` marks and the new rows that ``visible[:, pending:]`` marks (its
        ancestors among them, and itself). Returns the new rows' logits [n, V] float32. Attention-only
        targets (a hybrid's GDN state would have to be carried from row to row); afterwards
        :meth:`discard` drops every pending row and :meth:`commit` is refused."""
        if self.hybrid is not None:
            raise ValueError("extend: attention-only targets (a hybrid verifies each forward's tree from its root)")
        if not self._pending:
            raise ValueError("extend: nothing pending (call verify first)")
        tok = np.asarray(tokens, dtype=np.int64).reshape(-1)
        dep = np.asarray(depth, dtype=np.int64).reshape(-1)
        vis = np.asarray(visible, dtype=bool)
        n, p = tok.size, self._pending
        if n == 0 or dep.shape != (n,) or vis.shape != (n, p + n):
            raise ValueError(f"extend: need tokens [n >= 1], depth [n] and visible [n, {p} + n], got {tok.shape}, "
                             f"{dep.shape}, {vis.shape}")
        if dep.min() < 1 or not vis[np.arange(n), p + np.arange(n)].all() or not vis[:, 0].all():
            raise ValueError("extend: every new row has depth >= 1 and sees the root and itself")
        if tok.min() < 0 or tok.max() >= self.vocab_size:
            raise ValueError(f"extend: token ids must lie in [0, {self.vocab_size})")
        self.check_positions(self.length + 1 + int(dep.max()))
        mask = torch.zeros((n, self.length + p + n), dtype=self.dtype, device=self.device)
        mask[:, self.length:].masked_fill_(~torch.from_numpy(vis).to(self.device), torch.finfo(self.dtype).min)
        ids = torch.from_numpy(tok).to(self.device)[None]
        pos = (self.length + torch.from_numpy(dep)).to(self.device)[None]
        out = self.forward(ids, pos, mask[None, None], self.cache, hidden=False)
        self._pending += n
        self._extended = True
        return out.logits[0].float()

    def discard(self) -> None:
        """Drop the pending verification's rows, root included: the cache holds the committed
        context again, so the next verify may pass a root and a tree from the same place (the
        ceiling's many forwards from one context). A hybrid's GDN state is only read by a verify,
        so nothing else changes."""
        if not self._pending:
            raise ValueError("discard: nothing to discard (call verify first)")
        for layer in self._kv_layers():
            layer.crop(-self._pending)
        self._gdn_round = None
        self._pending = 0
        self._extended = False

    @torch.no_grad()
    def commit(self, path: list[int] | np.ndarray = ()) -> None:
        """Keep the cache rows of the root and of the accepted nodes ``path`` (node indices, in order).

        ``path`` must be a chain from the root of the verified tree: the first node a child of the
        root, each next node a child of the one before (so no node twice). Anything else would
        splice unrelated rows into the cache, so it is refused and the verification stays pending."""
        if not self._pending:
            raise ValueError("commit: nothing to commit (call verify first)")
        if getattr(self, "_extended", False):
            raise ValueError("commit: the pending rows were extended (a search's rows): discard them")
        path = [int(i) for i in path]
        if any(not 0 <= i < self._pending - 1 for i in path):
            raise ValueError(f"path: node indices must lie in [0, {self._pending - 1})")
        prev = -1
        for i in path:
            if int(self._pending_parent[i]) != prev:
                where = "the root" if prev < 0 else f"node {prev}"
                raise ValueError(f"path: node {i} is not a child of {where}; commit takes the accepted "
                                 f"chain from the root, in order, got {path}")
            prev = i
        keep_rel = [0] + [i + 1 for i in path]
        n_keep = len(keep_rel)
        if keep_rel != list(range(n_keep)):  # rows already in place when the path is a prefix
            keep = torch.tensor([self.length + r for r in keep_rel], device=self.device)
            dst = slice(self.length, self.length + n_keep)
            for layer in self._kv_layers():
                # [B, kvh, length + pending, d]: move the kept rows down in place (index_select
                # copies them out first, so source and destination may overlap)
                layer.keys[:, :, dst] = layer.keys.index_select(2, keep)
                layer.values[:, :, dst] = layer.values.index_select(2, keep)
        if self._pending > n_keep:
            for layer in self._kv_layers():
                layer.crop(n_keep - self._pending)  # drop the rest; a view, no copy of the cache
        if self.hybrid is not None:
            self.hybrid.commit(self._gdn_round, [keep_rel], self._gdn_state)
            self._gdn_round = None
        self.length += n_keep
        self._pending = 0
