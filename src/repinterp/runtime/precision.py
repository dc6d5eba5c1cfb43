"""Full float32 precision for the engine, whatever the user's TF32 settings.

On Ampere and later GPUs PyTorch may run float32 convolutions (cuDNN, on by default) and matrix
products (cuBLAS, when allowed) in TF32, with a 10-bit mantissa; oneDNN on the CPU can likewise be
told to use TF32 or bfloat16 for float32 work. Signs of projections near a boundary then differ
from the CPU's, and with them ``P(x)``. [`exact_float32`][repinterp.runtime.precision.exact_float32]
switches all of these off for the duration of a block and restores the user's settings afterwards,
also after an exception. An enclosing ``torch.autocast`` region (CUDA or CPU) is switched off inside
the block too, so that float32 models compute in float32 there.

PyTorch has two interfaces for these flags: the legacy one (``torch.backends.cuda.matmul.
allow_tf32``, ``torch.backends.cudnn.allow_tf32``, ``torch.set_float32_matmul_precision``) and,
since 2.9, the ``fp32_precision`` attributes. Mixing them leaves a state in which reading a legacy
flag (and, on CUDA, a matrix product) raises. Inside the block the flags are set through the
legacy setters, which keep both interfaces consistent; on exit the legacy values that were
readable on entry are put back through the legacy setters, then every ``fp32_precision``
attribute is put back as it was, so the user's state is restored through the interface they used.
The flags are process-wide: other threads running float32 work at the same time see them too;
blocks running in several threads at once restore the flags when the last one ends.

[`engine_dtype`][repinterp.runtime.precision.engine_dtype] refuses models in half precision, which
the engine never runs silently.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

__all__ = ["engine_dtype", "exact_float32", "tf32_allowed"]

# The backends whose float32 precision PyTorch lets users lower, parents before children.
_NODES = (
    "",
    "cuda.matmul",
    "cudnn",
    "cudnn.conv",
    "cudnn.rnn",
    "mkldnn",
    "mkldnn.matmul",
    "mkldnn.conv",
    "mkldnn.rnn",
)


def _node(path: str) -> Any:
    node: Any = torch.backends
    for part in path.split(".") if path else ():
        node = getattr(node, part, None)
        if node is None:
            return None
    return node


@functools.cache
def _precision_nodes() -> dict[str, Any]:
    """The backend nodes that have an ``fp32_precision`` (none before torch 2.9), by path."""
    nodes = {path: _node(path) for path in _NODES}
    return {p: n for p, n in nodes.items() if n is not None and hasattr(n, "fp32_precision")}


def _new_api() -> dict[str, str]:
    """The ``fp32_precision`` of every backend node this torch has (none before torch 2.9)."""
    return {path: node.fp32_precision for path, node in _precision_nodes().items()}


def _read(getter: Any) -> Any:
    try:
        return getter()
    except RuntimeError:  # the user mixed the two interfaces for this flag
        return None


def _effective(path: str, values: dict[str, str]) -> str:
    """A node's precision, following ``"none"`` up to its parents."""
    while True:
        value = values.get(path, "none")
        if value != "none" or not path:
            return "ieee" if value == "none" else value
        path = path.rpartition(".")[0]


def tf32_allowed() -> dict[str, bool]:
    """Whether float32 work may run in lower precision, per backend: ``cublas`` (CUDA matrix
    products), ``cudnn`` (CUDA convolutions), ``onednn_matmul`` and ``onednn_conv`` (CPU)."""
    values = _new_api()
    if values:
        lowered = {path: _effective(path, values) != "ieee" for path in _NODES}
        return {
            "cublas": lowered["cuda.matmul"],
            "cudnn": lowered["cudnn.conv"],
            "onednn_matmul": lowered["mkldnn.matmul"],
            "onednn_conv": lowered["mkldnn.conv"],
        }
    matmul = torch.get_float32_matmul_precision() != "highest"
    return {
        "cublas": matmul,
        "cudnn": bool(torch.backends.cudnn.allow_tf32),
        "onednn_matmul": matmul,
        "onednn_conv": False,
    }


def _save() -> tuple[Any, Any, dict[str, str]]:
    return (
        _read(torch.get_float32_matmul_precision),
        _read(lambda: torch.backends.cudnn.allow_tf32),
        _new_api(),
    )


def _restore(saved: tuple[Any, Any, dict[str, str]]) -> None:
    matmul, cudnn, new = saved
    if matmul is not None:
        torch.set_float32_matmul_precision(matmul)
    if cudnn is not None:
        torch.backends.cudnn.allow_tf32 = cudnn
    nodes = _precision_nodes()
    for path, value in new.items():
        nodes[path].fp32_precision = value


def _is_full_precision(saved: tuple[Any, Any, dict[str, str]]) -> bool:
    """Whether the flags read by `_save` already give full float32 precision everywhere
    (PyTorch's defaults on the CPU), so that there is nothing to set and restore."""
    matmul, cudnn, new = saved
    return matmul == "highest" and cudnn is False and set(new.values()) <= {"none", "ieee"}


def _full_precision() -> None:
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    nodes = _precision_nodes()
    for path, value in _new_api().items():
        if value not in ("none", "ieee"):
            nodes[path].fp32_precision = "ieee"


def _autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (True when this torch cannot say)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no device type
        return True


class _Blocks:
    """The blocks running now, in any thread: the first to enter saves the user's flags and
    sets them; the last to leave restores them (so that one thread leaving never turns TF32
    back on under another)."""

    lock = threading.Lock()
    depth = 0
    saved: tuple[Any, Any, dict[str, str]] | None = None


@contextmanager
def exact_float32() -> Iterator[None]:
    """Run the block with every float32 operation in full float32 precision (no TF32, no
    bfloat16 shortcuts, no autocast), on CUDA and on the CPU; the user's settings come back on
    exit, also after an exception. Blocks may nest and run in several threads at once: the
    settings come back when the last one ends. Also usable as a decorator:
    ``@exact_float32()``."""
    with _Blocks.lock:
        if _Blocks.depth == 0:
            saved = _save()
            if not _is_full_precision(saved):
                try:
                    _full_precision()
                except BaseException:
                    _restore(saved)
                    raise
                _Blocks.saved = saved
        _Blocks.depth += 1
    try:
        with ExitStack() as autocast:
            for device_type in ("cuda", "cpu"):
                if _autocast_enabled(device_type):
                    autocast.enter_context(torch.autocast(device_type, enabled=False))
            yield
    finally:
        with _Blocks.lock:
            _Blocks.depth -= 1
            if _Blocks.depth == 0 and _Blocks.saved is not None:
                _restore(_Blocks.saved)
                _Blocks.saved = None


def engine_dtype(model: torch.nn.Module) -> torch.dtype:
    """The floating dtype the engine computes in for ``model``: its widest floating parameter
    or buffer dtype (float32 for a model with none).

    Raises:
        ValueError: the model has float16 or bfloat16 parameters or buffers (one line saying
            how to convert it).
    """
    dtypes = {t.dtype for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()}
    low = sorted(str(d) for d in dtypes if d.itemsize < 4)
    if low:
        raise ValueError(
            f"the model computes in {', '.join(low)}; boundaries and their sides need float32 "
            "or wider: pass model.float()"
        )
    return max(dtypes, key=lambda d: d.itemsize, default=torch.float32)
