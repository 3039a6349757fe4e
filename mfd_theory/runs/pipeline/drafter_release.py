"""The torch half of ``mfd drafter pack`` (:mod:`mfd_theory.commands.pipeline.drafter`): a trained
drafter into the shipped release (:mod:`mfd_theory.shipped_drafters`), in bfloat16, with its provenance.

The new checkpoint is written beside the release, checked (sizes against the caps, loads for the
target), and only then renamed into place and entered in ``RELEASE.json`` (written atomically), so
an interrupted or refused pack leaves the release as it was.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from mfd_theory.results import atomic_write_text, provenance
from mfd_theory.shipped_drafters import (FORMAT, MAX_DRAFTER_BYTES, MAX_RELEASE_BYTES, RELEASE_FILE, file_sha256,
                                         read_release, release_bytes)

__all__ = ["pack", "tau_summary"]

WEIGHTS = "model.safetensors"


def tau_summary(tau_dir: Path, checkpoint: Path) -> dict:
    """The cells ``mfd tau`` measured for ``checkpoint`` in ``tau_dir/tau.json`` (every set and budget:
    method, scorer, budget, tau) with the run's provenance; ValueError when that run did not
    measure this checkpoint."""
    path = Path(tau_dir) / "tau.json"
    try:
        rec = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--tau: cannot read {path}: {exc}") from exc
    want = Path(checkpoint).resolve()
    mine = [d for d in rec["data"]["drafters"] if Path(d["drafter"]).resolve() == want]
    if not mine:
        measured = ", ".join(d["drafter"] for d in rec["data"]["drafters"])
        raise ValueError(f"--tau: {path} measured {measured}, not {checkpoint}")
    d = mine[0]
    cells, sets = [], {}
    for set_name, s in d["sets"].items():
        sets[set_name] = {"prompts": rec["data"]["sets"][set_name]["prompts"],
                          "sha256": rec["data"]["sets"][set_name]["sha256"],
                          "draft_vocab_coverage": s.get("draft_vocab_coverage")}
        for b in s["budgets"].values():
            for c in b["cells"]:
                label = c["method"] + (f"/{c['scorer']}" if c.get("scorer") else "") + f" N={b['budget']}"
                cells.append({"set": set_name, "method": c["method"], "scorer": c.get("scorer"),
                              "budget": int(b["budget"]), "tau": float(c["tau"]), "label": label})
    first = next(iter(sets), "?")
    return {"temperature": float(rec["data"].get("temperature", 0.0)), "rule": rec["data"].get("rule"), "set": first, "prompts": sets.get(first, {}).get("prompts"),
            "sets": sets, "cells": cells, "max_new_tokens": rec["config"].get("max_new_tokens"),
            "numerics": rec["config"].get("numerics"), "provenance": rec.get("provenance"),
            "record": str(path)}


def _training(run_dir: Path) -> dict:
    """What the run directory says of its training: config, data hashes, steps, time, where."""
    out: dict = {"run": str(run_dir)}
    cfg_path = run_dir / "train_config.json"
    if cfg_path.is_file():
        cfg = json.loads(cfg_path.read_text())
        corpus = cfg.get("corpus") or {}
        out.update(config=cfg, steps=(cfg.get("train") or {}).get("steps"), seed=(cfg.get("train") or {}).get("seed"),
                   data_sha256=corpus.get("ids_sha256") or cfg.get("data_hash"),
                   data_tokens=corpus.get("tokens"))
    rec_path = run_dir / "run_record.json"
    if rec_path.is_file():
        rec = json.loads(rec_path.read_text())
        last = rec["sessions"][-1]["provenance"]
        out.update(train_seconds=rec.get("train_seconds"), sessions=rec["sessions"], host=_host(last),
                   numerics=last.get("numerics"), git_sha=last.get("git_sha"))
    else:
        out["train_seconds"] = None
        out["note"] = ("no run_record.json in the run directory (trained before train-drafter wrote one): the "
                       "training time, host and git sha are not recorded here")
    return out


def _host(prov: dict) -> str:
    num = prov.get("numerics") or {}
    flags = ", ".join(num.get("isa_flags") or [])
    return f"{num.get('cpu', prov.get('host', '?'))} ({num.get('isa_level', '?')}: {flags})"


def pack(name: str, run: Path, tau_dirs: list[Path], target_spec: str, root: Path, *, announce=print) -> dict:
    """Write the drafter of train-drafter run ``run`` into release ``root`` as ``name`` (bfloat16
    weights, its small JSON files) and enter it in ``RELEASE.json`` with the tau of each ``mfd tau``
    run in ``tau_dirs``; the entry."""
    from safetensors.torch import load_file, save_file

    from mfd_theory.configs.pipeline.local_target import checkpoint_dir
    from mfd_theory.llm.models.drafter import load_drafter
    from mfd_theory.llm.models.fingerprint import target_fingerprint
    from mfd_theory.llm.models.target import load_local_target

    src = checkpoint_dir(str(run), "--run")
    run_dir = src.parent if src.name == "drafter" else src
    if not (src / WEIGHTS).is_file():
        raise ValueError(f"--run: {src} holds no {WEIGHTS} (pack takes a single-file checkpoint)")
    tau = [tau_summary(t, src) for t in tau_dirs]
    release = read_release(root)
    others = {n: e for n, e in release["drafters"].items() if n != name}

    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        state = load_file(str(src / WEIGHTS))
        packed = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous() for k, v in state.items()}
        save_file(packed, str(tmp / WEIGHTS), metadata={"format": "pt", "mfd_release": name})
        for f in sorted(src.iterdir()):
            if f.is_file() and f.suffix == ".json":
                shutil.copy2(f, tmp / f.name)
        files = {f.name: {"bytes": f.stat().st_size, "sha256": file_sha256(f)} for f in sorted(tmp.iterdir())}
        size = sum(f["bytes"] for f in files.values())
        if size > MAX_DRAFTER_BYTES:
            raise ValueError(f"--run: the drafter packs to {size / 1e6:.1f} MB, over the {MAX_DRAFTER_BYTES / 1e6:.0f} "
                             "MB cap of one shipped drafter")
        total = size + sum(release_bytes(e) for e in others.values())
        if total > MAX_RELEASE_BYTES:
            raise ValueError(f"--name: the release would hold {total / 1e6:.1f} MB with {name}, over its "
                             f"{MAX_RELEASE_BYTES / 1e6:.0f} MB cap ({', '.join(sorted(others)) or 'nothing else'} "
                             "already in it)")
        target, _ = load_local_target(target_spec, "cpu", "float32")
        drafter = load_drafter(tmp, target)  # the packed checkpoint loads for the target, as shipped
        entry = {"kind": "dartree" if hasattr(drafter, "correction_rank") else "dflash",
                 "modes": int(drafter.num_modes), "block_size": int(drafter.block_size),
                 "layers": len(drafter.layers), "target": target_spec,
                 "target_fingerprint": target_fingerprint(target),
                 "draft_vocab": None if drafter.d2t is None else int(drafter.d2t.numel()),
                 "dtype": "bfloat16", "bytes": size, "files": files,
                 "source": {"checkpoint": str(src), "weights_sha256": file_sha256(src / WEIGHTS)},
                 "training": _training(run_dir), "tau": tau, "packed": provenance(),
                 "rebuild": "make drafters"}
        del drafter, target
        old = root / f".{name}.old-{os.getpid()}"
        if (root / name).exists():
            (root / name).rename(old)
        tmp.rename(root / name)
        release = {"format": FORMAT, "note": ("the drafters shipped for the real Qwen target, one release at a time "
                                             "(make drafters rebuilds it; mfd drafter list shows it)"),
                   "drafters": {**others, name: entry}}
        atomic_write_text(root / RELEASE_FILE, json.dumps(release, indent=1, sort_keys=True) + "\n")
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    announce(f"packed {name}: {size / 1e6:.1f} MB into {root / name} (release {total / 1e6:.1f} MB)")
    return entry
