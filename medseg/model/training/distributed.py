"""Distributed setup: one process, or DistributedDataParallel under ``torchrun``."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from medseg.model.backends import TRAINING, resolve_device


@dataclass(frozen=True)
class DistributedContext:
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    initialized_here: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def setup_distributed(device: str, timeout: datetime.timedelta | None = None) -> DistributedContext:
    """Join the process group torchrun describes (WORLD_SIZE > 1); otherwise a single process.

    NCCL on CUDA, gloo on CPU; under CUDA each process uses the GPU of its LOCAL_RANK.
    ``timeout`` bounds every collective (torch's default, 30 minutes, when None): a batch
    whose processes meet only at the end needs longer.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    base = torch.device(resolve_device(device, TRAINING))
    if world_size <= 1:
        return DistributedContext(device=base)
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if base.type == "cuda":
        base = torch.device("cuda", local_rank)
        torch.cuda.set_device(base)
    initialized_here = False
    if not dist.is_initialized():
        options = {"timeout": timeout} if timeout is not None else {}
        dist.init_process_group(backend="nccl" if base.type == "cuda" else "gloo", init_method="env://", **options)
        initialized_here = True
    return DistributedContext(rank, world_size, base, initialized_here)

