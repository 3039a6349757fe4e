"""Measure one decoding round's cost on this machine, term by term, before any cell is timed.

:func:`measure_round_profile` decodes calibration prompts (never evaluated ones) with every cell
through the real decoding loop and pools the per-round times (10%-trimmed means; verify vs N and
drafting vs K fitted monotone) into a :class:`~mfd_theory.speedup.LatencyProfile`. Design:
docs/results.md ("Predicting before decoding", "How it is measured").
"""

from __future__ import annotations

import time

import numpy as np
import torch

from mfd_theory.speedup import LatencyProfile, OverheadTable, isotonic
from mfd_theory.validation import check_int
from mfd_theory.trees import product_tree

from mfd_theory.llm.decoding.generate import sampling_probs, speculative_generate
from mfd_theory.llm.measure.evaluate import cell_key
from mfd_theory.llm.models.target import TargetModel

__all__ = ["calibration_speed_rows", "device_tag", "draft_round_ms", "first_sampled_temperature",
           "measure_round_profile", "trimmed_mean"]

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
                          speed_out: dict | None = None, temperatures=(0.0,),
                          sampled_speed_out: dict | None = None) -> LatencyProfile:
    """The round cost model of ``cells`` (:class:`~mfd_theory.llm.measure.evaluate.Cell`: method, drafter,
    budget) on this machine, from ``repeats`` greedy decodes of every calibration prompt in
    ``prompts`` (token-id sequences) with every cell, ``max_new_tokens`` each (a fixed count: no
    EOS). Cells are interleaved per prompt, after one short warm-up decode per cell. An "ar" cell
    is added when missing (its rounds give ``t_target_ms``).

    When ``temperatures`` holds one above 0, every cell is also decoded sampled at the first such
    T, and each table gets the sampled round's walk without its draws (``walk_sampled_ms``): a
    sampled walk runs no argmax over the verified rows, so the greedy walk would overprice it.

    ``speed_out`` (a dict), when given, receives each cell's speedup over ar on these calibration
    decodes, {(method, drafter label, budget): speedup} (a best-mode mfd cell's key ends with its
    scorer, :func:`~mfd_theory.llm.measure.evaluate.cell_key`): what a naive rule that picks the
    budget that ran fastest on the calibration prompts knows. ``sampled_speed_out`` receives the same
    from the sampled decodes at the first T > 0 (nothing when no T > 0 is asked): what that rule knows
    at a sampled temperature. The overhead table of "mfd" pools both scorers' rounds: their trees
    come from one search."""
    if not isinstance(target, TargetModel):
        target = TargetModel(target)
    repeats = check_int("repeats", repeats, 1)
    # a round needs at least 2 new tokens (the prefill makes the first)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 2)
    if not prompts:
        raise ValueError("prompts: need at least one calibration prompt")
    spec = [c for c in cells if c.method != "ar"]
    if not spec:
        raise ValueError("cells: need at least one speculative cell (chain, ddtree, mfd)")
    plan = [("ar", None, 1, None)] + [(c.method, c.drafter, max(1, int(c.budget)), c.scorer) for c in spec]
    ids = [torch.as_tensor(np.asarray(p).reshape(-1)) for p in prompts]
    rounds = _decode_rounds(target, plan, ids, max_new_tokens, repeats, progress)
    if speed_out is not None:
        speed_out.update(_calibration_speed(plan, spec, rounds))
    draw_ms = _draw_ms(target, ids[0], repeats)
    hot = first_sampled_temperature(temperatures)
    sampled = (_decode_rounds(target, plan, ids, max_new_tokens, repeats, progress, temperature=hot)
               if hot is not None else None)
    if sampled_speed_out is not None and sampled is not None:
        sampled_speed_out.update(_calibration_speed(plan, spec, sampled))
    tables, fit_notes = _pooled_tables(plan, rounds, sampled, draw_ms)
    notes = [note] if note else []
    notes.append(f"measured by measure_round_profile: {repeats} x {len(ids)} calibration prompt(s) x "
                 f"{max_new_tokens} tokens per cell, greedy" + (f" and sampled at T = {hot:g}" if hot is not None else "")
                 + f", {TRIM:.0%}-trimmed means of per-round times")
    probe = _probe(target, ids, max_new_tokens, max(tables["tree_sizes"])) if context_probe else None
    return LatencyProfile(name=name, device=device, model=model, assumption=False, note="; ".join(notes + fit_notes),
                          draw_ms=draw_ms, context_probe=probe, **tables)


