"""Tiny random Qwen3 models for the llm tests (no downloads)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402

from mfd_theory.llm.models.protocol import DrafterBase  # noqa: E402

# Tiny models gain nothing from threads, and on a busy 2-core machine intra-op threads contend
# badly (a 4 ms forward becomes 100 ms).
torch.set_num_threads(1)


def tiny_qwen3(vocab_size: int = 64, hidden_size: int = 32, num_layers: int = 4, seed: int = 0,
               attn: str = "eager", init_std: float = 0.2, eos_token_id: int | None = None,
               max_position_embeddings: int = 512) -> Qwen3ForCausalLM:
    """A random Qwen3ForCausalLM in float32, eval mode. ``init_std`` is large so that the target's
    conditionals are peaked enough for argmax to be far from ties."""
    cfg = Qwen3Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2, head_dim=hidden_size // 4,
        max_position_embeddings=max_position_embeddings, initializer_range=init_std,
        tie_word_embeddings=False, eos_token_id=eos_token_id, pad_token_id=None, bos_token_id=None,
        use_sliding_window=False,
    )
    cfg._attn_implementation = attn
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.pad_token_id = eos_token_id if eos_token_id is not None else 0
    return model


def _finish_tiny(cls, cfg, attn: str, seed: int, eos_token_id: int | None):
    """``cls(cfg)`` seeded, in float32 eval mode, with generate's EOS / pad ids set as tiny_qwen3 sets them."""
    cfg._attn_implementation = attn
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.pad_token_id = eos_token_id if eos_token_id is not None else 0
    return model


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


#: the target families besides Qwen3 that every decoding path is tested on (tests/test_llm_families.py)
FAMILIES = {"qwen2": tiny_qwen2, "llama": tiny_llama}


def hf_greedy(model, prompt, n: int, eos: int | None = None) -> list[int]:
    """The reference every lossless test compares with: HF ``generate``'s greedy continuation of
    ``prompt`` (``n`` new tokens at most; ``eos`` ends it early)."""
    kw = {"eos_token_id": eos, "pad_token_id": eos} if eos is not None else {}
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, **kw)
    return out[0, len(prompt):].tolist()


class OracleDrafter(DrafterBase):
    """A test drafter that knows the target: it drafts the target's greedy continuation, with one
    position per block corrupted in mode 0 (so paths are partly accepted) and the true chain as a
    lower-weight mode 1 (K = 2) or as the second choice (K = 1). A
    :class:`~mfd_theory.llm.models.protocol.Drafter` that reads the committed tokens and grows trees."""

    grows_trees = True

    def __init__(self, hf_model, block_size: int = 6, num_modes: int = 2, seed: int = 0, corrupt: float = 0.5):
        self.model = hf_model
        self.block_size = block_size
        self.num_modes = num_modes
        self.mask_token_id = 0
        self.target_layer_ids = [0]
        self.config = None
        self.corrupt = corrupt
        self.rng = torch.Generator().manual_seed(seed)
        self.seq: list[int] = []

    def reset(self):
        self.seq = []

    def observe_tokens(self, toks):
        self.seq.extend(int(t) for t in toks)

    def fuse_hidden(self, hidden_states):
        return hidden_states[-1]

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

    @torch.no_grad()
    def draft_modes(self, ctx, root):
        L, V = self.block_size - 1, self.model.config.vocab_size
        chain = self._greedy_chain(root, L)
        wrong = list(chain)
        if float(torch.rand(1, generator=self.rng)) < self.corrupt:
            j = int(torch.randint(0, L, (1,), generator=self.rng))
            wrong[j] = (chain[j] + 1 + int(torch.randint(0, V - 1, (1,), generator=self.rng))) % V
        noise = 0.5 * torch.randn(self.num_modes, L, V, generator=self.rng)
        modes = [wrong, chain][: self.num_modes]
        logits = noise.clone()
        for k, toks in enumerate(modes):
            logits[k, torch.arange(L), torch.tensor(toks)] += 6.0
            if self.num_modes == 1:
                logits[k, torch.arange(L), torch.tensor(chain)] += 4.0
        log_pi = torch.log_softmax(torch.tensor([0.8, 0.2][: self.num_modes]).log(), dim=0)
        return log_pi, torch.log_softmax(logits, dim=-1)

    def grow_tree(self, root, log_q, budget, clock=None):
        """Method "dartree" on this drafter: the block's mode-0 distributions with a path-dependent
        nudge (each node favours (7 * its token + 3) mod V for its children), grown by the package's
        depth-by-depth path-tree search."""
        from mfd_theory.llm.models.domino import grow_path_tree

        V = log_q.shape[-1]

        def step(state, prev, d):
            nudge = torch.zeros(len(prev), V)
            nudge[torch.arange(len(prev)), (7 * prev + 3) % V] = 1.5
            return state, torch.log_softmax(log_q[d][None] + nudge, dim=-1)

        return grow_path_tree(root, log_q.shape[0], budget, step, torch.zeros(1, 1), clock)


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
    cfg._attn_implementation = attn
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.pad_token_id = eos_token_id if eos_token_id is not None else 0
    return model


