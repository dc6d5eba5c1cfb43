"""Several processes, on one machine or many, building one index with ``torch.distributed``.

``torchrun`` starts the processes and sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``; `init_from_env` joins the process group they describe
(gloo on CPU, NCCL on CUDA). Outside a process group every helper here is the one-process
identity, so the same code runs with and without ``torchrun``.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = ["broadcast", "gather", "init_from_env", "rank_and_world", "shutdown"]

T = TypeVar("T")


def rank_and_world() -> tuple[int, int]:
    """``(rank, world size)`` of this process; ``(0, 1)`` outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_from_env(device: str) -> str:
    """Join the process group that ``torchrun`` describes in the environment, if any.

    Does nothing unless ``WORLD_SIZE`` > 1 (or a group is already initialised). On a CUDA
    device each process takes the GPU of its ``LOCAL_RANK`` and the backend is NCCL; otherwise
    it is gloo.

    Args:
        device: the device asked for, e.g. ``"cpu"`` or ``"cuda"``.

    Returns:
        The device this process should use (``"cuda:LOCAL_RANK"`` for a CUDA device).
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return device
    cuda = torch.device(device).type == "cuda"
    if cuda:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    return device


def shutdown() -> None:
    """Leave the process group, if this process is in one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def broadcast(obj: T) -> T:
    """Rank 0's ``obj`` on every rank (pickled; tensors should be on the CPU)."""
    if rank_and_world()[1] == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(obj: Any) -> list[Any]:
    """On rank 0, the ``obj`` of every rank in rank order; ``[]`` on the other ranks."""
    rank, world = rank_and_world()
    if world == 1:
        return [obj]
    out: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out or []
