"""Is decoding lossless on this target? Every method against Hugging Face greedy ``generate``, and the walk's draws.

:func:`greedy_equality` decodes each prompt greedily with every method (one request each, and the
batchable methods as one batch) and compares the tokens with HF ``generate``'s, under two
drafters: a :class:`~mfd_theory.llm.models.testing.ReplayDrafter` of the reference texts (long
accepted paths, so deep verification rows, long commits and KV compaction are exercised) and a
random DFlash drafter built for the target (the real drafter's code path: the target's hidden
states, embedding and head). :func:`walk_chi_square` walks one verified tree many times at T > 0
with the decoder's own sampler and tests the outcomes (accepted path, bonus token) against their
exact probabilities from the same verify rows.

Under float32 a decode must equal HF's token for token. In a lower-precision dtype (bfloat16 under
fast numerics) plain decoding and a tree verification run the target through different kernel
shapes, so the logits of one position differ in their last bits and a near-tie can flip a greedy
token. Every decode that differs is therefore located (its first different token) and the target's
top-2 logit gap there is measured on the common prefix (:func:`first_difference`): a gap within
:data:`NEAR_TIE_ULPS` units in the last place of the logits' dtype at that magnitude is numerics,
any other difference is a bug, and ``ok`` is false.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from mfd_theory.llm.decoding.batch import speculative_generate_batch
from mfd_theory.llm.decoding.generate import sampling_probs, speculative_generate
from mfd_theory.llm.decoding.sampling import Sampler, children_map
from mfd_theory.llm.models.drafter import build_drafter
from mfd_theory.llm.models.target import TargetModel
from mfd_theory.llm.models.testing import ReplayDrafter

__all__ = ["CASES", "NEAR_TIE_ULPS", "first_difference", "greedy_equality", "hf_greedy", "logit_ulp", "walk_chi_square"]

#: a first difference whose top-2 logit gap is at most this many units in the last place of the
#: logits' dtype (at the top logit's magnitude) is a near-tie: numerics, not a bug
NEAR_TIE_ULPS = 2

#: (label, method, scorer, modes): every decoding method and MFD scorer the check runs
CASES = [("ar", "ar", None, 1), ("chain", "chain", None, 1), ("ddtree", "ddtree", None, 1),
         ("mfd", "mfd", "mixture", 2), ("mfd best-mode", "mfd", "best_mode", 2), ("dartree", "dartree", None, 1)]
BATCHED = ("ar", "chain", "ddtree", "mfd", "mfd best-mode")


def _eos(model) -> list[int]:
    eos = model.generation_config.eos_token_id
    return [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(e) for e in eos])


@torch.no_grad()
def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    """HF ``generate``'s greedy continuation (``n`` new tokens at most, stopped by the model's EOS)."""
    eos = _eos(model)
    pad = model.generation_config.pad_token_id
    kw = {"eos_token_id": eos or None, "pad_token_id": pad if pad is not None else (eos[0] if eos else 0)}
    out = model.generate(torch.tensor([prompt]), max_new_tokens=int(n), do_sample=False, top_p=None, top_k=None,
                         temperature=None, **kw)
    return out[0, len(prompt):].tolist()


def logit_ulp(value: float, dtype: torch.dtype) -> float:
    """One unit in the last place of ``dtype`` at ``|value|`` (float32: 2^-23 of its power of two;
    bfloat16: 2^-7, so 0.125 for logits in [16, 32))."""
    mant = torch.finfo(dtype).eps  # 2^-(mantissa bits)
    mag = max(abs(float(value)), float(torch.finfo(dtype).tiny))
    return float(mant * 2.0 ** np.floor(np.log2(mag)))


@torch.no_grad()
def first_difference(model, prompt: list[int], want: list[int], got: list[int]) -> dict | None:
    """Where ``got`` first leaves ``want`` (both continuations of ``prompt``): the target's top-2
    logit gap there (one forward of the prompt and the common prefix, in the model's dtype), how far
    the emitted token's logit lies below the top one, the dtype's unit in the last place at the top
    logit, and whether the emitted token was within :data:`NEAR_TIE_ULPS` units of the top (a
    near-tie). None when one is a prefix of the other."""
    i = next((j for j, (a, b) in enumerate(zip(want, got)) if a != b), None)
    if i is None:
        return None
    ids = torch.tensor([list(prompt) + list(want[:i])], device=next(model.parameters()).device)
    logits = model(input_ids=ids).logits[0, -1]  # [V], the model's dtype
    z = logits.float()
    top = torch.topk(z, 2)
    gap = float(top.values[0] - top.values[1])
    below = float(top.values[0] - z[int(got[i])])  # >= gap unless got is the top token itself
    ulp = logit_ulp(float(top.values[0]), logits.dtype)
    return {"index": int(i), "want": int(want[i]), "got": int(got[i]), "top2": [int(t) for t in top.indices],
            "top_logit": round(float(top.values[0]), 4), "gap": round(gap, 6), "got_below_top": round(below, 6),
            "ulp": ulp, "gap_ulps": round(gap / ulp, 2), "dtype": str(logits.dtype).replace("torch.", ""),
            "near_tie": bool(below <= NEAR_TIE_ULPS * ulp)}


def _compare(model, prompt, want: list[int], got: list[int]) -> dict:
    """A row's fields for one decode against its reference: equal, and where it first differs."""
    equal = list(got) == list(want)
    diff = None if equal else first_difference(model, prompt, want, list(got))
    # a decode that stops early or runs on (not a token flip) is a bug too: no near-tie explains it
    return {"equal": equal, "first_difference": diff,
            "near_tie": bool(diff is not None and diff["near_tie"]), "bug": not equal and not (diff and diff["near_tie"])}


def _drafters(model, refs: list[list[int]], block: int, seed: int) -> dict:
    V = int(model.config.get_text_config().vocab_size if hasattr(model.config, "get_text_config")
            else model.config.vocab_size)
    return {
        "replay": {1: ReplayDrafter(refs, V, block, 1, seed), 2: ReplayDrafter(refs, V, block, 2, seed)},
        "dflash-random": {1: build_drafter(model, block, 1, 1, seed), 2: build_drafter(model, block, 1, 2, seed),
                          "dartree": build_drafter(model, block, 1, 1, seed, kind="dartree")},
    }


def _pick(drafters: dict, method: str, modes: int):
    if method == "dartree" and "dartree" in drafters:
        return drafters["dartree"]
    return drafters[modes]


def greedy_equality(model, prompts: list[list[int]], new_tokens: int = 64, budget: int = 64, block: int = 9,
                    seed: int = 0, progress: bool = True, random_tokens: int | None = None) -> dict:
    """Per drafter, method and prompt: do the greedy tokens equal HF ``generate``'s (and tau);
    per drafter and batchable method: does one batch of every prompt give the same.

    ``random_tokens``: the new tokens decoded with the random DFlash drafters (default
    ``new_tokens``), compared with the first ``random_tokens`` of HF's greedy continuation (a
    greedy continuation's prefix is the shorter one). Their trees are rejected at the root nearly
    every round (tau about 1), so each round repeats one event, the tree verified and rolled back
    and the bonus token kept: a few rounds test it, and the replay drafter's long accepted paths
    take the full length."""
    from tqdm.auto import tqdm

    target = TargetModel(model)
    t0 = time.perf_counter()
    refs = [hf_greedy(model, p, new_tokens) for p in prompts]
    t_ref = time.perf_counter() - t0
    drafters = _drafters(model, [p + r for p, r in zip(prompts, refs)], block, seed)
    rows = []
    jobs = [(dname, case) for dname in drafters for case in CASES if not (dname == "dflash-random" and case[0] == "ar")]
    for dname, (label, method, scorer, modes) in tqdm(jobs, desc="lossless", disable=not progress, leave=False):
        d = _pick(drafters[dname], method, modes)
        n = new_tokens if random_tokens is None or dname != "dflash-random" else min(int(random_tokens), new_tokens)
        want = [r[:n] for r in refs]
        for i, p in enumerate(prompts):
            t1 = time.perf_counter()
            res = speculative_generate(target, d if method != "ar" else None, p, n, method, budget=budget,
                                       scorer=scorer, metrics=False)
            rows.append({"drafter": dname, "method": label, "prompt": i, "batched": False,
                         **_compare(model, p, want[i], list(res.tokens)), "tokens": len(res.tokens),
                         "tau": float(res.tau), "seconds": round(time.perf_counter() - t1, 2)})
        if label in BATCHED:
            t1 = time.perf_counter()
            res = speculative_generate_batch(target, d if method != "ar" else None, prompts, n, method,
                                             budget=budget, scorer=scorer, metrics=False)
            for i, r in enumerate(res.results):
                rows.append({"drafter": dname, "method": label, "prompt": i, "batched": True,
                             **_compare(model, prompts[i], want[i], list(r.tokens)), "tokens": len(r.tokens),
                             "tau": float(r.tau),
                             "seconds": round(time.perf_counter() - t1, 2)})
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    exact = dtype == "float32"
    return {"n_prompts": len(prompts), "new_tokens": int(new_tokens), "dtype": dtype,
            "by_method": _by_method(rows), "near_ties": sum(r["near_tie"] for r in rows),
            "bugs": sum(r["bug"] for r in rows),
            # float32 is the exact check; a lower precision may flip near-ties, never anything else
            "ok": all(r["equal"] for r in rows) if exact else not any(r["bug"] for r in rows),
            "random_tokens": int(new_tokens if random_tokens is None else min(int(random_tokens), new_tokens)),
            "budget": int(budget), "block": int(block),
            "reference_tokens": [len(r) for r in refs], "rows": rows, "all_equal": all(r["equal"] for r in rows),
            "reference_seconds": round(t_ref, 2)}


def _by_method(rows: list[dict]) -> dict:
    """Per method (and batched): decodes, how many differ from the reference, how many of those at a
    near-tie, and the share of decodes affected."""
    out: dict = {}
    for r in rows:
        key = r["method"] + (" (batched)" if r["batched"] else "")
        m = out.setdefault(key, {"decodes": 0, "differ": 0, "near_ties": 0, "bugs": 0, "gaps": []})
        m["decodes"] += 1
        m["differ"] += not r["equal"]
        m["near_ties"] += r["near_tie"]
        m["bugs"] += r["bug"]
        if r["first_difference"] is not None:
            m["gaps"].append(r["first_difference"]["gap"])
    for m in out.values():
        m["share_affected"] = round(m["differ"] / m["decodes"], 4)
    return out


def _outcome_probs(tree, logits: torch.Tensor, temperature: float) -> dict:
    """Exact P(accepted path ends at node u, bonus x) of the walk, from the verify rows."""
    probs = sampling_probs(logits, temperature).double()  # [N+1, V]
    kids = children_map(tree)
    reach = np.zeros(len(tree) + 1)
    reach[0] = 1.0
    for n in range(len(tree)):  # parents precede children
        par = int(tree.parent[n]) + 1
        reach[n + 1] = reach[par] * float(probs[par, int(tree.token[n])])
    out = {}
    for row in range(len(tree) + 1):
        p = probs[row].clone()
        for (par, tok), _ in kids.items():
            if par + 1 == row:
                p[tok] = 0.0  # a child token continues the walk
        out[row] = reach[row] * p.numpy()
    return out


def walk_chi_square(model, prompt: list[int], tree, n: int = 5000, temperature: float = 1.0, seed: int = 0) -> dict:
    """Walk ``tree`` (verified once after ``prompt``) ``n`` times with the decoder's sampler and
    compare the outcome counts with their exact probabilities (cells with < 5 expected merged)."""
    from scipy.stats import chisquare

    target = TargetModel(model)
    target.prefill(torch.tensor([prompt[:-1]]), hidden=False)
    logits = target.verify(int(prompt[-1]), tree, hidden=False).logits.float()  # [N+1, V]
    target.discard()
    exact = _outcome_probs(tree, logits, temperature)
    sampler = Sampler(temperature, 1.0, seed)
    counts: dict[tuple[int, int], int] = {}
    for _ in range(int(n)):
        path, emitted = sampler.walk(tree, logits)
        key = (path[-1] + 1 if path else 0, emitted[-1])
        counts[key] = counts.get(key, 0) + 1
    cells, obs, exp = [], [], []
    small_obs, small_exp = 0, 0.0
    seen = set()
    for row, p in exact.items():
        big = np.flatnonzero(p * n >= 5)
        for x in big:
            obs.append(counts.get((row, int(x)), 0))
            exp.append(p[x] * n)
            seen.add((row, int(x)))
        small_exp += (p.sum() - p[big].sum()) * n
    small_obs = sum(c for k, c in counts.items() if k not in seen)
    obs.append(small_obs)
    exp.append(small_exp)
    obs, exp = np.asarray(obs, float), np.asarray(exp, float)
    exp *= obs.sum() / exp.sum()
    res = chisquare(obs, exp)
    return {"draws": int(n), "cells": int(len(obs)), "nodes": len(tree), "temperature": float(temperature),
            "chi2": float(res.statistic), "pvalue": float(res.pvalue),
            "mean_accepted": float(sum(c * (0 if k[0] == 0 else int(tree.depth[k[0] - 1])) for k, c in counts.items())
                                   / n)}
