"""Measure one decoding round's cost on this machine, term by term, before any cell is timed.

:func:`measure_round_profile` decodes a few *calibration* prompts (never an evaluated one) with
every cell through the real loop (:func:`~mfd_theory.llm.decoding.generate.speculative_generate`), so every
term is timed exactly as the evaluation times it (same code, same clocks, same context growth),
and pools the per-round times into the tables of a
:class:`~mfd_theory.speedup.LatencyProfile`:

* ``t_target_ms``: the autoregressive round (mask, forward, argmax, commit);
* ``verify_ms`` by tree size N: the tree verify forward, pooled over every cell of that budget;
* ``draft_ms`` by K: the drafting pass (context fusion + one block for K modes), pooled over cells;
* ``overhead``: per (method, K) and N, tree build + mask, the greedy walk, the KV commit, and the
  drafting pass again by N (it follows a verify of N nodes, whose memory traffic it pays for);
* ``draw_ms``: one token sampled at T > 0 (the calls the loop makes per draw);
* ``context_probe``: the verify forward at the shortest and the longest context the run sees, to
  say whether context length matters on this machine.

The costs are what the profile is for; it also reports each cell's speedup on these calibration
decodes (``speed_out``), which only a naive budget rule uses. Acceptance is predicted separately,
from the target's covered mass (:mod:`mfd_theory.llm.measure.predict`). Per-round times are
pooled by a 10% trimmed mean (a mean, because throughput is a ratio of sums; trimmed, because a
short calibration on a shared machine can catch a stall that a long run averages away). Tables
that must grow with their argument (verify vs N, drafting vs K) are fitted monotone
(:func:`~mfd_theory.speedup.isotonic`) and the profile's note says so.
"""

from __future__ import annotations

import time
import numpy as np
import torch

from mfd_theory.speedup import LatencyProfile, OverheadTable, isotonic
from mfd_theory.trees import product_tree

from mfd_theory.llm.decoding.generate import sampling_probs, speculative_generate
from mfd_theory.llm.models.target import TargetModel

__all__ = ["measure_round_profile", "trimmed_mean"]

TRIM = 0.1  # share of rounds dropped at each end before averaging


def trimmed_mean(values, trim: float = TRIM) -> float:
    """Mean of ``values`` without the lowest and highest ``trim`` share (at least one kept)."""
    v = np.sort(np.asarray(values, dtype=np.float64).reshape(-1))
    if v.size == 0:
        raise ValueError("values: nothing to average")
    k = int(trim * v.size)
    return float(v[k:v.size - k].mean()) if v.size - 2 * k > 0 else float(v.mean())


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _draw_ms(target: TargetModel, prompt: torch.Tensor, repeats: int) -> float:
    """ms per sampled token: the loop's draw (softmax at T, multinomial with a CPU generator)."""
    logits, _ = target.prefill(prompt, hidden=False)
    gen = torch.Generator().manual_seed(0)
    times = []
    for _ in range(max(8, 4 * repeats) + 1):
        t0 = time.perf_counter()
        p = sampling_probs(logits, 1.0, 1.0).cpu()
        int(torch.multinomial(p, 1, generator=gen))
        times.append(time.perf_counter() - t0)
    return 1e3 * trimmed_mean(times[1:])


def _context_probe(target: TargetModel, prompt: torch.Tensor, contexts: list[int], sizes: list[int],
                   repeats: int, hidden: bool) -> dict:
    """Verify ms (median over ``repeats``, contexts interleaved so drift hits both alike) at each
    context length (prefilled with the prompt's tokens, cycled) and tree size."""
    dev = target.device
    g = np.random.default_rng(0)
    log_q = np.log(g.dirichlet(np.full(64, 0.3), size=max(1, min(16, max(sizes)))))  # [L, 64]
    log_q = np.maximum(log_q, -50.0)
    trees = {n: product_tree(log_q, n) for n in sizes}
    ids = prompt.reshape(-1).cpu().numpy()
    times = {(c, n): [] for c in contexts for n in sizes}
    for rep in range(repeats + 1):  # the first repeat warms up
        for c in contexts:
            target.prefill(torch.as_tensor(np.resize(ids, c)), hidden=False)
            for n in sizes:
                mask = target.tree_mask(trees[n])
                _sync(dev)
                t0 = time.perf_counter()
                target.verify(int(ids[0]), trees[n], hidden=hidden, mask=mask)
                _sync(dev)
                if rep:
                    times[(c, n)].append(time.perf_counter() - t0)
                target.commit([])
                target.cache.crop(-1)  # back to the same context for the next size
                target.length -= 1
    table = [[1e3 * float(np.median(times[(c, n)])) for n in sizes] for c in contexts]
    return {"contexts": list(contexts), "tree_sizes": list(sizes), "verify_ms": table}


