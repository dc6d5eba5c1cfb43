"""Small helpers shared by the engine, the evaluation and the viewer.

They stand at the bottom of the package: this module imports nothing from repinterp.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import Tensor, nn

__all__ = [
    "all_finite",
    "check_images",
    "eval_mode",
    "file_sha256",
    "model_device",
    "model_dtype",
    "nearest_rows",
    "resolve_device",
    "resolve_module",
    "tensor_bytes",
    "tensor_sha256",
]


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (CPU for a model with neither)."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def resolve_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device`` that exists on this machine.

    Raises:
        ValueError: an unknown device name, or a CUDA (or MPS) device that is not available.
    """
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda' or 'cuda:N'") from error
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"device {str(device)!r}: CUDA is not available here; use 'cpu'")
        if resolved.index is not None and resolved.index >= count:
            raise ValueError(f"device {str(device)!r}: this machine has {count} CUDA device(s)")
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {str(device)!r}: MPS is not available here; use 'cpu'")
    return resolved


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


def all_finite(tensor: Tensor) -> bool:
    """Whether every value of ``tensor`` is finite: one sum (a NaN or an Inf makes it NaN or
    Inf), then, only if that sum is not finite (it may overflow), the values one by one."""
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def check_images(
    images: Tensor,
    shape: Sequence[int] | None = None,
    what: str = "images",
    pixels: bool = False,
    nonempty: bool = False,
    expected_by: str | None = None,
) -> None:
    """Raise ``ValueError`` unless ``images`` is a finite floating N x C x H x W batch.

    Args:
        images: the batch.
        shape: the expected C x H x W, if known.
        what: how to name the batch in the message.
        pixels: the values must also lie in [0, 1] (pixel space, before normalisation).
        nonempty: N must be at least 1.
        expected_by: who expects ``shape``, to say so in the message (e.g. ``"the index"``:
            "... the index expects (1, 28, 28)"); None: "... expected (1, 28, 28)".
    """
    if not isinstance(images, Tensor):
        raise TypeError(f"{what} must be a tensor, got {type(images).__name__}")
    if images.ndim != 4:
        one = " (one image: image[None])" if images.ndim == 3 else ""
        raise ValueError(f"{what} must be N x C x H x W{one}, got shape {tuple(images.shape)}")
    if not images.is_floating_point():
        raise ValueError(f"{what} must be floating point, got {images.dtype}")
    if nonempty and images.shape[0] == 0:
        raise ValueError(f"{what} holds no image")
    if shape is not None and tuple(images.shape[1:]) != tuple(shape):
        expects = f"{expected_by} expects" if expected_by else "expected"
        raise ValueError(
            f"{what} have C x H x W = {tuple(images.shape[1:])}, {expects} {tuple(shape)}"
        )
    if pixels:
        inside = ((images >= 0) & (images <= 1)).flatten(1).all(1)
        if not bool(inside.all()):
            bad = (~inside).nonzero().flatten()[:5].tolist()
            raise ValueError(
                f"{what} must be in [0, 1] pixel space, before normalisation (NaN or values "
                f"outside it at batch positions {bad})"
            )
        return
    if not all_finite(images):
        finite = torch.isfinite(images).flatten(1).all(1)
        bad = (~finite).nonzero().flatten()[:5].tolist()
        raise ValueError(f"{what} contain NaN or Inf values (batch positions {bad})")


def resolve_module(model: nn.Module, layer: str | nn.Module) -> tuple[str, nn.Module]:
    """The dotted name and the module of ``layer`` (a name from ``named_modules()`` or the
    module itself) in ``model``.

    Raises:
        ValueError: the layer is not part of the model (the message lists similar names).
    """
    modules = dict(model.named_modules())
    if isinstance(layer, nn.Module):
        for name, module in modules.items():
            if module is layer and name:
                return name, module
        raise ValueError("target_layer is a module that is not part of the model")
    if not isinstance(layer, str) or not layer or layer not in modules:
        names = [n for n in modules if n]
        close = difflib.get_close_matches(str(layer), names, n=6, cutoff=0.6)
        top = [n for n in names if "." not in n]
        hint = (
            f"; similar names: {', '.join(close)}"
            if close
            else f"; its top-level modules: {', '.join(top[:12])}"
            if top
            else ""
        )
        raise ValueError(f"target_layer {layer!r} is not a module of the model{hint}")
    return layer, modules[layer]


