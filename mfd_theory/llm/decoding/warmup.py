"""Warm-up before timing: the first call of every piece a decoding round uses, outside the clock.

The tree builders and the ancestor-mask walk are numba kernels: their first call in a process
compiles them (or loads them from numba's on-disk cache), which takes from tenths of a second to
seconds and would otherwise land inside the first measured round's tree time. torch's first calls
(kernel selection, the drafter's cache buffers) cost a little too. ``warm_up`` makes all of these
calls once on tiny inputs; call it after the models are built and before anything is timed.
"""

from __future__ import annotations

import numpy as np
import torch

from mfd_theory.llm.decoding.generate import speculative_generate
from mfd_theory.llm.decoding.trees import METHODS, build_tree

__all__ = ["warm_up"]


def warm_up(target=None, drafter=None, budget: int = 64, methods=METHODS, prompt_len: int = 4) -> None:
    """Compile the tree builders for every method in ``methods``; with a ``target`` (and a
    ``drafter`` for the speculative methods) also decode a few tokens with each method, so every
    torch and numba call of a round has run once. Model state is reset by the next generation."""
    methods = tuple(methods)
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"methods: unknown {bad}; choose from {METHODS}")
    g = np.random.default_rng(0)
    for k in (1, 2):  # product trees for K = 1, marginals and mixture trees for K > 1
        log_q = torch.log_softmax(torch.from_numpy(g.normal(size=(k, 3, 8))), dim=-1)  # [K, L, V]
        log_pi = torch.log_softmax(torch.zeros(k, dtype=torch.float64), dim=0)
        for m in methods:
            if m == "dartree":  # grown by the drafter itself: warmed up by the decoding below
                continue
            tree = build_tree(m, log_pi, log_q, min(int(budget), 6))
            if tree is not None:
                tree.ancestor_mask()
    if target is None:
        return
    vocab = int(target.config.vocab_size) if hasattr(target, "config") else 2
    prompt = torch.arange(prompt_len) % max(1, vocab - 1)
    for m in methods:
        if (m != "ar" and drafter is None) or (m == "dartree" and not drafter.grows_trees):
            continue
        speculative_generate(target, drafter, prompt, 3, m, budget=budget)
