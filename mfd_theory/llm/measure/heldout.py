"""Greedy (and sampled) tau of a block drafter on held-out sequences, from one target forward per sequence.

At T = 0 a lossless decode emits the target's greedy continuation whatever the drafter does, so
every round's tree is drafted from a context that is known in advance: the features of the
sequence up to the round's root. One forward of the whole sequence gives the target's hidden
states at every position, one batched drafter forward gives the block of every possible root, and
the rounds of the decode are then a walk over those blocks: a round at root t accepts the
longest prefix of the continuation x[t+1:] that is a path of its tree, emits it and the bonus
token, and the next round's root is the last token emitted. The tau this returns is the tau
``speculative_generate`` measures for the same prompt and ``max_new_tokens`` (the test suite
compares the two), without running the target once per round; it also gives the mean accepted
length over *every* root of the response, a lower-variance figure of the same drafter. At T > 0
the same replay runs on answers the target sampled with keyed draws (``sampling`` of
:func:`heldout_greedy_tau_many`): a sampled decode of the answer's seed emits that answer whatever
the tree, so the same walk gives its tau.

Only what a round's tree needs from the drafter enters (its block at the root), so this holds for
chain, DDTree and MFD trees (both scorers), and for DARTree, whose tree a Domino drafter grows from
its block's backbone states at the root with its path correction (one tree per root, depth by
depth).
"""

from __future__ import annotations

import numpy as np
import torch

from mfd_theory.llm.decoding.trees import build_trees
from mfd_theory.validation import check_int

__all__ = ["default_cells", "greedy_prefix", "heldout_greedy_tau", "heldout_greedy_tau_many", "root_trees", "round_walk",
           "roots_accepted", "sampled_prefix", "tree_accepts"]

#: the methods and scorers this module measures (DARTree: a Domino drafter's path-grown tree)
CELLS = (("chain", None), ("ddtree", None), ("mfd", "mixture"), ("mfd", "best_mode"), ("dartree", None))


def greedy_prefix(seq: np.ndarray, prompt_len: int, logits: torch.Tensor, first_row: int = 0) -> int:
    """Length of the longest prefix of ``seq`` whose response (tokens from ``prompt_len`` on) is the
    target's greedy continuation under ``logits`` [len(seq) - first_row, V] (row j predicts token
    first_row + j + 1: ``first_row`` > 0 when only the last rows were computed, at most
    ``prompt_len - 1``). The first response token is the prefill's argmax too. At least ``prompt_len``."""
    first_row = _check_first_row(first_row, prompt_len)
    nxt = logits[prompt_len - 1 - first_row: len(seq) - 1 - first_row].argmax(-1).cpu().numpy()
    same = nxt == np.asarray(seq[prompt_len:], dtype=np.int64)
    bad = np.flatnonzero(~same)
    return int(prompt_len + (bad[0] if bad.size else same.size))


def _check_first_row(first_row, prompt_len: int) -> int:
    first_row = check_int("first_row", first_row, 0)
    if first_row > prompt_len - 1:
        raise ValueError(f"first_row: the logits must hold the prompt's last row ({prompt_len - 1}), got "
                         f"first_row {first_row}")
    return first_row


def sampled_prefix(seq: np.ndarray, prompt_len: int, logits: torch.Tensor, sampling: dict, seed: int,
                   first_row: int = 0) -> int:
    """:func:`greedy_prefix` for a sampled answer: the length of the longest prefix of ``seq`` whose
    response is what the target draws under ``logits`` with the keyed draws of the generator seed
    ``seed`` (draw k from response token k's row, :func:`~mfd_theory.llm.decoding.sampling.draw_tokens`,
    cut by ``sampling``'s ``temperature``, ``top_k``, ``top_p``): the answer a lossless sampled
    decode of that seed emits, up to where this forward's rounding changes a draw. At least
    ``prompt_len``. ``first_row``: as in :func:`greedy_prefix`."""
    from mfd_theory.llm.decoding.sampling import draw_tokens

    first_row = _check_first_row(first_row, prompt_len)
    n = len(seq) - prompt_len
    if n <= 0:
        return int(prompt_len)
    rows = logits[prompt_len - 1 - first_row: len(seq) - 1 - first_row]
    got = np.asarray(draw_tokens(rows, float(sampling["temperature"]), [int(seed)] * n, list(range(n)),
                                 int(sampling.get("top_k", 0)), float(sampling.get("top_p", 1.0))), dtype=np.int64)
    bad = np.flatnonzero(got != np.asarray(seq[prompt_len:], dtype=np.int64))
    return int(prompt_len + (bad[0] if bad.size else n))


