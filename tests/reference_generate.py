"""The slow, obvious twin of ``mfd_theory.llm.decoding.generate_batch``: one sequence at a time, no
padding and no cache (the whole sequence is run again for every new token), the sampling
distribution written out token by token, and each token drawn by walking the cumulative sum of
that distribution in token id order up to a uniform made from (seed, token index) by SplitMix64
written out in Python integers (the package computes the same uniform with numpy's wrapping
uint64 arithmetic, all rows at once)."""

from __future__ import annotations

import math

import torch


def reference_probs(logits, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The distribution one row samples from, [V] float32: the ``top_k`` largest logits (0: all;
    ties with the k-th kept), softmax at ``temperature``, then the smallest best-first set of
    tokens whose mass before each one is below ``top_p`` (the top token always in), renormalised."""
    z = [float(x) for x in logits]
    order = sorted(range(len(z)), key=lambda i: -z[i])
    if 0 < top_k < len(z):
        kth = z[order[top_k - 1]]
        order = [i for i in order if z[i] >= kth]
    top = z[order[0]]
    weight = {i: math.exp((z[i] - top) / temperature) for i in order}
    total = sum(weight.values())
    kept, mass = [], 0.0
    for i in order:
        if kept and mass >= top_p:
            break
        kept.append(i)
        mass += weight[i] / total
    probs = torch.zeros(len(z), dtype=torch.float64)
    for i in kept:
        probs[i] = weight[i]
    return (probs / probs.sum()).float()


M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def reference_uniform(seed: int, index: int) -> float:
    """Draw ``index`` of ``seed``: the top 53 bits of SplitMix64's output number ``index + 1`` from
    the state mix(seed + golden), as a float in [0, 1)."""
    key = _mix((int(seed) + GOLDEN) & M64)
    return (_mix((key + (int(index) + 1) * GOLDEN) & M64) >> 11) / 2.0 ** 53


def reference_draw(probs, u: float) -> int:
    """The first token, in id order, whose cumulative probability exceeds ``u`` times the total."""
    p = [float(x) for x in probs]
    target, acc = u * sum(p), 0.0
    last = max(i for i, x in enumerate(p) if x > 0)
    for i, x in enumerate(p):
        acc += x
        if acc > target:
            return i
    return last


@torch.no_grad()
def reference_generate(model, prompt, max_new_tokens: int, *, temperature: float = 0.0, seed: int = 0,
                       eos=(), top_k: int = 0, top_p: float = 1.0) -> list[int]:
    """New tokens for one prompt: argmax when ``temperature`` is 0, else token n is drawn at the
    uniform (``seed``, n); stops after a token in ``eos`` (kept) or ``max_new_tokens``."""
    seq, out = [int(t) for t in prompt], []
    while len(out) < max_new_tokens:
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
        if temperature == 0:
            tok = int(torch.argmax(logits))
        else:
            tok = reference_draw(reference_probs(logits, temperature, top_k, top_p), reference_uniform(seed, len(out)))
        out.append(tok)
        seq.append(tok)
        if tok in eos:
            break
    return out
