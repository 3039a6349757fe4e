"""The slow, obvious twin of ``mfd_theory.llm.decoding.generate_batch``: one sequence at a time, no
padding and no cache (the whole sequence is run again for every new token), the sampling
distribution written out token by token, and one ``torch.Generator`` per prompt drawing once
per token."""

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


@torch.no_grad()
def reference_generate(model, prompt, max_new_tokens: int, *, temperature: float = 0.0, seed: int = 0,
                       eos=(), top_k: int = 0, top_p: float = 1.0) -> list[int]:
    """New tokens for one prompt: argmax when ``temperature`` is 0, else one draw per token with a
    generator seeded ``seed``; stops after a token in ``eos`` (kept) or ``max_new_tokens``."""
    gen = torch.Generator().manual_seed(int(seed))
    seq, out = [int(t) for t in prompt], []
    while len(out) < max_new_tokens:
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
        if temperature == 0:
            tok = int(torch.argmax(logits))
        else:
            tok = int(torch.multinomial(reference_probs(logits, temperature, top_k, top_p), 1, generator=gen))
        out.append(tok)
        seq.append(tok)
        if tok in eos:
            break
    return out