class DecoyDrafter(OracleDrafter):
    """Ranks a wrong *decoy* token above the target's greedy token at every drafted position, in
    every mode, so each accepted node is a second (non-first) sibling: the tree walk then runs
    through branches whose GDN state differs from the first child's at every depth."""

    @torch.no_grad()
    def draft_modes(self, ctx, root):
        L, V = self.block_size - 1, self.model.config.vocab_size
        chain = self._greedy_chain(root, L)
        true = torch.tensor(chain)
        decoy = (true + 1 + torch.randint(0, V - 1, (L,), generator=self.rng)) % V
        logits = 0.3 * torch.randn(self.num_modes, L, V, generator=self.rng)
        logits[:, torch.arange(L), decoy] = 7.0  # a small gap: second siblings stay in a small tree
        logits[:, torch.arange(L), true] = 6.5
        log_pi = torch.log_softmax(torch.zeros(self.num_modes), dim=0)
        return log_pi, torch.log_softmax(logits, dim=-1)


def sampled_continuations_pvalue(model, vocab_size: int, n: int, temperature: float = 0.7,
                                 methods=("chain", "ddtree", "mfd", "ar"), drafter=None,
                                 scorer: str | None = None) -> float:
    """End-to-end losslessness of sampling: ``n`` three-token continuations of [1, 2, 3] through
    ``speculative_generate``, ``methods`` pooled (in turn), against the target's own distribution
    computed from its logits; the chi-square p-value (cells with < 5 expected merged so the
    approximation holds). ``drafter`` defaults to a random 2-mode MFD drafter of block size 3;
    ``scorer`` is method "mfd"'s."""
    import numpy as np
    from scipy.stats import chisquare

    from mfd_theory.llm import TargetModel, build_drafter
    from mfd_theory.llm.decoding.generate import sampling_probs, speculative_generate

    V, T = vocab_size, temperature
    t = TargetModel(model)
    d = drafter if drafter is not None else build_drafter(model, block_size=3, num_layers=1, num_modes=2, seed=1)
    prompt = [1, 2, 3]
    counts = np.zeros(V ** 3)
    for s in range(n):
        m = methods[s % len(methods)]
        res = speculative_generate(t, d, prompt, 3, m, budget=6, temperature=T, seed=s, metrics=False,
                                   scorer=scorer if m == "mfd" else None)
        a, b, c = res.tokens
        counts[(a * V + b) * V + c] += 1
    seqs = torch.tensor([prompt + [a, b] for a in range(V) for b in range(V)])
    with torch.no_grad():
        lg = model(seqs).logits  # [V*V, 5, V]
    p1 = sampling_probs(lg[0, 2], T)
    p2 = sampling_probs(lg[:, 3], T).view(V, V, V)[:, 0]  # [a, b]
    p3 = sampling_probs(lg[:, 4], T).view(V, V, V)  # [a, b, c]
    exp = (p1[:, None, None] * p2[:, :, None] * p3).double().numpy().reshape(-1) * n
    small = exp < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(exp[~small], exp[small].sum())
    exp *= obs.sum() / exp.sum()  # float32 probabilities: renormalise so the totals agree exactly
    return float(chisquare(obs, exp).pvalue)


class NanGateDrafter:
    """A drafter whose mode weights cannot be read: every member is the wrapped drafter's, but its
    drafts carry log_pi = NaN (as from a gate of the wrong shape). A best-mode tree never reads
    them; a mixture tree refuses them."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def draft_modes(self, ctx, root):
        lp, lq = self.inner.draft_modes(ctx, root)
        return torch.full_like(lp, float("nan")), lq

    def batch_context(self):
        return _NanGateBatch(self.inner.batch_context())


class _NanGateBatch:
    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def draft(self, new_feats, roots):
        lp, lq = self.inner.draft(new_feats, roots)
        return torch.full_like(lp, float("nan")), lq
