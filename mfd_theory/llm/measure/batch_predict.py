"""What batched decoding costs and accepts, measured on calibration prompts before any evaluation.

:func:`measure_batch_profile` times the batched round per (batch size, policy, nodes) into a
:class:`mfd_theory.speedup.BatchProfile`; :func:`replayed_acceptance` replays the prompts' greedy
traces under every policy (:mod:`mfd_theory.batch_sim`): each cell's accepted tokens per request
per round over the whole decode, the dynamics of its own rounds included; the older
:func:`predict_batch_acceptance` reads the global policy's gain off one large-tree decode per
round (biased: the rounds it reads are not the ones the policy decodes). The caller keeps the
prompts disjoint from the evaluated ones. Design: docs/benchmarks.md.
"""

from __future__ import annotations

import numpy as np
import torch

from mfd_theory.allocation import allocate_global, split_evenly
from mfd_theory.speedup import BatchCell, BatchPlan, BatchProfile

from mfd_theory.llm.decoding.batch import speculative_generate_batch
from mfd_theory.coverage import prefix_log_probs
from mfd_theory.llm.decoding.generate import speculative_generate

__all__ = ["measure_batch_profile", "predict_batch_acceptance", "replayed_acceptance", "steady_rounds",
           "make_batch_plan"]

SHARED = ("global", "proportional")  # nodes of a shared cell: the round's total


def steady_rounds(res, batch_size: int) -> list:
    """The rounds of a batched decode that held all ``batch_size`` requests (the steady state)."""
    return [r for r in res.rounds if r.batch_size == batch_size]


def _cells(batch_sizes, budgets, policies):
    for b in batch_sizes:
        yield b, "off", 0
        for n in budgets:
            if "per_request" in policies:
                yield b, "per_request", int(n)
            for pol in SHARED:
                if pol in policies:
                    yield b, pol, int(n) * b


