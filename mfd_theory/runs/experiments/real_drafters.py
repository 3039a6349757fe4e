"""The torch half of ``mfd real-drafters`` (:mod:`mfd_theory.commands.experiments.real_drafters`):
prompts, distilled answers, every kind of drafter for every seed on one shared target-feature pass,
``mfd eval`` per seed, and the replicated verdicts, into ``real_drafters.json``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from mfd_theory.runs.experiments.e2e import replicated_comparisons
from mfd_theory.runs.pipeline.entry import distill_main, eval_main
from mfd_theory.runs.steps import Steps
from mfd_theory.llm.measure.calibration import calibration_gaps
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


def _train_key(config, kind: str, seed: int, distill_key: str, changes: dict | None = None) -> str:
    fields = ("block_size", "layers", "target_layer_ids", "draft_vocab", "init_layers", "steps", "batch_size",
              "blocks_per_seq", "lr")
    parts = [kind, seed, distill_key, {f: getattr(config, f) for f in fields}]
    if config.references:  # runs without reference answers keep the keys they had
        parts.append({"references": config.references, "reference_tokens": config.reference_tokens})
    if changes:  # a recipe variant (the main drafters' keys stay what they were)
        parts.append(changes)
        if changes.get("soft_share"):  # the soft recipe trains on the target's top-k: k changes the weights
            parts.append({"soft_top_k": config.soft_top_k})
    if config.feature_store != "ram":  # features rounded to bfloat16 train other weights
        parts.append({"feature_store": config.feature_store})
    from mfd_theory.numerics import current_numerics

    if current_numerics() != "reproducible":  # other kernels (and perhaps bfloat16) train other weights
        parts.append({"numerics": current_numerics()})
    return config_hash(*parts)


class _Trainer:
    """The target loaded once for training, the distilled data and one feature pass shared by every
    drafter trained in this process (made on first use)."""

    def __init__(self, config, kinds: dict, target_dir: str, data_dir: Path, progress: bool, top_k: int = 0,
                 ref_dir: Path | None = None):
        self.config, self.kinds, self.target_dir, self.data_dir = config, kinds, target_dir, data_dir
        self.ref_dir = ref_dir
        self.progress, self.top_k = progress, top_k
        self.target = self.features = self.data = None

    def _load(self):
        from mfd_theory.llm.models.target import load_local_target
        from mfd_theory.llm.training.distill import load_distill_data
        from mfd_theory.llm.training.train import TargetFeatures

        if self.target is None:
            self.target, _ = load_local_target(self.target_dir, "cpu", "auto")
            self.data = load_distill_data(self.data_dir)
            if self.ref_dir is not None:  # the teacher-forced reference answers after the distilled ones
                rs, rp, _ = load_distill_data(self.ref_dir)
                self.data = (list(self.data[0]) + list(rs), np.concatenate([self.data[1], rp]), self.data[2])
            seqs = self.data[0]
            t0 = time.perf_counter()
            for p in self.target.parameters():
                p.requires_grad_(False)
            self.features = TargetFeatures(self.target.eval(), seqs, self.config.target_layer_ids,
                                           progress=self.progress, top_k=self.top_k, store=self.config.feature_store,
                                           directory=self.data_dir.parent / "features",
                                           cap_mb=self.config.feature_cap_mb)
            self.feature_seconds = round(time.perf_counter() - t0, 1)

    def release(self) -> None:
        """Drop the target, the data and the features (made again on the next use)."""
        self.target = self.features = self.data = None

    def train(self, kind: str, seed: int, run_dir: Path, changes: dict | None = None) -> dict:
        from mfd_theory.runs.pipeline.train_drafter import (
            frequent_tokens, init_layers_from_target, write_distilled_prompts,
        )
        from mfd_theory.llm.models.drafter import build_drafter
        from mfd_theory.llm.training.train import DrafterTrainConfig, train_drafter

        self._load()
        changes = dict(changes or {})
        soft_share = changes.pop("soft_share", 0.0)
        cfg, (seqs, plens, _) = dataclasses.replace(self.config, **changes), self.data
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
                                  seed=seed, soft_share=soft_share, soft_top_k=cfg.soft_top_k)
        features = self.features
        keep = [i for i, (x, p) in enumerate(zip(seqs, plens)) if len(x) - p >= cfg.block_size]
        if len(keep) < len(seqs):  # answers shorter than a block of this recipe hold no training block
            seqs, plens, features = [seqs[i] for i in keep], plens[keep], features.subset(keep)
        t0 = time.perf_counter()
        curve = train_drafter(self.target, drafter, seqs, plens, run_dir, tcfg, progress=self.progress,
                              desc=f"{kind} s{seed}", features=features,
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
            ddt = cell("ddtree", "product")
            for k in modes:
                if modes[k] > 1:
                    for sc in ("mixture", "best_mode"):
                        a = cell("mfd", k, sc)
                        if a is not None and ddt is not None and a[2] == ddt[2]:
                            add("same_n", a, ddt)
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


def run(config, kinds: dict, out_dir, progress: bool = True, recipes: dict | None = None) -> Result:
    """The study of ``config`` into ``out_dir``; ``kinds``: name -> (K, train-drafter kind) of every
    kind the config may name (distill and eval run through their entry points in
    :mod:`mfd_theory.runs.pipeline.entry`); ``recipes``: name -> the options
    each recipe variant changes (the recipe stage). Returns the main stage's Result, or the recipe
    stage's when it runs alone."""
    out = make_out_dir(Path(out_dir), "--out")
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
                  lambda: (ddir / "manifest.json").is_file(), lambda: distill_main(distill_argv))
        rdir = None
        if config.references:
            rdir = out / "references"
            ref_key = config_hash(config.references, config.reference_tokens, config.target, manifest.get("units"))
            steps.run("references", ref_key, f"{config.references} standard-library functions as answers", rdir,
                      lambda: (rdir / "manifest.json").is_file(),
                      lambda: _write_references(config, target_dir, rdir))
        soft = "recipe" in config.stages and any("soft_share" in (recipes or {}).get(r, {}) for r in config.recipes)
        trainer = _Trainer(config, kinds, target_dir, ddir, progress, top_k=config.soft_top_k if soft else 0,
                           ref_dir=rdir)
        common = {"target_dir": target_dir, "manifest": manifest, "files": files, "ddir": ddir, "rdir": rdir,
                  "distill_key": distill_key, "quiet": quiet, "t_all": t_all}
        res = None
        if "main" in config.stages:
            res = _main_stage(config, kinds, out, steps, trainer, common)
        if "recipe" in config.stages:
            rec = _recipe_stage(config, recipes or {}, out, steps, trainer, common, progress)
            res = res or rec
    finally:
        torch.set_num_threads(threads)
    return res


