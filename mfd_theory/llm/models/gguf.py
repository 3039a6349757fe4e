"""A GGUF file as a local Hugging Face directory, and ``--target`` names resolved to directories.

transformers reads a GGUF whose architecture it knows (Llama, Qwen2, Qwen3, ...) when ``gguf`` is
installed, dequantizing every tensor; such a model refuses ``save_pretrained``, so the directory
is written from a model rebuilt from the same config without its ``quantization_config`` and
loaded with the dequantized state dict (every key must match). The directory holds safetensors
weights in float32, the tokenizer with its chat template, the generation config and
``mfd_target.json`` (where it came from, the GGUF's sha256, the versions that converted it). It
is built in a hidden folder beside the destination and renamed into place, so an interrupted
conversion leaves no half directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import time
from pathlib import Path

from mfd_theory.shipped import (assemble_gguf, file_sha256, is_shipped_name, shipped_model, targets_dir)

__all__ = ["PROVENANCE", "gguf_to_hf", "materialise_shipped", "read_provenance", "resolve_target"]

PROVENANCE = "mfd_target.json"


def read_provenance(directory) -> dict | None:
    p = Path(directory) / PROVENANCE
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _versions() -> dict:
    import importlib.metadata as md

    out = {}
    for name in ("transformers", "gguf", "torch", "safetensors"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


@contextlib.contextmanager
def _parsed_once():
    """Within this block, the ``gguf`` package parses each file once and builds each tensor-name
    map once. transformers reads a GGUF's header three times for one model (its config, its
    tokenizer, its weights; about 6 s each for SmolLM2's 49 k-token vocabulary on 2 cores) and
    rebuilds the same name map for every module of the model (397 times for SmolLM2, 7.6 s). Both
    are read-only here (a reader opened with mode "r" is a read-only memory map; transformers only
    looks names up in the map), so sharing them changes no byte of the result:
    tests/test_real_targets.py compares the converted directory's logits with transformers' own
    load of the file, bit for bit. transformers imports both names from ``gguf`` when it calls
    them, which is what lets this block stand in for them; outside it nothing is changed."""
    try:
        import gguf
    except ImportError:  # _load_gguf names the missing package
        yield
        return
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict = {}

    def shared_reader(path, mode="r"):
        if mode != "r":
            return reader(path, mode)
        key = os.path.realpath(os.fspath(path))
        if key not in readers:
            readers[key] = reader(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = shared_reader, functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def _load_gguf(folder: Path, name: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with _parsed_once():
            tok = AutoTokenizer.from_pretrained(str(folder), gguf_file=name, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=name, dtype=torch.float32,
                                                         local_files_only=True)
    except ImportError as exc:
        raise ValueError(f"--gguf: reading GGUF needs the gguf package ({exc}); make install installs it") from exc
    except Exception as exc:  # noqa: BLE001 - an unreadable or unsupported file is the file's fault
        raise ValueError(f"--gguf: transformers cannot read {folder / name}: {exc}") from exc
    return model, tok


def _rebuilt(model):
    """The same weights in a model built from the config alone (``save_pretrained`` refuses a model
    loaded from GGUF)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg_dict = {k: v for k, v in model.config.to_dict().items() if k != "quantization_config"}
    cfg = AutoConfig.for_model(**cfg_dict)
    fresh = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    result = fresh.load_state_dict(model.state_dict(), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(f"--gguf: the rebuilt model's keys differ from the file's (missing "
                         f"{list(result.missing_keys)[:4]}, unexpected {list(result.unexpected_keys)[:4]})")
    if getattr(cfg, "tie_word_embeddings", False):
        fresh.tie_weights()
    fresh.generation_config = model.generation_config
    return fresh.eval()


def gguf_to_hf(gguf_path, out_dir, *, source: dict | None = None, sha256: str | None = None,
               file_name: str | None = None) -> Path:
    """Write the Hugging Face directory ``out_dir`` from the GGUF file ``gguf_path`` (see the module
    docstring); ``out_dir`` must not exist. Returns ``out_dir``."""
    gguf_path, out = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise ValueError(f"--gguf: no such file: {gguf_path}")
    if out.exists():
        raise ValueError(f"--out: {out} exists; give a new directory")
    t0 = time.perf_counter()
    sha = sha256 or file_sha256(gguf_path)
    model, tok = _load_gguf(gguf_path.parent, gguf_path.name)
    fresh = _rebuilt(model)
    del model
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        fresh.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        cfg_path = tmp / "config.json"
        cfg = json.loads(cfg_path.read_text())
        if cfg.pop("quantization_config", None) is not None:
            cfg_path.write_text(json.dumps(cfg, indent=2))
        record = {"format": "mfd-target-v1", "source": source or {"gguf": str(gguf_path.resolve())},
                  "gguf_file": file_name or gguf_path.name, "gguf_sha256": sha, "architecture": cfg.get("model_type"),
                  "dtype": "float32", "n_parameters": int(sum(p.numel() for p in fresh.parameters())),
                  "versions": _versions(), "seconds": round(time.perf_counter() - t0, 1)}
        (tmp / PROVENANCE).write_text(json.dumps(record, indent=1))
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def materialise_shipped(name: str, out_dir=None, *, announce=print) -> Path:
    """The Hugging Face directory of the shipped target ``name`` (:mod:`mfd_theory.shipped`):
    ``out_dir`` or ``targets_dir()/name``. Made once: a directory whose ``mfd_target.json`` names the
    same GGUF hash is reused; any other existing path is refused. Processes that ask for the same
    directory at once wait for each other (a lock file beside it): one converts, the others reuse."""
    model = shipped_model(name, "--target")
    out = Path(out_dir) if out_dir is not None else targets_dir() / name
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _materialise_locked(name, model, out, announce)


def _materialise_locked(name: str, model, out: Path, announce) -> Path:
    rec = read_provenance(out)
    if rec is not None:
        if rec.get("gguf_sha256") != model.sha256:
            raise ValueError(f"--out: {out} holds another model (GGUF sha256 {rec.get('gguf_sha256')}, "
                             f"{name} is {model.sha256})")
        return out
    if out.exists():
        raise ValueError(f"--out: {out} exists and is not a materialised target; give a new directory")
    t0 = time.perf_counter()
    announce(f"materialising {name} into {out} (once; a minute or two)")
    if len(model.pieces) == 1:
        gguf, tmp_gguf = assemble_gguf(model, None), None
    else:
        tmp_gguf = out.parent / f".{model.gguf_name}.{os.getpid()}"
        gguf = assemble_gguf(model, tmp_gguf)
    try:
        source = {"shipped": name, "wheels": model.distributions}
        gguf_to_hf(gguf, out, source=source, sha256=model.sha256, file_name=model.gguf_name)
    finally:
        if tmp_gguf is not None:
            tmp_gguf.unlink(missing_ok=True)
    announce(f"wrote {out} ({time.perf_counter() - t0:.0f} s)")
    return out


def resolve_target(spec: str, *, announce=print) -> str:
    """A ``--target`` value as a directory: a shipped name is materialised (once) under
    :func:`~mfd_theory.shipped.targets_dir`; anything else is returned as given."""
    if is_shipped_name(spec):
        return str(materialise_shipped(spec, announce=announce))
    return spec