def tensor_bytes(tensor: Tensor) -> bytes:
    """A tensor's raw bytes: its values on the CPU, contiguous, in row-major order."""
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def tensor_sha256(tensor: Tensor) -> str:
    """SHA-256 of a tensor's raw bytes (see :func:`tensor_bytes`)."""
    return hashlib.sha256(tensor_bytes(tensor)).hexdigest()


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def nearest_rows(
    queries: Tensor, rows: Tensor, k: int = 1, chunk: int = 1024
) -> tuple[Tensor, Tensor]:
    """The ``k`` rows (M x d) nearest each query (N x d) in Euclidean distance.

    Distances are sums of squared pairwise differences in float64, so a query that is also a
    row finds itself at distance 0; equal distances go to the lower row index. The faster
    matrix-product form ``|q|^2 - 2 q.r + |r|^2`` (in float64) only preselects: a row's
    distance is computed from the differences unless that form's rounding bound proves ``k``
    other rows nearer, so the result is the exact search's.

    Args:
        queries: N x d (or N x ..., flattened).
        rows: M x d (or M x ..., flattened), with the same d.
        k: neighbours per query, 1 <= k <= M.
        chunk: queries per distance computation (memory ``chunk x M``).

    Returns:
        N x k row indices (long) and N x k distances, nearest first, on the CPU, in the
        inputs' floating dtype (at least float32).

    Raises:
        ValueError: mismatched shapes, a bad ``k`` or ``chunk``, or NaN / Inf values.
    """
    query = queries.flatten(1) if queries.ndim > 2 else queries
    ref = rows.flatten(1) if rows.ndim > 2 else rows
    if query.ndim != 2 or ref.ndim != 2 or query.shape[1] != ref.shape[1]:
        raise ValueError(
            f"features must be N x d and M x d with the same d, got "
            f"{tuple(queries.shape)} and {tuple(rows.shape)}"
        )
    if not 1 <= k <= ref.shape[0]:
        raise ValueError(f"k must be in [1, {ref.shape[0]}] (number of rows), got {k}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    dtype = torch.promote_types(torch.promote_types(query.dtype, ref.dtype), torch.float32)
    query, ref = query.cpu(), ref.cpu()
    if not (bool(torch.isfinite(query).all()) and bool(torch.isfinite(ref).all())):
        raise ValueError("features contain NaN or Inf")
    block = max(1, _BLOCK_ELEMENTS // max(1, ref.shape[1]))  # rows converted to float64 at once
    ref_norms = torch.cat([_squared_norms(part) for part in ref.split(block)])  # M >= k >= 1
    # Either form is within 2 (d + 4) u (|q|^2 + |r|^2) of the exact value (u = 2^-53, in any
    # order of summation), so they differ by at most twice that; the slack spares a factor 2.
    slack = 8 * (ref.shape[1] + 4) * 2.0**-53
    best_i, best_d = [], []
    for part in query.split(chunk):
        q = part.to(_F64)
        q_norms = _squared_norms(q)
        bound = slack * (q_norms[:, None] + ref_norms)
        approx = torch.cat(
            [
                torch.addmm(q_norms[:, None] + n, q, r.to(_F64).T, alpha=-2)
                for r, n in zip(ref.split(block), ref_norms.split(block), strict=True)
            ],
            dim=1,
        )
        limit = (approx + bound).kthvalue(k, dim=1, keepdim=True).values
        qi, ri = (approx - bound <= limit).nonzero(as_tuple=True)
        exact = torch.full_like(approx, torch.inf)
        for s in range(0, len(qi), block):
            a, b = qi[s : s + block], ri[s : s + block]
            exact[a, b] = _squared_norms(q[a] - ref[b].to(_F64))
        if k == 1:  # min returns the first minimum: the lower index on ties
            value, index = exact.min(1, keepdim=True)
        else:
            value, index = torch.sort(exact, dim=1, stable=True)
        best_i.append(index[:, :k])
        best_d.append(value[:, :k].sqrt().to(dtype))
    if not best_i:
        return torch.empty(0, k, dtype=torch.long), torch.empty(0, k, dtype=dtype)
    return torch.cat(best_i), torch.cat(best_d)


_F64 = torch.float64
_BLOCK_ELEMENTS = 1 << 22  # 32 MB of float64


def _squared_norms(x: Tensor) -> Tensor:
    """Squared Euclidean norms of the rows of ``x``, in float64."""
    x = x.to(_F64)
    return (x * x).sum(1)
