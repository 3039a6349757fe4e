"""The torch half of ``mfd ceiling`` (:mod:`mfd_theory.commands.pipeline.ceiling`): load the target,
render the prompts, measure every prompt at every temperature, pool, write ``ceiling.json``."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from mfd_theory.ceiling_stats import pool_ceiling
from mfd_theory.llm.models.target import load_local_target
from mfd_theory.report.ceiling import ceiling_lines
from mfd_theory.llm.measure.ceiling import CeilingOptions, measure_ceiling
from mfd_theory.llm.training.dist import setup
from mfd_theory.llm.training.prompts import render
from mfd_theory.llm.training.train import config_hash
from mfd_theory.results import Result, wrote
from mfd_theory.validation import make_out_dir

__all__ = ["ceiling_options", "run"]


def ceiling_options(config) -> CeilingOptions:
    """The per-prompt options of a :class:`~mfd_theory.commands.pipeline.ceiling.CeilingConfig`."""
    return CeilingOptions(L=config.block_length, budgets=tuple(config.budgets), modes=tuple(config.modes),
                          scorers=tuple(config.scorers), samples=config.samples, top_k=config.top_k,
                          eps=config.dead_eps, dead_at=config.dead_at, batch=config.batch,
                          max_tokens=config.max_tokens, lookahead=config.lookahead,
                          fit_restarts=config.fit_restarts, fit_iters=config.fit_iters).check()


def run(config, prompts: list, out_dir, progress: bool = True) -> Result:
    """Measure the ceiling of ``config.target`` on ``prompts`` (read and checked) into ``out_dir``."""
    opts = ceiling_options(config)
    device = setup(config.device).device
    model, tok = load_local_target(config.target, device, config.dtype)
    contexts = [(p.dataset, p.id, render(p.messages, tok, config.enable_thinking)) for p in prompts]
    short = [f"{ds}/{pid}" for ds, pid, ids in contexts if len(ids) < 2]
    if short:
        raise ValueError(f"--prompts: {len(short)} prompt(s) render to fewer than two tokens ({short[:3]})")
    out = make_out_dir(Path(out_dir), "--out")
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    key = config_hash(opts, list(config.temperatures), config.seed, str(Path(config.target).resolve()), dtype,
                      config.enable_thinking)
    t0 = time.perf_counter()
    records = measure_ceiling(model, contexts, config.temperatures, opts, seed=config.seed, out_dir=out / "prompts",
                              key=key, progress=progress)
    data = {"records": records, "pooled": pool_ceiling(records), "device": device, "dtype": dtype,
            "wall_s": round(time.perf_counter() - t0, 2)}
    res = Result("ceiling", config=dataclasses.asdict(config), data=data, seed=config.seed)
    path = out / "ceiling.json"
    existed = path.exists()
    res.save(path)
    print("\n".join(ceiling_lines(data["pooled"], config.dead_eps)))
    wrote(path, existed)
    return res
