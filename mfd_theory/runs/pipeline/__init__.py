"""The torch halves of the own-target pipeline (``mfd distill``, ``train-drafter``, ``eval``, ``ceiling``,
``check-modes``), and what they share."""

from __future__ import annotations

__all__ = ["say"]


def say(dist, msg: str) -> None:
    """Print on the main process only (every torchrun rank runs the same code)."""
    if dist is None or dist.main:
        print(msg, flush=True)
