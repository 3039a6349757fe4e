"""Coverage of a draft tree: the expected number of accepted draft tokens, ``sum_{s in T} P(s)``.

P(s) comes from a :class:`MixtureOfProducts` target or a real verifier's per-node conditionals
(``node_log_cond``). Also here: acceptance variance, depth profile, the Monte Carlo walk, chimera
and splice masks. Why coverage is E[accepted]: docs/background.md ("The lossless rule").
"""

from __future__ import annotations

import sys
import types

import numpy as np

from mfd_theory._kernels.coverage import _cumulative_log, _simulate_acceptance, _splice_mask
from mfd_theory.distributions import MixtureOfProducts, _as_sequences
from mfd_theory.trees import DraftTree
from mfd_theory.validation import check_int, check_real

__all__ = [
    "acceptance_variance",
    "chimera_mask",
    "coverage",
    "depth_profile",
    "node_log_probs",
    "prefix_log_probs",
    "simulate_acceptance",
    "splice_mask",
    "spliced_chimera_mask",
    "variance_from_prefix_probs",
]


def _check_tree(tree) -> DraftTree:
    if not isinstance(tree, DraftTree):
        raise ValueError(f"tree: expected a DraftTree, got {type(tree).__name__}")
    return tree


def node_log_probs(tree: DraftTree, target: MixtureOfProducts | None = None, *, node_log_cond=None) -> np.ndarray:
    """[N] log P(s) of each node's prefix, from a target distribution or from node conditionals."""
    tree = _check_tree(tree)
    if (target is None) == (node_log_cond is None):
        raise ValueError("target: pass exactly one of target or node_log_cond")
    if target is not None:
        if not isinstance(target, MixtureOfProducts):
            raise ValueError(f"target: expected a MixtureOfProducts, got {type(target).__name__}")
        return target.node_log_probs(tree)
    c = np.asarray(node_log_cond, dtype=np.float64).reshape(-1)
    if c.shape[0] != len(tree):
        raise ValueError(f"node_log_cond: has {c.shape[0]} entries but the tree has {len(tree)} nodes")
    if np.isnan(c).any() or np.isposinf(c).any():
        raise ValueError("node_log_cond: contains NaN or +inf")
    if (c > 1e-6).any():
        raise ValueError("node_log_cond: has entries above 0 (a conditional probability > 1)")
    return _cumulative_log(tree.parent, np.minimum(c, 0.0))


def prefix_log_probs(parent: np.ndarray, depth: np.ndarray, cond: np.ndarray) -> np.ndarray:
    """log P(path) of every node from its own conditional ``cond`` [N] given its parent (node arrays
    ``parent`` [N], -1 for the root's children, and ``depth`` [N], 1-based): the cumulative sum of
    the conditionals along each path, one vector step per depth. No check: callers pass a tree's arrays."""
    lp = cond.copy()
    for d in range(2, int(depth.max()) + 1 if len(depth) else 0):
        at = np.flatnonzero(depth == d)
        lp[at] += lp[parent[at]]
    return lp


def coverage(tree: DraftTree, target: MixtureOfProducts | None = None, *, node_log_cond=None) -> float:
    """C(T) = sum over nodes of P(prefix) = expected accepted draft tokens (bonus excluded)."""
    lp = node_log_probs(tree, target, node_log_cond=node_log_cond)
    return float(np.exp(lp).sum())


