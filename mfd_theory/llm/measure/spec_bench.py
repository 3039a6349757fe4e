"""Answers in Spec-Bench's ``model_answer`` JSONL layout, and Spec-Bench's tau and speedup from them.

:func:`write_answers` writes ``spec_bench/run_<pass>/<model_id>.jsonl`` (one line per evaluated
prompt: turns, new tokens, decode-only wall time, per-round accept lengths); :func:`spec_bench_speed`
computes the two numbers Spec-Bench's ``evaluation/speed.py`` prints, by its rules. The fields and
the two deliberate differences from its script: :func:`answer_lines` and :func:`spec_bench_speed`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from mfd_theory.results import atomic_write_text

__all__ = ["model_id", "answer_lines", "write_answers", "read_answers", "spec_bench_speed"]


def model_id(record: dict) -> str:
    """The file stem of a record's cell: ``<drafter>-<method>-<budget>-temperature-<T>`` (``ar-...``
    for ar), with characters outside ``[A-Za-z0-9._-]`` replaced by ``_``."""
    if record["method"] == "ar":
        name = f"ar-temperature-{record['temperature']:g}"
    else:
        name = f"{record['drafter']}-{record['method']}-{record['budget']}-temperature-{record['temperature']:g}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def answer_lines(records: list[dict], tokenizer, pss: int = 0) -> dict[str, list[dict]]:
    """{model_id: one Spec-Bench answer per prompt} for timing pass ``pss`` of :func:`decode_cells
    <mfd_theory.llm.measure.evaluate.decode_cells>`'s records (which must hold ``turn_secs``).

    ``question_id`` is the prompt's position in the evaluation, ``prompt_id`` its id, ``category``
    its data set; per turn, ``turns`` holds the answer (special tokens dropped), ``new_tokens`` and
    ``wall_time`` the tokens decoded and their seconds, decode only (the prefill and the first token
    it makes are left out); ``accept_lengths`` holds per round the tokens emitted (accepted plus the
    bonus), from the first pass, so their mean is tau. Every pass decodes the same tokens."""
    out: dict[str, list[dict]] = {}
    for r in sorted(records, key=lambda r: (r["temperature"], r["cell"], r["item"])):
        mid = model_id(r)
        turns, start = [], 0
        for n in r["turn_lengths"]:
            turns.append(tokenizer.decode(r["tokens"][start:start + n], skip_special_tokens=True))
            start += n
        out.setdefault(mid, []).append({
            "question_id": int(r["item"]), "prompt_id": r["id"], "category": r["dataset"], "model_id": mid,
            "choices": [{"index": 0, "turns": turns, "new_tokens": [int(n) - 1 for n in r["turn_lengths"]],
                         "wall_time": [float(t) for t in r["turn_secs"][pss]],
                         "accept_lengths": [int(a) + 1 for a in r["accepted"]]}],
        })
    return out


def write_answers(directory: str | Path, records: list[dict], tokenizer) -> list[Path]:
    """Write every cell's answers, one directory per timing pass (``run_1``, ``run_2``, ...);
    returns the files written (each atomically)."""
    directory = Path(directory)
    passes = len(records[0]["turn_secs"]) if records else 0
    paths = []
    for pss in range(passes):
        for mid, lines in answer_lines(records, tokenizer, pss).items():
            path = directory / f"run_{pss + 1}" / f"{mid}.jsonl"
            atomic_write_text(path, "".join(json.dumps(x) + "\n" for x in lines))
            paths.append(path)
    return paths


def read_answers(path: str | Path, category: str | None = None) -> list[dict]:
    """The answers of one file (those of ``category`` only, when given)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: no answer file at {path}")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if category is None or r["category"] == category]


def _rates(answers: list[dict]) -> tuple[list[float], int, float]:
    """Per-answer tokens/s (answers with decode time only), total tokens, total seconds."""
    rates, tok, secs = [], 0, 0.0
    for a in answers:
        c = a["choices"][0]
        n, t = sum(c["new_tokens"]), sum(c["wall_time"])
        tok, secs = tok + n, secs + t
        if t > 0:
            rates.append(n / t)
    return rates, tok, secs


def spec_bench_speed(answers: str | Path, baseline: str | Path, category: str | None = None,
                     pooled: bool = False) -> dict:
    """Spec-Bench's numbers for one answer file against a baseline file (ar), over ``category``
    (a data set) or every answer.

    Returns ``tau`` (the mean of every ``accept_lengths`` entry of ``answers``, the bonus token
    counted), ``tokens_per_s`` and ``baseline_tokens_per_s`` (means over answers of each answer's
    tokens / seconds), ``speedup`` (their ratio) and ``n_answers``. Differences from Spec-Bench's
    script: an answer with no decode time (it ended at its first token) is left out of the rates,
    where the script would divide by zero; the baseline's tokens are its ``new_tokens``, where the
    script re-tokenizes its text. ``pooled=True`` gives instead the convention of ``mfd eval``'s
    ``speedup``: all tokens over all seconds, method against baseline.
    """
    mine, base = read_answers(answers, category), read_answers(baseline, category)
    if not mine or not base:
        raise ValueError(f"category: no answers{'' if category is None else f' of {category!r}'} in "
                         f"{answers if not mine else baseline}")
    acc = [x for a in mine for x in a["choices"][0]["accept_lengths"]]
    r_mine, tok_mine, sec_mine = _rates(mine)
    r_base, tok_base, sec_base = _rates(base)
    if pooled:
        tps = tok_mine / sec_mine if sec_mine > 0 else None
        tps_base = tok_base / sec_base if sec_base > 0 else None
    else:
        tps = float(np.mean(r_mine)) if r_mine else None
        tps_base = float(np.mean(r_base)) if r_base else None
    return {"tau": float(np.mean(acc)) if acc else None, "tokens_per_s": tps, "baseline_tokens_per_s": tps_base,
            "speedup": tps / tps_base if tps is not None and tps_base else None, "n_answers": len(mine)}
