"""Self-distillation data sets: the target's own answers to prompt files, in safetensors shards.

:func:`distill_prompts` writes ``shard-NNNNN.safetensors`` (tokens, offsets, prompt lengths; per
sequence its id, data set and turn), ``manifest.json`` and ``train_config.json``; shard s is made by
rank s % world and every answer's generator is seeded by (seed, prompt, turn), so the data do not
depend on the number of processes. Layout and format choice: docs/own-target.md ("What each command writes").
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np
import torch

from mfd_theory.results import atomic_write_text
from mfd_theory.validation import check_int

from mfd_theory.llm.decoding.generate import speculative_generate
from mfd_theory.llm.decoding.round import positions_needed
from mfd_theory.llm.training.prompts import Prompt, render, run_conversation
from mfd_theory.llm.models.fingerprint import target_fingerprint
from mfd_theory.llm.training.train import _check_run_config

__all__ = ["FORMAT", "check_context", "distill_prompts", "load_distill_data", "prompt_files_digest"]

FORMAT = "mfd-distill-v1"


def prompt_files_digest(paths) -> list[dict]:
    """Name and content hash of each prompt file (recorded so a changed file is not mixed in)."""
    out = []
    for p in paths:
        out.append({"file": Path(p).name, "sha256": hashlib.sha256(Path(p).read_bytes()).hexdigest()[:16]})
    return out


def _shard_path(out: Path, s: int) -> Path:
    return out / f"shard-{s:05d}.safetensors"


def _read_shard(path: Path) -> tuple[list[np.ndarray], np.ndarray, list[dict]]:
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as f:
        meta = json.loads(f.metadata()["samples"])
        tokens, offsets, plens = f.get_tensor("tokens"), f.get_tensor("offsets"), f.get_tensor("prompt_lens")
    if len(offsets) != len(plens) + 1 or len(meta) != len(plens) or offsets[-1] != len(tokens):
        raise ValueError(f"data: shard {path} is inconsistent")
    return [tokens[offsets[i]: offsets[i + 1]] for i in range(len(plens))], plens, meta


def _write_shard(path: Path, seqs: list[list[int]], plens: list[int], meta: list[dict]) -> None:
    from safetensors.numpy import save_file

    lengths = np.array([len(x) for x in seqs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.concatenate([np.asarray(x, dtype=np.int64) for x in seqs]) if seqs else np.zeros(0, np.int64)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    save_file({"tokens": tokens, "offsets": offsets, "prompt_lens": np.asarray(plens, dtype=np.int64)},
              str(tmp), metadata={"samples": json.dumps(meta)})
    os.replace(tmp, path)


def _shard_ok(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        _read_shard(path)
    except Exception:  # noqa: BLE001 - a damaged shard is simply made again
        return False
    return True


def check_context(prompts: list[Prompt], tokenizer, enable_thinking: bool, max_new_tokens: int,
                  max_positions: int | None) -> None:
    """Refuse a prompt whose conversation may not fit the target's context, naming its data set,
    id and turn.

    A later turn's prompt holds the earlier answers, whose length is known only once they are
    generated; the check takes the worst case: the turn rendered with empty earlier answers plus
    ``max_new_tokens`` tokens for each of them, plus the turn's own ``max_new_tokens``.
    """
    if max_positions is None:
        return
    for p in prompts:
        messages = list(p.messages)
        for turn in range(1 + len(p.turns)):
            if turn:
                messages += [("assistant", ""), ("user", p.turns[turn - 1])]
            n = len(render(messages, tokenizer, enable_thinking))
            need = positions_needed(n + turn * max_new_tokens, max_new_tokens)
            if need > max_positions:
                earlier = f" plus {turn} earlier answer(s) of up to {max_new_tokens} tokens" if turn else ""
                raise ValueError(
                    f"prompts: data set {p.dataset!r}, prompt {p.id!r}, turn {turn}: {n} prompt tokens{earlier} "
                    f"plus {max_new_tokens} new tokens need up to {need} positions, beyond the target's context "
                    f"of {max_positions}; lower --max-new-tokens or shorten the prompt")


def distill_prompts(target_hf, tokenizer, prompts: list[Prompt], out: str | Path, *, max_new_tokens: int,
                    temperature: float, seed: int, enable_thinking: bool, config: dict,
                    shard_size: int = 64, dist=None, progress: bool = True) -> dict:
    """Answer ``prompts`` with the target and write the data set to ``out``; returns the manifest.

    ``config`` (the command's options) is recorded in ``train_config.json`` together with the
    target's fingerprint; a directory holding another configuration is refused. Every prompt is
    checked against the target's context (:func:`check_context`) before anything is written.
    """
    from tqdm.auto import tqdm

    from mfd_theory.llm.models.target import TargetModel

    out = Path(out)
    shard_size = check_int("shard_size", shard_size, 1)
    target = TargetModel(target_hf)
    check_context(prompts, tokenizer, enable_thinking, max_new_tokens, target.max_positions)
    fp = target_fingerprint(target_hf)
    run_cfg = {"format": FORMAT, "target_fingerprint": fp, "n_prompts": len(prompts),
               "shard_size": shard_size, **config}
    _check_run_config(out, run_cfg, dist)
    n_shards = math.ceil(len(prompts) / shard_size)
    rank, world = (dist.rank, dist.world) if dist is not None else (0, 1)
    mine = [s for s in range(rank, n_shards, world) if not _shard_ok(_shard_path(out, s))]
    todo = sum(min(len(prompts), (s + 1) * shard_size) - s * shard_size for s in mine)
    bar = tqdm(total=todo, desc=f"distill (rank {rank})" if world > 1 else "distill",
               disable=not progress, leave=False)
    for s in mine:
        seqs, plens, meta = [], [], []
        for g in range(s * shard_size, min(len(prompts), (s + 1) * shard_size)):
            p = prompts[g]

            def answer(ids, turn, g=g, p=p):
                # One generator per (seed, prompt, turn): the answer does not depend on sharding.
                try:
                    res = speculative_generate(target, None, torch.tensor(ids), max_new_tokens, "ar",
                                               temperature=temperature, seed=seed * 1_000_003 + 1000 * g + turn,
                                               metrics=False)
                except ValueError as exc:
                    raise ValueError(f"prompts: data set {p.dataset!r}, prompt {p.id!r}, turn {turn}: {exc}") from exc
                return res.tokens

            for turn, (ids, new) in enumerate(run_conversation(p, tokenizer, enable_thinking, answer)):
                seqs.append(list(ids) + list(new))
                plens.append(len(ids))
                meta.append({"id": p.id, "dataset": p.dataset, "turn": turn})
            bar.update(1)
        _write_shard(_shard_path(out, s), seqs, plens, meta)
    bar.close()
    if dist is not None:
        dist.barrier()
    manifest = None
    if dist is None or dist.main:
        shards = []
        for s in range(n_shards):
            seqs, plens, _ = _read_shard(_shard_path(out, s))
            shards.append({"file": _shard_path(out, s).name, "n_sequences": len(seqs),
                           "n_tokens": int(sum(len(x) for x in seqs)),
                           "n_response_tokens": int(sum(len(x) - pl for x, pl in zip(seqs, plens)))})
        manifest = {"format": FORMAT, "target_fingerprint": fp, "config": run_cfg, "shards": shards,
                    "n_sequences": sum(x["n_sequences"] for x in shards),
                    "n_tokens": sum(x["n_tokens"] for x in shards),
                    "n_response_tokens": sum(x["n_response_tokens"] for x in shards)}
        atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=1))
    if dist is not None:
        manifest = dist.broadcast(manifest)
        dist.barrier()
    return manifest


def load_distill_data(directory: str | Path) -> tuple[list[np.ndarray], np.ndarray, dict]:
    """(sequences, prompt lengths, manifest) of a finished data set written by ``mfd distill``."""
    directory = Path(directory)
    mpath = directory / "manifest.json"
    if not mpath.is_file():
        raise ValueError(f"data: no manifest.json in {directory} (run mfd distill to the end first)")
    try:
        manifest = json.loads(mpath.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"data: corrupt {mpath}: {exc}") from exc
    if manifest.get("format") != FORMAT:
        raise ValueError(f"data: {mpath} is not an {FORMAT} manifest")
    seqs, plens = [], []
    for shard in manifest["shards"]:
        try:
            s, p, _ = _read_shard(directory / shard["file"])
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"data: cannot read shard {directory / shard['file']}: {exc}") from exc
        seqs.extend(s)
        plens.append(p)
    return seqs, (np.concatenate(plens) if plens else np.zeros(0, np.int64)), manifest
