"""SHA-256 of tensors and files: what fingerprints, manifests and shards are checked with."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO

import torch
from torch import Tensor

__all__ = ["file_sha256", "tensor_bytes", "tensor_sha256"]


def tensor_bytes(tensor: Tensor) -> bytes:
    """A tensor's raw bytes: its values on the CPU, contiguous, in row-major order."""
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def tensor_sha256(tensor: Tensor) -> str:
    """SHA-256 of a tensor's raw bytes (see `tensor_bytes`)."""
    return hashlib.sha256(tensor_bytes(tensor)).hexdigest()


def file_sha256(path: str | Path | BinaryIO) -> str:
    """SHA-256 of a file, read in 1 MiB blocks: by its path, or a binary file already open
    (read from its start, left at its end)."""
    if not isinstance(path, (str, Path)):
        path.seek(0)
        digest = hashlib.sha256()
        for block in iter(lambda: path.read(1 << 20), b""):
            digest.update(block)
        return digest.hexdigest()
    with open(path, "rb") as f:
        return file_sha256(f)
