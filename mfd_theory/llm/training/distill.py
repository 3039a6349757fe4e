"""Self-distillation data sets: the target's own answers to prompt files, in safetensors shards.

:func:`distill_prompts` writes ``shard-NNNNN.safetensors`` (tokens, offsets, prompt lengths; per
sequence its id, data set and turn), ``manifest.json`` and ``train_config.json``; shard s is made by
rank s % world, its answers are generated in batches turn by turn, and every answer's generator is
seeded by (seed, prompt, turn), so the data do not depend on the number of processes or the batch.
Layout and format choice: docs/own-target.md ("What each command writes").
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mfd_theory.results import atomic_write_text
from mfd_theory.validation import check_int, check_real

from mfd_theory.llm.decoding.generate_batch import can_batch, generate_batch
from mfd_theory.llm.decoding.round import positions_needed, prompt_ids
from mfd_theory.llm.training.prompts import Prompt, render, run_conversation
from mfd_theory.llm.models.fingerprint import target_fingerprint
from mfd_theory.llm.training.train import _check_run_config

__all__ = ["FORMAT", "answer_seeds", "check_context", "distill_prompts", "load_distill_data", "prompt_files_digest",
           "write_answer_set"]

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


def _seed(seed: int, g: int, turn: int) -> int:
    """The generator seed of prompt ``g``'s turn ``turn``: the answer does not depend on sharding or batching."""
    return seed * 1_000_003 + 1000 * g + turn


class _Asked(Exception):
    """Raised out of run_conversation at the first turn not yet answered, carrying its prompt ids."""

    def __init__(self, ids):
        super().__init__()
        self.ids = list(ids)


def _next_turn(p: Prompt, tokenizer, enable_thinking: bool, answers: list) -> list[int] | None:
    """The prompt ids of ``p``'s first turn not in ``answers`` (None when every turn is answered),
    rendered by :func:`run_conversation` itself with the earlier answers in their places."""
    def answer(ids, turn):
        if turn < len(answers):
            return answers[turn]
        raise _Asked(ids)

    try:
        run_conversation(p, tokenizer, enable_thinking, answer)
    except _Asked as asked:
        return asked.ids
    return None


def _where(p: Prompt, turn: int) -> str:
    return f"prompts: data set {p.dataset!r}, prompt {p.id!r}, turn {turn}"


def _check_row(target, p: Prompt, turn: int, ids: list[int], max_new_tokens: int, seed: int) -> None:
    """The checks generate_batch makes, here so that a refusal names the prompt and turn."""
    try:
        prompt_ids(ids, target, max_new_tokens)
        check_int("seed", seed, 0, 2 ** 64 - 1)
    except ValueError as exc:
        raise ValueError(f"{_where(p, turn)}: {exc}") from exc


def _answer_shard(target, tokenizer, prompts: list[Prompt], group: range, sampling: dict, seed: int,
                  enable_thinking: bool, done: Callable[[], None]) -> tuple[list, list, list]:
    """Every turn of the prompts ``group``, batched turn by turn (all first turns, then the second
    turns of the prompts that have them, ...): the shard's sequences, prompt lengths and records.
    ``done()`` is called as each prompt's last turn is answered."""
    answers = {g: [] for g in group}
    turn = 0
    while True:
        asked = [(g, ids) for g in group
                 if (ids := _next_turn(prompts[g], tokenizer, enable_thinking, answers[g])) is not None]
        if not asked:
            break
        seeds = [_seed(seed, g, turn) for g, _ in asked]
        for (g, ids), s in zip(asked, seeds):
            _check_row(target, prompts[g], turn, ids, sampling["max_new_tokens"], s)

        def finished(i, asked=asked, turn=turn):
            if turn == len(prompts[asked[i][0]].turns):
                done()

        new = generate_batch(target, [ids for _, ids in asked], seeds=seeds, on_finish=finished, **sampling)
        for (g, _), tokens in zip(asked, new):
            answers[g].append(tokens)
        turn += 1
    seqs, plens, meta = [], [], []
    for g in group:
        p = prompts[g]
        known = answers[g]
        for turn, (ids, new) in enumerate(run_conversation(p, tokenizer, enable_thinking, lambda _, t: known[t])):
            seqs.append(list(ids) + list(new))
            plens.append(len(ids))
            meta.append({"id": p.id, "dataset": p.dataset, "turn": turn})
    return seqs, plens, meta


def _sampling_record(top_k: int, top_p: float) -> dict:
    """The sampling cuts that change the data, recorded only when on (so that a directory made
    before they existed still resumes)."""
    return {**({"top_k": top_k} if top_k else {}), **({"top_p": top_p} if top_p < 1 else {})}


