"""Answers in Spec-Bench's ``model_answer`` JSONL layout, and Spec-Bench's tau and speedup from them.

``mfd eval --format spec-bench`` writes, for every (method, drafter, budget, temperature), one
file per timing pass: ``OUT/spec_bench/run_<pass>/<model_id>.jsonl`` (Spec-Bench keeps one
directory per run as well). A line per evaluated prompt::

    {"question_id": 3, "prompt_id": "a1", "category": "alpha", "model_id": "k1-ddtree-16-temperature-0",
     "choices": [{"index": 0, "turns": ["..."], "new_tokens": [41], "wall_time": [0.52],
                  "accept_lengths": [3, 1, 5, ...]}]}

* ``question_id``: the prompt's position in the evaluation (an integer, unique in the run);
  ``prompt_id`` our prompt id; ``category`` the data set (Spec-Bench's task).
* ``turns``: each turn's answer, decoded with the target's tokenizer (special tokens dropped).
* ``new_tokens`` / ``wall_time``: per turn, the tokens decoded and the seconds the decode took,
  *decode only*: the first token of a turn (made by the prefill) and the prefill's time are left
  out, as they are from every speedup ``mfd eval`` reports.
* ``accept_lengths``: per round (verify forward), the tokens it emitted: accepted draft tokens
  plus the bonus token, so their mean is our tau (tokens per target call). ar's rounds emit 1.
  They come from the first pass (the one that keeps the metrics); every pass decodes the same
  tokens, since the sampling seed is fixed per prompt.

:func:`spec_bench_speed` computes the two numbers Spec-Bench's ``evaluation/speed.py`` prints
from such files, by its rules: mean accepted tokens = the mean of every ``accept_lengths``
entry pooled over the answers; speedup = the mean over answers of (sum of ``new_tokens``) / (sum
of ``wall_time``), divided by the same mean for the baseline (here ar). Two deliberate
differences from its script, both documented in the function: answers with no decode time are
left out (its script would divide by zero), and the baseline's tokens are read from its
``new_tokens`` (its script re-tokenizes the baseline's text and subtracts one for a BOS token;
on our files that would count the prefill's token too).

How these relate to ``eval.json``'s rows: tau is the same number (pooled over rounds, bonus
counted). Spec-Bench's speedup weights every answer alike; the rows' ``speedup`` pools tokens and
time over the answers (a long answer weighs more). Each row carries Spec-Bench's convention as
``speedup_spec_bench`` (averaged over passes, as Spec-Bench averages runs), and
:func:`spec_bench_speed` with ``pooled=True`` gives the rows' convention from the same files.
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
    <mfd_theory.llm.measure.evaluate.decode_cells>`'s records (which must hold ``turn_secs``)."""
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
