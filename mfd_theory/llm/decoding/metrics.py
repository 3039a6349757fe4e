"""One round's coverage bookkeeping from its verify forward: what the tree predicted, and how.

``round_metrics`` reads the target's own conditionals at every node of the verified tree and
returns a ``RoundMetrics``: the exact E[accepted] and Var[accepted] under the decoding rule, the
covered mass (docs/background.md, coverage) and the dead nodes (docs/background.md, chimeras).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mfd_theory.coverage import prefix_log_probs, variance_from_prefix_probs
from mfd_theory.trees import DraftTree

from mfd_theory.llm.decoding.sampling import sampling_probs

__all__ = ["DEAD_EPS", "RoundMetrics", "round_metrics"]

DEAD_EPS = 1e-3  # a node is "dead" when the target's prefix probability is below this


@dataclass(frozen=True)
class RoundMetrics:
    """A verified tree's numbers (0 without a tree; NaN when the bookkeeping was skipped)."""

    tree_size: int
    predicted: float  # exact E[accepted] for this tree under the decoding rule's conditionals
    covered_mass: float  # sum over nodes of the target's (temperature-1 when greedy) prefix probability
    predicted_var: float  # exact Var[accepted] under the same conditionals
    dead_share: float  # share of nodes whose target prefix probability is below DEAD_EPS
    dead_splices: int  # dead nodes whose every token agrees with the same depth of a live branch
    node_log_cond: np.ndarray | None = None  # [N] decoding-rule log conditionals


def _node_conditionals(tree: DraftTree, logits: torch.Tensor, temperature: float, top_p: float):
    """(decoding-rule log conditionals [N], metric log conditionals [N]) of each node's token given
    its parent's path, read from the verify forward's own logits [N+1, V]."""
    dev = logits.device
    parent_row = torch.as_tensor(tree.parent + 1, device=dev)
    tok = torch.as_tensor(tree.token, device=dev)
    rows = torch.unique(parent_row)
    if temperature == 0:
        lsm = torch.log_softmax(logits[rows], dim=-1)  # only rows that are parents
        greedy = torch.argmax(logits[rows], dim=-1)
        where = torch.searchsorted(rows, parent_row)
        metric = lsm[where, tok]
        dec = torch.where(greedy[where] == tok, 0.0, float("-inf"))
    else:
        probs = sampling_probs(logits[rows], temperature, top_p)
        where = torch.searchsorted(rows, parent_row)
        dec = torch.log(probs[where, tok])
        metric = dec
    return dec.double().cpu().numpy(), metric.double().cpu().numpy()


def _dead_and_splices(tree: DraftTree, metric_lp: np.ndarray) -> tuple[float, int]:
    """Share of dead nodes, and how many dead nodes splice the live branches' tokens by depth."""
    n = len(tree)
    dead = metric_lp < np.log(DEAD_EPS)
    if not dead.any():
        return 0.0, 0
    live = ~dead
    live_pairs = set(zip(tree.depth[live].tolist(), tree.token[live].tolist()))
    ok = np.array([(d, t) in live_pairs for d, t in zip(tree.depth.tolist(), tree.token.tolist())], dtype=bool)
    splice = ok.copy()
    for i in range(n):  # parents precede children
        p = tree.parent[i]
        if p >= 0:
            splice[i] &= splice[p]
    return float(dead.mean()), int((dead & splice).sum())


def round_metrics(tree: DraftTree | None, logits: torch.Tensor, temperature: float, top_p: float,
                  metrics: bool = True) -> RoundMetrics:
    """One round's coverage bookkeeping from its verify logits [N+1, V] (root first). Without a
    tree everything is 0; with ``metrics=False`` the numbers are NaN."""
    n = 0 if tree is None else len(tree)
    if not (n and metrics):
        nan = float("nan") if n else 0.0
        return RoundMetrics(n, nan, nan, nan, nan, 0)
    dec, metric = _node_conditionals(tree, logits, temperature, top_p)
    dec_lp = prefix_log_probs(tree.parent, tree.depth, dec)
    met_lp = prefix_log_probs(tree.parent, tree.depth, metric)
    var = variance_from_prefix_probs(tree.depth, np.exp(dec_lp))
    dead_share, dead_splices = _dead_and_splices(tree, met_lp)
    return RoundMetrics(n, float(np.exp(dec_lp).sum()), float(np.exp(met_lp).sum()), var, dead_share,
                        dead_splices, dec)
