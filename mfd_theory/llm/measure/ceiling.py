"""The target's own ceiling: how much a mixture or path drafter could gain over a product drafter.

No drafter: per context, the target's oracle tree (its exact top-N prefixes, best-first with
:class:`TargetScorer` as the scorer) against the best product tree (DDTree's ranking of the target's
marginals, estimated from sampled blocks), their exact coverage, a Monte-Carlo check, and the dead
nodes and splices. Design: docs/results.md ("Real text: the standard library").
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mfd_theory.trees import DraftTree, path_tree, product_tree
from mfd_theory.validation import check_int

__all__ = ["TargetScorer", "sample_blocks", "empirical_marginals", "node_log_probs", "accepted_lengths",
           "oracle_coverage", "product_ceiling", "prompt_ceiling"]


def _cache_kw(model) -> str:
    """The forward's name for the KV cache (``cache`` in newer transformers, else ``past_key_values``)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _forward(model, ids, cache):
    return model(input_ids=ids, use_cache=True, **{_cache_kw(model): cache})


def _prefill(model, context: torch.Tensor):
    from transformers import DynamicCache

    ids = torch.as_tensor(context, dtype=torch.long).reshape(1, -1)
    if ids.shape[1] == 0:
        raise ValueError("context: needs at least one token")
    cache = DynamicCache(config=model.config)
    out = _forward(model, ids, cache)
    return out.logits[0, -1].double(), cache, ids.shape[1]


class TargetScorer:
    """``log P(. | context + prefix)`` of a causal LM, as :func:`mfd_theory.trees.path_tree` wants it.

    ``L``: the deepest prefix searched; ``V``: the vocabulary. Every row is one forward of the
    prefix's tokens on top of the context's KV cache (cropped back to the context afterwards), and
    rows are memoised, so a search and a later :func:`node_log_probs` share them.
    """

    def __init__(self, model, context, L: int):
        L = check_int("L", L, 1, integral_floats=True)
        self.model = model
        self.L = int(L)
        with torch.no_grad():
            root, self.cache, self.ctx_len = _prefill(model, context)
        self.V = int(root.shape[-1])
        self.rows: dict[tuple[int, ...], np.ndarray] = {(): torch.log_softmax(root, -1).numpy()}
        self.forwards = 0

    @torch.no_grad()
    def log_cond(self, prefix) -> np.ndarray:
        key = tuple(int(t) for t in prefix)
        row = self.rows.get(key)
        if row is None:
            ids = torch.tensor([key], dtype=torch.long)
            out = _forward(self.model, ids, self.cache)
            self.cache.crop(-len(key))  # back to the context alone
            row = torch.log_softmax(out.logits[0, -1].double(), -1).numpy()
            self.rows[key] = row
            self.forwards += 1
        return row


@torch.no_grad()
def sample_blocks(model, context, L: int, M: int, seed: int = 0, batch: int = 256) -> np.ndarray:
    """``M`` continuations of ``L`` tokens sampled from the target at temperature 1: int64 [M, L].

    Full vocabulary, no top-k/top-p; EOS is an ordinary token here. The context is run once and
    its KV cache repeated for each batch of rows.
    """
    M, L = check_int("M", M, 1, integral_floats=True), check_int("L", L, 1, integral_floats=True)
    gen = torch.Generator().manual_seed(int(seed))
    out = []
    done = 0
    while done < M:
        b = min(batch, M - done)
        last, cache, _ = _prefill(model, context)
        cache.batch_repeat_interleave(b)
        probs = torch.softmax(last.float(), -1).expand(b, -1)
        rows = []
        for i in range(L):
            tok = torch.multinomial(probs, 1, generator=gen)  # [b, 1]
            rows.append(tok)
            if i + 1 < L:
                logits = _forward(model, tok, cache).logits[:, -1]
                probs = torch.softmax(logits.float(), -1)
        out.append(torch.cat(rows, 1))
        done += b
    return torch.cat(out, 0).numpy().astype(np.int64)