def tree_accepts(tree, continuation: np.ndarray) -> int:
    """Length of the longest prefix of ``continuation`` that is a path of ``tree`` from its root
    (what the greedy walk accepts when the target's next tokens are ``continuation``)."""
    if tree is None or len(tree) == 0:
        return 0
    children: dict[tuple[int, int], int] = {}
    for i, (p, tok) in enumerate(zip(tree.parent.tolist(), tree.token.tolist())):
        children.setdefault((p, tok), i)
    node, depth = -1, 0
    for tok in continuation.tolist():
        node = children.get((node, int(tok)), None)
        if node is None:
            break
        depth += 1
    return depth


def round_walk(acc: dict[int, int], start: int, last: int) -> list[int]:
    """Accepted lengths of the rounds of a decode whose first root is at ``start`` and whose last
    token is at ``last``: a round at root t accepts ``acc[t]`` and hands the root to t + acc + 1."""
    out, t = [], start
    while t < last:
        a = acc[t]
        out.append(a)
        t += a + 1
    return out


def default_cells(drafter) -> list[tuple]:
    """A drafter's cells: chain and DDTree for a product drafter (and DARTree for a Domino one), MFD
    under both scorers for a K-mode one."""
    K = int(getattr(drafter, "num_modes", 1))
    grows = bool(getattr(drafter, "grows_trees", False))
    return [c for c in CELLS if (c[0] == "mfd") == (K > 1) and (c[0] != "dartree" or grows)]


def _check_cells(drafter, cells) -> list[tuple]:
    K = int(getattr(drafter, "num_modes", 1))
    if cells is None:
        cells = default_cells(drafter)
    cells = [tuple(c) for c in cells]
    for m, sc in cells:
        if (m, sc) not in CELLS:
            raise ValueError(f"cells: {(m, sc)} is not one of {CELLS}")
        if m == "mfd" and K == 1:
            raise ValueError("cells: 'mfd' needs a drafter with more than one mode")
        if m == "dartree" and not getattr(drafter, "grows_trees", False):
            raise ValueError("cells: 'dartree' needs a Domino drafter (one that grows its trees)")
    return cells


def root_trees(drafter, hidden_states, seq: np.ndarray, p: int, end: int, budgets, cells, chunk: int = 32):
    """Yield (budget, cell, root, tree) for every root of one answer (kept up to ``end``) and every
    budget and cell: the tree a round at that root verifies (None where the answer has no token left
    to draft; its tokens are draft-vocabulary ids when the drafter has a reduced vocabulary, as
    :meth:`draft_index` maps the answer). One batched drafter forward per chunk of roots serves every
    budget and cell."""
    dev = hidden_states[0].device
    L = int(drafter.block_size) - 1
    mask_id = int(drafter.mask_token_id)
    last = end - 1                                                 # index of the last token kept
    ctx_all = drafter.fuse_hidden(hidden_states)                   # [1, S, H]
    roots = np.arange(p, last)                                     # every root a round may have
    for lo in range(0, len(roots), chunk):
        part = roots[lo: lo + chunk]
        t = torch.from_numpy(part).to(dev)
        T = int(part.max())
        src = torch.arange(T, device=dev)[None, :] - (T - t)[:, None]  # left padding
        valid = src >= 0
        ctx = ctx_all[0][src.clamp_min(0)]                         # [b, T, H]
        block = torch.full((len(part), L + 1), mask_id, dtype=torch.long, device=dev)
        block[:, 0] = torch.from_numpy(seq[part]).to(dev)
        with drafter.reduced_output():
            log_pi, log_q = drafter._train_modes(ctx, block, valid)  # [b, K], [b, K, L, V']
        log_pi, log_q = log_pi.float(), log_q.float()              # trees rank in float32 whatever the dtype
        depths = [min(L, last - int(r) - 1) for r in part]         # a decode's depth cut
        for n in budgets:
            for m, sc in cells:
                if m == "dartree":  # grown root by root from each row's backbone states
                    h = drafter.drafted_block_states()
                    trees = [drafter.grow_tree_from(h[i], int(seq[r]), log_q[i, 0, :depths[i]], n,
                                                    draft_ids=drafter.d2t is not None)[0] if depths[i] else None
                             for i, r in enumerate(part.tolist())]
                else:
                    trees = build_trees(m, log_pi, log_q, n, depths, sc)
                for r, tree in zip(part.tolist(), trees):
                    yield n, (m, sc), r, tree


