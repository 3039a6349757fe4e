"""Prompt files for ``mfd distill`` and ``mfd eval``: JSONL parsing and chat rendering.

One JSON object per line with one of ``"prompt"``, ``"messages"`` or ``"turns"`` (multi-turn, each
answer kept in the next turn's context), optionally ``"id"`` and ``"dataset"``; a malformed file is
refused naming the file and line before any model is loaded. Format and rendering (chat template,
thinking off by default): docs/own-target.md ("Your own target and drafter").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mfd_theory.validation import check_int

__all__ = ["Prompt", "read_prompt_files", "render", "run_conversation", "shuffle_take"]


@dataclass(frozen=True)
class Prompt:
    dataset: str
    id: str
    kind: str                       # "prompt", "messages" or "turns"
    messages: tuple                 # the fixed part: a tuple of (role, content) pairs
    turns: tuple = ()               # further user turns (kind "turns"), answered one by one


def _fail(path: Path, line: int, why: str) -> None:
    raise ValueError(f"prompts: {path} line {line}: {why}")


def _parse_line(path: Path, lineno: int, text: str) -> Prompt:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        _fail(path, lineno, f"not valid JSON ({exc.msg})")
    if not isinstance(obj, dict):
        _fail(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
    kinds = [k for k in ("prompt", "messages", "turns") if k in obj]
    if len(kinds) != 1:
        _fail(path, lineno, 'needs exactly one of "prompt", "messages", "turns"'
              + (f" (has {kinds})" if kinds else ""))
    kind = kinds[0]
    val = obj[kind]
    if kind == "prompt":
        if not isinstance(val, str) or not val.strip():
            _fail(path, lineno, '"prompt" must be a non-empty string')
        messages, turns = (("user", val),), ()
    elif kind == "messages":
        if not isinstance(val, list) or not val:
            _fail(path, lineno, '"messages" must be a non-empty list')
        messages = []
        for j, m in enumerate(val):
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                _fail(path, lineno, f'"messages"[{j}] must be an object with string "role" and "content"')
            messages.append((m["role"], m["content"]))
        if messages[-1][0] == "assistant":
            _fail(path, lineno, '"messages" ends with an assistant message: nothing to answer')
        messages, turns = tuple(messages), ()
    else:
        if not isinstance(val, list) or not val or not all(isinstance(t, str) and t.strip() for t in val):
            _fail(path, lineno, '"turns" must be a non-empty list of non-empty strings')
        messages, turns = (("user", val[0]),), tuple(val[1:])
    pid = obj.get("id", f"{path.stem}-{lineno}")
    if not isinstance(pid, (str, int)) or isinstance(pid, bool):
        _fail(path, lineno, '"id" must be a string or an integer')
    dataset = obj.get("dataset", path.stem)
    if not isinstance(dataset, str) or not dataset:
        _fail(path, lineno, '"dataset" must be a non-empty string')
    return Prompt(dataset=dataset, id=str(pid), kind=kind, messages=messages, turns=turns)


def read_prompt_files(paths) -> list[Prompt]:
    """All prompts of ``paths`` in file and line order; ValueError on the first bad line."""
    if not paths:
        raise ValueError("prompts: give at least one JSONL file")
    out: list[Prompt] = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise ValueError(f"prompts: {path} is not a file")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"prompts: cannot read {path}: {exc}") from exc
        got = [_parse_line(path, i, line) for i, line in enumerate(lines, 1) if line.strip()]
        if not got:
            raise ValueError(f"prompts: {path} holds no prompts (empty file)")
        out.extend(got)
    seen: set[tuple[str, str]] = set()
    for q in out:
        if (q.dataset, q.id) in seen:
            raise ValueError(f"prompts: id {q.id!r} appears twice in dataset {q.dataset!r}")
        seen.add((q.dataset, q.id))
    return out


def shuffle_take(prompts: list[Prompt], n: int | None) -> list[Prompt]:
    """The first ``n`` prompts of each dataset after a shuffle with seed 0 (all of them if None)."""
    import numpy as np

    if n is None:
        return list(prompts)
    n = check_int("max_prompts", n, 1)
    out = []
    for ds in dict.fromkeys(p.dataset for p in prompts):
        group = [p for p in prompts if p.dataset == ds]
        order = np.random.default_rng(0).permutation(len(group))
        out.extend(group[i] for i in order[:n])
    return out


def render(messages, tokenizer, enable_thinking: bool = False) -> list[int]:
    """Token ids of a conversation (a sequence of (role, content) pairs) ready for the answer."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": r, "content": c} for r, c in messages],
                                             tokenize=False, add_generation_prompt=True,
                                             enable_thinking=enable_thinking)
    else:
        text = "\n".join(c for _, c in messages)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError("prompts: a prompt renders to zero tokens")
    return list(ids)


def run_conversation(prompt: Prompt, tokenizer, enable_thinking: bool,
                     answer: Callable[[list[int], int], list[int]]) -> list[tuple[list[int], list[int]]]:
    """Answer every turn of ``prompt``: ``answer(ids, turn)`` returns the new tokens for one turn.

    Returns ``[(context_ids, answer_ids), ...]``, one pair per turn; a later turn's context holds
    the earlier answers (decoded to text, special tokens dropped) as assistant messages.
    """
    messages = list(prompt.messages)
    out = []
    for turn in range(1 + len(prompt.turns)):
        if turn:
            messages.append(("user", prompt.turns[turn - 1]))
        ids = render(messages, tokenizer, enable_thinking)
        new = list(answer(ids, turn))
        out.append((ids, new))
        messages.append(("assistant", tokenizer.decode(new, skip_special_tokens=True)))
    return out
