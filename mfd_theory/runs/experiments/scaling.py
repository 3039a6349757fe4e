"""``mfd scaling``: held-out HumanEval tau against the number of training tokens, for a product and an
MFD drafter trained by the same recipe on growing prefixes of the same corpus.

:func:`plan` lays out the runs (``drafters/<kind>-<tokens>-s<seed>/``, each a ``mfd train-drafter``
run on the first ``tokens`` tokens of the corpus, and ``tau/<kind>-<tokens>-s<seed>/``, its ``mfd
tau`` record); :func:`run` trains and measures what is not finished (a training resumes from its
checkpoints; a tau record is kept once written for that drafter) and then :func:`assemble`\\ s
``scaling.json``: per drafter its kind, seed, data (sequences, tokens, answer tokens, the draft
vocabulary's coverage of its own answers and of HumanEval's), training (seconds, steps, loss) and
the per-problem tau of every cell at the chosen budget, read from the tau records. The curve and
MFD's gain at each size are computed from that file by :func:`mfd_theory.report.scaling.curve`
(the ``real-scaling`` block), so ``mfd report --check`` recomputes them from the committed record.

Runs made elsewhere join through ``--reuse RUN=TAU``: a train-drafter run directory and the tau
record that measured it (their kind, seed and size are read from the run's ``train_config.json``).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from mfd_theory.results import Result

__all__ = ["Job", "assemble", "plan", "read_run", "run"]

#: the set whose per-problem tau the curve reads (all 164 HumanEval problems)
SET = "code-eval"


@dataclasses.dataclass(frozen=True)
class Job:
    """One drafter of the curve: train-drafter preset ``preset`` on the first ``tokens`` tokens,
    seed ``seed``, trained into ``run_dir`` and measured into ``tau_file`` (``mfd tau``'s record); ``reused``: made elsewhere
    (``--reuse``), never trained or measured here."""

    preset: str
    tokens: int
    seed: int
    run_dir: Path
    tau_file: Path
    reused: bool = False


def plan(config, out: str | Path) -> list[Job]:
    """Every drafter ``config`` asks for, in the order they run: each ``kinds`` preset at each of
    ``sizes`` (largest first) for seeds 0..``seeds``-1, and 0..``largest_seeds``-1 at the largest
    size; a ``--reuse`` run of the same preset kind (its K and method), size and seed takes that
    job's place."""
    out = Path(out)
    reused = [read_reuse(r) for r in config.reuse]
    jobs = []
    top = max(config.sizes)
    # the largest size first and every kind at one size before the next size: a run cut short has
    # whole comparisons at the sizes it reached
    for tokens in sorted(config.sizes, reverse=True):
        for preset in config.kinds:
            kind = preset_kind(preset)
            for seed in range((config.largest_seeds if tokens == top else config.seeds)):
                hit = [j for j, info in reused if info["kind"] == kind and info["max_tokens"] == tokens
                       and info["seed"] == seed]
                if hit:
                    jobs.append(dataclasses.replace(hit[0], preset=preset))
                    continue
                name = f"{preset}-{tokens}-s{seed}"
                jobs.append(Job(preset, tokens, seed, out / "drafters" / name, out / "tau" / name / "tau.json"))
    return jobs


def preset_kind(preset: str) -> str:
    """The kind a train-drafter preset trains: ``K=<modes>`` for a block drafter, ``dartree``."""
    from mfd_theory.configs.options import preset_values
    from mfd_theory.configs.pipeline.train_drafter import TrainDrafterConfig

    v = preset_values(TrainDrafterConfig, "train_drafter", preset)
    return "dartree" if v.get("kind") == "dartree" else f"K={int(v.get('modes', 1))}"


def _kind_of(cfg: dict) -> str:
    return "dartree" if cfg.get("kind") == "dartree" else f"K={int(cfg['train']['num_modes'])}"


def read_reuse(text: str) -> tuple[Job, dict]:
    """``RUN=TAU`` (``--reuse``): the job of a train-drafter run made elsewhere and the tau record
    that measured it, with what its ``train_config.json`` says (kind, seed, corpus size)."""
    run_dir, sep, tau = text.partition("=")
    if not sep or not run_dir or not tau:
        raise ValueError(f"--reuse: give RUN_DIR=TAU_JSON (a train-drafter run and the tau record that measured it), "
                         f"got {text!r}")
    run_dir, tau = Path(run_dir), Path(tau)
    cfg_path = run_dir / "train_config.json"
    if not cfg_path.is_file():
        raise ValueError(f"--reuse: {run_dir} is not a train-drafter run (no train_config.json)")
    if not tau.is_file():
        raise ValueError(f"--reuse: no tau record at {tau}")
    cfg = json.loads(cfg_path.read_text())
    corpus = cfg.get("corpus") or {}
    if "max_tokens" not in corpus:
        raise ValueError(f"--reuse: {run_dir} was not trained on a corpus prefix (its train_config.json has no "
                         "corpus.max_tokens)")
    info = {"kind": _kind_of(cfg), "max_tokens": int(corpus["max_tokens"]), "seed": int(cfg["train"]["seed"])}
    return Job("", info["max_tokens"], info["seed"], run_dir, tau, reused=True), info


def trained(run_dir: Path) -> bool:
    """Whether the train-drafter run in ``run_dir`` reached its last step (its run record says so)."""
    rec, cfg = run_dir / "run_record.json", run_dir / "train_config.json"
    if not (rec.is_file() and cfg.is_file() and (run_dir / "drafter").is_dir()):
        return False
    try:
        steps = int(json.loads(cfg.read_text())["train"]["steps"])
        last = max(int(s.get("last_step", 0)) for s in json.loads(rec.read_text()).get("sessions", [{}]))
    except (ValueError, KeyError, TypeError):
        return False
    return last >= steps


def measured(job: Job) -> bool:
    """Whether ``job``'s tau record exists and measured this job's drafter."""
    path = job.tau_file
    if not path.is_file():
        return False
    try:
        return _record_drafter(json.loads(path.read_text()), job.run_dir) is not None
    except (ValueError, KeyError, TypeError):
        return False


def train_argv(config, job: Job) -> list[str]:
    argv = ["--preset", job.preset, "--target", config.target, "--data", config.data, "--max-tokens", str(job.tokens),
            "--seed", str(job.seed), "--threads", str(config.threads), "--out", str(job.run_dir)]
    if config.features_dir:
        argv += ["--features-dir", config.features_dir]
    if config.train_numerics:
        argv += ["--numerics", config.train_numerics]
    return ["train-drafter", *argv]


def tau_argv(config, job: Job) -> list[str]:
    argv = ["--preset", config.tau_preset, "--target", config.target, "--budgets", str(config.budget),
            "--cache-dir", config.cache_dir, "--threads", str(config.threads), "--drafter", str(job.run_dir),
            "--out", str(job.tau_file.parent)]
    if config.tau_numerics:
        argv += ["--numerics", config.tau_numerics]
    return ["tau", *argv]


def run(config, out: str | Path, *, quiet: bool = False, assemble_only: bool = False) -> Result:
    """Train and measure every job of :func:`plan` that is not finished, each step an ``mfd`` process
    of its own (its numerics are set before torch starts), saving ``scaling.json`` under ``out``
    after each measured job (the finished ones, the others listed as pending), so a run stopped
    halfway leaves its curve so far. ``assemble_only``: train and measure nothing, only write it."""
    out = Path(out)
    jobs = plan(config, out)
    flags = ["--quiet"] if quiet else []
    save = lambda: _partial(jobs, config).save(out / "scaling.json")  # noqa: E731
    for i, job in enumerate([] if assemble_only else jobs):
        if job.reused:
            continue
        where = f"[{i + 1}/{len(jobs)}] {job.preset} on {job.tokens:,} tokens, seed {job.seed}"
        if not trained(job.run_dir):
            print(f"{where}: train-drafter -> {job.run_dir}", flush=True)
            _step(train_argv(config, job) + flags)
        if not measured(job):
            print(f"{where}: tau -> {job.tau_file.parent}", flush=True)
            _step(tau_argv(config, job) + flags)
            save()
    if not any(j.reused or measured(j) for j in jobs):
        raise ValueError(f"scaling: no drafter of the curve is measured yet under {out} (run without --assemble)")
    res = _partial(jobs, config)
    res.save(out / "scaling.json")
    return res


def _partial(jobs: list[Job], config) -> Result:
    """:func:`assemble` of the jobs measured so far; the others are listed in ``data["pending"]``."""
    done = [j for j in jobs if j.reused or measured(j)]
    res = assemble(done, config.budget, config=dataclasses.asdict(config))
    res.data["pending"] = [{"preset": j.preset, "tokens": j.tokens, "seed": j.seed, "trained": trained(j.run_dir)}
                           for j in jobs if j not in done]
    return res


def _step(argv: list[str]) -> None:
    """``mfd ARGV`` (train-drafter or tau) in a new process (this module's ``__main__``); a failure
    stops the run with the step's command line."""
    cmd = [sys.executable, "-m", "mfd_theory.runs.experiments.scaling", *argv]
    rc = subprocess.run(cmd).returncode
    if rc:
        print(f"mfd scaling: step failed (exit {rc}): mfd {' '.join(argv)}", file=sys.stderr)
        raise SystemExit(rc)


def _record_drafter(rec: dict, run_dir: Path) -> dict | None:
    """The entry of ``rec`` (a tau record) that measured the drafter of ``run_dir``: its path is
    the run directory or the run's ``drafter/`` folder, compared by the run's folder name (tau
    records keep the path as given, relative or absolute)."""
    name = Path(run_dir).name
    hits = []
    for d in rec["data"]["drafters"]:
        p = Path(str(d["drafter"]).rstrip("/"))
        if (p.name == "drafter" and p.parent.name == name) or p.name == name:
            hits.append(d)
    if len(hits) > 1:
        raise ValueError(f"tau record: {len(hits)} drafters named {name!r}")
    return hits[0] if hits else None


def read_run(job: Job, budget: int) -> dict:
    """One row of ``scaling.json``: ``job``'s run (train_config.json, run_record.json,
    loss_curve.json) and the per-problem tau of every cell of its tau record at ``budget``."""
    run_dir = Path(job.run_dir)
    cfg = json.loads((run_dir / "train_config.json").read_text())
    rec_path = run_dir / "run_record.json"
    record = json.loads(rec_path.read_text()) if rec_path.is_file() else {}
    curve_path = run_dir / "loss_curve.json"
    curve = json.loads(curve_path.read_text()) if curve_path.is_file() else []
    losses = [float(r["loss"]) for r in curve if isinstance(r, dict) and "loss" in r]
    acc1 = [float(r["acc1"]) for r in curve if isinstance(r, dict) and r.get("acc1") is not None]
    tau = json.loads(job.tau_file.read_text())
    d = _record_drafter(tau, run_dir)
    if d is None:
        raise ValueError(f"{job.tau_file}: measured no drafter of {run_dir}")
    if SET not in d["sets"]:
        raise ValueError(f"{job.tau_file}: has no {SET} set (the curve reads all of HumanEval)")
    s = d["sets"][SET]
    b = s["budgets"].get(str(budget))
    if b is None:
        raise ValueError(f"{job.tau_file}: no budget {budget} (it has {', '.join(s['budgets'])})")
    corpus, vocab = cfg.get("corpus") or {}, cfg.get("draft_vocab") or {}
    sessions = record.get("sessions") or []
    prov = (sessions[0].get("provenance") if sessions else None) or {}
    tprov = tau.get("provenance") or {}
    return {
        "kind": _kind_of(cfg), "preset": job.preset or None, "seed": int(cfg["train"]["seed"]),
        "max_tokens": int(corpus.get("max_tokens", job.tokens)), "tokens": corpus.get("tokens"),
        "sequences": cfg.get("n_sequences"), "answer_tokens": vocab.get("answer_tokens"),
        "distinct_answer_tokens": vocab.get("distinct"), "draft_vocab": vocab.get("size"),
        "vocab_coverage_train": vocab.get("coverage"), "vocab_coverage_eval": (s.get("draft_vocab_coverage") or {}).get("coverage"),
        "steps": int(cfg["train"]["steps"]), "train_seconds": record.get("train_seconds"),
        "train_host": (prov.get("numerics") or {}).get("cpu"), "train_numerics": (prov.get("numerics") or {}).get("mode"),
        "train_git_sha": prov.get("git_sha"), "ids_sha256": corpus.get("ids_sha256"),
        "loss_first": losses[0] if losses else None,
        "loss_last50": sum(losses[-50:]) / len(losses[-50:]) if losses else None,
        "acc1_last50": sum(acc1[-50:]) / len(acc1[-50:]) if acc1 else None,
        "run_dir": str(run_dir), "tau_record": str(job.tau_file),
        "tau_git_sha": tprov.get("git_sha"), "tau_created": tprov.get("created"),
        "tau_host": (tprov.get("numerics") or {}).get("cpu"), "tau_dtype": tau["data"].get("dtype"),
        "temperature": tau["data"].get("temperature"), "prompts": b.get("sequences"),
        "eval_answer_tokens": b.get("answer_tokens"), "budget": int(budget),
        "cells": [{"method": c["method"], "scorer": c.get("scorer"), "tau": float(c["tau"]),
                   "per_problem_tau": [float(x) for x in c["per_sequence_tau"]]} for c in b["cells"]],
    }


def assemble(jobs: list[Job], budget: int, config: dict | None = None) -> Result:
    """``scaling.json``: one :func:`read_run` row per job (every one must be trained and measured)."""
    missing = [str(j.run_dir) for j in jobs if not j.tau_file.is_file()]
    if missing:
        raise ValueError(f"scaling: no tau record yet for {', '.join(missing)}")
    rows = [read_run(j, budget) for j in jobs]
    return Result("scaling", config or {}, {"budget": int(budget), "set": SET, "drafters": rows},
                  seed=sorted({r["seed"] for r in rows}))


def _main(argv: list[str]) -> int:
    """A step's process: ``train-drafter ARGS`` or ``tau ARGS`` through its command's entry point."""
    from mfd_theory.runs.pipeline.entry import tau_main, train_drafter_main

    cmd, rest = argv[0], argv[1:]
    entry = {"train-drafter": train_drafter_main, "tau": tau_main}[cmd]
    try:
        entry(rest)
    except ValueError as exc:  # bad input: one line, as mfd says it
        print(f"mfd {cmd}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