def first_sampled_temperature(temperatures) -> float | None:
    """The first T > 0 of ``temperatures`` (the round profile's sampled decodes run there), or None."""
    return next((float(t) for t in temperatures if float(t) > 0), None)


def calibration_speed_rows(greedy: dict, sampled: dict, temperatures, scorer=lambda method: None) -> list[dict]:
    """The naive budget rule's timings as a predictions file keeps them: one row per cell of
    ``speed_out`` (greedy, T = 0) and of ``sampled_speed_out`` (at :func:`first_sampled_temperature`);
    ``scorer(method)``: what a key without a scorer (a mixture mfd cell, any other method) records."""
    hot = first_sampled_temperature(temperatures)
    return [{"method": k[0], "drafter": k[1], "budget": k[2], "scorer": k[3] if len(k) > 3 else scorer(k[0]),
             "speedup": v, "temperature": t} for t, timed in ((0.0, greedy), (hot, sampled)) for k, v in timed.items()]


def _decode_rounds(target: TargetModel, plan: list[tuple], ids: list[torch.Tensor], max_new_tokens: int,
                   repeats: int, progress: bool, temperature: float = 0.0) -> list[list]:
    """Every round of ``repeats`` decodes (greedy, or sampled at ``temperature`` with fixed seeds)
    of every prompt with every (method, drafter, budget, scorer) of ``plan``, cells interleaved
    per prompt, after one short warm-up decode per cell."""
    from tqdm.auto import tqdm

    kw = {"temperature": temperature} if temperature > 0 else {}
    for method, drafter, budget, scorer in plan:  # warm-up: numba compiles, kernels are picked
        speculative_generate(target, drafter, ids[0], min(4, max_new_tokens), method, budget=budget,
                             metrics=False, eos_token_id=[], scorer=scorer, **kw)
    rounds: list[list] = [[] for _ in plan]
    bar = tqdm(total=repeats * len(ids) * len(plan), desc="round profile" + (f" T={temperature:g}" if kw else ""),
               disable=not progress, leave=False)
    for r in range(repeats):
        for j, p in enumerate(ids):
            for i, (method, drafter, budget, scorer) in enumerate(plan):
                res = speculative_generate(target, drafter, p, max_new_tokens, method, budget=budget,
                                           metrics=False, eos_token_id=[], scorer=scorer,
                                           seed=9_000_011 + 1000 * j + r, **kw)
                rounds[i].extend(res.steps)
                bar.update(1)
    bar.close()
    return rounds


def _calibration_speed(plan: list[tuple], spec: list, rounds: list[list]) -> dict:
    """{cell_key(method, drafter label, budget, scorer): speedup over ar} on the calibration decodes."""
    def per_token(steps):
        return sum(s.t_step for s in steps) / max(1, sum(s.emitted for s in steps))

    ar_cost = per_token(rounds[0])
    return {cell_key(method, c.drafter_label, budget, scorer=scorer): ar_cost / per_token(steps)
            for (method, drafter, budget, scorer), c, steps in zip(plan[1:], spec, rounds[1:]) if steps}


def _ms(steps, key: str) -> float:
    return 1e3 * trimmed_mean([getattr(s, key) for s in steps])


def _sampled_walk_ms(steps, draw_ms: float) -> float:
    """The sampled rounds' walk without its draws (1 + accepted per round, ``draw_ms`` each), ms;
    at least 1 microsecond (the walk follows the tree in Python, never free)."""
    return max(1e-3, trimmed_mean([1e3 * s.t_walk - (1 + s.accepted) * draw_ms for s in steps]))


