"""The torch half of ``mfd bench gpu-check`` (:mod:`mfd_theory.commands.bench.gpu_check`): greedy
equality in bfloat16 against HF ``generate``, the round profile of a Qwen3-8B-shaped stack, the
drafting latency by context, the ceiling on that stack, and ``mfd e2e --preset micro`` on the device."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import torch

from mfd_theory.runs.bench.shapes import SHAPES
from mfd_theory.llm.models.testing import ReplayDrafter, random_qwen3
from mfd_theory.llm.measure.profile import device_tag, draft_round_ms
from mfd_theory.results import Result, atomic_write_text, provenance

__all__ = ["TIE_RTOL", "ceiling_step", "draft_latency", "greedy_check", "round_cost", "run"]

TIE_RTOL = 0.02  # top-two logit gap, relative to max(1, |top logit|), below which bfloat16 rounding may flip argmax


def _random_target(shape: str, layers: int, dtype, dev, seed: int, std: float):
    """A random Qwen3 of a ``mfd bench decode`` preset's shape with ``layers`` layers; its LM head's
    std 4 / sqrt(hidden) gives logits of std ~4, argmax far from ties as in a trained model."""
    return random_qwen3(SHAPES[shape], layers=layers, dtype=dtype, device=dev, seed=seed, std=std, vector_std=std,
                        head_std=4.0 / SHAPES[shape][1] ** 0.5)


def greedy_check(cfg, shape: str, torch, dev, dtype) -> list[dict]:
    from mfd_theory.llm import TargetModel, build_drafter
    from mfd_theory.llm.decoding.generate import METHODS, speculative_generate

    hf = _random_target(shape, cfg.check_layers, dtype, dev, cfg.seed, cfg.init_std)
    target = TargetModel(hf)
    mfd = build_drafter(hf, cfg.block_size, 1, num_modes=cfg.num_modes, seed=cfg.seed)
    domino = build_drafter(hf, cfg.block_size, 1, seed=cfg.seed, kind="dartree")  # for method "dartree"
    g = torch.Generator().manual_seed(cfg.seed)
    rows = []
    for p in range(cfg.prompts):
        prompt = torch.randint(0, hf.config.vocab_size, (cfg.prompt_len,), generator=g).to(dev)
        with torch.no_grad():
            # an explicit all-ones mask: otherwise generate masks prompt tokens equal to pad_token_id
            out = hf.generate(prompt[None], attention_mask=torch.ones_like(prompt[None]), max_new_tokens=cfg.new_tokens,
                              do_sample=False, output_scores=True, return_dict_in_generate=True)
        ref = out.sequences[0, cfg.prompt_len:].tolist()
        scores = [s[0].float() for s in out.scores]  # [V] per step
        replay = ReplayDrafter([prompt.tolist() + ref], hf.config.vocab_size, cfg.block_size, seed=p, device=dev)
        for name, drafter in (("random-mfd", mfd), ("replay", replay), ("random-domino", domino)):
            for method in METHODS:
                if (name == "replay" and method == "ar") or ((method == "dartree") != (name == "random-domino")):
                    continue
                res = speculative_generate(target, drafter, prompt, cfg.new_tokens, method, budget=cfg.budget)
                rows.append({"prompt": p, "drafter": name, "method": method, "tau": res.tau,
                             **_compare(res.tokens, ref, scores)})
    return rows


def _compare(tokens: list[int], ref: list[int], scores) -> dict:
    """Equal, a bfloat16 near-tie at the first divergence, or a failure."""
    if tokens == ref:
        return {"status": "equal", "first_diff": None, "gap": None}
    i = next((j for j, (a, b) in enumerate(zip(tokens, ref)) if a != b), min(len(tokens), len(ref)))
    if i >= len(ref) or i >= len(tokens):
        return {"status": "FAIL (length)", "first_diff": i, "gap": None}
    s = scores[i]
    gap = float(s[ref[i]] - s[tokens[i]])
    tie = gap <= TIE_RTOL * max(1.0, abs(float(s[ref[i]])))
    return {"status": "near-tie" if tie else "FAIL", "first_diff": i, "gap": gap}


def round_cost(cfg, shape: str, sizes: list[int], torch, dev, dtype, progress: bool = True):
    """The round profile (:func:`~mfd_theory.llm.measure.profile.measure_round_profile`) of a random
    ``shape``-shaped stack of ``profile_layers`` layers with random block drafters (K = 1 for
    chain and ddtree, K = ``num_modes`` for mfd); returns (HF model, {K: drafter}, LatencyProfile)."""
    from mfd_theory.llm import TargetModel, build_drafter
    from mfd_theory.llm.measure.evaluate import Cell
    from mfd_theory.llm.measure.profile import measure_round_profile

    hf = _random_target(shape, cfg.profile_layers, dtype, dev, cfg.seed, cfg.init_std)
    target = TargetModel(hf)
    drafters = {k: build_drafter(hf, cfg.block_size, cfg.draft_layers, num_modes=k, seed=cfg.seed)
                for k in sorted({1, cfg.num_modes})}
    K = cfg.num_modes
    cells = [Cell("chain", "k1", cfg.block_size - 1, drafters[1])]
    cells += [Cell("ddtree", "k1", n, drafters[1]) for n in sizes]
    cells += [Cell("mfd", f"k{K}", n, drafters[K]) for n in sizes]
    g = torch.Generator().manual_seed(cfg.seed + 1)
    prompts = [torch.randint(0, hf.config.vocab_size, (cfg.profile_context,), generator=g)
               for _ in range(cfg.profile_prompts)]
    name = f"verify_latency_{dev.type}" if not cfg.small else f"verify_latency_{dev.type}_small"
    profile = measure_round_profile(
        target, cells, prompts, cfg.profile_tokens, name=name, device=device_tag(dev),
        model=f"random {shape}-shaped Qwen3, {cfg.profile_layers} layers, {cfg.dtype}, batch 1, HF SDPA",
        note=(f"Measured by mfd bench gpu-check: random weights and random {cfg.draft_layers}-layer block drafters "
              f"(K = 1 and {K}), {cfg.profile_prompts} prompt(s) of {cfg.profile_context} tokens, "
              f"{cfg.profile_tokens} new tokens per decode"),
        progress=progress)
    return hf, drafters, profile


def draft_latency(cfg, hf, drafters: dict, contexts: list[int], torch, dev, dtype) -> dict:
    """{"K=k,T=t": ms}: the fastest of ``repeats`` drafting rounds after ``t`` context rows."""

    gen = torch.Generator().manual_seed(cfg.seed)
    feats = torch.randn(1, max(contexts) + 4 * (cfg.repeats + 1), hf.config.hidden_size, generator=gen)
    feats = drafters[1].hidden_norm(feats.to(dev, dtype)).detach()
    out = {}
    for k, d in drafters.items():
        draft_round_ms(d, feats, min(contexts), 1, 4)  # first call: buffers, kernels
        for t in contexts:
            out[f"K={k},T={t}"] = draft_round_ms(d, feats, t, cfg.repeats, 4)
    return out



def ceiling_step(cfg, hf, torch, dev) -> dict:
    """``mfd ceiling``'s measurement of one random ``profile_context``-token prompt on ``hf`` at T = 1
    (:func:`~mfd_theory.llm.measure.ceiling.prompt_ceiling`): the oracle tree of ``ceiling_budget``
    nodes, the product and K = 2 trees, ``ceiling_samples`` paths to fit and as many to check."""
    from mfd_theory.llm.measure.ceiling import CeilingOptions, prompt_ceiling

    g = torch.Generator().manual_seed(cfg.seed + 2)
    ctx = torch.randint(0, hf.config.vocab_size, (max(2, cfg.profile_context),), generator=g).tolist()
    n = cfg.ceiling_budget
    opt = CeilingOptions(L=cfg.block_size - 1, budgets=tuple(sorted({1, min(16, n), n})), modes=(1, 2),
                         samples=cfg.ceiling_samples, dead_at=n, batch=min(64, cfg.ceiling_samples))
    return prompt_ceiling(hf, ctx, 1.0, opt, seed=cfg.seed)


def run(cfg, sizes: list[int], contexts: list[int], out_dir, progress: bool = True) -> Result:
    """The five steps on ``cfg`` (a :class:`~mfd_theory.commands.bench.gpu_check.GpuCheckConfig`, ``--small``
    applied) with the round profile's tree ``sizes`` and the drafting ``contexts``; writes the
    latency profile and ``gpu_check_<device>.json``; with ``cfg.e2e``, the run of ``mfd e2e --preset
    micro`` on the device (its config from :mod:`mfd_theory.configs.e2e`, its work
    :func:`~mfd_theory.runs.experiments.e2e.run_e2e`)."""
    from mfd_theory.speedup import load_latency_profile

    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device: {cfg.device!r} requested but CUDA is not available (use --device cpu --small true)")
    out_dir = Path(out_dir)
    dev = torch.device(cfg.device)
    dtype = getattr(torch, cfg.dtype)
    shape = cfg.shape or ("tiny" if cfg.small else "qwen3-8b")
    start = time.perf_counter()
    elapsed: dict[str, float] = {}

    def step(i: int, what: str):
        if progress:
            print(f"[{i}/5] {what} ...", flush=True)
        return time.perf_counter()

    def done(key: str, t0: float):
        elapsed[key] = time.perf_counter() - t0
        if progress:
            print(f"      {elapsed[key]:.1f} s (total {time.perf_counter() - start:.1f} s of the "
                  f"{cfg.time_budget_s:.0f} s budget)", flush=True)

    if progress:
        print(f"gpu-check on {dev} ({shape} shape, {cfg.dtype})", flush=True)
    t0 = step(1, "greedy equality against HF generate")
    rows = greedy_check(cfg, shape, torch, dev, dtype)
    done("greedy", t0)
    t0 = step(2, "round profile (measure_round_profile)")
    hf, drafters, profile = round_cost(cfg, shape, sizes, torch, dev, dtype, progress)
    done("round_profile", t0)
    t0 = step(3, "drafting latency by context")
    draft_ms = draft_latency(cfg, hf, drafters, contexts, torch, dev, dtype)
    done("draft_latency", t0)
    ceiling = None
    if cfg.ceiling:
        t0 = step(4, "the ceiling: oracle, product and K = 2 trees on the profile stack")
        ceiling = ceiling_step(cfg, hf, torch, dev)
        done("ceiling", t0)
    del hf, drafters  # the profile stack's memory, before the e2e run
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    tag = device_tag(dev)
    if dev.type == "cuda":
        profile.device = f"{tag} ({torch.cuda.get_device_name(dev)})"
    prof = {**profile.to_dict(), "provenance": provenance()}
    path = out_dir / f"{profile.name}.json"
    atomic_write_text(path, json.dumps(prof, indent=1) + "\n")
    load_latency_profile(path, make_monotone=True)  # the speedup model reads it
    e2e = None
    if cfg.e2e:
        t0 = step(5, "mfd e2e --preset micro")
        from mfd_theory.configs.e2e import preset_config
        from mfd_theory.runs.experiments.e2e import run_e2e

        res = run_e2e(preset_config("micro", device=cfg.device), out_dir / "gpu_check_e2e", progress=progress)
        done("e2e", t0)
        e2e = {"out": str(out_dir / "gpu_check_e2e"), "result": res.name}
    total = time.perf_counter() - start
    data = {"device": tag, "shape": shape, "greedy": rows, "latency_profile": str(path),
            "round_profile": profile.to_dict(), "draft_ms": draft_ms, "ceiling": ceiling, "e2e": e2e,
            "elapsed_s": elapsed, "total_s": total, "time_budget_s": cfg.time_budget_s,
            "within_budget": total <= cfg.time_budget_s}
    result = Result("gpu_check", dataclasses.asdict(cfg), data, seed=cfg.seed)
    result.save(out_dir / f"gpu_check_{dev.type}{'_small' if cfg.small else ''}.json")
    return result


