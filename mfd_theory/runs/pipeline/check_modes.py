"""The torch half of ``mfd check-modes`` (:mod:`mfd_theory.commands.pipeline.check_modes`): load the
target, the drafter and its DFlash initialisation, run :func:`~mfd_theory.llm.training.mode_check.check_modes`."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

from mfd_theory.llm.models.target import load_local_target
from mfd_theory.llm.models.drafter import load_drafter
from mfd_theory.llm.training.dist import setup, teardown
from mfd_theory.llm.training.mode_check import check_modes
from mfd_theory.llm.training.prompts import render
from mfd_theory.results import Result
from mfd_theory.validation import make_out_dir

__all__ = ["check"]


def _load(directory: Path, target, flag: str):
    """A drafter checkpoint and the warnings its load gave (a released gate kept unused, for one)."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            drafter = load_drafter(directory, target).eval()
    except ValueError as exc:  # the library names its parameter; the command names the flag
        raise ValueError(f"{flag}: {str(exc).split(': ', 1)[-1]}") from exc
    except (OSError, RuntimeError, KeyError, TypeError) as exc:
        raise ValueError(f"{flag}: cannot load {directory}: {exc}") from exc
    return drafter, [str(w.message) for w in caught]


def check(config, prompts: list, drafter_dir: Path, reference_dir: Path | None, opts) -> int:
    """Run the check ``config`` (a :class:`~mfd_theory.commands.pipeline.check_modes.CheckModesConfig`)
    asks for; print it, write ``check_modes.json``; 1 if it fails, else 0."""
    dist = setup(config.device)
    try:
        target, tok = load_local_target(config.target, dist.device, config.dtype)
        drafter, notes = _load(drafter_dir, target, "--drafter")
        reference = None
        if reference_dir is not None:
            reference, ref_notes = _load(reference_dir, target, "--reference")
            if reference.num_modes != 1:
                raise ValueError(f"--reference: {reference_dir} has {reference.num_modes} modes; the DFlash "
                                 "initialisation has one")
            notes += ref_notes
        ids = [render(p.messages, tok, config.enable_thinking) for p in prompts]
        out = make_out_dir(opts.out, "--out")  # every check passed: now the output directory is made
        res = check_modes(target, drafter, ids, reference, new_tokens=config.new_tokens,
                          tolerance=config.tolerance, progress=not opts.quiet)
        data = {**dataclasses.asdict(res), "mean_mode_accepted": res.mean_mode_accepted,
                "gate_used": bool(getattr(drafter, "gate_used", False)), "gate_note": getattr(drafter, "gate_note", None),
                "load_warnings": notes, "drafter_dir": str(drafter_dir),
                "reference_dir": None if reference_dir is None else str(reference_dir)}
        result = Result("check_modes", dataclasses.asdict(config), data, seed=config.seed)
        if dist.main:
            result.save(out / "check_modes.json")
            for note in notes:
                print(f"load: {note}")
            print(res.report())
        return 1 if res.holds is False else 0
    finally:
        teardown(dist)
