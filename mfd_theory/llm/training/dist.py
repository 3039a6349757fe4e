"""torch.distributed for the pipeline commands: one process, or ``torchrun --nproc_per_node P``.

:func:`setup` starts the process group under torchrun (gloo on CPU, nccl on CUDA) and pins each rank
to its device, or reports rank 0 of 1 in a plain process. Work is split by a fixed rule (item ``i``
to rank ``i % world``), so results do not depend on the number of processes. Design: docs/own-target.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Dist", "setup", "teardown"]


@dataclass(frozen=True)
class Dist:
    rank: int
    world: int
    local_rank: int
    device: str

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.active:
            torch.distributed.barrier()

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` on rank 0 (in rank order); None on the other ranks."""
        if not self.active:
            return [obj]
        out = [None] * self.world if self.main else None
        torch.distributed.gather_object(obj, out, dst=0)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.active:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def mean(self, value: float) -> float:
        """The mean of a scalar over ranks (for logged losses)."""
        if not self.active:
            return float(value)
        t = torch.tensor([float(value)], dtype=torch.float64,
                         device=self.device if self.device.startswith("cuda") else "cpu")
        torch.distributed.all_reduce(t)
        return float(t.item()) / self.world

    def mine(self, n: int) -> list[int]:
        """The indices among ``range(n)`` that this rank handles."""
        return list(range(self.rank, n, self.world))


def setup(device: str = "auto") -> Dist:
    """Start the process group when launched by torchrun; pick this rank's device.

    ``device``: "auto" (CUDA when available, else CPU), "cpu", "cuda" (this rank's GPU under
    torchrun) or an explicit "cuda:N" (single process only).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device: {device!r} requested but CUDA is not available")
        if world > 1:
            if ":" in device:
                raise ValueError(f"device: under torchrun use 'cuda' (each rank takes its own GPU), got {device!r}")
            device = f"cuda:{local}"
            torch.cuda.set_device(local)
        elif device == "cuda":
            device = "cuda:0"
    elif device != "cpu":
        raise ValueError(f"device: must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if world > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        torch.distributed.init_process_group(backend=backend)
    return Dist(rank=rank, world=world, local_rank=local, device=device)


def teardown(d: Dist) -> None:
    if d.active and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