def roots_accepted(drafter, hidden_states, seq: np.ndarray, p: int, end: int, budgets, cells, chunk: int = 32,
                   trees: dict | None = None) -> dict:
    """{(budget, cell): {root: accepted}} for every root of one answer (kept up to ``end``);
    ``trees`` (a dict, filled in place): each root's tree by (budget, cell, root)."""
    acc = {(n, c): {} for n in budgets for c in cells}
    draft_ids = drafter.draft_index(torch.from_numpy(seq).to(hidden_states[0].device)).cpu().numpy()  # -1 outside
    for n, c, r, tree in root_trees(drafter, hidden_states, seq, p, end, budgets, cells, chunk):
        acc[(n, c)][r] = tree_accepts(tree, draft_ids[r + 1: end])
        if trees is not None:
            trees[(n, c, r)] = tree
    return acc


@torch.no_grad()
def heldout_greedy_tau_many(target_hf, drafters: dict, seqs, plens, budgets, cells: dict | None = None,
                            chunk: int = 32, progress: bool = False, sampling: dict | None = None) -> dict:
    """:func:`heldout_greedy_tau` for several drafters and budgets at once: one target forward per
    sequence serves every drafter (each fuses its own layers from the same hidden states) and one
    drafter forward per chunk of roots serves every budget. ``drafters``: {name: drafter};
    ``cells``: {name: cells} (default per drafter as in :func:`heldout_greedy_tau`). Returns
    {name: {budget: the dict heldout_greedy_tau returns}}, equal to calling it per drafter and budget.

    ``sampling`` (None: T = 0): ``{"temperature", "top_k", "top_p", "seeds"}`` for answers the target
    sampled, sequence i with generator seed ``seeds[i]`` (:func:`~mfd_theory.llm.training.distill.answer_seeds`).
    The lossless walk samples the target at each node and moves to the child holding that token;
    with the keyed draws of a seed, the tokens a decode emits are the answer that seed samples
    whatever the tree, so a round at root t accepts the longest prefix of the answer after t that
    is a path of its tree, as at T = 0: the same replay, on a sampled answer (each cut at
    :func:`sampled_prefix`). The tau is that of ``speculative_generate`` at this temperature with
    the answer's seed (the tests compare the two); over answers it is an unbiased measure of the
    tau a sampled decode has, since each answer is a draw of the target's own distribution."""
    budgets = [check_int("budgets", n, 1) for n in budgets]
    chunk = check_int("chunk", chunk, 1)
    if len(seqs) != len(plens):
        raise ValueError(f"plens: need one prompt length per sequence ({len(seqs)}), got {len(plens)}")
    if sampling is not None:
        if not float(sampling.get("temperature", 0)) > 0:
            raise ValueError(f"sampling: temperature must be > 0 (T = 0 is sampling=None), got {sampling}")
        if len(sampling.get("seeds", ())) != len(seqs):
            raise ValueError(f"sampling: need one seed per sequence ({len(seqs)}), got "
                             f"{len(sampling.get('seeds', ()))}")
    cells = {name: _check_cells(d, (cells or {}).get(name)) for name, d in drafters.items()}
    dev = next(target_hf.parameters()).device
    rounds = {(name, n, c): [] for name in drafters for n in budgets for c in cells[name]}
    anchors = {k: [] for k in rounds}
    per_seq = {k: [] for k in rounds}
    kept_total = answer_total = 0
    from tqdm.auto import tqdm

    for i, (seq, p) in enumerate(tqdm(list(zip(seqs, plens)), desc="held-out tau", unit="answer",
                                      disable=not progress, leave=False)):
        seq, p = np.asarray(seq, dtype=np.int64), int(p)
        if not 1 <= p < len(seq):
            raise ValueError(f"plens: a prompt of {p} tokens in a sequence of {len(seq)} leaves no answer")
        ids = torch.from_numpy(seq)[None].to(dev)
        # hidden states at every position (the drafter's context), logits only from the prompt's
        # last row on: the rows that check the answer (the LM head over the prompt is most of its cost)
        out = target_hf(input_ids=ids, output_hidden_states=True, logits_to_keep=int(len(seq) - p + 1))
        if sampling is None:
            end = greedy_prefix(seq, p, out.logits[0], first_row=p - 1)
        else:
            end = sampled_prefix(seq, p, out.logits[0], sampling, int(sampling["seeds"][i]), first_row=p - 1)
        answer_total += len(seq) - p
        kept_total += end - p
        if end - p < 1:
            continue
        for name, drafter in drafters.items():
            acc = roots_accepted(drafter, out.hidden_states, seq, p, end, budgets, cells[name], chunk)
            for n in budgets:
                for c in cells[name]:
                    walk = round_walk(acc[(n, c)], p, end - 1)
                    key = (name, n, c)
                    rounds[key] += walk
                    anchors[key] += list(acc[(n, c)].values())
                    per_seq[key].append(float(np.mean(walk) + 1) if walk else float("nan"))
    res: dict = {}
    for name in drafters:
        res[name] = {}
        for n in budgets:
            got = {"budget": n, "sequences": len(seqs), "answer_tokens": int(answer_total),
                   "kept_tokens": int(kept_total), "cells": []}
            for m, sc in cells[name]:
                key = (name, n, (m, sc))
                r = np.asarray(rounds[key], dtype=np.float64)
                got["cells"].append({
                    "method": m, "scorer": sc, "rounds": int(r.size), "tokens": int((r + 1).sum()),
                    "tau": float((r + 1).mean()) if r.size else float("nan"),
                    "per_sequence_tau": per_seq[key],
                    "anchor_accepted": float(np.mean(anchors[key])) if anchors[key] else float("nan")})
            res[name][n] = got
    return res


def heldout_greedy_tau(target_hf, drafter, seqs, plens, budget: int, cells=None, chunk: int = 32) -> dict:
    """T = 0 tau of ``drafter`` on the held-out sequences ``seqs`` (int arrays, each a prompt of
    ``plens[i]`` tokens and the target's greedy answer to it), per method and scorer in ``cells``
    (default: chain and DDTree, and MFD under both scorers for a drafter of K > 1 modes), trees of
    ``budget`` nodes.

    Each sequence is cut where its answer stops being the target's greedy continuation under this
    forward (batched generation may flip a near-tie; the cut is reported). A decode of the kept
    answer's length from the prompt is replayed round by round. Returns, per cell, ``tau`` (tokens
    per round over every round of every sequence, bonus included, as a decode reports it),
    ``rounds``, ``tokens``, ``per_sequence_tau``, and ``anchor_accepted`` (the mean accepted length
    over every root of every answer), plus ``kept_tokens`` / ``answer_tokens``."""
    budget = check_int("budget", budget, 1)
    got = heldout_greedy_tau_many(target_hf, {0: drafter}, seqs, plens, [budget],
                                  None if cells is None else {0: cells}, chunk)
    return got[0][budget]
