"""Whether a model is a fixed function of each image: every module its forward runs in eval
mode (or one that computes the same in both modes) with running statistics, no call given
``training=True``, and the same feature maps and logits for an image alone, twice or in a
batch. [`split_model`][repinterp.models.split.split_model] and ``fit`` check them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, fx, nn

from .linearity import where

__all__ = [
    "CHECKED_IMAGES",
    "UnfixedModelError",
    "check_fixed",
    "check_fixed_before_each_call",
    "check_functional_training",
    "check_image_function",
    "modules_run",
]


class UnfixedModelError(ValueError):
    """A module that the model's forward runs is not a fixed function of one image: it is in
    training mode, or a batch norm uses the statistics of each batch."""


_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)
# The files of torch.nn.modules whose modules compute the same in training and eval mode, but
# for those named in _MODE_DEPENDENT; any other module (batch and instance norms, dropouts,
# recurrent layers, the user's own, which may read self.training) must be in eval mode.
_MODE_FREE_FILES = {
    "activation",
    "channelshuffle",
    "container",
    "conv",
    "distance",
    "flatten",
    "fold",
    "linear",
    "normalization",
    "padding",
    "pixelshuffle",
    "pooling",
    "upsampling",
}
_MODE_DEPENDENT = (nn.RReLU, nn.MultiheadAttention)


def _depends_on_mode(module: nn.Module) -> bool:
    """Whether ``module`` may compute otherwise in training mode than in eval mode."""
    package, _, file = type(module).__module__.rpartition(".")
    built_in = package == "torch.nn.modules" and file in _MODE_FREE_FILES
    return not built_in or isinstance(module, _MODE_DEPENDENT)


def _unfixed(name: str, module: nn.Module) -> str | None:
    """Why ``module`` (called ``name`` in the model) is not a fixed function, or None."""
    what = f"module {name!r} ({type(module).__name__})" if name else "the model"
    if module.training and _depends_on_mode(module):
        return (
            f"{what} is in training mode: it would depend on chance or on the other images "
            "of a batch, and running it could change the model (a batch norm's running "
            "statistics); call model.eval() first"
        )
    if isinstance(module, _BATCH_NORMS) and module.running_mean is None:
        return (
            f"{what} uses the statistics of each batch (track_running_stats=False), so an "
            "image's logits depend on the other images of its batch: give it running "
            "statistics, or replace it"
        )
    return None


def check_fixed(modules: Sequence[tuple[str, nn.Module]]) -> None:
    """Raise `UnfixedModelError`, naming the first module, unless every module of ``modules``
    (name, module) is a fixed function of each image: in eval mode (but for torch's modules
    that compute the same in both modes, a convolution or a ReLU), and a batch norm with
    running statistics."""
    for name, module in modules:
        problem = _unfixed(name, module)
        if problem is not None:
            raise UnfixedModelError(problem)


def modules_run(
    model: nn.Module, nodes: Sequence[fx.Node], root: bool
) -> list[tuple[str, nn.Module]]:
    """The modules of ``model`` that running ``nodes`` runs (with the model itself when
    ``root``): those it calls, with every module inside them, and those traced through; in the
    model's order."""
    names = {""} if root else set()
    for node in nodes:
        stack = node.meta.get("nn_module_stack") or {}
        names.update(name for name, _ in stack.values())
        if node.op == "call_module":
            prefix = node.target
            names.update(
                f"{prefix}.{sub}" if sub else prefix
                for sub, _ in model.get_submodule(prefix).named_modules()
            )
    return [(name, module) for name, module in model.named_modules() if name in names]


def check_functional_training(nodes: Sequence[fx.Node]) -> None:
    """Raise `UnfixedModelError` for a traced call given ``training=True`` (``F.dropout``,
    ``F.batch_norm`` called in the model's forward)."""
    for node in nodes:
        if node.op == "call_function" and node.kwargs.get("training") is True:
            name = getattr(node.target, "__name__", node.target)
            raise UnfixedModelError(
                f"the model calls {name}{where(node)} with training=True: it would depend on "
                "chance or on the other images of a batch; call it with training=self.training "
                "and model.eval()"
            )


def check_fixed_before_each_call(module: nn.Module, modules: list[tuple[str, nn.Module]]) -> None:
    """Check `check_fixed` on ``modules`` before each forward pass of ``module``: a module put
    in training mode after the split is refused before it runs."""
    module.register_forward_pre_hook(lambda _module, _args: check_fixed(modules))


def _differ(a: Tensor, b: Tensor) -> float | None:
    """The largest difference between ``a`` and ``b`` where it exceeds 1e-4 of their scale
    (float rounding between batch sizes stays far below), else None; equal non-finite values
    (NaN with NaN) do not differ."""
    same = (a == b) | (a.isnan() & b.isnan())
    gap = torch.where(same, 0.0, (a - b).abs()).nan_to_num(nan=float("inf")).max().item()
    finite = a[a.isfinite()]
    scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
    return None if gap <= 1e-4 * scale else gap


CHECKED_IMAGES = 4
"""How many reference images (the first) ``fit`` gives `check_image_function`: it reads them
once more and runs ``psi`` on them three times."""


@torch.inference_mode()
def check_image_function(
    psi: Callable[[Tensor], Tensor], head: Callable[[Tensor], Tensor], layer: str, images: Tensor
) -> None:
    """Raise `UnfixedModelError` unless a split model (``psi`` up to ``layer``, then ``head``)
    is a function of each image alone, on ``images`` (a few reference images, N x C x H x W):
    ``psi`` gives the same feature maps when run twice, and each image's logits are the same
    alone as in the batch (to 1e-4 of their scale).

    Raises:
        UnfixedModelError: the feature maps differ between two runs (chance in the trunk) or
            an image's logits depend on the other images of its batch (a batch statistic).
    """
    features = psi(images)
    gap = _differ(features, psi(images))
    if gap is not None:
        raise UnfixedModelError(
            f"the model's feature maps at {layer!r} differ when the same images run "
            f"twice (by up to {gap:.3g}): it draws random numbers in eval mode, so no index "
            "or explanation of it would repeat; make its forward deterministic"
        )
    if len(images) < 2:
        return
    batched = head(features)
    alone = torch.cat([head(psi(images[i : i + 1])) for i in range(len(images))])
    gap = _differ(batched, alone)
    if gap is not None:
        raise UnfixedModelError(
            f"the model's logits for an image alone differ from its logits in a batch of "
            f"{len(images)} (by up to {gap:.3g}): they depend on the other images of the batch "
            "(a batch statistic in the model), so an explanation would too; compute it from "
            "each image alone"
        )
