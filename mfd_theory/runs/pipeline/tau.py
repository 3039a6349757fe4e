"""``mfd tau``: greedy (or sampled) tau of drafters on every prompt of a set, and each cell's speed from its round cost.

1. Prompts: the given JSONL files, or the package's evaluation sets (all 164 HumanEval problems and
   the prose evaluation prompts, :func:`~mfd_theory.llm.training.real_prompts.write_prompt_sets`).
2. The target's own greedy answers, made once per target, numerics (the dtype decides near-ties),
   prompt file and length cap by ``mfd distill --temperature 0`` (batched, resumable) into
   ``--cache-dir``; every later run and every drafter reads them.
3. Per drafter, budget and cell (chain, DDTree, MFD under both scorers, DARTree for a Domino drafter):
   :func:`~mfd_theory.llm.measure.heldout.heldout_greedy_tau`, the tau a T = 0 decode of each
   answer measures, from one target forward per answer.
4. Speed (``--timing-prompts`` n > 0): the first n prompts of each set are decoded for real, plain
   decoding and every cell, timed in this run and these numerics; a cell's round cost is its time
   per round there, and its predicted speedup on the whole set is its full-set tau times plain
   decoding's time per token over that round cost. The same rule applied to the subset's own tau
   is checked against the subset's measured speedup (``speed_check``).
5. Chimeras (``--chimera-budget`` N > 0): over the rounds of the first ``--chimera-answers`` answers'
   decodes, every cell's N-node tree with each node's exact P(s) under the target, its dead nodes
   and chimeras (dead splices of the oracle tree's paths), and the oracle tree's own dead share at
   the same roots (:mod:`~mfd_theory.llm.measure.round_chimeras`). Each answer's rounds are kept
   under ``<out>/chimeras/<set>/`` as it ends: the same command with the same ``--out`` resumes a
   stopped run where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch

from mfd_theory.results import Result
from mfd_theory.validation import make_out_dir

__all__ = ["tau", "vocab_coverage"]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _prompt_files(config, out: Path) -> list[Path]:
    if config.prompts:
        return [Path(p) for p in config.prompts]
    from mfd_theory.llm.training.real_prompts import write_prompt_sets

    write_prompt_sets(out / "prompts")
    return [out / "prompts" / f"{s}-eval.jsonl" for s in config.sets]


def _answers(config, pfile: Path, dtype: str, progress: bool) -> tuple[Path, float]:
    """The greedy answers to ``pfile`` (distilled once; the cache key holds what they depend on)."""
    from mfd_theory.configs.pipeline.distill import DistillConfig
    from mfd_theory.llm.training.prompts import read_prompt_files
    from mfd_theory.numerics import current_numerics
    from mfd_theory.runs.pipeline.distill import distill

    parts = [_sha(pfile), str(config.target), config.max_new_tokens, dtype, current_numerics(), config.enable_thinking]
    if config.temperature > 0:  # sampled answers depend on the temperature and the seed too (greedy keys as before)
        parts += [float(config.temperature), int(config.seed)]
    key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]
    adir = Path(config.cache_dir) / f"{pfile.stem}-{key}"
    t0 = time.perf_counter()
    if not (adir / "manifest.json").is_file():
        dc = DistillConfig(target=str(config.target), prompts=(str(pfile),), max_new_tokens=config.max_new_tokens,
                           temperature=float(config.temperature), batch=config.batch, threads=config.threads,
                           shard_size=max(64, config.batch),  # a shard's prompts share one batch
                           seed=int(config.seed) if config.temperature > 0 else 0,
                           enable_thinking=config.enable_thinking, dtype=config.dtype, device=config.device)
        distill(dc, read_prompt_files([pfile]), str(adir), progress=progress)
    return adir, time.perf_counter() - t0


def _cells(drafter) -> list[tuple[str, str | None]]:
    from mfd_theory.llm.measure.heldout import default_cells

    K = int(getattr(drafter, "num_modes", 1))
    return default_cells(drafter) + ([("ddtree", None)] if K > 1 else [])


def _timed_runs(target, prompts: list[list[int]], max_new_tokens: int, temperature: float, seeds, bar):
    """A function (method, budget, scorer, drafter) -> [P, 3] array of each prompt's real decode:
    (decode seconds, tokens, rounds)."""
    from mfd_theory.llm.decoding.generate import speculative_generate

    def run(method, budget, scorer, d):
        per = []
        for j, p in enumerate(prompts):
            r = speculative_generate(target, d, p, max_new_tokens, method, budget=budget, scorer=scorer, metrics=False,
                                     temperature=temperature, seed=0 if seeds is None else seeds[j])
            per.append((r.t_total - r.t_prefill, len(r.tokens), max(len(r.steps), 1)))  # decode only
            bar.set_postfix_str(f"{method}: {len(r.tokens) / max(r.t_total - r.t_prefill, 1e-9):.1f} tokens/s")
            bar.update()
        return np.array(per, dtype=np.float64)  # [P, 3]

    return run


def _plain_timing(target, prompts: list[list[int]], max_new_tokens: int, temperature: float = 0.0,
                  seeds: list[int] | None = None, progress: bool = False) -> np.ndarray:
    """Plain decoding of ``prompts`` timed once (after a warm-up), for every drafter's cells of the
    set: [P, 3] as :func:`_timed_runs` gives."""
    from tqdm.auto import tqdm

    from mfd_theory.llm.decoding.generate import speculative_generate

    bar = tqdm(total=len(prompts), desc="timed decodes, plain", unit="decode", disable=not progress, leave=False)
    speculative_generate(target, None, prompts[0], 4, "ar", metrics=False)  # warm-up
    ar = _timed_runs(target, prompts, max_new_tokens, temperature, seeds, bar)("ar", 1, None, None)
    bar.close()
    return ar


def _timing(target, drafter, prompts: list[list[int]], cells, budgets, max_new_tokens: int,
            temperature: float = 0.0, seeds: list[int] | None = None, progress: bool = False,
            label: str = "timed decodes", ar: np.ndarray | None = None) -> dict:
    """Real decodes of ``prompts``: plain decoding's time per token, and per cell and budget its
    time per round, its tau and its measured speedup over plain decoding on these prompts, and the
    check that can fail: each prompt's speedup predicted from the *other* prompts' round cost and
    plain time per token and its own tau, against its measured speedup (None with one prompt).
    ``ar``: plain decoding's runs of the same prompts (:func:`_plain_timing`), shared by every
    drafter of a set; None times them here."""
    from tqdm.auto import tqdm

    from mfd_theory.llm.decoding.generate import speculative_generate

    shared = ar is not None
    if ar is None:
        ar = _plain_timing(target, prompts, max_new_tokens, temperature, seeds, progress)
    bar = tqdm(total=len(prompts) * len(budgets) * len(cells), desc=label, unit="decode", disable=not progress,
               leave=False)
    run = _timed_runs(target, prompts, max_new_tokens, temperature, seeds, bar)
    speculative_generate(target, drafter, prompts[0], 4, cells[0][0] if cells else "ar", budget=min(budgets),
                         scorer=cells[0][1] if cells else None, metrics=False)  # warm-up of the drafter's path
    ar_tok = ar[:, 0].sum() / max(ar[:, 1].sum(), 1)
    out = {"ar_s_per_token": ar_tok, "cells": [], "timed_prompts": len(prompts), "plain_shared": shared}
    for n in budgets:
        for m, sc in cells:
            x = run(m, n, sc, drafter)
            s, t, r = x[:, 0].sum(), x[:, 1].sum(), x[:, 2].sum()
            cell = {"method": m, "scorer": sc, "budget": int(n), "round_s": s / r, "tau": t / r,
                    "speedup": ar_tok / (s / max(t, 1)), "held_out": None}
            if len(prompts) >= 2:  # leave one prompt out: its round cost and plain time come from the others
                pred, meas = [], []
                for j in range(len(prompts)):
                    o = np.arange(len(prompts)) != j
                    ar_o = ar[o, 0].sum() / max(ar[o, 1].sum(), 1)
                    round_o = x[o, 0].sum() / x[o, 2].sum()
                    pred.append((x[j, 1] / x[j, 2]) * ar_o / round_o)
                    meas.append((ar[j, 0] / max(ar[j, 1], 1)) / (x[j, 0] / max(x[j, 1], 1)))
                cell["held_out"] = {"predicted": pred, "measured": meas,
                                    "median_predicted_over_measured": float(np.median(np.divide(pred, meas)))}
            out["cells"].append(cell)
    bar.close()
    return out


def vocab_coverage(drafter, seqs, plens) -> dict | None:
    """The share of the greedy answers' tokens (after each prompt) that the drafter's draft vocabulary
    holds: the tokens it can ever draft (None for a drafter that drafts the whole vocabulary)."""
    vocab = getattr(drafter, "draft_vocab", None)
    if vocab is None:
        return None
    have = np.zeros(int(drafter.config.vocab_size), dtype=bool)
    have[np.asarray(vocab.cpu(), dtype=np.int64)] = True
    answer = np.concatenate([np.asarray(x[int(p):], dtype=np.int64) for x, p in zip(seqs, plens)])
    return {"size": int(have.sum()), "answer_tokens": int(answer.size),
            "coverage": float(have[answer].mean()) if answer.size else None}


def _chimeras(config, hf, drafters: dict, cells: dict, s: dict, results: list[dict], set_name: str,
              progress: bool, store: Path | None = None, store_key=None) -> None:
    """The dead and chimera shares of every cell's trees over the rounds of the set's first
    ``--chimera-answers`` decodes (:func:`~mfd_theory.llm.measure.round_chimeras.round_chimeras_many`),
    into each drafter's entry of the set."""
    from mfd_theory.llm.measure.round_chimeras import round_chimeras_many

    k = config.chimera_answers or len(s["seqs"])
    sampling = (None if config.temperature == 0
                else {"temperature": float(config.temperature), "seeds": s["seeds"][:k]})
    got = round_chimeras_many(hf, drafters, s["seqs"][:k], s["plens"][:k], config.chimera_budget, cells,
                              stride=config.chimera_stride, sampling=sampling, progress=progress, store=store,
                              store_key=store_key)
    meta = {x: v for x, v in got.items() if x != "drafters"}
    for row in results:
        row["sets"][set_name]["chimeras"] = meta | {"cells": got["drafters"][row["drafter"]]}
        if progress:
            for c in got["drafters"][row["drafter"]]:
                if not c["rounds"]:
                    continue
                print(f"{row['drafter']}: {set_name}: {c['method']}{'/' + c['scorer'] if c['scorer'] else ''} at "
                      f"N = {config.chimera_budget}, {c['rounds']} rounds of {c['answers']} answers: dead "
                      f"{c['dead_share'][0]:.1%}, chimeras {c['chimera_share'][0]:.1%} (P(s) <= {c['eps'][0]:g}); "
                      f"the oracle tree's dead {c['oracle_dead_share'][0]:.1%}", flush=True)
    if progress:
        print(f"{set_name}: chimeras of {k} answers in {got['seconds']:.0f} s", flush=True)