def distill_prompts(target_hf, tokenizer, prompts: list[Prompt], out: str | Path, *, max_new_tokens: int,
                    temperature: float, seed: int, enable_thinking: bool, config: dict,
                    shard_size: int = 64, batch: int = 16, top_k: int = 0, top_p: float = 1.0,
                    dist=None, progress: bool = True) -> dict:
    """Answer ``prompts`` with the target and write the data set to ``out``; returns the manifest.

    ``config`` (the command's options) is recorded in ``train_config.json`` together with the
    target's fingerprint (and ``top_k`` / ``top_p`` when they cut anything); a directory holding
    another configuration is refused. Every prompt is checked against the target's context
    (:func:`check_context`) before anything is written.

    Answers are sampled by :func:`~mfd_theory.llm.decoding.generate_batch.generate_batch`,
    ``batch`` sequences at a time, turn by turn within a shard (a later turn holds the earlier
    answers); a target with recurrent layers is answered one sequence at a time. Each answer's
    generator is seeded by (seed, prompt, turn), so neither the number of processes nor ``batch``
    changes the data (``batch`` up to float round-off, so it is not recorded).
    """
    from tqdm.auto import tqdm

    from mfd_theory.llm.models.target import TargetModel

    out = Path(out)
    shard_size = check_int("shard_size", shard_size, 1)
    batch = check_int("batch", batch, 1)
    top_k = check_int("top_k", top_k, 0)
    top_p = check_real("top_p", top_p, 0, 1, low_open=True)
    target = TargetModel(target_hf)
    check_context(prompts, tokenizer, enable_thinking, max_new_tokens, target.max_positions)
    fp = target_fingerprint(target_hf)
    run_cfg = {"format": FORMAT, "target_fingerprint": fp, "n_prompts": len(prompts),
               "shard_size": shard_size, **_sampling_record(top_k, top_p), **config}
    _check_run_config(out, run_cfg, dist)
    sampling = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                    batch=batch if can_batch(target) else 1)
    n_shards = math.ceil(len(prompts) / shard_size)
    rank, world = (dist.rank, dist.world) if dist is not None else (0, 1)
    mine = [s for s in range(rank, n_shards, world) if not _shard_ok(_shard_path(out, s))]
    todo = sum(min(len(prompts), (s + 1) * shard_size) - s * shard_size for s in mine)
    bar = tqdm(total=todo, desc=f"distill (rank {rank})" if world > 1 else "distill",
               disable=not progress, leave=False)
    for s in mine:
        group = range(s * shard_size, min(len(prompts), (s + 1) * shard_size))
        seqs, plens, meta = _answer_shard(target, tokenizer, prompts, group, sampling, seed, enable_thinking,
                                          lambda: bar.update(1))
        _write_shard(_shard_path(out, s), seqs, plens, meta)
    bar.close()
    if dist is not None:
        dist.barrier()
    manifest = None
    if dist is None or dist.main:
        manifest = _write_manifest(out, n_shards, fp, run_cfg)
    if dist is not None:
        manifest = dist.broadcast(manifest)
        dist.barrier()
    return manifest


def write_answer_set(out: str | Path, seqs: list, plens, meta: list[dict], target_hf, config: dict,
                     shard_size: int = 256) -> dict:
    """Write given (prompt + answer) sequences as a data set in :func:`distill_prompts`' layout,
    so :func:`load_distill_data` and ``mfd train-drafter`` read it like distilled answers: answers
    the target did not write (for example teacher-forced human text). ``config`` says where they
    came from (recorded in the manifest); ``target_hf`` is the target whose tokenizer made them
    (its fingerprint is recorded). Each shard and the manifest are written atomically."""
    out = Path(out)
    shard_size = check_int("shard_size", shard_size, 1)
    if not (len(seqs) == len(plens) == len(meta)) or not seqs:
        raise ValueError(f"seqs: need one prompt length and one meta entry per sequence and at least one "
                         f"sequence, got {len(seqs)} / {len(plens)} / {len(meta)}")
    for i, (x, pl) in enumerate(zip(seqs, plens)):
        if not 0 < int(pl) < len(x):
            raise ValueError(f"plens: sequence {i} has {len(x)} tokens and prompt length {int(pl)} "
                             "(each needs a prompt and an answer)")
    out.mkdir(parents=True, exist_ok=True)
    n_shards = math.ceil(len(seqs) / shard_size)
    for k in range(n_shards):
        part = slice(k * shard_size, (k + 1) * shard_size)
        _write_shard(_shard_path(out, k), [list(map(int, x)) for x in seqs[part]],
                     [int(x) for x in plens[part]], list(meta[part]))
    run_cfg = {"format": FORMAT, "target_fingerprint": target_fingerprint(target_hf), "n_prompts": len(seqs),
               "shard_size": shard_size, **config}
    return _write_manifest(out, n_shards, run_cfg["target_fingerprint"], run_cfg)


def _write_manifest(out: Path, n_shards: int, fp, run_cfg: dict) -> dict:
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
    return manifest


def answer_seeds(directory: str | Path, seed: int) -> list[int]:
    """The generator seed each sequence of the data set in ``directory`` was sampled with by a
    ``mfd distill`` run of ``seed`` (in :func:`load_distill_data`'s order): prompt g's turn t is
    seeded by (seed, g, t), prompts numbered in the order of their files as distill read them."""
    manifest = json.loads((Path(directory) / "manifest.json").read_text())
    out, g = [], -1
    for shard in manifest["shards"]:
        _, _, meta = _read_shard(Path(directory) / shard["file"])
        for m in meta:
            g += int(m["turn"]) == 0
            out.append(_seed(int(seed), g, int(m["turn"])))
    return out


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