def variance_from_prefix_probs(depth, prefix_probs) -> float:
    """Var[accepted] of a deterministic tree from its nodes' depths and prefix probabilities P(s).

    ``E[X^2] = sum_s P(s) (2 depth(s) - 1)`` and ``Var[X] = E[X^2] - (sum_s P(s))^2``.

    Proof. Let Y be the target's block and X the accepted length. The walk accepts exactly the
    tree nodes that are prefixes of Y, and the tree is prefix-closed, so X = sum_s 1[s <= Y]
    (s <= Y: s is a prefix of Y). Then X^2 = sum_{s, s'} 1[s <= Y] 1[s' <= Y]. Two prefixes of Y
    are comparable, one is a prefix of the other, and when s <= Y every prefix of s is <= Y too;
    so the pairs with both indicators 1 are (s, s) and, twice, (s, s') with s' a proper
    prefix of s in the tree. Prefix-closedness gives every node s exactly depth(s) - 1 proper
    prefixes in the tree, hence X^2 = sum_s 1[s <= Y] (1 + 2 (depth(s) - 1)) and taking
    expectations, E[X^2] = sum_s P(s) (2 depth(s) - 1). The mean is the coverage sum_s P(s).

    Parameters: ``depth`` int [N] (1-based), ``prefix_probs`` float [N] (each in [0, 1]).
    The depths must be those of a prefix-closed tree: integers >= 1 in which every depth d > 1
    present has some node at depth d - 1 (its parent's depth); others raise ValueError. The
    difference is clipped at 0 (rounding of a near-certain walk can leave -1e-16).
    """
    d = np.asarray(depth, dtype=np.float64).reshape(-1)
    p = np.asarray(prefix_probs, dtype=np.float64).reshape(-1)
    if d.shape != p.shape:
        raise ValueError(f"prefix_probs: has {p.shape[0]} entries but depth has {d.shape[0]}")
    if np.isnan(p).any() or (p < 0).any() or (p > 1 + 1e-9).any():
        raise ValueError("prefix_probs: entries must be probabilities in [0, 1]")
    if not np.isfinite(d).all() or (d != np.round(d)).any():
        raise ValueError("depth: depths must be integers")
    if (d < 1).any():
        raise ValueError("depth: depths are 1-based, got an entry < 1")
    present = np.unique(d)
    if present.size and present[-1] != present.size:  # some depth in 1..max is missing
        gap = int(np.setdiff1d(np.arange(1, present[-1] + 1), present)[0])
        raise ValueError(f"depth: no prefix-closed tree has these depths (nodes deeper than {gap}, "
                         f"none at depth {gap})")
    mean = p.sum()
    return float(max(0.0, (p * (2.0 * d - 1.0)).sum() - mean * mean))


def acceptance_variance(tree: DraftTree, target: MixtureOfProducts | None = None, *, node_log_cond=None) -> float:
    """Var[accepted draft tokens] of the lossless walk on ``tree`` (bonus excluded), exactly.

    Uses ``E[X^2] = sum over nodes of P(s) (2 depth(s) - 1)`` (proved in
    :func:`variance_from_prefix_probs`); the target is given as for :func:`coverage`.
    """
    lp = node_log_probs(tree, target, node_log_cond=node_log_cond)
    return variance_from_prefix_probs(tree.depth, np.exp(lp))


def depth_profile(tree: DraftTree, target: MixtureOfProducts | None = None, *, node_log_cond=None, L: int | None = None) -> np.ndarray:
    """float [L]: entry d-1 is P(accepted >= d); the nodes of one depth are disjoint events.

    ``L`` defaults to the target's block length (or the tree's depth for ``node_log_cond``).
    Its sum is the coverage.
    """
    lp = node_log_probs(tree, target, node_log_cond=node_log_cond)
    if L is None:
        L = target.L if target is not None else tree.max_depth
    if L < tree.max_depth:
        raise ValueError(f"L: {L} is shorter than the tree's depth {tree.max_depth}")
    out = np.zeros(int(L))
    np.add.at(out, tree.depth - 1, np.exp(lp))
    return out


