"""A user's own target, from prompts to speedup: ``mfd distill`` (the target's answers),
``mfd train-drafter`` and ``mfd eval`` (and ``mfd ceiling``, ``mfd check-modes``, ``mfd target``).
``X.py`` is the torch-free command (its config and ``main``), ``mfd_theory.runs.pipeline.X`` its
torch half; ``_target.py`` the target options they share. Usage: docs/own-target.md."""

from __future__ import annotations

__all__ = ["mains"]


def mains() -> dict:
    """The entry points (``main(argv)``) of distill, train-drafter and eval by command name: what a
    driver that runs them as steps (``mfd own-target``, ``mfd natural``) is given."""
    from mfd_theory.commands.pipeline import distill, eval, train_drafter

    return {"distill": distill.main, "train-drafter": train_drafter.main, "eval": eval.main}
