"""The torch half of ``mfd bench draft`` (:mod:`mfd_theory.commands.bench.bench_draft`): drafting rounds
of the drafter, its folded-modes form and the slow twin at every context, the SDPA floor, and the
target's verify forward with its cache in place and concatenated."""

from __future__ import annotations

import os
import time

import numpy as np
import torch
from tqdm import tqdm

from mfd_theory.configs.options import keeps_torch_threads
from mfd_theory.runs.bench.bench_decode import build_target
from mfd_theory.llm import TargetModel, build_drafter
from mfd_theory.llm.decoding.warmup import warm_up
from mfd_theory.llm.measure.profile import draft_round_ms
from mfd_theory.trees import product_tree

__all__ = ["measure"]


def _attention_ms(drafter, context: int, cfg, torch, folded: bool) -> float:
    """The arithmetic floor: the draft layers' SDPA calls alone (random values, the drafter's
    shapes), fastest of ``rounds``. ``folded``: one masked call over the K modes' folded queries;
    otherwise one unmasked call per mode over [context ; its block]."""
    import torch.nn.functional as F

    from mfd_theory.llm.models.drafter import block_mode_mask

    attn = drafter.layers[0].self_attn
    k, s, d = drafter.num_modes, drafter.block_size, attn.head_dim
    calls, per_call, blocks = (1, k, k) if folded else (k, 1, 1)
    q = torch.randn(1, attn.num_kv_heads, attn.rep * per_call * s, d)  # [1, kvh, rep*K*S | rep*S, d]
    keys, values = torch.randn(2, 1, attn.num_kv_heads, context + blocks * s, d)
    mask = None
    if folded and k > 1:
        mask = torch.zeros(attn.rep * k * s, context + k * s)
        mask[:, context:] = block_mode_mask(k, s, attn.rep, torch.float32, "cpu")
    times = []
    for _ in range(cfg.rounds):
        t0 = time.perf_counter()
        for _layer in drafter.layers:
            for _call in range(calls):
                F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=d ** -0.5)
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def _verify_ms(target, prompt, tree, cfg, torch, copies: bool = False):
    """Fastest ms of verify + commit; with ``copies`` also the fastest ms of the cache
    concatenation ``DynamicCache.update`` does per forward, and of the key/value head repeat HF's
    SDPA and eager paths do per forward for a GQA target given a mask (``repeat_kv``: every cached
    row copied once per query head; 0 without GQA), both on this target's cache."""
    target.prefill(prompt, hidden=False)
    cfg_t = target.config
    groups = cfg_t.num_attention_heads // cfg_t.num_key_value_heads
    ver, cat, rep = [], [], []
    for _ in range(cfg.rounds):
        t0 = time.perf_counter()
        target.verify(1, tree, hidden=True)
        target.commit([])  # keep the root row: the context grows by one per round
        ver.append(time.perf_counter() - t0)
        if not copies:
            continue
        grow = len(tree) + 1
        t0 = time.perf_counter()
        for layer in target.cache.layers:  # what DynamicLayer.update does with the new rows
            torch.cat([layer.keys, layer.keys[:, :, -grow:]], dim=-2)
            torch.cat([layer.values, layer.values[:, :, -grow:]], dim=-2)
        cat.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for layer in target.cache.layers if groups > 1 else ():
            for x in (layer.keys, layer.values):  # [B, kvh, T, d] -> [B, heads, T, d], a copy
                b, kvh, t, d = x.shape
                x[:, :, None].expand(b, kvh, groups, t, d).reshape(b, kvh * groups, t, d)
        rep.append(time.perf_counter() - t0)
    if not copies:
        return 1e3 * min(ver)
    return 1e3 * min(ver), 1e3 * min(cat), 1e3 * min(rep)



