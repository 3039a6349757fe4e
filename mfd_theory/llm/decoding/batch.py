"""Many requests at once: batched tree verification with a shared verify budget.

A round drafts every active request's block in one drafter call, verifies every tree in one
target forward (``batch_target.py``), then walks, emits and records each request with the
one-request pieces of ``round.py``; requests join and leave as others finish. The cache layout
and the budget policies: docs/benchmarks.md ("Many requests at once").
"""

from __future__ import annotations

import numpy as np
import torch

from mfd_theory.allocation import allocate_global, allocate_proportional
from mfd_theory.trees import greedy_walks
from mfd_theory.validation import check_int

from mfd_theory.llm.decoding.batch_target import BatchTarget
from mfd_theory.llm.decoding.metrics import round_metrics
from mfd_theory.llm.decoding.records import BatchDecodeResult, BatchRound, clock
from mfd_theory.llm.decoding.round import Request, as_target, batch_prompts, check_decoding, check_seed, eos_set
from mfd_theory.llm.decoding.sampling import Sampler
from mfd_theory.llm.decoding.trees import build_trees, first_nodes

__all__ = ["POLICIES", "ROUND_POLICIES", "BatchTarget", "BatchRound", "BatchDecodeResult", "speculative_generate_batch"]

# per_request: every tree ``budget`` nodes; global: one total per round spent on the global top
# prefixes of all requests (mfd_theory.allocation.allocate_global); proportional: the same total
# on the nodes of largest gain in log expected tokens per round (allocate_proportional); off:
# batched AR; auto: each round the policy and size a BatchPlan predicts fastest for the batch's size
POLICIES = ("per_request", "global", "proportional", "off", "auto")
ROUND_POLICIES = ("per_request", "global", "proportional", "off")  # what one round runs (a plan's choices)
SHARED = ("global", "proportional")  # the policies that share one total over the batch


