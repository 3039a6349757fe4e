"""Drawing tokens from the target: the sampling distribution, one request's sampler, the lossless walk.

``Sampler`` draws a request's tokens (argmax when greedy, else from its own seeded generator);
``walk_tree`` is the lossless rule over a verified tree (docs/background.md, "The lossless rule").
"""

from __future__ import annotations

from typing import Callable

import torch

from mfd_theory.trees import DraftTree

__all__ = ["MIN_TEMPERATURE", "Sampler", "children_map", "sampling_probs", "walk_tree"]

# Below float32's smallest normal number, T itself is subnormal or rounds to 0 in the float32
# division, and softmax(z / T) turns to 0/0; such temperatures are refused (0 means greedy).
MIN_TEMPERATURE = float(torch.finfo(torch.float32).tiny)


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """The distribution the target samples from: softmax(logits / T), cut to the top-p nucleus.

    The row maximum is subtracted before dividing, so (logits - max) / T <= 0 never overflows: any
    T down to float32's smallest normal number (``MIN_TEMPERATURE``) gives a proper distribution,
    the argmax (ties shared) as T -> 0."""
    z = logits.float()
    probs = torch.softmax((z - z.max(dim=-1, keepdim=True).values) / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = sorted_p.cumsum(dim=-1) - sorted_p < top_p  # the top token is always kept
        sorted_p = sorted_p * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def walk_tree(children: dict[tuple[int, int], int], draw: Callable[[int], int]) -> tuple[list[int], int]:
    """The lossless walk. ``children[(parent, token)] = node`` (parent -1 is the root); ``draw(row)``
    samples the target's next token at verify row ``row`` (0 = root, node i -> i + 1).
    Returns (accepted node indices, bonus token)."""
    path: list[int] = []
    node = -1
    while True:
        x = draw(node + 1)
        nxt = children.get((node, x))
        if nxt is None:
            return path, x
        path.append(nxt)
        node = nxt


def children_map(tree: DraftTree | None) -> dict[tuple[int, int], int]:
    if tree is None:
        return {}
    return {(int(p), int(t)): i for i, (p, t) in enumerate(zip(tree.parent.tolist(), tree.token.tolist()))}


class Sampler:
    """How one request draws from the target's logits: the argmax when ``temperature`` is 0, else a
    draw from :func:`sampling_probs` with the request's own CPU generator seeded by ``seed``."""

    def __init__(self, temperature: float, top_p: float, seed: int):
        self.temperature, self.top_p = temperature, top_p
        self.greedy = temperature == 0
        self.gen = torch.Generator().manual_seed(int(seed))

    def draw(self, logits_row: torch.Tensor) -> int:
        if self.greedy:
            return int(torch.argmax(logits_row))
        p = sampling_probs(logits_row, self.temperature, self.top_p).cpu()
        return int(torch.multinomial(p, 1, generator=self.gen))

    def walk(self, tree: DraftTree | None, logits: torch.Tensor, argmax: list[int] | None = None):
        """Walk ``tree`` over its verify rows ``logits`` [N+1, V] (greedy: their argmax ids
        ``argmax``, read once for the whole forward): (accepted node indices, emitted tokens, the
        bonus last)."""
        children = children_map(tree)
        if self.greedy:
            path, bonus = walk_tree(children, argmax.__getitem__)
        else:
            path, bonus = walk_tree(children, lambda r: self.draw(logits[r]))
        return path, [int(tree.token[i]) for i in path] + [bonus]