def empirical_marginals(samples: np.ndarray, V: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-position token frequencies of ``samples`` [M, L] and their binomial standard errors: [L, V] each."""
    x = np.asarray(samples, dtype=np.int64)
    M, L = x.shape
    p = np.zeros((L, V))
    for i in range(L):
        p[i] = np.bincount(x[:, i], minlength=V)[:V] / M
    return p, np.sqrt(p * (1 - p) / M)


def node_log_probs(scorer: TargetScorer, tree: DraftTree) -> np.ndarray:
    """``log P(s)`` of every node of ``tree`` under the target (one forward per internal node)."""
    paths = tree.paths()
    out = np.empty(len(tree))
    for n, s in enumerate(paths):
        p = tree.parent[n]
        out[n] = (out[p] if p >= 0 else 0.0) + float(scorer.log_cond(s[:-1])[s[-1]])
    return out


def accepted_lengths(tree: DraftTree, samples: np.ndarray) -> np.ndarray:
    """Per sample [M]: the depth of its longest prefix that is a node of ``tree`` (what a round of
    tree verification accepts when the target draws that sample)."""
    nodes = set(tree.paths())
    x = np.asarray(samples, dtype=np.int64)
    acc = np.zeros(x.shape[0], dtype=np.int64)
    for m in range(x.shape[0]):
        d = 0
        while d < x.shape[1] and tuple(x[m, : d + 1].tolist()) in nodes:
            d += 1
        acc[m] = d
    return acc


def oracle_coverage(scorer: TargetScorer, budgets) -> tuple[DraftTree, dict[int, float]]:
    """The target's top-max(budgets) tree and its coverage at each budget (the first N nodes of a
    best-first emission are the top-N tree)."""
    N = max(budgets)
    tree = path_tree(scorer, N)
    cum = np.cumsum(np.exp(tree.log_score))
    return tree, {int(n): float(cum[min(n, len(tree)) - 1]) for n in budgets}


def product_ceiling(scorer: TargetScorer, samples: np.ndarray, budgets, eps: float = 1e-3, dead_at: int = 64):
    """The product tree of the target's sampled marginals: coverage by budget, and its dead share at
    ``dead_at`` nodes."""
    p, _ = empirical_marginals(samples, scorer.V)
    with np.errstate(divide="ignore"):
        log_p = np.log(p)
    cov, trees = {}, {}
    for n in sorted(set(budgets) | {dead_at}):
        t = product_tree(log_p, int(n))
        keep = np.isfinite(t.log_score)  # prefix-closed: a child never outscores its parent
        if not keep.all():  # fewer than n prefixes have sampled support: the tree stops there
            new = np.cumsum(keep) - 1  # old node index -> new one (parents of kept nodes are kept)
            par = t.parent[keep]
            t = DraftTree(np.where(par >= 0, new[np.maximum(par, 0)], -1), t.token[keep], t.depth[keep],
                          t.log_score[keep])
        lp = node_log_probs(scorer, t)
        trees[int(n)] = (t, lp)
        cov[int(n)] = float(np.exp(lp).sum())
    t, lp = trees[int(dead_at)]
    dead = lp <= math.log(eps)
    prefixes = {tuple(r[:d].tolist()) for r in np.asarray(samples) for d in range(1, samples.shape[1] + 1)}
    unseen = np.array([s not in prefixes for s in t.paths()], dtype=bool)
    dead_info = {"nodes": len(t), "product_nodes": {str(n): len(tr) for n, (tr, _) in trees.items()}, "dead": int(dead.sum()), "dead_share": float(dead.mean()) if len(t) else 0.0,
                 "dead_splices": int((dead & unseen).sum()),
                 "dead_splice_share": float((dead & unseen).mean()) if len(t) else 0.0,
                 "dead_mass_lost": float(np.exp(lp[dead]).sum())}
    return trees, cov, dead_info


def prompt_ceiling(model, context, L: int, budgets, M: int, seed: int, eps: float = 1e-3, dead_at: int = 64) -> dict:
    """Everything the ceiling reports for one context; ``samples`` (2M rows: the first M build the
    marginals, the second M check coverage by Monte Carlo) are returned for the futures fit."""
    scorer = TargetScorer(model, context, L)
    samples = sample_blocks(model, context, L, 2 * M, seed=seed)
    build, check = samples[:M], samples[M:]
    otree, ocov = oracle_coverage(scorer, sorted(set(budgets) | {dead_at}))
    ptrees, pcov, dead = product_ceiling(scorer, build, budgets, eps, dead_at)
    mc = {}
    for name, tree_at in (("oracle", lambda n: DraftTree(otree.parent[:n], otree.token[:n], otree.depth[:n])),
                          ("product", lambda n: ptrees[n][0])):
        mc[name] = {}
        for n in budgets:
            acc = accepted_lengths(tree_at(min(int(n), len(otree)) if name == "oracle" else int(n)), check)
            mc[name][int(n)] = [float(acc.mean()), float(acc.std(ddof=1) / math.sqrt(len(acc)))]
    return {"oracle": {int(n): ocov[int(n)] for n in budgets}, "product": {int(n): pcov[int(n)] for n in budgets},
            "mc": mc, "dead": dead, "forwards": scorer.forwards, "samples": samples}
