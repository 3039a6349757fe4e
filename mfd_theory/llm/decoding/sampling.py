"""Drawing tokens from the target: the sampling distribution, one request's sampler, the lossless walk.

``Sampler`` draws a request's tokens (argmax when greedy, else by :func:`draw_tokens`);
``walk_tree`` is the lossless rule over a verified tree (docs/background.md, "The lossless rule").

A sampled token is a keyed draw: the n-th token a request draws with seed s is the inverse CDF, in
token id order, of the request's cut distribution (:func:`cut_distribution`) at the uniform
:func:`keyed_uniform` (s, n). The uniform depends on (s, n) alone, so a request's tokens do not
depend on what else is drawn at the same time (batched generation draws every row in one call), and
a tree walk, which draws once per emitted token, draws the n-th token of its output at the same
uniform as plain decoding does.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from mfd_theory.trees import DraftTree

__all__ = ["MIN_TEMPERATURE", "Sampler", "children_map", "cut_distribution", "draw_tokens", "inverse_cdf",
           "keyed_uniform", "sampling_probs", "walk_tree"]

# Below float32's smallest normal number, T itself is subnormal or rounds to 0 in the float32
# division, and softmax(z / T) turns to 0/0; such temperatures are refused (0 means greedy).
MIN_TEMPERATURE = float(torch.finfo(torch.float32).tiny)

#: the nucleus is first looked for among this many likeliest tokens (a full sort only when it is wider)
NUCLEUS_GUESS = 256

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment
_MASK64 = (1 << 64) - 1


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


# ------------------------------------------------------------------------------------ keyed draws
def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 arrays (numpy array arithmetic wraps modulo 2**64)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def keyed_uniform(seeds, index) -> np.ndarray:
    """Uniforms in [0, 1), float64 [B]: entry b depends on (``seeds[b]``, ``index[b]``) alone.

    A counter-based generator: the seed is mixed into a key k = mix(s + G), and draw n of that key
    is mix(k + (n + 1) G) (G = 0x9E3779B97F4A7C15, mix SplitMix64's finaliser: SplitMix64's own
    stream started from k), of which the top 53 bits make the uniform. Seeds are taken modulo 2**64."""
    s = np.array([int(x) & _MASK64 for x in _ints(seeds)], dtype=np.uint64)  # [B]
    n = np.array([int(x) & _MASK64 for x in _ints(index)], dtype=np.uint64)  # [B]
    with np.errstate(over="ignore"):
        h = _mix64(_mix64(s + _GOLDEN) + (n + np.uint64(1)) * _GOLDEN)
    return (h >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def _ints(values) -> list:
    """Python ints from a list, range, array or tensor of integers (never through float64, which
    would round seeds above 2**53)."""
    if isinstance(values, (np.ndarray, torch.Tensor)):
        return values.reshape(-1).tolist()
    return list(values) if hasattr(values, "__iter__") else [values]


def cut_distribution(logits: torch.Tensor, temperature: float, top_k: int = 0,
                     top_p: float = 1.0) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The distribution a row samples from, on its candidate tokens only: ``(ids, probs)``, each
    [B, M] (``ids`` None when the candidates are the whole vocabulary, M = V, in id order).

    ``logits`` [B, V]: cut to their ``top_k`` largest (0: all; ties with the k-th kept), softmax at
    ``temperature``, then cut to the ``top_p`` nucleus (the likeliest tokens while the mass before
    each is below ``top_p``; the top token always in) and renormalised. The same distribution as
    ``sampling_probs`` after a top-k cut, found without sorting the vocabulary: top-k first
    (``torch.topk`` of k + 1: the one more shows a tie at the k-th), and a nucleus without top-k is
    looked for among the ``NUCLEUS_GUESS`` likeliest tokens first (exact: it lies there when the
    mass before the last of them already reaches ``top_p``; otherwise the whole vocabulary is
    sorted)."""
    z = logits.float()
    vocab = z.shape[-1]
    if 0 < top_k < vocab:
        m = min(top_k + 1, vocab)
        vals, ids = torch.topk(z, m, dim=-1)  # [B, k + 1], best first: one more shows a tie at the k-th
        if m > top_k and bool((vals[:, top_k] == vals[:, top_k - 1]).any()):  # tokens tied with the k-th are kept
            ties = int((z >= vals[:, top_k - 1: top_k]).sum(dim=-1).max())
            vals, ids = torch.topk(z, ties, dim=-1)
        vals = vals.masked_fill(vals < vals[:, top_k - 1: top_k], float("-inf"))  # [B, M], M >= k
        probs = torch.softmax((vals - vals[:, :1]) / temperature, dim=-1)
        if top_p < 1.0:
            probs = _nucleus(probs, top_p)
        return ids, probs
    if top_p >= 1.0:
        return None, torch.softmax((z - z.max(dim=-1, keepdim=True).values) / temperature, dim=-1)
    scaled = (z - z.max(dim=-1, keepdim=True).values) / temperature  # [B, V], <= 0
    log_total = torch.logsumexp(scaled, dim=-1, keepdim=True)  # [B, 1]
    m = min(NUCLEUS_GUESS, vocab)
    vals, ids = torch.topk(scaled, m, dim=-1)
    probs = torch.exp(vals - log_total)  # [B, m] the full distribution's mass, best first
    if m < vocab and not bool(((probs.cumsum(dim=-1) - probs)[:, -1] >= top_p).all()):
        vals, ids = scaled.sort(dim=-1, descending=True)
        probs = torch.exp(vals - log_total)
    return ids, _nucleus(probs, top_p)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` [B, M] (best first, rows summing to 1) cut to the top-p nucleus, renormalised."""
    keep = probs.cumsum(dim=-1) - probs < top_p  # the top token is always kept
    probs = probs * keep
    return probs / probs.sum(dim=-1, keepdim=True)


def inverse_cdf(ids: torch.Tensor | None, probs: torch.Tensor, u) -> torch.Tensor:
    """Token ids [B] (int64, on ``probs``' device): row b's first token, in id order, whose
    cumulative probability exceeds ``u[b]`` times the row's total. ``ids`` / ``probs`` as
    :func:`cut_distribution` gives them; ``u`` [B] uniforms in [0, 1). The sum runs in float64."""
    if ids is not None:
        ids, order = ids.sort(dim=-1)
        probs = probs.gather(-1, order)
    cdf = probs.double().cumsum(dim=-1)  # [B, M]
    x = torch.as_tensor(np.asarray(u, dtype=np.float64), device=cdf.device)[:, None] * cdf[:, -1:]
    j = torch.searchsorted(cdf, x, right=True).clamp_(max=cdf.shape[-1] - 1)  # [B, 1]
    return j[:, 0] if ids is None else ids.gather(-1, j)[:, 0]


def draw_tokens(logits: torch.Tensor, temperature: float, seeds, index, top_k: int = 0,
                top_p: float = 1.0) -> list[int]:
    """One sampled token per row of ``logits`` [B, V]: row b's draw ``index[b]`` with seed
    ``seeds[b]`` from its cut distribution (:func:`cut_distribution`, :func:`keyed_uniform`,
    :func:`inverse_cdf`); a row's token depends on its own logits, seed and index alone."""
    ids, probs = cut_distribution(logits, temperature, top_k, top_p)
    return inverse_cdf(ids, probs, keyed_uniform(seeds, index)).tolist()


# ------------------------------------------------------------------------------------ the walk
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
    """How one request draws from the target's logits: the argmax when ``temperature`` is 0, else
    :func:`draw_tokens` with the request's ``seed`` and its count of draws so far (``drawn``), from
    the distribution cut to ``top_k`` (0: off) and ``top_p``."""

    def __init__(self, temperature: float, top_p: float, seed: int, top_k: int = 0):
        self.temperature, self.top_p, self.top_k = temperature, top_p, int(top_k)
        self.greedy = temperature == 0
        self.seed = int(seed)
        self.drawn = 0  # sampled draws so far: the next one's index

    def draw(self, logits_row: torch.Tensor) -> int:
        if self.greedy:
            return int(torch.argmax(logits_row))
        tok = draw_tokens(logits_row[None], self.temperature, [self.seed], [self.drawn], self.top_k, self.top_p)[0]
        self.drawn += 1
        return tok

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