def _write_references(config, target_dir: str, rdir: Path) -> None:
    """The ``--references`` functions as a data set in ``mfd distill``'s layout under ``rdir``."""
    from mfd_theory.llm.models.target import load_local_target
    from mfd_theory.llm.training.distill import write_answer_set
    from mfd_theory.llm.training.real_prompts import reference_answers

    hf, tok = load_local_target(target_dir, "cpu", "auto")
    eos = hf.generation_config.eos_token_id if hf.generation_config is not None else None
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    if eos is None:
        eos = tok.eos_token_id
    seqs, plens, meta, note = reference_answers(tok, config.references, config.reference_tokens, int(eos))
    write_answer_set(rdir, seqs, plens, meta, hf, {"source": "standard-library functions, teacher-forced", **note})


def _main_stage(config, kinds: dict, out: Path, steps: Steps, trainer: "_Trainer", common: dict) -> Result:
    """Every kind for every seed, ``mfd eval`` per seed and the replicated verdicts, into
    ``real_drafters.json``."""

    files, ddir, distill_key, quiet = common["files"], common["ddir"], common["distill_key"], common["quiet"]
    modes = {k: int(kinds[k][0]) for k in config.kinds}
    trained = []
    for seed in range(config.seeds):
        for kind in config.kinds:
            rdir = out / "drafters" / f"s{seed}" / kind
            key = _train_key(config, kind, seed, distill_key)
            # the recipe stage's tokens drafter of this seed is this very drafter when its key is this one
            done = (_finished_drafter(steps, f"recipe tokens s{seed}", out / "recipes" / "tokens" / f"s{seed}", key)
                    if kind == "product" else None)
            if done is not None:
                what, work = (f"{kind}, seed {seed} (the recipe stage's tokens drafter, copied)",
                              lambda d=done, r=rdir: _copy_drafter(d, r))
            else:
                what, work = f"{kind}, seed {seed}", lambda k=kind, s=seed, r=rdir: trainer.train(k, s, r)
            steps.run(f"train {kind} s{seed}", key, what, rdir, lambda r=rdir: (r / "study.json").is_file(), work)
            trained.append(json.loads((rdir / "study.json").read_text()))
    feature_seconds = getattr(trainer, "feature_seconds", None)
    trainer.release()  # the evaluation loads the target itself

    evals = []
    for seed in range(config.seeds):
        edir = out / "eval" / f"s{seed}"
        dirs = [out / "drafters" / f"s{seed}" / k / "drafter" for k in config.kinds]
        argv = _eval_argv(config, modes, config.target, dirs, files, edir, quiet)
        key = config_hash([_train_key(config, k, seed, distill_key) for k in config.kinds],
                          argv[4:len(argv) - len(quiet)],  # printing less is no other evaluation
                          {n: hashlib.sha256(files[n].read_bytes()).hexdigest() for n in ("calib", *DOMAINS)})
        steps.run(f"eval s{seed}", key, f"mfd eval, seed {seed}", edir, lambda e=edir: (e / "eval.json").is_file(),
                  lambda a=argv: eval_main(a))
        data = json.loads((edir / "eval.json").read_text())["data"]
        preds = json.loads((edir / "predictions.json").read_text())["data"]
        evals.append({"seed": seed, "rows": data["rows"], "choices": preds["budget_choice"],
                      "predictions": preds["cells"], "prediction": data.get("prediction"),
                      # the drafter-side C1 (can fail): each drafter's own mass on its calibration trees
                      "drafter_calibration": calibration_gaps((preds.get("calibration") or {}).get("entries"))})

    pairs = study_pairs(evals[0]["choices"], evals[0]["predictions"], modes, config.block_size,
                        config.temperatures, DOMAINS)
    verdicts = _verdicts(pairs, evals) if config.seeds >= 2 else []
    dmanifest = json.loads((ddir / "manifest.json").read_text())
    step_secs = {n: s.get("seconds") for n, s in steps.data["steps"].items()}
    data = {
        "target": config.target, "provenance": read_provenance(common["target_dir"]),
        "prompts": common["manifest"], "distill": {k: dmanifest.get(k) for k in ("n_sequences", "n_response_tokens")},
        "references": _reference_note(common.get("rdir")),
        "trained": trained, "feature_seconds": feature_seconds,
        "runs": [{"seed": e["seed"], "rows": [{k: r.get(k) for k in _ROW_KEEP} for r in e["rows"]],
                  "choices": e["choices"], "prediction": e["prediction"],
                  "drafter_calibration": e["drafter_calibration"]} for e in evals],
        "pairs": pairs, "verdicts": verdicts, "step_seconds": step_secs,
        "rule": "paired over the evaluated prompts of one data set; each seed's mean log ratio is one observation, "
                f"Student t over the {config.seeds} seeds; Bonferroni over the comparisons of one question at one "
                "data set and temperature; every cell at the budget seed 0's calibration chose (docs/statistics.md)",
        "wall_s_this_run": round(time.perf_counter() - common["t_all"], 1),
    }
    return _save("real_drafters", config, data, out)