@keeps_torch_threads
def measure(config, modes: list[int], contexts: list[int], progress: bool = True) -> dict:
    """Every repeat of the measurement (drafting rounds, SDPA floor, verify forwards), with the
    machine's load around it: ``model``, ``width``, ``repeats``, ``load_avg_1min``, ``cpu_count``."""
    from mfd_theory.llm.models import reference_drafter as twin

    torch.set_num_threads(config.threads)
    dev = torch.device("cpu")
    hf, model_name = build_target(config.shape, config.seed, dev, torch.float32)
    need = max(contexts) + config.rounds * max(config.new_rows, config.verify_nodes + 1) + config.block_size * max(modes)
    if need > hf.config.max_position_embeddings:
        raise ValueError(f"contexts: {max(contexts)} rows plus the timed rounds exceed the target's "
                         f"{hf.config.max_position_embeddings} positions")
    target = TargetModel(hf)
    concat_target = TargetModel(hf, cache_in_place=False)  # HF's DynamicCache as it is
    drafters = {k: build_drafter(hf, config.block_size, config.draft_layers, num_modes=k, seed=config.seed)
                for k in modes}
    folded = {k: build_drafter(hf, config.block_size, config.draft_layers, num_modes=k, seed=config.seed)
              for k in modes if k > 1}  # the same weights (same seed), modes folded into one call
    for drafter in folded.values():
        drafter.fold_modes = True
    g = torch.Generator().manual_seed(config.seed)
    width = hf.config.hidden_size
    feats = torch.randn(1, max(contexts) + config.rounds * config.new_rows, width, generator=g)
    feats = drafters[1].hidden_norm(feats).detach()  # [1, T_max + rounds * new_rows, H]
    log_q = torch.log_softmax(3.0 * torch.randn(config.block_size - 1, 64, generator=g), dim=-1).double().numpy()
    tree = product_tree(np.minimum(log_q, 0.0), config.verify_nodes)
    prompts = {t: torch.randint(0, hf.config.vocab_size - 1, (t,), generator=g) for t in contexts}
    warm_up(target, drafters[max(modes)])
    for drafter in [*drafters.values(), *folded.values()]:  # first calls allocate buffers and pick kernels
        draft_round_ms(drafter, feats, min(contexts), 1, config.new_rows)
    load = [os.getloadavg()[0]]  # the machine's load around the run: timings on a shared machine move with it
    reps = []
    for _ in tqdm(range(config.repeats), desc="repeats", disable=not progress):
        rep = {"draft_ms": {}, "attention_ms": {}, "verify_ms": {}, "verify_concat_ms": {}, "cache_cat_ms": {},
               "kv_repeat_ms": {}}
        for k in modes:
            slow = twin.SlowDraftCache(drafters[k])
            for t in contexts:
                rep["draft_ms"][f"after,K={k},T={t}"] = draft_round_ms(drafters[k], feats, t, config.rounds,
                                                                       config.new_rows)
                if k > 1:
                    rep["draft_ms"][f"folded,K={k},T={t}"] = draft_round_ms(folded[k], feats, t, config.rounds,
                                                                            config.new_rows)
                rep["draft_ms"][f"before,K={k},T={t}"] = draft_round_ms(slow, feats, t, config.rounds, config.new_rows)
                rep["attention_ms"][f"K={k},T={t}"] = _attention_ms(drafters[k], t, config, torch, folded=False)
                if k > 1:
                    rep["attention_ms"][f"folded,K={k},T={t}"] = _attention_ms(drafters[k], t, config, torch,
                                                                               folded=True)
        for t in contexts:
            rep["verify_concat_ms"][t], rep["cache_cat_ms"][t], rep["kv_repeat_ms"][t] = _verify_ms(
                concat_target, prompts[t], tree, config, torch, copies=True)
            rep["verify_ms"][t] = _verify_ms(target, prompts[t], tree, config, torch)
        reps.append(rep)
    load.append(os.getloadavg()[0])
    return {"model": model_name, "width": width, "repeats": reps, "load_avg_1min": load, "cpu_count": os.cpu_count()}