def tau(config, out_dir, drafter_dirs: list[Path], progress: bool = True) -> Result:
    """Run ``mfd tau`` (module docstring) into ``out_dir``; returns the Result (``tau.json``)."""
    from mfd_theory.llm.measure.heldout import heldout_greedy_tau_many
    from mfd_theory.llm.models.drafter import load_drafter
    from mfd_theory.llm.models.target import TargetModel, load_local_target
    from mfd_theory.llm.training.distill import answer_seeds, load_distill_data
    from mfd_theory.numerics import current_numerics

    out = make_out_dir(Path(out_dir), "--out")
    t_all = time.perf_counter()
    files = _prompt_files(config, out)
    hf, _ = load_local_target(config.target, "cpu", config.dtype)
    hf.eval()
    dtype = str(next(hf.parameters()).dtype).replace("torch.", "")
    sets = {}
    for pfile in files:
        adir, secs = _answers(config, pfile, dtype, progress)
        seqs, plens, manifest = load_distill_data(adir)
        sets[pfile.stem] = {"file": str(pfile), "sha256": _sha(pfile), "answers": str(adir), "seqs": seqs,
                            "plens": plens, "answer_seconds": round(secs, 1),
                            "seeds": answer_seeds(adir, config.seed) if config.temperature > 0 else None,
                            "answer_tokens": int(sum(len(s) - p for s, p in zip(seqs, plens)))}
    target = TargetModel(hf) if config.timing_prompts else None
    drafters = {str(d): load_drafter(d, hf).eval() for d in drafter_dirs}
    cells = {name: _cells(d) for name, d in drafters.items()}
    results = [{"drafter": name, "modes": int(getattr(d, "num_modes", 1)), "sets": {}} for name, d in drafters.items()]
    for set_name, s in sets.items():
        t0 = time.perf_counter()
        # one target forward per answer for every drafter, one drafter forward per chunk for every budget
        sampling = None if config.temperature == 0 else {"temperature": float(config.temperature), "seeds": s["seeds"]}
        got = heldout_greedy_tau_many(hf, drafters, s["seqs"], s["plens"], config.budgets, cells, progress=progress,
                                      sampling=sampling)
        secs = time.perf_counter() - t0
        plain = None  # plain decoding's timed runs of the set, made with its first drafter's timing
        s["tau_seconds"] = round(secs, 1)
        s["tau_answer_tokens_per_s"] = round(s["answer_tokens"] / max(secs, 1e-9), 1)
        for row in results:
            name = row["drafter"]
            per_budget = {str(n): g for n, g in got[name].items()}
            entry = {"budgets": per_budget, "draft_vocab_coverage": vocab_coverage(drafters[name], s["seqs"], s["plens"])}
            if config.timing_prompts:
                k = min(config.timing_prompts, len(s["seqs"]))
                prompts = [list(map(int, s["seqs"][i][: int(s["plens"][i])])) for i in range(k)]
                seeds = None if s["seeds"] is None else s["seeds"][:k]
                if plain is None:  # once per set: every drafter's speedups are over the same plain decodes
                    plain = _plain_timing(target, prompts, config.max_new_tokens, float(config.temperature), seeds,
                                          progress)
                timing = _timing(target, drafters[name], prompts, cells[name], config.budgets, config.max_new_tokens,
                                 float(config.temperature), seeds, progress=progress,
                                 label=f"timed decodes, {Path(name).name}", ar=plain)
                for c in timing["cells"]:
                    full = next(x for x in per_budget[str(c["budget"])]["cells"]
                                if x["method"] == c["method"] and x["scorer"] == c["scorer"])
                    c["full_set_tau"] = full["tau"]
                    c["full_set_predicted_speedup"] = full["tau"] * timing["ar_s_per_token"] / c["round_s"]
                ratios = [r for c in timing["cells"] if c["held_out"]
                          for r in np.divide(c["held_out"]["predicted"], c["held_out"]["measured"])]
                timing["speed_check"] = {"timed_prompts": k, "rule": "each timed prompt's speedup predicted from "
                                         "the other timed prompts' round cost and plain time per token and its own "
                                         "tau, against its measured speedup",
                                         "median_predicted_over_measured": float(np.median(ratios)) if ratios else None,
                                         "worst_relative_error": float(np.max(np.abs(np.subtract(ratios, 1))))
                                         if ratios else None}
                entry["timing"] = timing
            row["sets"][set_name] = entry
        if config.chimera_budget:
            _chimeras(config, hf, drafters, cells, s, results, set_name, progress, store=out / "chimeras" / set_name,
                      store_key=[str(config.target), dtype, current_numerics()])
            if progress:
                n, best = max(((n, c) for n, g in per_budget.items() for c in g["cells"]), key=lambda x: x[1]["tau"])
                print(f"{name}: {set_name}: {len(s['seqs'])} answers, best tau {best['tau']:.3f} ({best['method']}"
                      f"{'/' + best['scorer'] if best['scorer'] else ''} at N = {n})", flush=True)
        if progress:
            print(f"{set_name}: {len(drafters)} drafters x {len(config.budgets)} budgets in {secs:.0f} s "
                  f"({s['tau_answer_tokens_per_s']:.0f} answer tokens/s)", flush=True)
    data = {"target": str(config.target), "dtype": dtype, "threads": torch.get_num_threads(),
            "sets": {k: {x: v for x, v in s.items() if x not in ("seqs", "plens", "seeds")} | {"prompts": len(s["seqs"])}
                     for k, s in sets.items()},
            "drafters": results, "wall_s": round(time.perf_counter() - t_all, 1),
            "temperature": float(config.temperature),
            "rule": ("greedy tau over every round of a T = 0 decode of each whole answer (the target's own greedy "
                     "answer, cut where this forward's greedy continuation first differs)" if config.temperature == 0
                     else f"tau over every round of a T = {config.temperature:g} decode of each whole answer (the "
                          "target's own sampled answer, prompt g drawn with the keyed generator of seed (--seed, g), "
                          "which a lossless decode of that seed emits whatever the tree; cut where this forward's "
                          "draw first differs)") + ", bonus included; speed: "
                    "tau x plain decoding's time per token / the cell's time per round, both timed in this run on prompts "
                    "of the set itself (an in-sample estimate, not a prediction)"}
    import dataclasses

    from mfd_theory.configs.options import save_result

    return save_result(Result("tau", config=dataclasses.asdict(config), data=data, seed=config.seed), out / "tau.json")