@torch.no_grad()
def measure_round_profile(target, cells: list, prompts: list, max_new_tokens: int, *, repeats: int = 1,
                          name: str = "round_profile", device: str = "cpu", model: str = "", note: str = "",
                          context_probe: bool = True, progress: bool = True,
                          speed_out: dict | None = None) -> LatencyProfile:
    """The round cost model of ``cells`` (:class:`~mfd_theory.llm.measure.evaluate.Cell`: method, drafter,
    budget) on this machine, from ``repeats`` greedy decodes of every calibration prompt in
    ``prompts`` (token-id sequences) with every cell, ``max_new_tokens`` each (a fixed count: no
    EOS). Cells are interleaved per prompt, after one short warm-up decode per cell. An "ar" cell
    is added when missing (its rounds give ``t_target_ms``).

    ``speed_out`` (a dict), when given, receives each cell's speedup over ar on these calibration
    decodes, {(method, drafter label, budget): speedup}: what a naive rule that picks the budget
    that ran fastest on the calibration prompts knows."""
    from tqdm.auto import tqdm

    if not isinstance(target, TargetModel):
        target = TargetModel(target)
    if isinstance(repeats, bool) or int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats: must be an integer >= 1, got {repeats!r}")
    if isinstance(max_new_tokens, bool) or int(max_new_tokens) != max_new_tokens or max_new_tokens < 2:
        raise ValueError(f"max_new_tokens: a round needs at least 2 new tokens, got {max_new_tokens!r}")
    if not prompts:
        raise ValueError("prompts: need at least one calibration prompt")
    spec = [c for c in cells if c.method != "ar"]
    if not spec:
        raise ValueError("cells: need at least one speculative cell (chain, ddtree, mfd)")
    plan = [("ar", None, 1)] + [(c.method, c.drafter, max(1, int(c.budget))) for c in spec]
    ids = [torch.as_tensor(np.asarray(p).reshape(-1)) for p in prompts]
    for method, drafter, budget in plan:  # warm-up: numba compiles, kernels are picked
        speculative_generate(target, drafter, ids[0], min(4, max_new_tokens), method, budget=budget,
                             metrics=False, eos_token_id=[])
    rounds: list[list] = [[] for _ in plan]
    bar = tqdm(total=repeats * len(ids) * len(plan), desc="round profile", disable=not progress, leave=False)
    for _ in range(repeats):
        for p in ids:
            for i, (method, drafter, budget) in enumerate(plan):
                res = speculative_generate(target, drafter, p, max_new_tokens, method, budget=budget,
                                           metrics=False, eos_token_id=[])
                rounds[i].extend(res.steps)
                bar.update(1)
    bar.close()

    if speed_out is not None:
        def per_token(steps):
            return sum(s.t_step for s in steps) / max(1, sum(s.emitted for s in steps))

        ar_cost = per_token(rounds[0])
        for (method, drafter, budget), c, steps in zip(plan[1:], spec, rounds[1:]):
            if steps:
                speed_out[(method, c.drafter_label, budget)] = ar_cost / per_token(steps)

    def ms(steps, key):
        return 1e3 * trimmed_mean([getattr(s, key) for s in steps])

    t_target = 1e3 * trimmed_mean([s.t_step for s in rounds[0]])
    by_n: dict[int, list] = {}
    by_k: dict[int, list] = {}
    by_mk: dict[tuple[str, int], dict[int, list]] = {}
    for (method, drafter, budget), steps in zip(plan[1:], rounds[1:]):
        steps = [s for s in steps if s.tree_size]
        K = int(drafter.num_modes)
        by_n.setdefault(budget, []).extend(steps)
        if method != "dartree":  # its drafting includes one step per depth: kept in its own table by N
            by_k.setdefault(K, []).extend(steps)
        by_mk.setdefault((method, K), {}).setdefault(budget, []).extend(steps)
    sizes = sorted(by_n)
    verify_raw = [ms(by_n[n], "t_verify") for n in sizes]
    modes = sorted(by_k)
    draft_raw = [ms(by_k[k], "t_draft") for k in modes]
    verify = isotonic(verify_raw, [len(by_n[n]) for n in sizes]).tolist()
    # empty when every cell is dartree (its drafting lives in its own table by N)
    draft = isotonic(draft_raw, [len(by_k[k]) for k in modes]).tolist() if modes else []
    notes = [note] if note else []
    notes.append(f"measured by measure_round_profile: {repeats} x {len(ids)} calibration prompt(s) x "
                 f"{max_new_tokens} tokens per cell, greedy, {TRIM:.0%}-trimmed means of per-round times")
    if verify != verify_raw:
        notes.append("verify_ms fitted monotone in N (isotonic); raw " + ", ".join(f"{t:.4g}" for t in verify_raw))
    if draft != draft_raw:
        notes.append("draft_ms fitted monotone in K (isotonic); raw " + ", ".join(f"{t:.4g}" for t in draft_raw))
    overhead = []
    for (method, K), per_n in sorted(by_mk.items()):
        ns = sorted(per_n)
        overhead.append(OverheadTable(method, K, tuple(ns), *(tuple(ms(per_n[n], key) for n in ns)
                                                               for key in ("t_tree", "t_walk", "t_commit", "t_draft"))))
    probe = None
    if context_probe and target.hybrid is None:  # a recurrent (GDN) state cannot be cropped back
        lo = max(1, int(min(len(p) for p in ids)))
        hi = lo + int(max_new_tokens)
        if target.max_positions is not None:
            hi = min(hi, target.max_positions - max(sizes) - 1)
        probe_sizes = sorted({1, max(sizes)})
        if hi > lo:
            probe = _context_probe(target, ids[0], [lo, hi], probe_sizes, 10, hidden=True)
    return LatencyProfile(
        name=name, device=device, model=model, assumption=False, t_target_ms=t_target,
        t_draft_ms=float(np.interp(1, modes, draft)) if modes else 0.0,
        tree_sizes=tuple(sizes), verify_ms=tuple(verify), note="; ".join(notes),
        draw_ms=_draw_ms(target, ids[0], repeats), draft_modes=tuple(modes), draft_ms=tuple(draft),
        overhead=tuple(overhead), context_probe=probe,
    )

