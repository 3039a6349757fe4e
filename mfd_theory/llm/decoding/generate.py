"""Tree-verified speculative decoding of one request: "ar", "chain", "ddtree", "mfd" and "dartree".

A round drafts a block, builds the method's tree (``trees.py``; "dartree" grows it with the
drafter), verifies it in one target forward, walks it by the lossless rule (``sampling.py``),
commits the accepted path and records the tree's exact predicted acceptance (``metrics.py``). The
rule and why coverage is the expected accepted length: docs/background.md. Many requests: ``batch.py``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from mfd_theory.llm.decoding.metrics import DEAD_EPS, round_metrics
from mfd_theory.llm.decoding.records import DecodeResult, StepRecord, clock
from mfd_theory.llm.decoding.round import Request, as_target, check_decoding, check_seed, eos_set
from mfd_theory.llm.decoding.sampling import Sampler, sampling_probs, walk_tree
from mfd_theory.llm.decoding.trees import METHODS, build_tree, build_trees, first_nodes

__all__ = ["METHODS", "DEAD_EPS", "StepRecord", "DecodeResult", "speculative_generate", "sampling_probs",
           "walk_tree", "build_tree"]


def _check_budget_rule(budget_rule, method: str) -> None:
    if budget_rule is not None and not callable(budget_rule):
        raise ValueError(f"budget_rule: expected a callable (node gains -> tree size), got {budget_rule!r}")
    if budget_rule is not None and method == "dartree":
        # a Domino tree is not stored best first, so its first n nodes need not be its top n
        raise ValueError("budget_rule: not available with method 'dartree' (its tree is grown depth by depth, "
                         "not in best-first order)")


@torch.no_grad()
def speculative_generate(target, drafter, input_ids, max_new_tokens: int, method: str, budget: int = 64,
                         temperature: float = 0.0, top_p: float = 1.0, seed: int = 0, *,
                         eos_token_id=None, keep_trees: bool = False, metrics: bool = True,
                         budget_rule: Callable[[np.ndarray], int] | None = None,
                         scorer: str | None = None) -> DecodeResult:
    """Generate up to ``max_new_tokens`` tokens for one prompt; lossless for every method.

    ``input_ids``: the prompt, [T] or [1, T], token ids or a tokenizer's output (its
    ``input_ids``). ``target``: a :class:`~mfd_theory.llm.models.target.TargetModel` (or an HF
    model, wrapped on the fly); ``drafter``: any :class:`~mfd_theory.llm.models.protocol.Drafter`
    (unused for "ar"). ``eos_token_id`` defaults to the target's generation config. Greedy when
    ``temperature == 0``; otherwise the walk samples softmax(logits / temperature) cut to ``top_p``
    with a CPU generator seeded by ``seed``. ``metrics=False`` skips the coverage bookkeeping (for
    timing runs); ``keep_trees`` keeps each round's tree and node conditionals in its record.
    ``budget_rule`` (e.g. :class:`mfd_theory.speedup.PerRoundBudget`) cuts each round's tree, built
    at ``budget``, to its first ``budget_rule(node gains)`` nodes (gains: the drafter's prefix
    probabilities in best-first order). ``scorer``: how "mfd" ranks prefixes, "mixture" (None, the
    default: sum_k pi_k Q_k) or "best_mode" (max_k Q_k, the released MFD drafters' rule, which
    reads none of the drafter's mode weights); other methods have none.

    T prompt tokens plus n new ones occupy T + n - 1 positions, which must fit the target's
    context; each tree is cut to the depth the positions and new tokens left allow, so generation
    ends where HF ``generate`` ends. On return the target holds the committed state: a prefill of
    ``prompt + tokens[:-1]`` (``target.verify(tokens[-1], ...)`` continues the sequence).
    """
    target = as_target(target)
    scorer = check_decoding(target, drafter, method, budget, temperature, top_p, max_new_tokens, scorer)
    _check_budget_rule(budget_rule, method)
    sampler = Sampler(temperature, top_p, check_seed(seed))
    req = Request.start(target, input_ids, max_new_tokens, method, sampler, eos_set(target, eos_token_id),
                        scorer=scorer)
    dev, use_draft = target.device, method != "ar"
    t0 = clock(dev)
    logits0, hidden = target.prefill(req.ids, hidden=use_draft)
    root = sampler.draw(logits0)
    ctx = pending = None  # the context features to draft from next, or the verify rows to fuse into them
    if use_draft:
        drafter.reset()
        drafter.observe_tokens(req.ids.tolist())
        ctx = drafter.fuse_hidden(hidden)  # [1, T, H]
    req.result.t_prefill = clock(dev) - t0
    req.emit([root])
    req.root = root
    while not req.done:
        ta = clock(dev)
        tree, depth, depth_times = None, 0, ()
        if use_draft:
            if pending is not None:  # the last round's kept rows (drafter time)
                ctx = drafter.fuse_hidden(tuple(h.index_select(1, pending[1]) for h in pending[0]))
            log_pi, log_q = drafter.draft_modes(ctx, req.root)  # [K], [K, L, V]
            ctx = pending = None
            depth = req.depth_left(target.length, target.max_positions, log_q.shape[1])
            if depth and method == "dartree":
                t_backbone = clock(dev) - ta
                tree, times = drafter.grow_tree(req.root, log_q[0, :depth], int(budget), clock=lambda: clock(dev))
                depth_times = (t_backbone, *times)
        tb = clock(dev)
        if depth and method != "dartree":
            tree = build_trees(method, log_pi[None], log_q[None], int(budget), [depth], scorer)[0]
            if budget_rule is not None and len(tree) > 1:
                tree = first_nodes(tree, budget_rule(np.exp(tree.log_score)))
        mask = target.tree_mask(tree)  # [1, 1, N+1, P+N+1] float additive
        tc = clock(dev)
        out = target.verify(req.root, tree, hidden=use_draft, mask=mask)  # logits [N+1, V]
        td = clock(dev)
        argmax = torch.argmax(out.logits, dim=-1).tolist() if sampler.greedy else None  # one transfer
        path, emitted = sampler.walk(tree, out.logits, argmax)
        te = clock(dev)
        m = round_metrics(tree, out.logits, temperature, top_p, metrics)
        tf = clock(dev)
        count = req.emit(emitted)
        if req.done:  # leave the committed state: every emitted token but the last has been fed
            target.commit(path[: count - 1])
        else:
            target.commit(path)
            if use_draft:
                pending = (out.hidden_states, torch.tensor([0] + [i + 1 for i in path], device=dev))
                drafter.observe_tokens([req.root] + emitted[:-1])
            req.root = emitted[-1]
        tg = clock(dev)
        times = dict(t_draft=tb - ta, t_tree=tc - tb, t_verify=td - tc, t_walk=te - td, t_commit=tg - tf)
        req.record(m, path, count, times, tree, keep_trees, depth_times)
    req.result.t_total = clock(dev) - t0
    return req.result
