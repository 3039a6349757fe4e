"""Natural text every machine has: Python's standard library, split by module.

Units are the stdlib's modules (code) and ``pydoc_data.topics``' documentation topics (prose), read
from the running interpreter; a unit is held out by a hash of its name alone; prompts (function
signatures with docstrings, opening sentences of paragraphs) come from held-out units only; and
:func:`provenance` records what was read. Design: docs/results.md ("Real text: the standard library").
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import platform
import re
import sys
import sysconfig
import textwrap
from pathlib import Path

from mfd_theory.validation import check_real

__all__ = [
    "Unit",
    "stdlib_root",
    "list_units",
    "is_heldout",
    "split_units",
    "code_prompts",
    "prose_prompts",
    "write_prompts",
    "provenance",
    "check_no_leak",
    "text_hash",
    "unit_hash",
]

EXCLUDED_DIRS = frozenset({"test", "tests", "idlelib", "site-packages", "__pycache__", "pydoc_data"})
TOPICS_FILE = Path("pydoc_data") / "topics.py"


@dataclasses.dataclass(frozen=True)
class Unit:
    """One split unit: a module (``kind`` "code") or a documentation topic (``kind`` "prose")."""

    name: str   # dotted module name, or "pydoc_data.topics:<key>"
    kind: str   # "code" | "prose"
    path: str   # the file it came from, relative to the stdlib root
    text: str


def stdlib_root() -> Path:
    """The running interpreter's standard-library directory."""
    return Path(sysconfig.get_paths()["stdlib"])


def _module_name(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def list_units(root: str | Path | None = None) -> list[Unit]:
    """Every code module and documentation topic under ``root`` (default: this interpreter's stdlib),
    sorted by name. Files that are not UTF-8 or not parseable Python are skipped."""
    root = Path(root) if root is not None else stdlib_root()
    if not root.is_dir():
        raise ValueError(f"stdlib: no directory at {root}")
    units: list[Unit] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part in EXCLUDED_DIRS for part in rel.parts[:-1]):
            continue
        st = path.stat()
        text = _python_text(str(path), st.st_mtime_ns, st.st_size)
        if text is not None and text.strip():
            units.append(Unit(_module_name(rel), "code", str(rel), text))
    topics_path = root / TOPICS_FILE
    if topics_path.is_file():
        tree = ast.parse(topics_path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "topics" for t in node.targets):
                topics = ast.literal_eval(node.value)
                for key in sorted(topics):
                    if isinstance(topics[key], str) and topics[key].strip():
                        units.append(Unit(f"pydoc_data.topics:{key}", "prose", str(TOPICS_FILE), topics[key]))
    units.sort(key=lambda u: u.name)
    return units


