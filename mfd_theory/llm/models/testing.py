"""Drafters for checking decoding on any target, real ones included: a replay of known continuations.

A random drafter on a real target is almost never accepted past its first token, so a lossless
check with it exercises little of the verifier (deep paths, long commits, KV compaction). The
:class:`ReplayDrafter` drafts a continuation it was given (the target's own greedy text, say),
with one position of mode 0 corrupted now and then, mode 1 exact (K = 2) or the exact token as
each position's second choice (K = 1): paths are accepted long and cut at varied depths. It
grows path-dependent trees too (method "dartree"). Decoding stays lossless whatever it drafts;
only how much is accepted depends on it. :class:`OracleDrafter` replays the target's own greedy
continuation of whatever has been committed, computed from the target.

Random models for tests and benchmarks: the tiny ones of the tests (:func:`tiny_qwen3`,
:func:`tiny_qwen2`, :func:`tiny_llama`, :func:`tiny_hybrid`; transformers' own initialiser, seeded)
and :func:`random_qwen3`, a Qwen3 of any size (built on the meta device, its weights drawn from one
keyed generator on the target device), which ``mfd bench decode``, ``bench draft`` and
``bench gpu-check`` time and check.
"""

from __future__ import annotations

import torch

from mfd_theory.llm.models.protocol import DrafterBase

__all__ = ["HYBRID_PATTERNS", "OracleDrafter", "ReplayDrafter", "random_qwen3", "tiny_hybrid", "tiny_llama",
           "tiny_qwen2", "tiny_qwen3"]


class ReplayDrafter(DrafterBase):
    """Drafts the continuation of the committed tokens found in ``references`` (full token
    sequences: prompt then continuation); a sequence off every reference gets noise. ``vocab_size``
    is the target's; ``corrupt`` the chance that a block's mode 0 has one wrong position."""

    grows_trees = True

    def __init__(self, references: list[list[int]], vocab_size: int, block_size: int = 8, num_modes: int = 2,
                 seed: int = 0, corrupt: float = 0.5, *, peak: float = 8.0, second: float = 6.0,
                 weights: tuple[float, float] = (0.7, 0.3), device=None):
        if num_modes not in (1, 2):
            raise ValueError(f"num_modes: a replay drafter has 1 or 2 modes, got {num_modes}")
        if int(block_size) < 2:
            raise ValueError(f"block_size: must be >= 2, got {block_size}")
        self.references = [list(map(int, r)) for r in references]
        self.vocab_size, self.block_size, self.num_modes = int(vocab_size), int(block_size), int(num_modes)
        self.mask_token_id = 0
        self.target_layer_ids = [0]
        self.config = None
        self.corrupt = float(corrupt)
        # the logit added to each mode's token (``peak``), to the exact token as mode 0's second choice
        # when K = 1 (``second``); the two modes' weights; where the drafts are returned (the target's device)
        self.peak, self.second, self.weights, self.device = float(peak), float(second), tuple(weights), device
        self.rng = torch.Generator().manual_seed(int(seed))
        self.seq: list[int] = []

    def reset(self):
        self.seq = []

    def observe_tokens(self, toks):
        self.seq.extend(int(t) for t in toks)

    def fuse_hidden(self, hidden_states):
        return hidden_states[-1][:, :, :1]  # unused: the replay reads tokens, not features

    def _continuation(self, root: int, L: int) -> list[int] | None:
        head = self.seq + [int(root)]
        n = len(head)
        for ref in self.references:
            if len(ref) >= n and ref[:n] == head:
                nxt = ref[n: n + L]
                return nxt + [nxt[-1] if nxt else 0] * (L - len(nxt))
        return None

    @torch.no_grad()
    def draft_modes(self, ctx, root):
        L, V = self.block_size - 1, self.vocab_size
        noise = 0.5 * torch.randn(self.num_modes, L, V, generator=self.rng)  # [K, L, V]
        chain = self._continuation(root, L)
        if chain is None:
            log_pi = torch.full((self.num_modes,), -float(torch.log(torch.tensor(float(self.num_modes)))))
            return self._out(log_pi, torch.log_softmax(noise, dim=-1))
        wrong = list(chain)
        if float(torch.rand(1, generator=self.rng)) < self.corrupt:
            j = int(torch.randint(0, L, (1,), generator=self.rng))
            wrong[j] = (chain[j] + 1 + int(torch.randint(0, V - 1, (1,), generator=self.rng))) % V
        logits = noise.clone()
        pos = torch.arange(L)
        for k, toks in enumerate([wrong, chain][: self.num_modes]):
            logits[k, pos, torch.tensor(toks)] += self.peak
            if self.num_modes == 1:
                logits[k, pos, torch.tensor(chain)] += self.second
        log_pi = torch.log_softmax(torch.tensor(self.weights[: self.num_modes]).log(), dim=0)
        return self._out(log_pi, torch.log_softmax(logits, dim=-1))

    def _out(self, log_pi, log_q):
        return (log_pi, log_q) if self.device is None else (log_pi.to(self.device), log_q.to(self.device))

    def grow_tree(self, root, log_q, budget, clock=None):
        """Method "dartree": mode 0's block with a path-dependent nudge (each node favours
        (7 * its token + 3) mod V among its children), by the package's depth-by-depth search."""
        from mfd_theory.llm.models.domino import grow_path_tree

        V = log_q.shape[-1]

        def step(state, prev, d):
            nudge = torch.zeros(len(prev), V)
            nudge[torch.arange(len(prev)), (7 * prev + 3) % V] = 1.5
            return state, torch.log_softmax(log_q[d][None] + nudge, dim=-1)

        return grow_path_tree(root, log_q.shape[0], budget, step, torch.zeros(1, 1), clock)


