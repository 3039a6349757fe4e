"""The torch half of ``mfd real`` (:mod:`mfd_theory.commands.experiments.real`): prompt sets, the
lossless check and the ceiling on each shipped target, pooled into ``real.json``."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from mfd_theory.ceiling_stats import pool_ceiling
from mfd_theory.llm.measure.ceiling import CeilingOptions, TargetScorer, measure_ceiling, oracle_tree_of
from mfd_theory.llm.measure.lossless import greedy_equality, walk_chi_square
from mfd_theory.llm.models.gguf import read_provenance, resolve_target
from mfd_theory.llm.models.target import load_local_target
from mfd_theory.llm.training.prompts import read_prompt_files, render, shuffle_take
from mfd_theory.llm.training.real_prompts import write_prompt_sets
from mfd_theory.llm.training.train import config_hash
from mfd_theory.results import Result, atomic_write_text, wrote
from mfd_theory.validation import make_out_dir

__all__ = ["ceiling_options", "eval_prompts", "run"]

DOMAINS = ("code", "prose")


def ceiling_options(config) -> CeilingOptions:
    return CeilingOptions(L=config.block_length, budgets=tuple(config.budgets), modes=tuple(config.modes),
                          scorers=tuple(config.scorers), samples=config.samples, eps=config.dead_eps,
                          dead_at=config.dead_at, batch=config.samples, lookahead=config.lookahead,
                          fit_restarts=config.fit_restarts, fit_iters=config.fit_iters).check()


def eval_prompts(prompt_dir: Path, n: int) -> dict[str, list]:
    """Per domain, the first ``n`` evaluation prompts after a shuffle with seed 0."""
    out = {}
    for dom in DOMAINS:
        prompts = read_prompt_files([prompt_dir / f"{dom}-eval.jsonl"])
        out[dom] = [dataclasses.replace(p, dataset=dom) for p in shuffle_take(prompts, n)]
    return out


def _dtype_key(model) -> tuple:
    """What a cached record depends on beyond the config: the target's dtype (float32 keeps the
    key it always had, so records made before the numerics option stay valid)."""
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    return () if dtype == "float32" else (dtype,)


def _lossless(model, tok, prompts: dict, config, out: Path, name: str, progress: bool) -> dict:
    path = out / "lossless" / f"{name}.json"
    random_tokens = config.lossless_random_tokens or None  # 0: every drafter decodes --lossless-tokens
    key = config_hash(config.lossless_prompts, config.lossless_tokens, config.lossless_budget, config.block_length,
                      config.walk_draws, config.seed, *_dtype_key(model), *(() if random_tokens is None
                                                                           else (("random_tokens", random_tokens),)))
    if path.is_file():
        rec = json.loads(path.read_text())
        if rec.get("key") == key:
            return rec
    half = (config.lossless_prompts + 1) // 2
    chosen = prompts["code"][:half] + prompts["prose"][: config.lossless_prompts - half]
    ids = [render(p.messages, tok) for p in chosen]
    t0 = time.perf_counter()
    rec = greedy_equality(model, ids, config.lossless_tokens, config.lossless_budget, config.block_length + 1,
                          seed=config.seed, progress=progress, random_tokens=random_tokens)
    rec["prompt_ids"] = [f"{p.dataset}/{p.id}" for p in chosen]
    if not rec["ok"]:  # float32: any difference; a lower precision: a difference that is not a near-tie
        bad = [f"{r['drafter']} {r['method']} prompt {r['prompt']}" for r in rec["rows"] if r["bug"]]
        raise RuntimeError(f"{name}: decoding is not lossless in {rec['dtype']}: {', '.join(bad[:5])}"
                           + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""))
    scorer = TargetScorer(model, ids[0], 4, 1.0, 1024)
    tree = oracle_tree_of(scorer, 24, 32)  # the target's own top 24 prefixes: branches it takes often
    rec["walk"] = walk_chi_square(model, ids[0], tree, config.walk_draws, 1.0, seed=config.seed)
    rec.update(key=key, wall_s=round(time.perf_counter() - t0, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(rec))
    return rec


def _ceiling(model, tok, prompts: dict, config, out: Path, name: str, progress: bool) -> dict:
    opts = ceiling_options(config)
    contexts = [(p.dataset, p.id, render(p.messages, tok)) for dom in DOMAINS for p in prompts[dom]]
    key = config_hash(opts, list(config.temperatures), config.seed, name, *_dtype_key(model))
    cdir = out / "ceiling" / name
    t0 = time.perf_counter()
    records = measure_ceiling(model, contexts, config.temperatures, opts, seed=config.seed, out_dir=cdir / "prompts",
                              key=key, progress=progress)
    pooled = pool_ceiling(records)
    data = {"records": records, "pooled": pooled, "wall_s": round(time.perf_counter() - t0, 1)}
    atomic_write_text(cdir / "ceiling.json", json.dumps(data))
    return pooled


def run(config, out_dir, progress: bool = True) -> Result:
    out = make_out_dir(Path(out_dir), "--out")
    t0 = time.perf_counter()
    manifest = write_prompt_sets(out / "prompts")
    prompts = eval_prompts(out / "prompts", config.prompts_per_domain)
    targets = {}
    for name in config.targets:
        t1 = time.perf_counter()
        model, tok = load_local_target(resolve_target(name), "cpu", "auto")
        entry = {"provenance": read_provenance(resolve_target(name)),
                 "architecture": model.config.model_type,
                 "n_parameters": int(sum(p.numel() for p in model.parameters()))}
        if "lossless" in config.stages:
            entry["lossless"] = _lossless(model, tok, prompts, config, out, name, progress)
        if "ceiling" in config.stages:
            entry["ceiling"] = _ceiling(model, tok, prompts, config, out, name, progress)
        entry["wall_s"] = round(time.perf_counter() - t1, 1)
        targets[name] = entry
        del model
    data = {"prompts": manifest, "eval_prompt_ids": {d: [p.id for p in ps] for d, ps in prompts.items()},
            "targets": targets, "wall_s": round(time.perf_counter() - t0, 1)}
    res = Result("real", config=dataclasses.asdict(config), data=data, seed=config.seed)
    path = out / "real.json"
    existed = path.exists()
    res.save(path)
    wrote(path, existed)
    return res