def _reference_note(rdir: Path | None) -> dict | None:
    """What the reference answers were (their manifest's counts and source), or None."""
    if rdir is None:
        return None
    m = json.loads((rdir / "manifest.json").read_text())
    cfg = m.get("config", {})
    return {"n_sequences": m.get("n_sequences"), "n_response_tokens": m.get("n_response_tokens"),
            **{k: cfg.get(k) for k in ("functions", "dropped_for_leaks", "max_tokens", "sha256")}}


def _save(name: str, config, data: dict, out: Path) -> Result:
    """``data`` as the Result ``name`` in ``out/<name>.json`` (atomically), said on stdout."""
    res = Result(name, config=dataclasses.asdict(config), data=data, seed=0)
    path = out / f"{name}.json"
    existed = path.exists()
    res.save(path)
    wrote(path, existed)
    return res


def heldout_prompts(pdir: Path, config) -> Path:
    """The recipe stage's held-out prompts: per domain the calibration split's prompts after the
    first ``calibration_prompts`` (shuffled with seed 0, as :func:`write_run_prompts` takes them),
    ``heldout_prompts`` of them: never distilled, never evaluated, and not the prompts the main
    stage calibrates on."""
    rows = []
    for dom in DOMAINS:
        pool = shuffle_take(read_prompt_files([pdir / f"{dom}-calib.jsonl"]), config.calibration_prompts
                            + config.heldout_prompts)[config.calibration_prompts:]
        if len(pool) < 2:
            raise ValueError(f"--heldout-prompts: the {dom} calibration split has too few prompts after the "
                             f"{config.calibration_prompts} calibration prompts")
        rows += [dataclasses.replace(p, dataset=dom) for p in pool]
    return _jsonl(pdir / "heldout.jsonl", rows)


