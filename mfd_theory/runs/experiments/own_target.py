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

import torch

from mfd_theory.results import atomic_write_text, wrote

from mfd_theory.runs.experiments.e2e import cached_corpus, cached_target, target_run_name
from mfd_theory.runs.steps import Steps, run_command_steps
from mfd_theory.validation import make_out_dir
from mfd_theory.llm.training.train import config_hash

__all__ = ["run_own_target", "write_prompt_files"]


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
