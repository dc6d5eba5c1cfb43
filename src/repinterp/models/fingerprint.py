"""Fingerprints of a model, saved in an index to tell another model when it is opened
again: its weights (every tensor its forward may read) and its traced graphs (what each node
calls, with the settings ``repr`` omits)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, fx, nn

from ..runtime.checksums import tensor_bytes

__all__ = ["graph_fingerprint", "model_fingerprint"]


# Not devices: an index made on a GPU is the CPU's index too.
_PLAIN = (type(None), bool, int, float, complex, str, torch.dtype)


def _plain(value: Any) -> bool:
    """Whether ``value`` is a plain setting: a number, string, dtype or None, or a tuple or
    list of them."""
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return isinstance(value, _PLAIN)


def _settings(module: nn.Module) -> str:
    """Every plain public attribute of ``module`` and of each module inside it (its
    constructor's settings, ``count_include_pad`` or ``align_corners`` included, which
    ``repr`` omits), by name; not the mode, which is checked on its own."""
    return ";".join(
        f"{name}:"
        + ",".join(
            f"{key}={value!r}"
            for key, value in sorted(vars(m).items())
            if not key.startswith("_") and key != "training" and _plain(value)
        )
        for name, m in module.named_modules()
    )


def _callee(node: fx.Node, modules: dict[str, nn.Module]) -> str:
    """What a traced node calls, by name alone (not where it is defined, which moves between
    versions of torch, nor where it lies in memory): a module's class, ``repr`` and settings
    (see `_settings`), with the modules inside it, a function's name, a method's name."""
    if node.op == "call_module":
        module = modules[node.target]
        return f"{type(module).__qualname__}:{module!r}:{_settings(module)}"
    if node.op == "call_function":
        target = node.target
        return getattr(target, "__qualname__", None) or type(target).__qualname__
    return str(node.target)


def graph_fingerprint(model: nn.Module, graphs: Sequence[fx.Graph]) -> str:
    """SHA-256 of traced graphs of ``model``: each node's operation, what it calls (see
    `_callee`) and its arguments (constants, and the other nodes by position), so that a
    model with the same weights and another trunk or head (a ReLU swapped for a LeakyReLU, a
    changed stride or slope) gives another one."""
    modules = dict(model.named_modules())
    digest = hashlib.sha256()
    for graph in graphs:
        position = {node: f"%{i}" for i, node in enumerate(graph.nodes)}
        for node in graph.nodes:
            args = fx.node.map_arg((node.args, node.kwargs), position.__getitem__)
            digest.update(f"{node.op}|{_callee(node, modules)}|{args!r};".encode())
        digest.update(b"#")
    return digest.hexdigest()


def _unsaved_tensors(model: nn.Module) -> dict[str, Tensor]:
    """The tensors of ``model`` that its state_dict lacks and its forward may read: the
    non-persistent buffers and the plain tensor attributes of its modules, by dotted name."""
    saved = model.state_dict(keep_vars=True)
    found: dict[str, Tensor] = {}
    for prefix, module in model.named_modules():
        dot = f"{prefix}." if prefix else ""
        tensors = dict(module.named_buffers(recurse=False))
        tensors.update((k, v) for k, v in vars(module).items() if isinstance(v, Tensor))
        found.update(
            (f"{dot}{name}", tensor)
            for name, tensor in tensors.items()
            if tensor is not None and f"{dot}{name}" not in saved
        )
    return found


def model_fingerprint(model: nn.Module) -> str:
    """SHA-256 of the names, shapes, dtypes and values of all parameters and buffers, the
    non-persistent ones and the modules' plain tensor attributes included (a model without
    these has the fingerprint of its state_dict alone)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor_bytes(tensor))
    for name, tensor in sorted(_unsaved_tensors(model).items()):
        digest.update(f"+{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor_bytes(tensor))
    return digest.hexdigest()
