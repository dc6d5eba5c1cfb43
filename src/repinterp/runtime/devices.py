"""Devices: the one resolver of device names (``auto`` included), a model's device and dtype, and
eval mode as a context."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["eval_mode", "model_device", "model_dtype", "resolve_device"]


def resolve_device(device: str | torch.device | None, what: str = "device") -> torch.device:
    """``device`` as a ``torch.device`` that exists on this machine.

    Args:
        device: a device or its name (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``);
            ``"auto"`` or None: CUDA when available, else the CPU.
        what: how the message names the setting (``"--device"`` on the command line).

    Raises:
        ValueError: an unknown device name, or a CUDA (or MPS) device that is not available.
    """
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"{what} {str(device)!r} is not a device (auto, cpu, cuda, cuda:N, mps)"
        ) from None
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no GPU"
            raise ValueError(
                f"{what} {str(device)!r}: CUDA is not available here ({why}); use 'cpu' or 'auto'"
            )
        if resolved.index is not None and resolved.index >= count:
            raise ValueError(f"{what} {str(device)!r}: this machine has {count} CUDA device(s)")
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{what} {str(device)!r}: MPS is not available here; use 'cpu' or 'auto'")
    return resolved


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (CPU for a model with neither)."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def model_dtype(model: nn.Module) -> torch.dtype:
    """The dtype of the model's first floating parameter or buffer (float32 for a model with
    none)."""
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.float32


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put every module of ``model`` in eval mode; restore each module's own mode on exit."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, training in modes:
            module.training = training