class _Drafting:
    """The drafter's side of a batch: its batch context (one row per active request), each row's
    committed context features not drafted from yet, and the hidden states of AR rounds ("auto"
    chose off) whose rows are fused when drafting resumes."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.feats: list = []  # per row: fused context rows [1, t, H] for the next draft, or None
        self.pending: list[list] = []  # per row: (AR round, its batch row) of rows not fused yet
        self.off_rounds: list = []  # hidden-state tuples of AR rounds, until every row fused its rows

    def add(self, hidden_states, ids: torch.Tensor) -> None:
        self.ctx.add(hidden_states, ids.tolist())
        self.feats.append(None)
        self.pending.append([])

    def drop(self, keep: list[int]) -> None:
        self.ctx.drop(keep)
        self.feats, self.pending = [self.feats[b] for b in keep], [self.pending[b] for b in keep]

    def draft(self, roots: list[int]):
        """(log_pi [B, K], log_q [B, K, L, V]) of every row, after its pending rows."""
        for b, pend in enumerate(self.pending):  # rows of AR rounds, after any older fused rows
            if pend:  # (AR round, its packed row): hidden states [1, R, H] per layer
                late = self.ctx.fuse(tuple(torch.cat([self.off_rounds[k][i][:, r: r + 1] for k, r in pend], dim=1)
                                           for i in range(len(self.off_rounds[0]))))
                self.feats[b] = late if self.feats[b] is None else torch.cat([self.feats[b], late], dim=1)
                self.pending[b] = []
        self.off_rounds.clear()
        out = self.ctx.draft(self.feats, roots)
        self.feats = [None] * len(self.feats)
        return out

    def feed(self, going: list[int], paths: list, hidden, drafted: bool, tokens: list, start: list[int]) -> None:
        """After a commit, the rows ``going`` (requests not done) keep their root and accepted rows
        ``paths[b]`` (request b's verify rows from packed row ``start[b]``): fused now in one call
        after a drafted round, noted after an AR round."""
        if going and drafted:
            keeps = [[0] + [i + 1 for i in paths[b]] for b in going]
            dev = hidden[0].device
            r_idx = torch.tensor([start[b] + i for b, k in zip(going, keeps) for i in k], device=dev)
            fused = self.ctx.fuse(tuple(h[:, r_idx] for h in hidden))[0]  # [rows, H]
            start = 0
            for b, k in zip(going, keeps):
                self.feats[b] = fused[start: start + len(k)][None]
                start += len(k)
        elif going:  # kept once; each request notes where its root row is
            self.off_rounds.append(hidden)
            for b in going:
                self.pending[b].append((len(self.off_rounds) - 1, start[b]))
        for b in going:
            self.ctx.observe(b, tokens[b])


def _check_batch(target, drafter, prompts, method, budget, policy, plan, temperature, top_p, max_new_tokens,
                 total_budget, max_batch, node_cap, scorer) -> str | None:
    if method == "dartree":
        raise ValueError("method: 'dartree' grows each tree depth by depth with the drafter; batched decoding "
                         "supports 'ar', 'chain', 'ddtree' and 'mfd'")
    if policy not in POLICIES:
        raise ValueError(f"policy: must be one of {POLICIES}, got {policy!r}")
    if policy == "auto" and (plan is None or not callable(getattr(plan, "choose", None))):
        raise ValueError("plan: policy 'auto' needs a plan with choose(batch_size) -> (policy, nodes), "
                         "e.g. mfd_theory.speedup.BatchPlan")
    scorer = check_decoding(target, drafter if method != "ar" else None, method, budget, temperature, top_p,
                            max_new_tokens, scorer)
    for name, value in (("total_budget", total_budget), ("max_batch", max_batch), ("node_cap", node_cap)):
        if value is not None:
            check_int(name, value, 1, integral_floats=True)
    for name, value in (("total_budget", total_budget), ("node_cap", node_cap)):
        if value is not None and policy not in (*SHARED, "auto"):
            raise ValueError(f"{name}: only the global and proportional policies share a budget (policy {policy!r} "
                             "would ignore it)")
    if total_budget is not None and policy == "auto":
        raise ValueError("total_budget: under policy 'auto' the plan names each round's total (it would be ignored)")
    return scorer


def _requests(target, prompts, max_new_tokens, method, temperature, top_p, seed, eos, scorer=None) -> list[Request]:
    """One request per prompt; request i samples with its own generator seeded ``seed + i``."""
    reqs = []
    for i, p in enumerate(prompts):
        try:
            reqs.append(Request.start(target, p, max_new_tokens, method, Sampler(temperature, top_p, seed + i), eos, i,
                                      scorer))
        except ValueError as exc:
            raise ValueError(f"prompts[{i}]: {exc}") from exc
    return reqs


def _finish(r: Request, out: BatchDecodeResult, now: float, t0: float) -> None:
    r.done = True
    r.result.t_total = now - r.t_start
    out.latency[r.index] = now - t0


def _join(bt: BatchTarget, draft: _Drafting | None, waiting: list, room: int, out, t0: float) -> list[Request]:
    """Prefill up to ``room`` waiting requests, each alone and then as a new batch row; a request
    done at its first token leaves again at once."""
    dev = bt.target.device
    joined = []
    while waiting and len(joined) < room:
        r = waiting.pop(0)
        r.t_start = clock(dev)
        logits0, hidden = bt.add(r.ids, hidden=draft is not None)
        if draft is not None:
            draft.add(hidden, r.ids)
        r.root = r.sampler.draw(logits0)
        r.emit([r.root])
        r.result.t_prefill = clock(dev) - r.t_start
        if r.done:
            _finish(r, out, clock(dev), t0)
            bt.drop(list(range(bt.batch_size - 1)))
            if draft is not None:
                draft.drop(list(range(bt.batch_size)))
        else:
            joined.append(r)
    return joined


def _round_trees(method, log_pi, log_q, depths: list[int], nodes: int, n_total: int | None, node_cap,
                 policy: str = "global", scorer: str | None = None) -> list:
    """This round's trees: each at ``nodes`` nodes, or (a shared policy) each built at ``cap`` nodes
    and all cut to the ``n_total`` nodes the policy ranks first over the batch, ``cap`` twice the
    even share by default. A best-mode tree's scores rank across requests as a mixture tree's do
    (each is a drafter probability of its prefix)."""
    if n_total is None:
        return build_trees(method, log_pi, log_q, int(nodes), depths, scorer)
    cap = int(node_cap) if node_cap is not None else 2 * -(-n_total // len(depths))
    trees = build_trees(method, log_pi, log_q, min(n_total, cap), depths, scorer)
    share = allocate_proportional if policy == "proportional" else allocate_global
    counts = share([t.log_score if t is not None else np.empty(0) for t in trees], n_total, cap=cap)
    return [None if t is None or c == 0 else first_nodes(t, int(c)) for t, c in zip(trees, counts)]


def _planned(plan, bsz: int) -> tuple[str, int]:
    """``plan.choose(bsz)``, checked: a policy of ``ROUND_POLICIES`` and its nodes (an integer >= 1,
    0 for "off")."""
    out = plan.choose(bsz)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise ValueError(f"plan: choose({bsz}) must return (policy, nodes), got {out!r}")
    cur, nodes = out
    if cur not in ROUND_POLICIES:
        raise ValueError(f"plan: choose({bsz}) returned policy {cur!r}, not one of {ROUND_POLICIES}")
    try:
        nodes = check_int("nodes", nodes, 0 if cur == "off" else 1, integral_floats=True)
    except ValueError:
        raise ValueError(f"plan: choose({bsz}) returned nodes {nodes!r} for policy {cur!r} (an integer >= "
                         f"{0 if cur == 'off' else 1})") from None
    return cur, nodes


def _round_policy(policy, plan, bsz: int, budget, total_budget) -> tuple[str, int, int | None]:
    """(this round's policy, nodes per tree, total nodes of a global round or None)."""
    cur, nodes = _planned(plan, bsz) if policy == "auto" else (policy, budget)
    if cur not in SHARED:
        return cur, nodes, None
    # a plan names the total; otherwise total_budget, or budget per request
    return cur, nodes, (int(nodes) if policy == "auto" else
                        int(total_budget) if total_budget is not None else int(budget) * bsz)


@torch.no_grad()
def speculative_generate_batch(target, drafter, prompts, max_new_tokens: int, method: str, budget: int = 64,
                               policy: str = "per_request", temperature: float = 0.0, top_p: float = 1.0,
                               seed: int = 0, *, total_budget: int | None = None, max_batch: int | None = None,
                               eos_token_id=None, metrics: bool = True, plan=None,
                               keep_trees: bool = False, node_cap: int | None = None,
                               scorer: str | None = None) -> BatchDecodeResult:
    """Decode every prompt of ``prompts`` (a list, any form ``speculative_generate`` takes, any
    lengths; or a tokenizer's padded batch output) in one batch; lossless for every request and
    policy. ``method``: "ar", "chain", "ddtree" or "mfd". ``policy`` (``POLICIES``):
    "per_request" (each tree ``budget`` nodes), "global" (``total_budget`` nodes per round,
    default ``budget`` x active requests, on the global top prefixes; each tree at most
    ``node_cap``), "proportional" (the same total on the nodes of largest gain in log expected
    tokens per round), "off" (batched AR), "auto" (``plan.choose(B)`` each round). ``max_batch``:
    at most this many requests at once; the others join as requests finish. Request i samples with
    a generator seeded ``seed + i``. Greedy output equals each prompt's alone (and HF ``generate``).
    ``scorer``: "mfd"'s ranking, as :func:`~mfd_theory.llm.decoding.generate.speculative_generate` takes it."""
    target = as_target(target)
    prompts = batch_prompts(prompts)
    scorer = _check_batch(target, drafter, prompts, method, budget, policy, plan, temperature, top_p, max_new_tokens,
                          total_budget, max_batch, node_cap, scorer)
    seed = check_seed(seed, len(prompts))
    reqs = _requests(target, prompts, max_new_tokens, method, temperature, top_p, seed, eos_set(target, eos_token_id),
                     scorer)
    dev = target.device
    bt = BatchTarget(target)
    speculate = method != "ar" and policy != "off"
    draft = _Drafting(drafter.batch_context()) if speculate else None  # "off" never drafts
    out = BatchDecodeResult(results=[r.result for r in reqs], method=method, policy=policy,
                            latency=[float("nan")] * len(reqs), scorer=scorer)
    waiting, active = list(reqs), []
    limit = int(max_batch) if max_batch is not None else len(reqs)
    t0 = clock(dev)
    while waiting or active:
        ta = clock(dev)
        active += _join(bt, draft, waiting, limit - len(active), out, t0)
        if not active:
            continue
        bsz = len(active)
        cur_policy, nodes, n_total = _round_policy(policy, plan, bsz, budget, total_budget)
        spec = speculate and cur_policy != "off"
        tb = clock(dev)
        if spec:
            log_pi, log_q = draft.draft([r.root for r in active])  # [B, K], [B, K, L, V]
        tc = clock(dev)
        trees = [None] * bsz
        if spec:
            depths = [r.depth_left(bt.lengths[b], target.max_positions, log_q.shape[2]) for b, r in enumerate(active)]
            trees = _round_trees(method, log_pi, log_q, depths, nodes, n_total, node_cap, cur_policy, scorer)
        td = clock(dev)
        ver = bt.verify([r.root for r in active], trees, hidden=draft is not None)  # logits [R, V], packed
        te = clock(dev)
        if temperature == 0:  # every tree's walk in one kernel call over the rows' argmax (one transfer)
            paths = greedy_walks(trees, torch.argmax(ver.logits, dim=-1).cpu().numpy(), ver.start[:-1])
            walks = [(path, [int(trees[b].token[i]) for i in path] + [bonus]) for b, (path, bonus) in enumerate(paths)]
        else:  # each request draws with its own generator
            walks = [r.sampler.walk(trees[b], ver.rows(b)) for b, r in enumerate(active)]
        tf = clock(dev)
        mets = [round_metrics(t, ver.rows(b), temperature, top_p, metrics) for b, t in enumerate(trees)]
        tg = clock(dev)
        counts = [r.emit(emitted) for r, (_, emitted) in zip(active, walks)]
        bt.commit([path for path, _ in walks])
        fed = [[r.root] + emitted[:-1] for r, (_, emitted) in zip(active, walks)]  # the tokens now committed
        for r, (_, emitted) in zip(active, walks):
            r.root = emitted[-1]
        th = clock(dev)
        if draft is not None:  # the committed rows' context features, fused by the drafter for its next
            # round: drafter work, timed as drafting (the one-request loop fuses them when it drafts)
            draft.feed([b for b, r in enumerate(active) if not r.done], [path for path, _ in walks], ver.hidden, spec,
                       fed, ver.start)
        ti = clock(dev)
        times = dict(t_draft=(tc - tb) + (ti - th), t_tree=td - tc, t_verify=te - td, t_walk=tf - te, t_commit=th - tg)
        steps = [r.record(m, path, c, times, t, keep_trees) for r, (path, _), m, c, t in
                 zip(active, walks, mets, counts, trees)]
        out.rounds.append(BatchRound(
            batch_size=bsz, policy=cur_policy if spec else "off", nodes=[s.tree_size for s in steps],
            accepted=[s.accepted for s in steps], emitted=counts, predicted=[m.predicted for m in mets],
            t_prefill=tb - ta, **times))
        for r in active:
            if r.done:
                _finish(r, out, ti, t0)
        keep_rows = [b for b, r in enumerate(active) if not r.done]
        if len(keep_rows) < bsz:
            bt.drop(keep_rows)
            if draft is not None:
                draft.drop(keep_rows)
            active = [active[b] for b in keep_rows]
    out.t_total = clock(dev) - t0
    return out
