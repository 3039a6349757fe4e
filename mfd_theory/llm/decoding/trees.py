"""The methods' draft trees from drafted blocks, for one request or a batch of them.

``build_trees`` turns one draft (log_pi [B, K], log_q [B, K, L, V]) into each request's tree with
the core's builders (:mod:`mfd_theory.trees`), after one top-k candidate cut over all rows and in
one kernel call for all requests (:func:`~mfd_theory.trees.candidate_trees`; a best-mode tree
request by request); ``build_tree`` is the one-request case; ``check_scorer`` the scorer of "mfd"
(``SCORERS``). How the builders work: docs/design.md.
"""

from __future__ import annotations

import numpy as np
import torch

from mfd_theory.trees import DraftTree, best_mode_tree, candidate_trees, chain_tree, top_candidates

__all__ = ["METHODS", "SCORERS", "build_tree", "build_trees", "check_scorer", "first_nodes"]

METHODS = ("ar", "chain", "ddtree", "mfd", "dartree")
#: how method "mfd" ranks a prefix: "mixture", sum_k pi_k Q_k(s) (the default), or "best_mode",
#: max_k Q_k(s), the released MFD drafters' rule, which reads no mode weights
SCORERS = ("mixture", "best_mode")


def check_scorer(method: str, scorer: str | None) -> str | None:
    """The scorer a decode of ``method`` uses: "mixture" or "best_mode" for "mfd" (None means
    "mixture"), None for every other method (which has none; "mixture", the default, is accepted
    and ignored there, "best_mode" refused)."""
    if scorer is not None and scorer not in SCORERS:
        raise ValueError(f"scorer: must be one of {SCORERS}, got {scorer!r}")
    if method == "mfd":
        return scorer or "mixture"
    if scorer == "best_mode":
        raise ValueError(f"scorer: 'best_mode' ranks the modes of method 'mfd'; method {method!r} has no scorer")
    return None


def _topk(log_q: torch.Tensor, k: int):
    """The k largest entries of every row (last axis), in descending order, ties to the lower
    token id (in the cut and in the order, the builders' tie rule): float64 values and int64
    ids, numpy.

    On CPU this is the core's :func:`~mfd_theory.trees.top_candidates`, the builders' own numba
    row screen (2-4x faster than a partial ``np.argpartition`` selection and a sort at B = 16,
    K = 2, L = 7, V = 512, and several times faster than ``torch.topk``). On an accelerator the
    selection runs there and only k entries per row are copied back. NaN rows are refused later
    by the builder (the screen stops at them), as on the accelerator."""
    if log_q.device.type != "cpu":
        return _topk_torch(log_q, k)
    x = log_q.detach()
    x = x.numpy() if x.dtype in (torch.float32, torch.float64) else x.float().numpy()
    try:
        return top_candidates(x, k)
    except ValueError:  # NaN, +inf or a positive log-probability: left for the builder to name
        return _topk_numpy(x, k)


def _topk_numpy(x: np.ndarray, k: int):
    """:func:`_topk` by a partial selection (``np.argpartition``) and a sort of the k selected
    entries, for rows the screen refuses; either selection may cut a run of equal values
    anywhere, so the rows where it did are redone from their k-th value, keeping the lowest ids."""
    v = x.shape[-1]
    flat = x.reshape(-1, v)  # [rows, V]
    ids = np.argpartition(flat, v - k, axis=1)[:, v - k:]  # [rows, k]
    kth = np.take_along_axis(flat, ids, axis=1).min(axis=1)  # [rows]; NaN rows are refused later
    for r in np.flatnonzero((flat >= kth[:, None]).sum(axis=1) > k):  # a run of kth cut by the partition
        above = np.flatnonzero(flat[r] > kth[r])
        ids[r] = np.concatenate([above, np.flatnonzero(flat[r] == kth[r])[: k - above.size]])
    ids = np.sort(ids, axis=1)  # then a stable sort by value leaves equal values in id order
    vals = np.take_along_axis(flat, ids, axis=1).astype(np.float64)
    order = np.argsort(-vals, axis=1, kind="stable")  # descending
    ids, vals = np.take_along_axis(ids, order, axis=1), np.take_along_axis(vals, order, axis=1)
    return vals.reshape(*x.shape[:-1], k), ids.reshape(*x.shape[:-1], k)


