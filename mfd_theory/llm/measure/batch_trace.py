"""Traces of greedy decoding for the batch simulator: at every position of every prompt's greedy
text, the tree a round rooted there would verify and the nodes the target accepts in it.

At T = 0 the text is the target's own, whatever the policy, and a round rooted at position s
drafts from the same context, so one drafting pass per position gives what every allocation
policy's rounds would see; :func:`mfd_theory.batch_sim.replay` then decodes any policy from them.
Design and findings: docs/benchmarks.md ("The whole decode").
"""

from __future__ import annotations

import numpy as np
import torch

from mfd_theory.batch_sim import DecodeTraces

from mfd_theory.llm.decoding.batch import speculative_generate_batch
from mfd_theory.llm.decoding.round import as_target, batch_prompts, prompt_ids
from mfd_theory.llm.decoding.trees import build_trees

__all__ = ["decode_traces"]


@torch.no_grad()
def decode_traces(target, drafter, method: str, prompts, max_new_tokens: int, cap: int,
                  progress: bool = False, scorer: str | None = None) -> tuple[DecodeTraces, list[list[int]]]:
    """(traces, greedy texts) of ``prompts`` under ``method`` ("chain", "ddtree" or "mfd"): each
    root's tree built at ``cap`` nodes and cut to the depth the decoder would allow there, as
    :func:`~mfd_theory.llm.decoding.batch.speculative_generate_batch` builds it. The texts are the
    target's greedy continuations (``max_new_tokens`` tokens, no EOS). ``scorer``: method "mfd"'s
    ranking (:func:`~mfd_theory.llm.decoding.trees.check_scorer`)."""
    from tqdm.auto import tqdm

    if method not in ("chain", "ddtree", "mfd"):
        raise ValueError(f"method: traces are drawn for 'chain', 'ddtree' or 'mfd', got {method!r}")
    target = as_target(target)
    prompts = batch_prompts(prompts)
    ids = [prompt_ids(p, target, max_new_tokens).tolist() for p in prompts]
    texts = [r.tokens for r in speculative_generate_batch(target, None, ids, max_new_tokens, "ar",
                                                          eos_token_id=[], metrics=False).results]
    T, L = int(max_new_tokens), int(drafter.block_size) - 1
    P = len(ids)
    scores = np.full((P, max(T - 1, 1), int(cap)), -np.inf)
    paths = np.full((P, max(T - 1, 1), L), -1, dtype=np.int64)
    for i in tqdm(range(P), desc=f"traces {method}", disable=not progress):
        p, x = ids[i], texts[i]
        _, hid = target.prefill(torch.tensor(p + x[:-1], device=target.device), hidden=True)
        n = len(p)
        drafter.reset()
        drafter.observe_tokens(p)
        ctx = drafter.fuse_hidden(tuple(h[:, :n] for h in hid))  # [1, T_p, H]
        for s in range(T - 1):
            log_pi, log_q = drafter.draft_modes(ctx, x[s])  # [K], [K, L, V]
            drafter.observe_tokens([x[s]])
            ctx = drafter.fuse_hidden(tuple(h[:, n + s: n + s + 1] for h in hid))  # the root's own row, next
            depth = min(T - s - 2, L)  # Request.depth_left with s + 1 tokens emitted
            if target.max_positions is not None:
                depth = min(depth, target.max_positions - 1 - (n + s))
            if depth <= 0:
                continue
            tree = build_trees(method, log_pi[None], log_q[None], int(cap), [depth], scorer)[0]
            scores[i, s, : len(tree)] = tree.log_score
            node, j = -1, 0
            for tok in x[s + 1: s + 1 + depth]:  # the greedy walk: the text's next tokens
                hit = np.flatnonzero((tree.parent == node) & (tree.token == tok))
                if hit.size == 0:
                    break
                node = int(hit[0])
                paths[i, s, j] = node
                j += 1
    return DecodeTraces(scores, paths, np.array([len(x) for x in texts])), texts