def _pooled_tables(plan: list[tuple], rounds: list[list], sampled: list[list] | None = None,
                   draw_ms: float = 0.0) -> tuple[dict, list[str]]:
    """The profile's tables (keyword arguments of :class:`~mfd_theory.speedup.LatencyProfile`)
    pooled from the rounds of each cell (and the sampled walk from ``sampled``'s rounds, when
    given), and a note for each table the monotone fit changed."""
    by_n: dict[int, list] = {}
    by_k: dict[int, list] = {}
    by_mk: dict[tuple[str, int], dict[int, list]] = {}
    hot_mk: dict[tuple[str, int], dict[int, list]] = {}
    for i, ((method, drafter, budget, _), steps) in enumerate(zip(plan[1:], rounds[1:]), start=1):
        steps = [s for s in steps if s.tree_size]
        K = int(drafter.num_modes)
        by_n.setdefault(budget, []).extend(steps)
        if method != "dartree":  # its drafting includes one step per depth: kept in its own table by N
            by_k.setdefault(K, []).extend(steps)
        by_mk.setdefault((method, K), {}).setdefault(budget, []).extend(steps)
        if sampled is not None:
            hot_mk.setdefault((method, K), {}).setdefault(budget, []).extend(s for s in sampled[i] if s.tree_size)
    sizes = sorted(by_n)
    verify_raw = [_ms(by_n[n], "t_verify") for n in sizes]
    modes = sorted(by_k)
    draft_raw = [_ms(by_k[k], "t_draft") for k in modes]
    verify = isotonic(verify_raw, [len(by_n[n]) for n in sizes]).tolist()
    # empty when every cell is dartree (its drafting lives in its own table by N)
    draft = isotonic(draft_raw, [len(by_k[k]) for k in modes]).tolist() if modes else []
    notes = []
    if verify != verify_raw:
        notes.append("verify_ms fitted monotone in N (isotonic); raw " + ", ".join(f"{t:.4g}" for t in verify_raw))
    if draft != draft_raw:
        notes.append("draft_ms fitted monotone in K (isotonic); raw " + ", ".join(f"{t:.4g}" for t in draft_raw))
    overhead = []
    for (method, K), per_n in sorted(by_mk.items()):
        ns = sorted(per_n)
        hot = hot_mk.get((method, K), {})
        walk_sampled = (tuple(_sampled_walk_ms(hot[n], draw_ms) for n in ns)
                        if ns and all(hot.get(n) for n in ns) else ())
        overhead.append(OverheadTable(method, K, tuple(ns), *(tuple(_ms(per_n[n], key) for n in ns)
                                                               for key in ("t_tree", "t_walk", "t_commit", "t_draft")),
                                      walk_sampled_ms=walk_sampled))
    tables = dict(t_target_ms=1e3 * trimmed_mean([s.t_step for s in rounds[0]]),
                  t_draft_ms=float(np.interp(1, modes, draft)) if modes else 0.0,
                  tree_sizes=tuple(sizes), verify_ms=tuple(verify), draft_modes=tuple(modes), draft_ms=tuple(draft),
                  overhead=tuple(overhead))
    return tables, notes


def _probe(target: TargetModel, ids: list[torch.Tensor], max_new_tokens: int, max_size: int) -> dict | None:
    """:func:`_context_probe` at the shortest and the longest context the decodes reach (None on a
    hybrid target, whose recurrent (GDN) state cannot be cropped back, or with no room to grow)."""
    if target.hybrid is not None:
        return None
    lo = max(1, int(min(len(p) for p in ids)))
    hi = lo + int(max_new_tokens)
    if target.max_positions is not None:
        hi = min(hi, target.max_positions - max_size - 1)
    if hi <= lo:
        return None
    return _context_probe(target, ids[0], [lo, hi], sorted({1, max_size}), 10, hidden=True)


def device_tag(dev) -> str:
    """A short name of torch device ``dev`` for results and profile files: "cpu", or the CUDA
    device's name in lower case without its vendor ("h100-80gb-hbm3")."""
    import re

    if dev.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(dev).lower()
    name = re.sub(r"^nvidia\s+", "", name)
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "cuda"


def draft_round_ms(drafter, feats, context: int, rounds: int, new_rows: int) -> float:
    """A drafter's round as decoding pays it: feed ``context`` rows of the target features
    ``feats`` [1, T, H], then time ``rounds`` rounds of (append ``new_rows`` rows, draft a block);
    the fastest round in ms (CUDA work synchronised)."""
    cuda = feats.device.type == "cuda"
    times = []
    with torch.no_grad():
        drafter.reset()
        drafter.draft_modes(feats[:, :context], 1)
        for r in range(rounds):
            a = context + r * new_rows
            if cuda:
                torch.cuda.synchronize(feats.device)
            t0 = time.perf_counter()
            drafter.draft_modes(feats[:, a:a + new_rows], 1 + r)
            if cuda:
                torch.cuda.synchronize(feats.device)
            times.append(time.perf_counter() - t0)
    return 1e3 * min(times)
