"""The torch half of ``mfd real-drafters`` (:mod:`mfd_theory.commands.experiments.real_drafters`):
prompts, distilled answers, every kind of drafter for every seed on one shared target-feature pass,
``mfd eval`` per seed, and the replicated verdicts, into ``real_drafters.json``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from pathlib import Path

import torch

from mfd_theory.commands.experiments.e2e_run import replicated_comparisons
from mfd_theory.commands.experiments.own_target_run import Steps
from mfd_theory.llm.models.gguf import read_provenance, resolve_target
from mfd_theory.llm.training.prompts import read_prompt_files, shuffle_take
from mfd_theory.llm.training.real_prompts import write_prompt_sets
from mfd_theory.llm.training.train import config_hash
from mfd_theory.results import Result, atomic_write_text, wrote
from mfd_theory.validation import make_out_dir

__all__ = ["run", "study_pairs", "write_run_prompts"]

DOMAINS = ("code", "prose")


def _jsonl(path: Path, prompts: list) -> Path:
    lines = [json.dumps({"id": p.id, "dataset": p.dataset,
                         "messages": [{"role": r, "content": c} for r, c in p.messages]}) for p in prompts]
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def write_run_prompts(pdir: Path, config) -> dict[str, Path]:
    """The files the run reads, from the prompt sets in ``pdir``: per domain the first n of each
    split after a shuffle with seed 0 (train, calib: pooled over the domains; eval: one per domain)."""
    take = {"train": config.train_prompts, "calib": config.calibration_prompts, "eval": config.eval_prompts}
    paths = {}
    for split in ("train", "calib"):
        rows = []
        for dom in DOMAINS:
            rows += shuffle_take(read_prompt_files([pdir / f"{dom}-{split}.jsonl"]), take[split])
        paths[split] = _jsonl(pdir / f"{split}.jsonl", rows)
    for dom in DOMAINS:
        rows = shuffle_take(read_prompt_files([pdir / f"{dom}-eval.jsonl"]), take["eval"])
        paths[dom] = _jsonl(pdir / f"{dom}.jsonl", [dataclasses.replace(p, dataset=dom) for p in rows])
    return paths


def _train_key(config, kind: str, seed: int, distill_key: str) -> str:
    fields = ("block_size", "layers", "target_layer_ids", "draft_vocab", "init_layers", "steps", "batch_size",
              "blocks_per_seq", "lr")
    return config_hash(kind, seed, distill_key, {f: getattr(config, f) for f in fields})


class _Trainer:
    """The target loaded once for training, the distilled data and one feature pass shared by every
    drafter trained in this process (made on first use)."""

    def __init__(self, config, kinds: dict, target_dir: str, data_dir: Path, progress: bool):
        self.config, self.kinds, self.target_dir, self.data_dir = config, kinds, target_dir, data_dir
        self.progress = progress
        self.target = self.features = self.data = None

    def _load(self):
        from mfd_theory.llm.models.target import load_local_target
        from mfd_theory.llm.training.distill import load_distill_data
        from mfd_theory.llm.training.train import TargetFeatures

        if self.target is None:
            self.target, _ = load_local_target(self.target_dir, "cpu", "float32")
            self.data = load_distill_data(self.data_dir)
            seqs = self.data[0]
            t0 = time.perf_counter()
            for p in self.target.parameters():
                p.requires_grad_(False)
            self.features = TargetFeatures(self.target.eval(), seqs, self.config.target_layer_ids,
                                           progress=self.progress)
            self.feature_seconds = round(time.perf_counter() - t0, 1)

    def train(self, kind: str, seed: int, run_dir: Path) -> dict:
        from mfd_theory.commands.pipeline.train_drafter_run import (
            frequent_tokens, init_layers_from_target, write_distilled_prompts,
        )
        from mfd_theory.llm.models.drafter import build_drafter
        from mfd_theory.llm.training.train import DrafterTrainConfig, train_drafter

        self._load()
        cfg, (seqs, plens, _) = self.config, self.data
        K, dkind = self.kinds[kind]
        vocab_note = None
        ids = None
        if cfg.draft_vocab:
            ids, vocab_note = frequent_tokens(seqs, plens, cfg.draft_vocab, int(self.target.config.vocab_size))
        drafter = build_drafter(self.target, cfg.block_size, cfg.layers, num_modes=K, seed=seed, kind=dkind,
                                target_layer_ids=list(cfg.target_layer_ids), draft_vocab=ids)
        if cfg.init_layers == "target":
            init_layers_from_target(drafter, self.target)
        tcfg = DrafterTrainConfig(block_size=cfg.block_size, num_layers=cfg.layers, num_modes=K,
                                  batch_size=cfg.batch_size, blocks_per_seq=cfg.blocks_per_seq, steps=cfg.steps,
                                  lr=cfg.lr, warmup=max(1, cfg.steps // 25), ckpt_every=max(1, cfg.steps // 3),
                                  seed=seed)
        t0 = time.perf_counter()
        curve = train_drafter(self.target, drafter, seqs, plens, run_dir, tcfg, progress=self.progress,
                              desc=f"{kind} s{seed}", features=self.features,
                              extra_config={"kind": dkind, "draft_vocab": vocab_note, "init_layers": cfg.init_layers})
        write_distilled_prompts(run_dir / "drafter", seqs, plens)
        rec = {"kind": kind, "seed": seed, "seconds": round(time.perf_counter() - t0, 1),
               "final_loss": float(curve[-1]["loss"]) if curve else None,
               "first_loss": float(curve[0]["loss"]) if curve else None, "draft_vocab": vocab_note}
        atomic_write_text(run_dir / "study.json", json.dumps(rec) + "\n")
        return rec


def _eval_argv(config, modes: dict, target: str, drafters: list[Path], files: dict, out: Path,
               quiet: list[str]) -> list[str]:
    methods = ["ar", "chain", "ddtree"] + (["mfd"] if any(modes[k] > 1 for k in config.kinds) else []) + (
        ["dartree"] if "dartree" in config.kinds else [])
    return ["--target", target, "--drafter", *map(str, drafters), "--prompts", str(files["code"]), str(files["prose"]),
            "--calibration-prompts", str(files["calib"]), "--calibration-count", str(config.calibration_prompts),
            "--methods", *methods, "--scorers", "mixture", "best_mode", "--ddtree-on-mfd", "false",
            "--budgets", *map(str, config.budgets), "--temperatures", *map(str, config.temperatures),
            "--max-new-tokens", str(config.eval_tokens), "--passes", str(config.passes), "--profile-prompts", "1",
            "--seed", "0", "--threads", str(config.threads), "--out", str(out), *quiet]


def _cell(method: str, drafter: str, budget: int, scorer) -> tuple:
    return (method, drafter, int(budget), scorer)


def study_pairs(choices: list[dict], predictions: list[dict], modes: dict, block_size: int, temps,
                datasets) -> list[dict]:
    """The comparisons, per data set and temperature, at the budgets ``choices`` (one seed's
    calibration) picked: each MFD tree (both scorers) and DARTree against the product method the
    theory predicted faster (the chain, or DDTree at its chosen budget); and the best-mode tree
    against the mixture tree of each MFD drafter. ``modes``: each kind's K, in the run's order. Entries as :func:`replicated_comparisons` reads."""
    out = []
    L = block_size - 1
    for ds in datasets:
        for temp in temps:
            chosen = {(c["method"], c["drafter"], c.get("scorer")): int(c["budget"]) for c in choices
                      if float(c["temperature"]) == float(temp) and c.get("dataset") in (ds, None)}
            speed = {_cell(p["method"], p["drafter"], p["budget"], p.get("scorer")): p.get("predicted_speedup")
                     for p in predictions if float(p["temperature"]) == float(temp) and p.get("dataset") in (ds, None)}

            def cell(method, drafter, scorer=None):
                n = chosen.get((method, drafter, scorer))
                return None if n is None else _cell(method, drafter, n, scorer)

            product = [c for c in (_cell("chain", "product", L, None), cell("ddtree", "product")) if c is not None]
            base = max(product, key=lambda c: speed.get(c) if speed.get(c) is not None else -math.inf)

            def add(question, a, b):
                if a is not None and b is not None:
                    out.append({"question": question, "dataset": ds, "temperature": float(temp), "a": a, "b": b})

            for k in modes:
                if modes[k] > 1:
                    for sc in ("mixture", "best_mode"):
                        add("against_product", cell("mfd", k, sc), base)
            if "dartree" in modes:
                add("against_product", cell("dartree", "dartree"), base)
            for k in modes:
                if modes[k] > 1:
                    add("scorer", cell("mfd", k, "best_mode"), cell("mfd", k, "mixture"))
    return out


def _by_cell(rows: list[dict], ds: str) -> dict:
    return {(float(r["temperature"]), *_cell(r["method"], r["drafter"], r["budget"], r.get("scorer"))): r
            for r in rows if r["dataset"] == ds}


def _verdicts(pairs: list[dict], evals: list[dict]) -> list[dict]:
    out = []
    for ds in dict.fromkeys(p["dataset"] for p in pairs):
        mine = [p for p in pairs if p["dataset"] == ds]
        runs = [_by_cell(e["rows"], ds) for e in evals]
        for entry in replicated_comparisons(mine, runs):
            out.append({"dataset": ds, **entry})
    return out


_ROW_KEEP = ("dataset", "method", "scorer", "drafter", "K", "budget", "temperature", "tau", "speedup",
             "tokens_per_s", "accepted_mean", "covered_mass_insample", "pred_gap_z", "dead_share", "matches_ar",
             "mean_tree_size", "predicted_tau", "predicted_speedup")


def run(config, kinds: dict, out_dir, progress: bool = True) -> Result:
    """The study of ``config`` into ``out_dir``; ``kinds``: name -> (K, train-drafter kind) of every
    kind the config may name."""
    from mfd_theory.commands.pipeline import distill, eval as eval_cmd

    out = make_out_dir(Path(out_dir), "--out")
    modes = {k: int(kinds[k][0]) for k in config.kinds}
    steps = Steps(out / "steps.json")
    quiet = [] if progress else ["--quiet"]
    t_all = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        target_dir = resolve_target(config.target)
        pdir = out / "prompts"
        manifest = write_prompt_sets(pdir)
        files = write_run_prompts(pdir, config)
        # the answers depend only on the training prompts: their bytes key the distill step
        prompt_key = config_hash(hashlib.sha256(files["train"].read_bytes()).hexdigest())
        ddir = out / "distill"
        distill_argv = ["--target", config.target, "--prompts", str(files["train"]),
                        "--max-new-tokens", str(config.answer_tokens), "--temperature", str(config.distill_temperature),
                        "--top-p", str(config.distill_top_p), "--top-k", str(config.distill_top_k),
                        "--batch", str(config.distill_batch), "--seed", "0", "--threads", str(config.threads),
                        "--out", str(ddir), *quiet]
        distill_key = config_hash(prompt_key, distill_argv[2:-2 - len(quiet)], config.target)
        steps.run("distill", distill_key, "mfd distill " + " ".join(distill_argv), ddir,
                  lambda: (ddir / "manifest.json").is_file(), lambda: distill.main(distill_argv))

        trainer = _Trainer(config, kinds, target_dir, ddir, progress)
        trained = []
        for seed in range(config.seeds):
            for kind in config.kinds:
                rdir = out / "drafters" / f"s{seed}" / kind
                steps.run(f"train {kind} s{seed}", _train_key(config, kind, seed, distill_key),
                          f"{kind}, seed {seed}", rdir, lambda r=rdir: (r / "study.json").is_file(),
                          lambda k=kind, s=seed, r=rdir: trainer.train(k, s, r))
                trained.append(json.loads((rdir / "study.json").read_text()))
        feature_seconds = getattr(trainer, "feature_seconds", None)
        del trainer

        evals = []
        for seed in range(config.seeds):
            edir = out / "eval" / f"s{seed}"
            dirs = [out / "drafters" / f"s{seed}" / k / "drafter" for k in config.kinds]
            argv = _eval_argv(config, modes, config.target, dirs, files, edir, quiet)
            key = config_hash([_train_key(config, k, seed, distill_key) for k in config.kinds], argv[4:],
                              {n: hashlib.sha256(files[n].read_bytes()).hexdigest() for n in ("calib", *DOMAINS)})
            steps.run(f"eval s{seed}", key, f"mfd eval, seed {seed}", edir, lambda e=edir: (e / "eval.json").is_file(),
                      lambda a=argv: eval_cmd.main(a))
            data = json.loads((edir / "eval.json").read_text())["data"]
            preds = json.loads((edir / "predictions.json").read_text())["data"]
            evals.append({"seed": seed, "rows": data["rows"], "choices": preds["budget_choice"],
                          "predictions": preds["cells"], "prediction": data.get("prediction")})
    finally:
        torch.set_num_threads(threads)

    pairs = study_pairs(evals[0]["choices"], evals[0]["predictions"], modes, config.block_size,
                        config.temperatures, DOMAINS)
    verdicts = _verdicts(pairs, evals) if config.seeds >= 2 else []
    dmanifest = json.loads((ddir / "manifest.json").read_text())
    step_secs = {n: s.get("seconds") for n, s in steps.data["steps"].items()}
    data = {
        "target": config.target, "provenance": read_provenance(target_dir),
        "prompts": manifest, "distill": {k: dmanifest.get(k) for k in ("n_sequences", "n_response_tokens")},
        "trained": trained, "feature_seconds": feature_seconds,
        "runs": [{"seed": e["seed"], "rows": [{k: r.get(k) for k in _ROW_KEEP} for r in e["rows"]],
                  "choices": e["choices"], "prediction": e["prediction"]} for e in evals],
        "pairs": pairs, "verdicts": verdicts, "step_seconds": step_secs,
        "rule": "paired over the evaluated prompts of one data set; each seed's mean log ratio is one observation, "
                f"Student t over the {config.seeds} seeds; Bonferroni over the comparisons of one question at one "
                "data set and temperature; every cell at the budget seed 0's calibration chose (docs/statistics.md)",
        "wall_s_this_run": round(time.perf_counter() - t_all, 1),
    }
    res = Result("real_drafters", config=dataclasses.asdict(config), data=data, seed=0)
    path = out / "real_drafters.json"
    existed = path.exists()
    res.save(path)
    wrote(path, existed)
    return res
