"""What decoding needs of a drafter: the ``Drafter`` protocol, and ``DrafterBase`` with its defaults.

Decoding reads a drafter only through these members, never through its class or ``hasattr``; what
a drafter can do beyond drafting blocks is a capability attribute. The package's drafters and the
tests' oracle drafters derive from ``DrafterBase``. The architecture: docs/background.md.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Protocol, runtime_checkable

import torch

__all__ = ["BatchContext", "Drafter", "DrafterBase", "SequentialBatch", "TreeGrower"]


@runtime_checkable
class Drafter(Protocol):
    """A drafter as decoding uses it (one request, or many through :meth:`batch_context`)."""

    block_size: int  # the root plus block_size - 1 drafted positions (L)
    num_modes: int  # K
    target_layer_ids: list[int]  # the target layers whose hidden states the context features fuse
    config: Any  # an HF config with vocab_size and hidden_size checked against the target's, or None
    grows_trees: bool  # is also a TreeGrower: method "dartree" (a path-dependent tree grown depth by depth)

    def reset(self) -> None:
        """Forget the context: a new sequence starts."""

    def observe_tokens(self, tokens: list[int]) -> None:
        """The sequence's newly committed tokens (the prompt, then each round's); most drafters ignore them."""

    def fuse_hidden(self, hidden_states) -> torch.Tensor:
        """Context features [1, t, H] from the target's HF ``hidden_states`` tuple."""

    def draft_modes(self, new_ctx_feats: torch.Tensor, root_token: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new context features [1, t, H] and draft a block after ``root_token``:
        (log_pi [K], log_q [K, L, V])."""

    def batch_context(self) -> "BatchContext":
        """A fresh drafting state for a batch of requests."""


@runtime_checkable
class TreeGrower(Protocol):
    """What a drafter with ``grows_trees`` adds: method "dartree"'s tree."""

    def grow_tree(self, root_token: int, log_q: torch.Tensor, budget: int,
                  clock: Callable[[], float] | None = None) -> tuple[Any, list[float]]:
        """(DraftTree, seconds per depth): the top-``budget`` tree after ``root_token``, from the
        last drafted block's log-probs ``log_q`` [D, V]."""


class BatchContext(Protocol):
    """A drafter's state for a batch: one row per request, in the batch's row order."""

    def add(self, hidden_states, prompt_ids: list[int]) -> None:
        """A new request as the last row, with its prompt's hidden states."""

    def drop(self, keep: list[int]) -> None:
        """Keep rows ``keep`` (in that order)."""

    def fuse(self, hidden_states) -> torch.Tensor:
        """Context features [1, t, H] of committed rows (fed to :meth:`draft` later)."""

    def observe(self, row: int, tokens: list[int]) -> None:
        """Request ``row``'s newly committed tokens."""

    def draft(self, new_feats: list, roots: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Append each request's new context features ([1, t_b, H] or None), draft every block:
        (log_pi [B, K], log_q [B, K, L, V])."""


class DrafterBase:
    """Defaults of the optional members: no tree growth, committed tokens ignored, and a batch
    drafted request by request (:class:`SequentialBatch`)."""

    grows_trees = False

    def observe_tokens(self, tokens: list[int]) -> None:
        return None

    def batch_context(self) -> BatchContext:
        return SequentialBatch(self)


class SequentialBatch:
    """A batch of any drafter: one shallow copy per request, drafted one after another (for
    drafters without a batched form, e.g. the tests' oracle drafters)."""

    def __init__(self, drafter: Drafter):
        self.proto = drafter
        self.rows: list = []
        self.ctx: list = []  # per request: context features not yet drafted from, or None

    def add(self, hidden_states, prompt_ids: list[int]) -> None:
        d = copy.copy(self.proto)
        d.reset()
        d.observe_tokens(list(prompt_ids))
        self.rows.append(d)
        self.ctx.append(d.fuse_hidden(hidden_states))

    def drop(self, keep: list[int]) -> None:
        self.rows = [self.rows[i] for i in keep]
        self.ctx = [self.ctx[i] for i in keep]

    def fuse(self, hidden_states) -> torch.Tensor:
        return self.proto.fuse_hidden(hidden_states)

    def observe(self, row: int, tokens: list[int]) -> None:
        self.rows[row].observe_tokens(tokens)

    def draft(self, new_feats: list, roots: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        for b, f in enumerate(new_feats):
            if f is not None:
                self.ctx[b] = f if self.ctx[b] is None else torch.cat([self.ctx[b], f], dim=1)
        pis, qs = [], []
        for b, (d, root) in enumerate(zip(self.rows, roots)):
            ctx, self.ctx[b] = self.ctx[b], None
            if ctx is None:  # nothing new since the last draft
                ctx = torch.zeros((1, 0, 1))
            lp, lq = d.draft_modes(ctx, root)
            pis.append(lp)
            qs.append(lq)
        return torch.stack(pis), torch.stack(qs)