def simulate_acceptance(tree: DraftTree, target: MixtureOfProducts, n: int, seed: int = 0) -> np.ndarray:
    """Monte Carlo of the lossless verification walk: int64 [n] accepted lengths.

    Each walk samples a block from the target and follows it down the tree until it leaves it;
    the mean converges to :func:`coverage`.
    """
    tree = _check_tree(tree)
    if not isinstance(target, MixtureOfProducts):
        raise ValueError(f"target: expected a MixtureOfProducts, got {type(target).__name__}")
    n = check_int("n", n, 0, integral_floats=True)
    target._check_tree(tree)
    N = len(tree)
    slots = tree.parent + 1  # 0 = root
    order = np.lexsort((tree.token, slots))  # by parent slot, then token
    child_start = np.zeros(N + 2, dtype=np.int64)
    np.add.at(child_start, slots + 1, 1)
    child_start = np.cumsum(child_start)
    child_tok = np.ascontiguousarray(tree.token[order])
    child_idx = np.ascontiguousarray(order.astype(np.int64))
    pi_cdf, cdf = target.sampling_cdfs()
    return _simulate_acceptance(child_start, child_tok, child_idx, pi_cdf, cdf, int(n), int(seed) % (2**32))


def _futures_target(tree: DraftTree, target) -> MixtureOfProducts:
    """``target`` as a MixtureOfProducts; futures [F, L] become the exact-futures target."""
    if isinstance(target, MixtureOfProducts):
        return target
    if isinstance(target, (str, bytes, dict)) or not hasattr(target, "__len__"):
        raise ValueError(f"target: expected a MixtureOfProducts or futures [F, L], got {type(target).__name__}")
    seqs = _as_sequences("target", target)  # [F, L]
    if seqs.min() < 0:
        raise ValueError("target: futures contain negative token ids")
    V = int(max(seqs.max(), tree.token.max() if len(tree) else 0)) + 1
    return MixtureOfProducts.futures(seqs, vocab_size=V)


def chimera_mask(tree: DraftTree, target, eps: float = 0.0) -> np.ndarray:
    """bool [N]: nodes whose target prefix probability is <= eps (eps = 0: exactly zero).

    ``target`` is a :class:`MixtureOfProducts` or, like :func:`mfd_theory.chimeras.count_chimeras`
    takes it, the futures [F, L] of an exact-futures target (then a chimera is a node that is a
    prefix of no future, and only eps = 0 is meaningful).
    """
    check_real("eps", eps, 0)  # checked, not converted: eps is compared in its own type below
    tree = _check_tree(tree)
    if not isinstance(target, MixtureOfProducts) and eps != 0:
        raise ValueError("eps: must be 0 when target is given as futures (their weights are not given)")
    lp = node_log_probs(tree, _futures_target(tree, target))
    if eps == 0:
        return lp == -np.inf
    return lp <= np.log(eps)


def spliced_chimera_mask(tree: DraftTree, futures) -> np.ndarray:
    """bool [N]: the chimeras that splice the futures [F, L]: nodes whose every token agrees with
    the same position of some future (:func:`splice_mask`) while the node follows no single future
    (:func:`chimera_mask` of the futures). The chimera share of the theory commands counts these."""
    return splice_mask(tree, futures) & chimera_mask(tree, futures)


def splice_mask(tree: DraftTree, sequences) -> np.ndarray:
    """bool [N]: nodes whose every token agrees with the same position of some sequence."""
    tree = _check_tree(tree)
    seqs = _as_sequences("sequences", sequences)  # [F, L]
    if seqs.min() < 0:
        raise ValueError("sequences: contains negative token ids")
    if tree.max_depth > seqs.shape[1]:
        raise ValueError(f"sequences: length {seqs.shape[1]} is shorter than the tree's depth {tree.max_depth}")
    V = int(max(seqs.max(), tree.token.max() if len(tree) else 0)) + 1
    allowed = np.zeros((seqs.shape[1], V), dtype=np.bool_)  # [L, V]
    allowed[np.arange(seqs.shape[1])[None, :], seqs] = True
    return _splice_mask(tree.parent, tree.token, tree.depth, allowed)


class _CallableModule(types.ModuleType):
    """This module, callable as :func:`coverage`: ``from mfd_theory import coverage`` gives the
    module (the package attribute of that name is always the submodule), and
    ``coverage(tree, target)`` still computes C(T)."""

    def __call__(self, tree: DraftTree, target: MixtureOfProducts | None = None, *, node_log_cond=None) -> float:
        return coverage(tree, target, node_log_cond=node_log_cond)


sys.modules[__name__].__class__ = _CallableModule
