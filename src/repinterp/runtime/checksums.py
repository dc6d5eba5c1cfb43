"""SHA-256 of tensors and files: what fingerprints, manifests and shards are checked with."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from torch import Tensor

__all__ = ["file_sha256", "tensor_bytes", "tensor_sha256"]


def tensor_bytes(tensor: Tensor) -> bytes:
    """A tensor's raw bytes: its values on the CPU, contiguous, in row-major order."""
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def tensor_sha256(tensor: Tensor) -> str:
    """SHA-256 of a tensor's raw bytes (see `tensor_bytes`)."""
    return hashlib.sha256(tensor_bytes(tensor)).hexdigest()


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
