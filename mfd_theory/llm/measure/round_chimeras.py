"""Dead nodes and chimeras in drafters' trees over every round of a decode (the paper's C3, on a real target).

The rounds are those of the replay in :mod:`~mfd_theory.llm.measure.heldout`: a T = 0 decode of the
target's own answer (or a sampled decode of its sampled answer) goes from root to root by what each
round's tree accepts, so the roots, and the tree at each, are known from one target forward and
the drafter. At a round's root, with one target cache moved along the answer to it:

- every node s of the drafter's N-node tree gets its exact log P_T(s) under the target at
  ``temperature`` (1 by default: the target's own distribution), from tree forwards
  (:class:`~mfd_theory.llm.measure.ceiling.TargetScorer`);
- the oracle tree of the same N and the same depth cut is built from the same context
  (:func:`~mfd_theory.llm.measure.ceiling.oracle_tree_of`: the target's own N most probable
  prefixes, the paths the target prefers);
- a node is *dead* at eps when P_T(s) <= eps; a *splice* when each of its tokens is the token at
  the same depth of some node of the oracle tree while the node is not one of them (no single path
  the target prefers holds it, so it joins the head of one preferred path to tokens of another at a
  fork); a *chimera* at eps when it is both. A dead node that is no splice is improbable but holds
  some token the target's top-N prefixes never have at that depth.

Shares are per round (a count over the tree's nodes) and then averaged over rounds; the oracle
tree's dead share at the same roots is the floor a threshold counts whatever the drafter (no tree of
N nodes within the same depth holds more nodes above eps than the N most probable prefixes do).
The synthetic counterpart, with whole futures for the oracle's paths, is
:func:`mfd_theory.coverage.spliced_chimera_mask`. What it measures and on what: docs/real-targets.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from mfd_theory.llm.measure.ceiling import TargetScorer, oracle_tree_of
from mfd_theory.llm.measure.heldout import default_cells, greedy_prefix, roots_accepted, round_walk, sampled_prefix
from mfd_theory.llm.models.target import TargetModel
from mfd_theory.trees import DraftTree
from mfd_theory.validation import check_int, check_real

__all__ = ["EPS", "answer_round_chimeras", "drafter_fingerprint", "round_chimeras_many", "splices_of",
           "summarise_rounds"]

#: the thresholds a node is dead under (P_T(s) <= eps): the paper's 1e-3 and a stricter one
EPS = (1e-3, 1e-4)


def splices_of(tree: DraftTree, reference: DraftTree | None) -> np.ndarray:
    """bool [N]: the nodes of ``tree`` each of whose tokens is the token at the same depth of some
    node of ``reference``, and which are not nodes of ``reference`` themselves (an empty or None
    reference makes no splice)."""
    ref = set(reference.paths()) if reference is not None and len(reference) else set()
    allowed: dict[int, set[int]] = {}
    for s in ref:
        allowed.setdefault(len(s), set()).add(s[-1])
    out = np.zeros(len(tree), dtype=bool)
    for n, s in enumerate(tree.paths()):
        out[n] = s not in ref and all(tok in allowed.get(d + 1, ()) for d, tok in enumerate(s))
    return out


def _in_target_ids(tree: DraftTree | None, vocab: np.ndarray | None) -> DraftTree | None:
    """A tree drafted over a reduced draft vocabulary, with its tokens as target ids."""
    if tree is None or vocab is None or not len(tree):
        return tree
    return DraftTree(tree.parent, vocab[tree.token], tree.depth, tree.log_score, validate=False)


@torch.no_grad()
def _move_to(target: TargetModel, seq: np.ndarray, held: int, r: int) -> None:
    """Move a cache holding ``seq[:held]`` on to ``seq[:r]`` (r > held): one verify of the chain
    seq[held + 1 : r] from the root seq[held], all of it committed."""
    chain = [tuple(int(t) for t in seq[held + 1: held + 1 + k]) for k in range(1, r - held)]
    tree = DraftTree.from_paths(chain) if chain else None
    target.verify(int(seq[held]), tree, hidden=False)
    target.commit(list(range(len(chain))))


def _round_record(root: int, tree: DraftTree, lp: np.ndarray, oracle: DraftTree | None, oracle_lp, eps) -> dict:
    log_eps = [math.log(e) for e in eps]
    rec = {"root": int(root), "nodes": len(tree), "depth": int(tree.max_depth),
           "covered": float(np.exp(lp).sum()), "dead": [int((lp <= le).sum()) for le in log_eps]}
    if oracle is not None:
        sp = splices_of(tree, oracle)
        rec["splices"] = int(sp.sum())
        rec["chimeras"] = [int((sp & (lp <= le)).sum()) for le in log_eps]
        rec["oracle_nodes"] = len(oracle)
        rec["oracle_covered"] = float(np.exp(oracle_lp).sum())
        rec["oracle_dead"] = [int((oracle_lp <= le).sum()) for le in log_eps]
    return rec


@torch.no_grad()
def answer_round_chimeras(target: TargetModel, drafters: dict, hidden_states, seq, p: int, end: int, budget: int,
                          cells: dict, *, stride: int = 1, oracle: bool = True, temperature: float = 1.0,
                          eps=EPS, chunk: int = 32, cost: dict | None = None, hold: bool = True) -> dict:
    """{name: {cell: [round record]}} for one answer ``seq`` (a prompt of ``p`` tokens, kept up to
    ``end``) and every drafter in ``drafters`` ({name: drafter}, ``cells`` {name: [(method, scorer)]}),
    trees of ``budget`` nodes: the rounds of each cell's replayed decode (every ``stride``-th of
    them), each with its tree's node count and depth, its covered mass ``covered`` (the sum of
    P_T(s)), and per eps the dead count, and with ``oracle`` the splices, the chimeras per eps and
    the oracle tree's nodes, covered mass and dead counts. ``hidden_states``: the target's over
    ``seq`` (one forward, as the replay reads them). One target cache is moved along the answer; at
    each root that some cell's rounds visit, one scorer serves the oracle and every tree. ``cost``
    (a dict, updated in place): the roots visited, and the target's verify forwards and rows there,
    in all and up to the end of each oracle search (the root's own row included): the rows the
    forwards computed. ``hold``: each root's forwards keep their rows in the target's cache and later
    ones compute only their new nodes (:class:`~mfd_theory.llm.measure.ceiling.TargetScorer`'s
    ``hold``; the same log-probabilities within float round-off), False: every forward runs its
    nodes' whole prefix closure."""
    stride = check_int("stride", stride, 1)
    seq = np.asarray(seq, dtype=np.int64)
    trees: dict = {}
    roots: dict = {}
    for name, d in drafters.items():
        mine: dict = {}
        acc = {c: a for (_, c), a in roots_accepted(d, hidden_states, seq, p, end, [budget], cells[name], chunk,
                                                     trees=mine).items()}
        trees.update({(name, c, r): t for (_, c, r), t in mine.items()})
        vocab = None if getattr(d, "draft_vocab", None) is None else d.draft_vocab.cpu().numpy()
        for c in cells[name]:
            t, visit = p, []
            for a in round_walk(acc[c], p, end - 1):
                visit.append(t)
                t += a + 1
            roots[(name, c)] = set(visit[::stride])
            for r in roots[(name, c)]:
                trees[(name, c, r)] = _in_target_ids(trees[(name, c, r)], vocab)
    out = {name: {c: [] for c in cells[name]} for name in drafters}
    need = sorted(set().union(*roots.values())) if roots else []
    if not need:
        return out
    target.prefill(torch.from_numpy(seq[:p]), hidden=False)  # the first round's root is seq[p]
    held = p
    for r in need:
        if r > held:
            _move_to(target, seq, held, r)
            held = r
        trees_here = [(name, c, trees[(name, c, r)]) for (name, c), rs in roots.items() if r in rs]
        # the depth cut of the round's trees (root_trees'): the oracle is held to the same
        depth = max(min(int(drafters[name].block_size) - 1, end - r - 2) for name, _, _ in trees_here)
        if depth < 1:
            continue
        # hold: the search's forwards run over their new nodes only, on top of the rows they hold
        scorer = TargetScorer(target, seq[: r + 1], depth, temperature, prefilled=True, hold=hold)
        try:
            orc = orc_lp = None
            if oracle:
                orc = oracle_tree_of(scorer, budget)
                orc_lp = scorer.log_probs(orc)
            f_oracle, r_oracle = scorer.forwards, scorer.tokens
            # the rows every tree's nodes need, in shared forwards (the cells' trees overlap, and the
            # oracle's rows are held): each tree is then scored from held rows
            scorer.prefetch(sorted({s[:-1] for _, _, t in trees_here if t is not None for s in t.paths()}))
            for name, c, tree in trees_here:
                if tree is None or not len(tree):
                    continue
                out[name][c].append(_round_record(r, tree, scorer.log_probs(tree), orc, orc_lp, eps))
        finally:
            scorer.release()  # the cache holds seq[:r] again, to be moved on
        if cost is not None:
            for key, v in (("roots", 1), ("forwards", scorer.forwards), ("rows", scorer.tokens),
                           ("oracle_forwards", f_oracle), ("oracle_rows", r_oracle)):
                cost[key] = cost.get(key, 0) + v
    return out


def _share(recs: list[dict], key: str, nodes: str, i: int | None) -> float | None:
    """The mean over ``recs`` of each round's count ``key`` (entry ``i`` of it) over its ``nodes``."""
    if not recs:
        return None
    return float(np.mean([(r[key] if i is None else r[key][i]) / r[nodes] for r in recs]))


def summarise_rounds(per_answer: list[list[dict]], eps=EPS) -> dict:
    """A cell's shares from its round records (``per_answer``: one list of round records per answer):
    each share is a round's count over its tree's nodes (the oracle's over the oracle's), averaged
    over every round of every answer (``dead_share`` etc., one entry per eps where the count is per
    eps) and per answer (``per_answer``, for comparisons paired over answers); the mean node count
    and covered mass; the oracle's entries None where the records hold no oracle."""
    recs = [r for a in per_answer for r in a]
    answers = [a for a in per_answer if a]
    has_oracle = bool(recs) and "oracle_nodes" in recs[0]
    keys = {"dead_share": ("dead", "nodes", True)}
    if has_oracle:
        keys |= {"splice_share": ("splices", "nodes", False), "chimera_share": ("chimeras", "nodes", True),
                 "oracle_dead_share": ("oracle_dead", "oracle_nodes", True)}

    def shares(rs, key, nodes, by_eps):
        return [_share(rs, key, nodes, i) for i in range(len(eps))] if by_eps else _share(rs, key, nodes, None)

    out = {"eps": list(eps), "rounds": len(recs), "answers": len(answers),
           "nodes": float(np.mean([r["nodes"] for r in recs])) if recs else None,
           "covered": float(np.mean([r["covered"] for r in recs])) if recs else None,
           "oracle_covered": float(np.mean([r["oracle_covered"] for r in recs])) if has_oracle else None}
    for name in ("dead_share", "splice_share", "chimera_share", "oracle_dead_share"):
        out[name] = shares(recs, *keys[name]) if name in keys else None
    out["per_answer"] = {name: [shares(a, *k) for a in answers] for name, k in keys.items()}
    return out


#: the version of a stored answer's rounds: raised when what a round record holds or how it is
#: counted changes, so that a store written before is not read as if it were now
STORE_VERSION = 1


@torch.no_grad()
def drafter_fingerprint(drafter) -> str:
    """sha256 (16 hex) of a drafter's parameters and buffers, names, shapes, dtypes and bytes: what
    its trees depend on, whatever directory it was loaded from."""
    h = hashlib.sha256()
    for name, t in sorted(list(drafter.state_dict().items())):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def _answer_key(parts: list) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _read_stored(path: Path, names, cells) -> dict | None:
    """A stored answer's rounds, cost and seconds, or None when absent or unreadable (then redone)."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
        got = {name: {tuple(c): d["rounds"][name][f"{c[0]}/{c[1]}"] for c in cells[name]} for name in names}
        return {"rounds": got, "cost": d["cost"], "seconds": float(d["seconds"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


@torch.no_grad()
def round_chimeras_many(target_hf, drafters: dict, seqs, plens, budget: int, cells: dict | None = None, *,
                        stride: int = 1, oracle: bool = True, temperature: float = 1.0, sampling: dict | None = None,
                        eps=EPS, chunk: int = 32, progress: bool = False, store: str | Path | None = None,
                        store_key=None) -> dict:
    """:func:`answer_round_chimeras` over the answers ``seqs`` (prompts of ``plens`` tokens), each cut
    where it stops being the target's greedy continuation (or, with ``sampling`` as in
    :func:`~mfd_theory.llm.measure.heldout.heldout_greedy_tau_many`, its keyed draw), summarised
    per drafter and cell (:func:`summarise_rounds`), with the rule, the forwards run and the time.
    ``cells`` (default: each drafter's tau cells, as :func:`~mfd_theory.llm.measure.heldout.default_cells`).

    ``store``: a folder where each answer's rounds, cost and seconds are written (atomically) as it
    ends, one JSON file per answer under a key of everything they depend on (the answer's tokens and
    prompt length, its draw, each drafter's :func:`drafter_fingerprint` and cells, budget, stride,
    temperature, eps, oracle, :data:`STORE_VERSION` and ``store_key``: the caller's name for the target
    and numerics); a rerun reads the answers found there instead of measuring them again, so a run
    stopped part way resumes. ``seconds`` and ``cost`` then count every answer's own work, and
    ``resumed`` how many answers were read back."""
    budget = check_int("budget", budget, 1)
    stride = check_int("stride", stride, 1)
    check_real("temperature", temperature, 0, low_open=True)
    if len(seqs) != len(plens):
        raise ValueError(f"plens: need one prompt length per sequence ({len(seqs)}), got {len(plens)}")
    if not eps or any(not 0 < float(e) < 1 for e in eps):
        raise ValueError(f"eps: each threshold must lie in (0, 1), got {list(eps)}")
    cells = {name: [tuple(c) for c in (cells or {}).get(name, default_cells(d))] for name, d in drafters.items()}
    target = TargetModel(target_hf)
    per = {name: {c: [] for c in cells[name]} for name in drafters}
    from tqdm.auto import tqdm

    from mfd_theory.results import atomic_write_text

    if store is not None:
        store = Path(store)
        common = [STORE_VERSION, store_key, int(budget), stride, float(temperature), [float(e) for e in eps],
                  bool(oracle), None if sampling is None else float(sampling["temperature"]),
                  {name: [drafter_fingerprint(d), [list(c) for c in cells[name]]] for name, d in drafters.items()}]
    cost: dict = {}
    secs, resumed, t_run = 0.0, 0, time.perf_counter()

    def add(got: dict, mine: dict, dt: float) -> None:  # one answer's rounds, cost and seconds, read or measured
        nonlocal secs
        secs += dt
        for k, v in mine.items():
            cost[k] = cost.get(k, 0) + v
        for name in drafters:
            for c in cells[name]:
                per[name][c].append(got[name][c])

    bar = tqdm(list(zip(seqs, plens)), desc="round chimeras", unit="answer", disable=not progress, leave=False)
    for i, (seq, p) in enumerate(bar):
        seq, p = np.asarray(seq, dtype=np.int64), int(p)
        path = None
        if store is not None:
            draw = None if sampling is None else int(sampling["seeds"][i])
            key = _answer_key(common + [hashlib.sha256(seq.tobytes()).hexdigest(), p, draw])
            path = store / f"answer-{i:05d}-{key}.json"
            got = _read_stored(path, drafters, cells) if path.is_file() else None
            if got is not None:
                resumed += 1
                add(got["rounds"], got["cost"], got["seconds"])
                continue
        t0, mine = time.perf_counter(), {}
        out = target_hf(input_ids=torch.from_numpy(seq)[None].to(target.device), output_hidden_states=True,
                        logits_to_keep=int(len(seq) - p + 1))  # logits only where they check the answer
        end = (greedy_prefix(seq, p, out.logits[0], first_row=p - 1) if sampling is None
               else sampled_prefix(seq, p, out.logits[0], sampling, int(sampling["seeds"][i]), first_row=p - 1))
        if end - p < 1:
            got = {name: {c: [] for c in cells[name]} for name in drafters}
        else:
            got = answer_round_chimeras(target, drafters, out.hidden_states, seq, p, end, budget, cells, stride=stride,
                                        oracle=oracle, temperature=temperature, eps=eps, chunk=chunk, cost=mine)
        dt = time.perf_counter() - t0
        add(got, mine, dt)
        if path is not None:
            rounds = {name: {f"{c[0]}/{c[1]}": got[name][c] for c in cells[name]} for name in drafters}
            atomic_write_text(path, json.dumps({"rounds": rounds, "cost": mine, "seconds": round(dt, 3)}))
        if cost.get("roots"):  # the unit of work: a root's oracle search and trees
            bar.set_postfix(roots=cost["roots"], s_per_root=f"{secs / cost['roots']:.1f}")
    res = {"budget": budget, "stride": stride, "p_temperature": float(temperature), "answers": len(seqs),
           "seconds": round(secs, 1), "wall_seconds": round(time.perf_counter() - t_run, 1), "resumed": resumed,
           "cost": cost,
           "rule": ("every stride-th round of each answer's replayed decode; per round, the tree's nodes with "
                    "the target's exact P(s) (at temperature p_temperature) <= eps (dead), those whose every token is "
                    "the token at the same depth of some node of the oracle tree (the target's own top-N prefixes, same "
                    "depth cut) but which are no node of it (splices), and both (chimeras); shares per round, averaged "
                    "over rounds; the oracle tree's own dead share at the same roots is the floor any N-node tree counts"),
           "drafters": {}}
    for name in drafters:
        res["drafters"][name] = [{"method": m, "scorer": sc} | summarise_rounds(per[name][(m, sc)], eps)
                                 for (m, sc) in cells[name]]
    return res