class OracleDrafter(ReplayDrafter):
    """A replay of the target's own greedy continuation, computed from the target at every draft
    (``hf_model`` runs on the committed tokens and the root): drafts are accepted long on any
    context, not only on the texts a :class:`ReplayDrafter` was given. Peaks 6 / 4 and mode weights
    0.8 / 0.2 (softer than the replay's), so that trees branch at small budgets."""

    def __init__(self, hf_model, block_size: int = 6, num_modes: int = 2, seed: int = 0, corrupt: float = 0.5):
        super().__init__([], hf_model.config.vocab_size, block_size, num_modes, seed, corrupt,
                         peak=6.0, second=4.0, weights=(0.8, 0.2))
        self.model = hf_model

    @torch.no_grad()
    def _greedy_chain(self, root, L: int) -> list[int]:
        """The target's own greedy continuation of the committed tokens and ``root``, L tokens."""
        ids = torch.tensor([self.seq + [int(root)]])
        chain = []
        for _ in range(L):
            nxt = int(self.model(ids).logits[0, -1].argmax())
            chain.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
        return chain

    def _continuation(self, root: int, L: int) -> list[int]:
        return self._greedy_chain(root, L)


def _finish_tiny(cls, cfg, attn: str, seed: int, eos_token_id: int | None):
    """``cls(cfg)`` seeded, in float32 eval mode, with generate's EOS / pad ids set (pad = EOS, or 0)."""
    cfg._attn_implementation = attn
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.pad_token_id = eos_token_id if eos_token_id is not None else 0
    return model


def random_qwen3(shape: tuple[int, int, int, int, int, int, int], *, layers: int | None = None,
                 dtype=torch.float32, device="cpu", seed: int = 0, std: float = 0.02, vector_std: float = 0.0,
                 head_std: float | None = None, attn: str = "sdpa"):
    """A random Qwen3ForCausalLM of ``shape`` = (vocab, hidden, layers, heads, kv_heads, head_dim,
    intermediate), ``layers`` overriding its depth, in eval mode: built on the meta device (no memory
    or time for an initialiser that is overwritten), then every norm weight 1, the LM head drawn with
    std ``head_std`` (default ``std``), the other matrices with ``std`` and vectors with
    ``vector_std``, all from one generator keyed by ``seed`` on ``device``; RoPE rebuilt there.
    generate's EOS is unset and its pad id 0, so a greedy reference runs its full length."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

    v, h, n, nh, kv, hd, inter = (int(x) for x in shape)
    cfg = Qwen3Config(vocab_size=v, hidden_size=h, num_hidden_layers=int(layers or n), num_attention_heads=nh,
                      num_key_value_heads=kv, head_dim=hd, intermediate_size=inter, max_position_embeddings=32768,
                      tie_word_embeddings=False, use_sliding_window=False, eos_token_id=None, pad_token_id=None,
                      bos_token_id=None)
    cfg._attn_implementation = attn
    with torch.device("meta"):
        model = Qwen3ForCausalLM(cfg)
    model = model.to_empty(device=device)
    g = torch.Generator(device=device).manual_seed(int(seed))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name == "lm_head.weight":
                p.normal_(0.0, std if head_std is None else head_std, generator=g)
            else:
                p.normal_(0.0, std if p.dim() > 1 else vector_std, generator=g)
    model.model.rotary_emb = Qwen3RotaryEmbedding(cfg).to(device)  # meta construction left inv_freq empty
    model = model.to(dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def tiny_qwen3(vocab_size: int = 64, hidden_size: int = 32, num_layers: int = 4, seed: int = 0,
               attn: str = "eager", init_std: float = 0.2, eos_token_id: int | None = None,
               max_position_embeddings: int = 512):
    """A random Qwen3ForCausalLM in float32, eval mode, with the initialiser of transformers (seeded
    by ``seed``). ``init_std`` is large so that the target's conditionals are peaked enough for argmax
    to be far from ties."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2, head_dim=hidden_size // 4,
        max_position_embeddings=max_position_embeddings, initializer_range=init_std,
        tie_word_embeddings=False, eos_token_id=eos_token_id, pad_token_id=None, bos_token_id=None,
        use_sliding_window=False,
    )
    return _finish_tiny(Qwen3ForCausalLM, cfg, attn, seed, eos_token_id)