def _finished_drafter(steps: Steps, name: str, rdir: Path, key: str) -> Path | None:
    """``rdir`` when step ``name`` finished under ``key`` and its drafter is there, else None: the main
    stage's product drafter and the recipe stage's ``tokens`` drafter of one seed share their key
    (options, data, seed), so either stage can copy the other's instead of training it again (runs
    of one seed give the same bits)."""
    entry = steps.data["steps"].get(name) or {}
    if entry.get("key") == key and entry.get("done") and (rdir / "study.json").is_file():
        return rdir
    return None


def _copy_drafter(src: Path, dst: Path) -> None:
    """The drafter and its training record (``study.json``, its training time kept) of ``src`` into
    ``dst``; a recipe drafter's held-out measurement stays behind."""
    shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("heldout.json"))


def _recipe_stage(config, recipes: dict, out: Path, steps: Steps, trainer: "_Trainer", common: dict,
                  progress: bool) -> Result:
    """Product drafters of each recipe variant and seed, their greedy tau on held-out prompts, each
    variant against ``tokens`` (paired over the prompts, replicated over the seeds), into
    ``real_recipe.json``."""
    from mfd_theory.llm.measure.heldout import heldout_greedy_tau
    from mfd_theory.llm.models.drafter import load_drafter
    from mfd_theory.llm.training.distill import load_distill_data
    from mfd_theory.stats import compare, tau_resolution

    pdir, distill_key, quiet = out / "prompts", common["distill_key"], common["quiet"]
    hfile = heldout_prompts(pdir, config)
    hdir = out / "heldout"
    h_argv = ["--target", config.target, "--prompts", str(hfile), "--max-new-tokens", str(config.heldout_tokens),
              "--temperature", "0", "--batch", str(config.distill_batch), "--seed", "0",
              "--threads", str(config.threads), "--out", str(hdir), *quiet]
    h_key = config_hash(hashlib.sha256(hfile.read_bytes()).hexdigest(), h_argv[2:-2 - len(quiet)], config.target)
    steps.run("heldout answers", h_key, "mfd distill " + " ".join(h_argv), hdir,
              lambda: (hdir / "manifest.json").is_file(), lambda: distill_main(h_argv))
    hseqs, hplens, _ = load_distill_data(hdir)
    hmeta = [json.loads(line) for line in hfile.read_text().splitlines() if line.strip()]

    trained, measured = [], []
    for name in config.recipes:
        changes = {k: (config.soft_share if v is None else v) for k, v in recipes[name].items()}
        for seed in range(config.recipe_seeds):
            rdir = out / "recipes" / name / f"s{seed}"
            key = _train_key(config, "product", seed, distill_key, changes or None)
            done = _finished_drafter(steps, f"train product s{seed}", out / "drafters" / f"s{seed}" / "product", key)
            if done is not None:  # the main stage trained this very drafter (same key): a copy, not a retrain
                what, work = (f"product drafter, recipe {name}, seed {seed} (the main stage's, copied)",
                              lambda d=done, r=rdir: _copy_drafter(d, r))
            else:
                what, work = (f"product drafter, recipe {name}, seed {seed}",
                              lambda s=seed, r=rdir, c=changes: trainer.train("product", s, r, c))
            steps.run(f"recipe {name} s{seed}", key, what, rdir, lambda r=rdir: (r / "study.json").is_file(), work)
            rec = json.loads((rdir / "study.json").read_text())
            trained.append({"recipe": name, "changes": changes, **rec})
    hf = trainer.target  # loaded where a recipe drafter was trained in this process; else on first need
    for name in config.recipes:
        for seed in range(config.recipe_seeds):
            rdir = out / "recipes" / name / f"s{seed}"
            mpath = rdir / "heldout.json"
            made_on = {"heldout_key": h_key, "measured_budgets": [int(n) for n in config.budgets]}
            if mpath.is_file() and {k: json.loads(mpath.read_text()).get(k) for k in made_on} != made_on:
                mpath.unlink()  # measured on other held-out answers or budgets (or before they were kept): again
            if not mpath.is_file():
                if hf is None:  # the target alone: no feature pass for a measurement
                    from mfd_theory.llm.models.target import load_local_target

                    hf, _ = load_local_target(trainer.target_dir, "cpu", "auto")
                    hf.eval().requires_grad_(False)
                drafter = load_drafter(rdir / "drafter", hf).eval()
                got = {**made_on, "budgets": {}}
                for n in config.budgets:
                    got["budgets"][str(n)] = heldout_greedy_tau(hf, drafter, hseqs, hplens, n)
                atomic_write_text(mpath, json.dumps(got) + "\n")
                if progress:
                    taus = {n: [c["tau"] for c in g["cells"]] for n, g in got["budgets"].items()}
                    print(f"recipe {name} s{seed}: held-out greedy tau (chain, ddtree) {taus}", flush=True)
            measured.append({"recipe": name, "seed": seed, **json.loads(mpath.read_text())})

    comparisons = []
    family = max(1, len(config.recipes) - 1)
    answer_tokens = np.array([max(len(x) - int(q), 1) for x, q in zip(hseqs, hplens)], dtype=np.float64)  # [P]
    for n in config.budgets:
        for method in ("chain", "ddtree"):
            def matrix(name):
                rows = [m for m in measured if m["recipe"] == name]
                return np.array([[x for c in m["budgets"][str(n)]["cells"] if c["method"] == method
                                  for x in c["per_sequence_tau"]] for m in rows], dtype=np.float64)
            base = matrix("tokens")
            for name in config.recipes:
                if name == "tokens":
                    continue
                a = matrix(name)
                ok = np.isfinite(a).all(0) & np.isfinite(base).all(0)
                # tau over one answer moves by a whole round: that step floors the interval
                step = tau_resolution(np.maximum(a, base)[:, ok], answer_tokens[ok]) if ok.sum() else None
                cmp = (compare(a[:, ok], base[:, ok], family=family, resolution=step).to_dict()
                       if ok.sum() >= 2 else None)
                comparisons.append({"budget": int(n), "method": method, "recipe": name, "against": "tokens",
                                    "cmp": cmp})
    data = {"target": config.target, "heldout": {"file": hfile.name, "prompts": [m["id"] for m in hmeta],
                                                 "answers": len(hseqs)},
            "references": _reference_note(common.get("rdir")),
            "trained": trained, "measured": measured, "comparisons": comparisons,
            "step_seconds": {n: s.get("seconds") for n, s in steps.data["steps"].items()},
            "rule": "greedy tau on the held-out prompts, exactly as a T = 0 decode of each answer's length measures "
                    "it (mfd_theory.llm.measure.heldout); each variant against tokens paired over the held-out "
                    f"prompts, each seed's mean log ratio one observation, Student t over the {config.recipe_seeds} "
                    f"seeds, Bonferroni over the {family} variants at one method and budget",
            "wall_s_this_run": round(time.perf_counter() - common["t_all"], 1)}
    return _save("real_recipe", config, data, out)
