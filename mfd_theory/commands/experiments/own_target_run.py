"""The work behind ``mfd own-target`` (config and command lines: :mod:`mfd_theory.commands.experiments.own_target`).

Steps ``target`` (the ``mfd e2e`` preset's target, saved into ``OUT/target``), ``prompts``, then the
pipeline commands (``distill``, ``drafter-k<K>``, ``eval``), each run or reused through
:class:`Steps` (``OUT/steps.json``), keyed by its command line and the keys of what it reads.
Design: docs/own-target.md ("Your own target and drafter").
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Callable

import torch

from mfd_theory.results import atomic_write_text, wrote
from mfd_theory.run_records import file_digests

from mfd_theory.commands.experiments.e2e_run import cached_corpus, cached_target, target_run_name
from mfd_theory.validation import make_out_dir
from mfd_theory.llm.models.fingerprint import FINGERPRINT_VERSION
from mfd_theory.llm.training.train import config_hash

__all__ = ["Steps", "run_command_steps", "run_own_target", "write_prompt_files"]


def _first_words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def write_prompt_files(corpus, directory: Path, n_train: int, n_heldout: int, words: int) -> list[Path]:
    """``train.jsonl`` (the first ``n_train`` training documents) and ``heldout.jsonl`` (the first
    ``n_heldout`` held-out ones whose prompt is no training prompt and no earlier held-out one),
    each prompt the first ``words`` words of its document and its id the document's index. Two
    documents can open with the same words: a held-out prompt equal to a distilled one would be
    in-sample for the drafters (and ``mfd eval`` refuses to calibrate on it)."""
    if n_train > len(corpus.train_docs) or n_heldout > len(corpus.heldout_docs):
        raise ValueError(f"prompts: the corpus has {len(corpus.train_docs)} training and {len(corpus.heldout_docs)} "
                         f"held-out documents; asked for {n_train} and {n_heldout}")
    train = [(i, _first_words(d, words)) for i, d in enumerate(corpus.train_docs[:n_train])]
    seen, heldout = {p for _, p in train}, []
    for i, d in enumerate(corpus.heldout_docs):
        p = _first_words(d, words)
        if p not in seen:
            seen.add(p)
            heldout.append((i, p))
        if len(heldout) == n_heldout:
            break
    if len(heldout) < n_heldout:
        raise ValueError(f"prompts: only {len(heldout)} held-out documents open with words no training prompt and no "
                         f"other held-out prompt has; asked for {n_heldout}")
    paths = []
    for name, rows in (("train", train), ("heldout", heldout)):
        lines = [json.dumps({"id": i, "prompt": p}) for i, p in rows]
        path = directory / f"{name}.jsonl"
        atomic_write_text(path, "\n".join(lines) + "\n")
        paths.append(path)
    return paths


def run_command_steps(steps, commands: list[tuple], keys: dict, distill_inputs: list[str], config,
                      quiet: list[str]) -> None:
    """Run the distill / train-drafter / eval ``commands`` (``(name, command, argv, argv relative to
    the output directory, command line)``) as steps of ``steps``, each keyed by its relative command
    line and the keys of what it reads (distill: ``distill_inputs``; a drafter: distill; eval: every
    drafter), so that moving the output directory keeps them valid. ``keys`` gains each step's key.
    Data and drafters record the target's fingerprint: a new fingerprint version redoes distill
    and, through the keys, every step after it."""
    from mfd_theory.commands.pipeline import distill, eval, train_drafter

    entry = {"distill": distill.main, "train-drafter": train_drafter.main, "eval": eval.main}
    marker = {"distill": "manifest.json", "train-drafter": "loss_curve.json", "eval": "eval.json"}
    for name, cmd, argv, rel, line in commands:
        upstream = distill_inputs if cmd == "distill" else (
            ["distill"] if cmd == "train-drafter" else [n for n, c, *_ in commands if c == "train-drafter"])
        keys[name] = config_hash(rel, [keys[u] for u in upstream])
        if cmd == "distill":
            keys[name] = config_hash(keys[name], f"fingerprint-v{FINGERPRINT_VERSION}")
        where = Path(argv[argv.index("--out") + 1])

        def work(cmd=cmd, argv=argv):
            threads = config.eval_threads if cmd == "eval" else config.threads
            entry[cmd](argv + ["--threads", str(threads)] + quiet)

        steps.run(name, keys[name], line, where, lambda w=where, m=marker[cmd]: (w / m).is_file(), work)


class Steps:
    """The step bookkeeping of ``mfd own-target``, ``mfd natural`` and ``mfd real-drafters``, kept in
    ``steps.json``: per step its key, what it runs (the command line), whether it finished, its wall
    time, and the sha256 of every checkpoint and data file it wrote (``files``,
    :mod:`mfd_theory.run_records`; ``mfd compare-runs`` names the first step two runs part at).

    :meth:`run` skips a step recorded as finished under the same key whose output is there, runs
    again from an empty output a step recorded under another key, and runs again into the same
    output a step that started but did not finish (the command resumes it). An unreadable file
    counts as empty: every step is redone.
    """

    def __init__(self, path: Path):
        self.path = path
        self.existed = path.is_file()
        self.data: dict = {"steps": {}}
        if self.existed:
            try:
                self.data = json.loads(path.read_text())
            except json.JSONDecodeError:
                pass  # unreadable: every step is redone (into its directory, which stays)
            if not isinstance(self.data.get("steps"), dict):
                self.data = {"steps": {}}

    def save(self) -> None:
        atomic_write_text(self.path, json.dumps(self.data, indent=1) + "\n")

    def run(self, name: str, key: str, line: str, output: Path, finished: Callable[[], bool],
            work: Callable[[], None]) -> bool:
        """Run ``work`` unless step ``name`` finished under ``key``; True when it ran."""
        entry = self.data["steps"].get(name) or {}
        if entry.get("key") == key and entry.get("done") and finished():
            print(f"{name}: finished earlier, reusing {output}", flush=True)
            if "files" not in entry:  # finished before step records were kept
                entry["files"] = file_digests(output)
                self.save()
            return False
        if entry.get("key") not in (None, key) and output.exists():
            print(f"{name}: its options or inputs changed since the last run; removing {output}", flush=True)
            if output.is_dir():
                shutil.rmtree(output)
            else:
                output.unlink()
        print(f"\n== {name}: {line}", flush=True)
        self.data["steps"][name] = {"key": key, "what": line, "done": False}
        self.save()
        t0 = time.perf_counter()
        work()
        self.data["steps"][name].update(done=True, seconds=round(time.perf_counter() - t0, 1),
                                        files=file_digests(output))
        self.save()
        return True


def run_own_target(config, ecfg, out_dir: str | Path, commands: list[tuple], progress: bool = True) -> dict:
    """Run or resume every step under ``out_dir``; returns ``steps.json``'s content.

    ``ecfg`` is the ``mfd e2e`` config of the target preset and ``commands`` the command steps, each
    ``(name, command, argv, argv relative to the output directory, command line)``; both come from
    :mod:`mfd_theory.commands.experiments.own_target`, which owns the config (this module stays below it)."""

    out = make_out_dir(Path(out_dir), "out_dir")
    cache = make_out_dir(Path(config.cache_dir) if config.cache_dir else out / "cache", "cache_dir")
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device: {config.device!r} requested but CUDA is not available")
    steps = Steps(out / "steps.json")
    threads = torch.get_num_threads()
    quiet = [] if progress else ["--quiet"]
    t_all = time.perf_counter()
    try:
        torch.set_num_threads(config.threads)
        tdir = out / "target"
        key_target = target_run_name(ecfg)
        corpus = None

        def make_target():
            nonlocal corpus
            corpus = cached_corpus(ecfg, cache)
            model, _, _ = cached_target(ecfg, corpus, cache, progress)
            tmp = out / "target.tmp"
            if tmp.exists():
                shutil.rmtree(tmp)
            model.save_pretrained(str(tmp))
            corpus.tokenizer.save_pretrained(str(tmp))
            if tdir.exists():
                shutil.rmtree(tdir)
            os.replace(tmp, tdir)
            wrote(tdir)

        steps.run("target", key_target, f"the mfd e2e --preset {config.target_preset} target", tdir,
                  lambda: (tdir / "config.json").is_file() and (tdir / "tokenizer.json").is_file(), make_target)

        pdir = out / "prompts"
        key_prompts = config_hash(key_target, config.train_prompts, config.heldout_prompts, config.prompt_words)

        def make_prompts():
            nonlocal corpus
            corpus = corpus or cached_corpus(ecfg, cache)
            for path in write_prompt_files(corpus, pdir, config.train_prompts, config.heldout_prompts,
                                           config.prompt_words):
                wrote(path)

        steps.run("prompts", key_prompts, f"first {config.prompt_words} words of documents", pdir,
                  lambda: all((pdir / f"{n}.jsonl").is_file() for n in ("train", "heldout")), make_prompts)

        # Keys from the command lines relative to the output directory: moving it keeps them valid.
        keys = {"target": key_target, "prompts": key_prompts}
        run_command_steps(steps, commands, keys, ["target", "prompts"], config, quiet)
    finally:
        torch.set_num_threads(threads)
    steps.data["seconds_last_run"] = round(time.perf_counter() - t_all, 1)
    steps.save()
    wrote(steps.path, steps.existed)
    return steps.data