@torch.no_grad()
def measure_batch_profile(target, drafter, method: str, prompts: list, batch_sizes, budgets, max_new_tokens: int,
                          *, policies=("per_request", "global"), repeats: int = 1, seed: int = 0,
                          name: str = "batch_profile", device: str = "", model: str = "",
                          progress: bool = False, scorer: str | None = None) -> BatchProfile:
    """Steady-state round time of every (B, policy, nodes) cell: the mean round of each of
    ``repeats`` batched decodes of B prompts (``prompts`` cycled, temperature 0), median over the
    decodes. The repeats are interleaved over the cells of one batch size (every cell once, then
    every cell again), so a slow spell of a shared machine hits one decode of many cells rather
    than every decode of one, and the median leaves it out; the cells of one batch size, which
    the plan compares, are measured in the same stretch of time. ``scorer``: method "mfd"'s."""
    from tqdm.auto import tqdm as bar

    if not prompts:
        raise ValueError("prompts: the batch profile needs at least one prompt")
    todo = list(_cells(batch_sizes, budgets, policies))
    speculative_generate_batch(target, drafter, [prompts[0]], 4, method, budget=int(min(budgets)),
                               scorer=scorer)  # warm-up
    got: dict = {c: ([], [], []) for c in todo}  # per cell: decode means, rows per request, the three parts
    order = [(rep, c) for b in batch_sizes for rep in range(repeats) for c in todo if c[0] == b]
    for rep, (b, policy, nodes) in bar(order, desc=f"batch profile {method}", disable=not progress):
        batch = [prompts[i % len(prompts)] for i in range(b)]
        res = speculative_generate_batch(
            target, drafter, batch, max_new_tokens, method if policy != "off" else "ar",
            budget=nodes if policy == "per_request" else 1, policy="per_request" if policy == "off" else policy,
            total_budget=nodes if policy in SHARED else None, seed=seed, metrics=False, eos_token_id=[],
            scorer=scorer if policy != "off" else None)
        steady = steady_rounds(res, b)
        if steady:  # one mean per decode; the cell takes the median decode
            times, rows, parts = got[(b, policy, nodes)]
            times.append(np.mean([1000.0 * r.t_step for r in steady]))
            rows += [sum(r.nodes) / len(r.nodes) + 1 for r in steady]  # packed: the real rows per request
            parts.append(np.mean([(1000.0 * r.t_draft, 1000.0 * r.t_verify, 1000.0 * r.t_overhead)
                                  for r in steady], axis=0))
    cells = []
    for (b, policy, nodes), (times, rows, parts) in got.items():
        if times:
            mid = int(np.argsort(times)[(len(times) - 1) // 2])  # the median decode (lower middle)
            d, v, o = parts[mid]
            cells.append(BatchCell(b, policy, nodes, float(times[mid]), float(np.mean(rows)), len(rows),
                                   float(d), float(v), float(o)))
    return BatchProfile(cells, name=name, device=device, model=model, method=method,
                        K=int(getattr(drafter, "num_modes", 1)), note="measured by measure_batch_profile")


@torch.no_grad()
def predict_batch_acceptance(target, drafter, method: str, prompts: list, batch_sizes, budgets, max_new_tokens: int,
                             *, temperature: float = 0.0, seed: int = 0, draws: int = 200,
                             progress: bool = False, scorer: str | None = None) -> dict:
    """``{(B, policy, nodes): accepted per request per round}`` for every cell of
    :func:`measure_batch_profile`, plus ``{"single": {N: accepted}, "global_gain": {(B, N): ratio}}``
    under the keys "single" and "global_gain" (see the module docstring). ``scorer``: method "mfd"'s."""
    from tqdm.auto import tqdm as bar

    budgets = sorted(int(n) for n in budgets)
    single = {}
    for n in bar(budgets, desc=f"acceptance {method}", disable=not progress):
        vals = []
        for i, p in enumerate(prompts):
            res = speculative_generate(target, drafter, p, max_new_tokens, method, budget=n,
                                       temperature=temperature, seed=seed + i, eos_token_id=[], scorer=scorer)
            vals += [s.predicted for s in res.steps if s.tree_size]
        single[n] = float(np.mean(vals)) if vals else 0.0
    # one large-tree decode per prompt: every round's best-first scores and decoding-rule masses
    cap = max(budgets) * max(1, min(max(batch_sizes), 4))
    rounds = []
    for i, p in enumerate(prompts):
        res = speculative_generate(target, drafter, p, max_new_tokens, method, budget=cap, temperature=temperature,
                                   seed=seed + i, eos_token_id=[], keep_trees=True, scorer=scorer)
        for s in res.steps:
            if s.tree is not None and len(s.tree) and s.node_log_cond is not None:
                mass = np.exp(prefix_log_probs(s.tree.parent, s.tree.depth, s.node_log_cond))
                rounds.append((s.tree.log_score, mass))
    rng = np.random.default_rng(seed)
    gain = {}
    out: dict = {}
    for b in batch_sizes:
        for n in budgets:
            if not rounds:
                gain[(b, n)] = 1.0
            else:
                got = even = 0.0
                for _ in range(draws):
                    pick = [rounds[j] for j in rng.integers(0, len(rounds), size=b)]
                    counts = allocate_global([sc for sc, _ in pick], b * n, cap=2 * n)
                    split = split_evenly(b * n, [len(sc) for sc, _ in pick])
                    got += sum(m[:c].sum() for (_, m), c in zip(pick, counts))
                    even += sum(m[:c].sum() for (_, m), c in zip(pick, split))
                gain[(b, n)] = float(got / even) if even > 0 else 1.0
            out[(b, "per_request", n)] = single[n]
            out[(b, "global", n * b)] = single[n] * gain[(b, n)]
    out["single"] = single
    out["global_gain"] = gain
    return out


@torch.no_grad()
def replayed_acceptance(target, drafter, method: str, prompts: list, batch_sizes, budgets, max_new_tokens: int,
                        *, policies=("per_request", "global", "proportional"), progress: bool = False,
                        scorer: str | None = None):
    """({(B, policy, nodes): accepted per request per round over the whole decode}, the same over
    the steady rounds only, the traces): the prompts' greedy traces
    (:func:`~mfd_theory.llm.measure.batch_trace.decode_traces`, trees at twice the largest budget)
    replayed under every policy in static batches of B. Greedy rounds; a sampled decode is
    predicted from them as an approximation. ``scorer``: method "mfd"'s."""
    from mfd_theory.batch_sim import replay
    from mfd_theory.llm.measure.batch_trace import decode_traces

    budgets = sorted(int(n) for n in budgets)
    tr, _ = decode_traces(target, drafter, method, prompts, max_new_tokens, 2 * budgets[-1], progress=progress,
                          scorer=scorer)
    full, steady = {}, {}
    for b in batch_sizes:
        for pol in policies:
            for n in budgets:
                rep = replay(tr, pol, n, int(b))
                key = (int(b), pol, n * (int(b) if pol in SHARED else 1))
                full[key] = float(np.sum(tr.lengths - 1) / max(np.sum(rep.request_rounds), 1)) - 1.0
                steady[key] = rep.steady_accepted()
    return full, steady, tr


def make_batch_plan(profile: BatchProfile, accepted: dict, margin: float = 0.0) -> BatchPlan:
    """The plan (``auto`` policy) from a measured profile and predicted acceptance (a shared policy
    only when predicted ahead by more than ``margin``)."""
    return BatchPlan(profile, {k: v for k, v in accepted.items() if isinstance(k, tuple)}, margin=margin)
