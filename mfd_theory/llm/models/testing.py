"""Drafters for checking decoding on any target, real ones included: a replay of known continuations.

A random drafter on a real target is almost never accepted past its first token, so a lossless
check with it exercises little of the verifier (deep paths, long commits, KV compaction). The
:class:`ReplayDrafter` drafts a continuation it was given (the target's own greedy text, say),
with one position of mode 0 corrupted now and then, mode 1 exact (K = 2) or the exact token as
each position's second choice (K = 1): paths are accepted long and cut at varied depths. It
grows path-dependent trees too (method "dartree"). Decoding stays lossless whatever it drafts;
only how much is accepted depends on it.
"""

from __future__ import annotations

import torch

from mfd_theory.llm.models.protocol import DrafterBase

__all__ = ["ReplayDrafter"]


class ReplayDrafter(DrafterBase):
    """Drafts the continuation of the committed tokens found in ``references`` (full token
    sequences: prompt then continuation); a sequence off every reference gets noise. ``vocab_size``
    is the target's; ``corrupt`` the chance that a block's mode 0 has one wrong position."""

    grows_trees = True

    def __init__(self, references: list[list[int]], vocab_size: int, block_size: int = 8, num_modes: int = 2,
                 seed: int = 0, corrupt: float = 0.5):
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
            return log_pi, torch.log_softmax(noise, dim=-1)
        wrong = list(chain)
        if float(torch.rand(1, generator=self.rng)) < self.corrupt:
            j = int(torch.randint(0, L, (1,), generator=self.rng))
            wrong[j] = (chain[j] + 1 + int(torch.randint(0, V - 1, (1,), generator=self.rng))) % V
        logits = noise.clone()
        pos = torch.arange(L)
        for k, toks in enumerate([wrong, chain][: self.num_modes]):
            logits[k, pos, torch.tensor(toks)] += 8.0
            if self.num_modes == 1:
                logits[k, pos, torch.tensor(chain)] += 6.0
        log_pi = torch.log_softmax(torch.tensor([0.7, 0.3][: self.num_modes]).log(), dim=0)
        return log_pi, torch.log_softmax(logits, dim=-1)

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