def _topk_torch(log_q: torch.Tensor, k: int):
    """:func:`_topk` with torch operations on the tensor's own device (the accelerator path)."""
    x = log_q.detach()
    vals, ids = torch.topk(x, k, dim=-1)
    kth = vals[..., -1:]
    need = k - (x > kth).sum(dim=-1, keepdim=True)  # places left for entries equal to kth
    eq = x == kth
    keep = (x > kth) | (eq & (eq.cumsum(dim=-1) <= need))  # k per row, NaN rows aside
    if bool((keep.sum(dim=-1) == k).all()):  # otherwise a NaN row, which the builder refuses
        ids = keep.nonzero()[:, -1].reshape(*x.shape[:-1], k)  # increasing ids per row
        vals, order = torch.sort(x.gather(-1, ids), dim=-1, descending=True, stable=True)
        ids = ids.gather(-1, order)
    return vals.double().cpu().numpy(), ids.cpu().numpy()


def build_trees(method: str, log_pi: torch.Tensor, log_q: torch.Tensor, budget: int,
                depths: list[int], scorer: str | None = None) -> list[DraftTree | None]:
    """Every request's tree from one draft (log_pi [B, K], log_q [B, K, L, V]), request b's cut to
    depth ``depths[b]`` (None where that is 0, and for "ar"). The candidate cut runs once over all
    requests' rows and is row by row, so a request's tree does not depend on the others.
    ``scorer`` (:func:`check_scorer`): "mfd"'s ranking; "best_mode" never reads ``log_pi``, so a
    drafter whose weights are unusable (NaN, or a gate of another shape) decodes with it."""
    bsz = log_q.shape[0]
    trees: list = [None] * bsz
    if method == "dartree":
        raise ValueError("method: 'dartree' grows its tree with the drafter's path correction "
                         "(DominoDrafter.grow_tree), not from a drafted block alone")
    if method not in METHODS:
        raise ValueError(f"method: must be one of {METHODS}, got {method!r}")
    scorer = check_scorer(method, scorer)
    live = [b for b in range(bsz) if depths[b] > 0]
    if method == "ar" or not live:
        return trees
    k_cand = min(int(budget), log_q.shape[-1])
    if method != "chain" and k_cand > 1:
        # a token at -inf (outside a reduced draft vocabulary) is never drafted: without this cap a
        # budget above the vocabulary's size would take -inf candidates into the tree
        finite = int(torch.isfinite(log_q).sum(-1).min())
        k_cand = max(1, min(k_cand, finite))
    if method == "chain":
        best = torch.argmax(log_pi, dim=1)  # [B]
        lq = log_q[torch.arange(bsz), best]  # [B, L, V]: each request's most likely mode
        toks = torch.argmax(lq, dim=-1)  # [B, L]
        top = lq.gather(-1, toks[..., None])[..., 0]  # [B, L]
        # a chain node's score: the mode's log-probability of its prefix, so the global top-N
        # compares chains by what they are worth (all-zero scores would rank by request index)
        scores = torch.cumsum(top.double().clamp(max=0.0), dim=-1).cpu().numpy()  # [B, L]
        toks = toks.cpu().numpy()
        for b in live:
            n = min(depths[b], int(budget))
            trees[b] = chain_tree(toks[b, :n], scores[b, :n])
    elif method == "ddtree":  # a product tree over the mixture's per-position marginals
        marg = log_q[:, 0] if log_q.shape[1] == 1 else torch.logsumexp(log_pi[:, :, None, None] + log_q, dim=1)
        vals, ids = _topk(marg, k_cand)  # [B, L, k]
        # every request's tree in one kernel call, each what product_tree builds from its candidates
        trees = candidate_trees(np.zeros((bsz, 1)), np.minimum(vals, 0.0)[:, None], ids[:, None], int(budget), depths)
    elif scorer == "best_mode":  # exact within each mode's top-k candidates; no weights read
        vals, ids = _topk(log_q, k_cand)  # [B, K, L, k]
        for b in live:
            d = depths[b]
            trees[b] = best_mode_tree(np.minimum(vals[b, :, :d], 0.0), budget, token_ids=ids[b, :, :d])
    else:  # "mfd" by the mixture: exact within each mode's top-k candidates
        vals, ids = _topk(log_q, k_cand)  # [B, K, L, k]
        lp = log_pi.double().cpu().numpy()  # [B, K]; renormalised by the builder
        trees = candidate_trees(lp, np.minimum(vals, 0.0), ids, int(budget), depths)
    return trees


def build_tree(method: str, log_pi: torch.Tensor, log_q: torch.Tensor, budget: int,
               scorer: str | None = None) -> DraftTree | None:
    """The method's tree from one drafted block (log_pi [K], log_q [K, L, V]); None for "ar"."""
    return build_trees(method, log_pi[None], log_q[None], budget, [log_q.shape[1]], scorer)[0]


def first_nodes(tree: DraftTree, n: int) -> DraftTree:
    """The tree's first ``n`` nodes: prefix-closed, since parents precede children."""
    n = max(1, min(int(n), len(tree)))
    return DraftTree(tree.parent[:n], tree.token[:n], tree.depth[:n], tree.log_score[:n], validate=False)