@functools.lru_cache(maxsize=None)
def _python_text(path: str, mtime_ns: int, size: int) -> str | None:
    """The text of the Python file ``path`` if it is UTF-8 and parses, else None. Remembered per
    process under the file's modification time and size (the standard library is listed, and its
    files parsed, once, not at every call: the reference answers, the prompt sets and the natural
    corpus all list it); a file changed since reads afresh."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        ast.parse(text)
    except (UnicodeDecodeError, SyntaxError, ValueError):
        return None
    return text


def unit_hash(name: str, salt: str) -> int:
    """A unit name's hash under ``salt``, uniform in [0, 2**32): the first 8 hex digits of
    ``sha256(salt + ":" + name)``. It decides the split and every order that must not depend on
    how the files were listed."""
    return int(hashlib.sha256(f"{salt}:{name}".encode()).hexdigest()[:8], 16)


def is_heldout(name: str, heldout_fraction: float, salt: str = "mfd-natural") -> bool:
    """Whether unit ``name`` is held out: a function of the name alone."""
    check_real("heldout_fraction", heldout_fraction, 0, 1, low_open=True, high_open=True)
    return unit_hash(name, salt) < heldout_fraction * 2**32


def split_units(units: list[Unit], heldout_fraction: float, salt: str = "mfd-natural") -> tuple[list[Unit], list[Unit]]:
    """(train, held-out), each in name order."""
    held = [u for u in units if is_heldout(u.name, heldout_fraction, salt)]
    train = [u for u in units if not is_heldout(u.name, heldout_fraction, salt)]
    for kind in ("code", "prose"):
        if any(u.kind == kind for u in units) and not any(u.kind == kind for u in held):
            raise ValueError(f"heldout_fraction: {heldout_fraction} holds out no {kind} unit")
    return train, held


def _round_robin(per_unit: list[list], n: int) -> list:
    out: list = []
    depth = 0
    while len(out) < n and any(depth < len(c) for c in per_unit):
        for cands in per_unit:
            if depth < len(cands) and len(out) < n:
                out.append(cands[depth])
        depth += 1
    return out


def _by_hash(units: list[Unit], salt: str) -> list[Unit]:
    return sorted(units, key=lambda u: (unit_hash(u.name, salt + ":order"), u.name))


def _function_prompts(unit: Unit, max_chars: int, min_body: int) -> list[dict]:
    return [dict(p) for p in _function_prompts_of(unit, max_chars, min_body)]  # the caller's own dicts


@functools.lru_cache(maxsize=4096)
def _function_prompts_of(unit: Unit, max_chars: int, min_body: int) -> tuple[dict, ...]:
    """:func:`_function_prompts`, remembered per unit (a frozen dataclass: its name and text are the
    key): parsing every module again was most of a prompt set's time."""
    lines = unit.text.splitlines(keepends=True)
    out = []
    for node in ast.walk(ast.parse(unit.text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if ast.get_docstring(node, clean=False) is None or len(node.body) < 1 + min_body:
            continue
        doc = node.body[0]
        segment = "".join(lines[node.lineno - 1: doc.end_lineno])
        prompt = textwrap.dedent(segment).rstrip() + "\n"
        if len(prompt) > max_chars or not prompt.lstrip().startswith(("def ", "async def ")):
            continue
        body = textwrap.dedent("".join(lines[doc.end_lineno: node.end_lineno]))
        out.append({"id": f"{unit.name}:{node.name}:{node.lineno}", "prompt": prompt,
                    "reference": body, "unit": unit.name})
    out.sort(key=lambda p: (unit_hash(p["id"], "fn"), p["id"]))
    return tuple(out)


_SENTENCE_END = re.compile(r"[.!?](?=\s)")


def _paragraph_prompts(unit: Unit, max_chars: int, min_chars: int) -> list[dict]:
    out = []
    for k, para in enumerate(re.split(r"\n\s*\n", unit.text)):
        plines = para.split("\n")
        if len(para) < min_chars or any(ln[:1].isspace() for ln in plines) or "::=" in para:
            continue
        if para.startswith(("*", "-", "+", "=")) or set(plines[-1].strip()) <= set("*=-~^"):
            continue  # bullets and headings
        cut = 0
        for m in _SENTENCE_END.finditer(para):
            if m.end() > max_chars:
                break
            cut = m.end()
            if cut >= min_chars // 2:
                break
        if cut == 0 or len(para) - cut < 40:
            continue  # no sentence end early enough, or nothing left to continue
        out.append({"id": f"{unit.name}:p{k}", "prompt": para[:cut], "reference": para[cut:], "unit": unit.name})
    out.sort(key=lambda p: (unit_hash(p["id"], "para"), p["id"]))
    return out


def code_prompts(units: list[Unit], n: int, *, max_chars: int = 400, min_body_statements: int = 2,
                 salt: str = "mfd-natural") -> list[dict]:
    """Up to ``n`` HumanEval-style prompts (signature + docstring) from the code ``units``."""
    per = [_function_prompts(u, max_chars, min_body_statements) for u in _by_hash(units, salt) if u.kind == "code"]
    return _round_robin(per, n)


def prose_prompts(units: list[Unit], n: int, *, max_chars: int = 300, min_chars: int = 160,
                  salt: str = "mfd-natural") -> list[dict]:
    """Up to ``n`` prompts: the opening sentence(s) of documentation paragraphs of the prose ``units``."""
    per = [_paragraph_prompts(u, max_chars, min_chars) for u in _by_hash(units, salt) if u.kind == "prose"]
    return _round_robin(per, n)


def write_prompts(path: str | Path, prompts: list[dict], dataset: str) -> Path:
    """JSONL as ``mfd eval`` / ``mfd distill`` read it: ``id``, ``prompt``, ``dataset`` per line."""
    from mfd_theory.results import atomic_write_text

    if not prompts:
        raise ValueError(f"prompts: no {dataset} prompt could be extracted")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(json.dumps({"id": p["id"], "prompt": p["prompt"], "dataset": dataset}) + "\n"
                                    for p in prompts))
    return path


def text_hash(units: list[Unit]) -> str:
    h = hashlib.sha256()
    for u in sorted(units, key=lambda u: u.name):
        h.update(u.name.encode() + b"\0" + u.text.encode() + b"\0")
    return h.hexdigest()


def provenance(units: list[Unit], train: list[Unit], held: list[Unit], root: str | Path | None = None) -> dict:
    """Where the corpus came from: Python version, stdlib path, the units and their split, text hash."""
    held_names = {u.name for u in held}
    return {
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "sys_version": sys.version,
        "stdlib": str(Path(root) if root is not None else stdlib_root()),
        "text_sha256": text_hash(units),
        "n_units": {k: sum(u.kind == k for u in units) for k in ("code", "prose")},
        "n_heldout": {k: sum(u.kind == k for u in held) for k in ("code", "prose")},
        "chars": {split: {k: sum(len(u.text) for u in us if u.kind == k) for k in ("code", "prose")}
                  for split, us in (("train", train), ("heldout", held))},
        "units": [[u.name, u.path, "heldout" if u.name in held_names else "train"] for u in units],
    }


def check_no_leak(train_texts: list[str], held: list[Unit], min_chars: int = 400) -> None:
    """Raise ValueError when a held-out unit's text (at least ``min_chars`` long; short files such as
    empty ``__init__`` modules can coincide) occurs verbatim in a training document."""
    train_set = set(train_texts)
    for u in held:
        if len(u.text) >= min_chars and (u.text in train_set or any(u.text in t for t in train_texts)):
            raise ValueError(f"split: held-out unit {u.name} occurs in the training text")
