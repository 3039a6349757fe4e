"""What the llm tests share: the tiny random models and drafters of
:mod:`mfd_theory.llm.models.testing` (which the benches use too), HF's greedy reference, and drafters
only tests need (a decoy, unreadable mode weights)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from mfd_theory.llm.models.testing import (HYBRID_PATTERNS, OracleDrafter, tiny_hybrid, tiny_llama,  # noqa: E402,F401
                                           tiny_qwen2, tiny_qwen3)

# Tiny models gain nothing from threads, and on a busy 2-core machine intra-op threads contend
# badly (a 4 ms forward becomes 100 ms).
torch.set_num_threads(1)


#: the target families besides Qwen3 that every decoding path is tested on (tests/test_llm_families.py)
FAMILIES = {"qwen2": tiny_qwen2, "llama": tiny_llama}


def hf_greedy(model, prompt, n: int, eos: int | None = None) -> list[int]:
    """The reference every lossless test compares with: HF ``generate``'s greedy continuation of
    ``prompt`` (``n`` new tokens at most; ``eos`` ends it early)."""
    kw = {"eos_token_id": eos, "pad_token_id": eos} if eos is not None else {}
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, **kw)
    return out[0, len(prompt):].tolist()


def greedy_answers(model, prompts, new) -> tuple[list[np.ndarray], list[int]]:
    """Each prompt followed by its :func:`hf_greedy` answer of ``new[i]`` tokens (int64 arrays), and
    the prompts' lengths: the held-out sequences a replay measures."""
    seqs = [np.array(list(p) + hf_greedy(model, list(p), n), dtype=np.int64) for p, n in zip(prompts, new)]
    return seqs, [len(p) for p in prompts]


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
                                 scorer: str | None = None, first_seed: int = 0) -> float:
    """End-to-end losslessness of sampling: ``n`` three-token continuations of [1, 2, 3] through
    ``speculative_generate``, ``methods`` pooled (in turn), against the target's own distribution
    computed from its logits; the chi-square p-value (cells with < 5 expected merged so the
    approximation holds). ``drafter`` defaults to a random 2-mode MFD drafter of block size 3;
    ``scorer`` is method "mfd"'s; draw s uses seed ``first_seed + s``."""
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
        res = speculative_generate(t, d, prompt, 3, m, budget=6, temperature=T, seed=first_seed + s, metrics=False,
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


def detectable_distance(n: int, df: int, alpha: float = 1e-3, power: float = 0.99) -> float:
    """The smallest chi-square distance ``sum (q - p)^2 / p`` between a sampler's output ``q`` and the
    target's ``p`` that a chi-square test of ``n`` draws over ``df + 1`` cells at level ``alpha``
    finds with probability ``power`` (the statistic is then noncentral chi-square with noncentrality
    ``n * distance``): what a sampling check of that size can see."""
    from scipy.optimize import brentq
    from scipy.stats import chi2, ncx2

    crit = chi2.isf(alpha, df)
    return brentq(lambda lam: ncx2.sf(crit, df, lam) - power, 1e-9, 1e6) / n


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