def tiny_qwen2(vocab_size: int = 64, hidden_size: int = 32, num_layers: int = 4, seed: int = 0,
               attn: str = "eager", init_std: float = 0.2, eos_token_id: int | None = None,
               max_position_embeddings: int = 512):
    """A random Qwen2ForCausalLM (Qwen2.5's family: bias on the q/k/v projections, no q/k norm, an
    untied LM head, RoPE theta 1e6) in float32, eval mode; sizes as :func:`tiny_qwen3`."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings, initializer_range=init_std,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        tie_word_embeddings=False, eos_token_id=eos_token_id, pad_token_id=None, bos_token_id=None,
        use_sliding_window=False,
    )
    return _finish_tiny(Qwen2ForCausalLM, cfg, attn, seed, eos_token_id)


def tiny_llama(vocab_size: int = 64, hidden_size: int = 32, num_layers: int = 4, seed: int = 0,
               attn: str = "eager", init_std: float = 0.2, eos_token_id: int | None = None,
               max_position_embeddings: int = 512):
    """A random LlamaForCausalLM (SmolLM2's family: no attention bias, no q/k norm, the LM head
    tied to the input embedding, RoPE theta 1e5) in float32, eval mode; sizes as :func:`tiny_qwen3`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2, head_dim=hidden_size // 4,
        max_position_embeddings=max_position_embeddings, initializer_range=init_std,
        rope_parameters={"rope_type": "default", "rope_theta": 1e5}, attention_bias=False, mlp_bias=False,
        tie_word_embeddings=True, eos_token_id=eos_token_id, pad_token_id=None, bos_token_id=None,
    )
    return _finish_tiny(LlamaForCausalLM, cfg, attn, seed, eos_token_id)


HYBRID_PATTERNS = {
    "gdn_first": ["linear_attention", "full_attention", "linear_attention"],
    "attention_first": ["full_attention", "linear_attention", "linear_attention"],
    "gdn_between": ["full_attention", "linear_attention", "linear_attention", "full_attention"],
}


def tiny_hybrid(arch: str = "qwen3_5", layer_types=None, vocab_size: int = 64, hidden_size: int = 32,
                seed: int = 0, attn: str = "eager", init_std: float = 0.2, eos_token_id: int | None = None,
                max_position_embeddings: int = 512):
    """A random hybrid (Gated DeltaNet + attention) causal LM in float32, eval mode: ``arch`` is
    "qwen3_5" (Qwen3_5ForCausalLM), "qwen3_next" (Qwen3NextForCausalLM, MoE MLPs) or "qwen3_5_moe"
    (Qwen3_5MoeForCausalLM)."""
    from transformers import (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig,
                              Qwen3_5TextConfig, Qwen3NextConfig, Qwen3NextForCausalLM)

    types = list(layer_types or HYBRID_PATTERNS["gdn_first"])
    common = dict(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=len(types), layer_types=types, num_attention_heads=4, num_key_value_heads=2,
        head_dim=hidden_size // 4, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=hidden_size // 4, linear_value_head_dim=hidden_size // 4, linear_conv_kernel_dim=4,
        max_position_embeddings=max_position_embeddings, initializer_range=init_std, tie_word_embeddings=False,
        eos_token_id=eos_token_id, pad_token_id=None, bos_token_id=None,
    )
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=hidden_size,
               shared_expert_intermediate_size=hidden_size)
    if arch == "qwen3_5":
        cls, cfg = Qwen3_5ForCausalLM, Qwen3_5TextConfig(**common)
    elif arch == "qwen3_next":
        cls, cfg = Qwen3NextForCausalLM, Qwen3NextConfig(**common, **moe)
    elif arch == "qwen3_5_moe":
        cls, cfg = Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig(**common, **moe)
    else:
        raise ValueError(f"arch: unknown hybrid {arch!r}")
    return _finish_tiny(cls, cfg, attn, seed, eos_token_id)
