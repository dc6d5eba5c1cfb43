"""CAM baselines whose channel weights are reused on other images (paper §6.1).

The paper extends Grad-CAM, Grad-CAM++ and Score-CAM to new images by computing the channel
weights ``w`` on an input image ``x`` and reusing them, unchanged, with the method's own heat
map steps on every image assigned to ``x``. Everything here runs through pytorch-grad-cam:
the weights are what the method's ``get_cam_weights`` returns, and reused weights go back
through the library's ``get_cam_image`` / ``compute_cam_per_layer`` / ``scale_cam_image``.

Heat maps, as the library makes them (one target layer): ``cam = ReLU(sum_k w_k A_k)`` at
the layer's resolution, then per image ``(cam - min) / (max - min + 1e-7)``, then
``cv2.resize`` (bilinear, half-pixel centres as torch's ``align_corners=False``, no
antialiasing) to the input's H x W, then the same min-max normalisation again. Values are
in [0, 1]; a map that is 0 everywhere stays 0.

Images here are the model's inputs (already normalised), as pytorch-grad-cam expects; the
model is put in eval mode during a call (each module's mode is restored after) and the
library's hooks are removed before a call returns.
"""

import contextlib
import types
import unittest.mock
from collections.abc import Iterator

import numpy as np
import pytorch_grad_cam.score_cam as score_cam_module
import torch
from pytorch_grad_cam import GradCAM, GradCAMPlusPlus, ScoreCAM
from pytorch_grad_cam.base_cam import BaseCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
from torch import Tensor, nn

from .metrics import eval_mode

CAM_METHODS: dict[str, type[BaseCAM]] = {
    "Grad-CAM": GradCAM,
    "Grad-CAM++": GradCAMPlusPlus,
    "Score-CAM": ScoreCAM,
}

# A key of CAM_METHODS or one of its classes.
CamMethod = str | type[BaseCAM]


class _RecordWeights:
    """Mixin: keep what the method's own ``get_cam_weights`` returns."""

    recorded: np.ndarray

    def get_cam_weights(self, input_tensor, target_layer, targets, activations, grads):
        self.recorded = super().get_cam_weights(
            input_tensor, target_layer, targets, activations, grads
        )
        return self.recorded


class _StoredWeights:
    """Mixin: return stored N x K weights instead of computing them."""

    stored: np.ndarray

    def get_cam_weights(self, input_tensor, target_layer, targets, activations, grads):
        if self.stored.shape != activations.shape[:2]:
            raise ValueError(
                f"weights have {self.stored.shape[1]} channels, "
                f"the target layer has {activations.shape[1]}"
            )
        return self.stored


_RECORDING = {
    name: type(f"_Recording{cls.__name__}", (_RecordWeights, cls), {})
    for name, cls in CAM_METHODS.items()
}
_REUSING = {
    name: type(f"_Reusing{cls.__name__}", (_StoredWeights, cls), {})
    for name, cls in CAM_METHODS.items()
}


def channel_weights(
    method: CamMethod,
    model: nn.Module,
    target_layer: nn.Module | str,
    images: Tensor,
    target_classes: Tensor | list[int] | None = None,
    batch_size: int | None = None,
    progress: bool = False,
) -> Tensor:
    """Channel weights the CAM method computes for each image, exactly as the library does.

    Args:
        method: "Grad-CAM", "Grad-CAM++" or "Score-CAM" (or its pytorch-grad-cam class).
        model: classifier returning logits.
        target_layer: the layer (module, or its name in ``model``) whose output is ``A``.
        images: N x C x H x W model inputs.
        target_classes: (N,) class explained per image; None: the class the model predicts.
        batch_size: images per library call; None: 1 for Score-CAM (which holds
            ``batch_size x K`` masked copies of the input at once), 32 otherwise.
        progress: show Score-CAM's per-image progress bars.

    Returns:
        N x K weights, one per channel of the target layer, as the library's dtype (float32).
    """
    return _fit(method, model, target_layer, images, target_classes, batch_size, progress)[0]


def reused_cam(
    method: CamMethod,
    model: nn.Module,
    target_layer: nn.Module | str,
    images: Tensor,
    weights: Tensor,
    batch_size: int = 32,
) -> Tensor:
    """Heat maps of images from stored channel weights, through the method's own steps.

    Needs one forward pass per batch (no gradients, no extra Score-CAM passes). On the
    image the weights were computed on, this is the library's own heat map.

    Args:
        method: the CAM method that computed ``weights`` (see ``channel_weights``).
        model: classifier returning logits.
        target_layer: the layer (module, or its name in ``model``) the weights belong to.
        images: N x C x H x W model inputs.
        weights: N x K (a row per image) or K (the same for every image) channel weights.
        batch_size: images per forward pass.

    Returns:
        N x H x W float32 heat maps in [0, 1], normalised and upsampled as the module
        docstring says.
    """
    name = _method_name(method)
    layer = _resolve_layer(model, target_layer)
    _check_images(images)
    _check_batch_size(batch_size)
    n = images.shape[0]
    weights = torch.as_tensor(weights).detach().cpu()
    if weights.ndim == 1:
        weights = weights.expand(n, -1)
    if weights.ndim != 2 or weights.shape[0] != n:
        raise ValueError(f"weights must be K or N x K with N = {n}, got {tuple(weights.shape)}")
    if not bool(torch.isfinite(weights).all()):
        raise ValueError("weights contain NaN or inf")
    if n == 0:
        return torch.empty(0, *images.shape[2:])
    maps = []
    with torch.no_grad(), _cam(_REUSING[name], model, layer) as cam:
        cam.uses_gradients = False
        for start in range(0, n, batch_size):
            cam.stored = weights[start : start + batch_size].numpy()
            maps.append(torch.from_numpy(cam(images[start : start + batch_size], targets=None)))
    return torch.cat(maps)


class ReusableCAM:
    """A CAM method fitted on input images whose channel weights are reused on other images.

    Example::

        cam = ReusableCAM("Grad-CAM", model, "features.35")
        cam.fit(inputs)                       # M x K weights, one row per input image
        maps = cam.heatmaps(images, nearest)  # image i uses the weights of inputs[nearest[i]]

    No hooks outlive a call: each call registers the library's hooks and removes them.
    """

    def __init__(
        self,
        method: CamMethod,
        model: nn.Module,
        target_layer: nn.Module | str,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> None:
        """Args: as in ``channel_weights``; ``batch_size`` None uses 32 for ``heatmaps``."""
        self.method = _method_name(method)
        self.model = model
        self.target_layer = _resolve_layer(model, target_layer)
        self.batch_size = batch_size
        self.progress = progress
        self.weights: Tensor | None = None
        self.classes: Tensor | None = None

    def fit(self, inputs: Tensor, target_classes: Tensor | list[int] | None = None) -> Tensor:
        """Compute and keep the channel weights of each input image.

        Args:
            inputs: M x C x H x W model inputs.
            target_classes: (M,) classes to explain; None: the classes the model predicts.

        Returns:
            ``self.weights``, M x K; ``self.classes`` holds the M classes explained.
        """
        self.weights, self.classes = _fit(
            self.method,
            self.model,
            self.target_layer,
            inputs,
            target_classes,
            self.batch_size,
            self.progress,
        )
        return self.weights

    def heatmaps(self, images: Tensor, assignment: Tensor | list[int]) -> Tensor:
        """Heat maps of images, each from the weights of the input it is assigned to.

        Args:
            images: N x C x H x W model inputs.
            assignment: (N,) index of an input image (row of ``self.weights``) per image.

        Returns:
            N x H x W float32 heat maps in [0, 1].
        """
        if self.weights is None:
            raise RuntimeError("call fit(inputs) before heatmaps()")
        assignment = torch.as_tensor(assignment)
        m = self.weights.shape[0]
        if assignment.ndim != 1 or assignment.is_floating_point() or assignment.dtype == torch.bool:
            raise ValueError(f"assignment must be a 1-D integer tensor, got {assignment.dtype}")
        if assignment.numel() and not (0 <= int(assignment.min()) and int(assignment.max()) < m):
            raise ValueError(f"assignment must index the {m} fitted inputs, in [0, {m})")
        return reused_cam(
            self.method,
            self.model,
            self.target_layer,
            images,
            self.weights[assignment.cpu()],
            self.batch_size or 32,
        )


def euclidean_neighbours(
    features_query: Tensor, features_ref: Tensor, k: int, chunk_size: int = 1024
) -> Tensor:
    """The ``k`` reference images nearest each query by Euclidean distance of feature maps.

    Distances are computed exactly (pairwise differences, not the matrix-product shortcut),
    so a query that is also a reference image finds itself at distance 0.

    Args:
        features_query: N x d (or N x C x H x W, flattened) query features.
        features_ref: M x d (or M x C x H x W) reference features.
        k: neighbours per query, 1 <= k <= M.
        chunk_size: queries per distance computation (memory ``chunk_size x M``).

    Returns:
        N x k LongTensor of reference indices, nearest first; equal distances by lower index.
    """
    query = features_query.flatten(1) if features_query.ndim > 2 else features_query
    ref = features_ref.flatten(1) if features_ref.ndim > 2 else features_ref
    if query.ndim != 2 or ref.ndim != 2 or query.shape[1] != ref.shape[1]:
        raise ValueError(
            f"features must be N x d and M x d with the same d, got "
            f"{tuple(features_query.shape)} and {tuple(features_ref.shape)}"
        )
    if not 1 <= k <= ref.shape[0]:
        raise ValueError(f"k must be in [1, {ref.shape[0]}] (number of references), got {k}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    dtype = torch.promote_types(torch.promote_types(query.dtype, ref.dtype), torch.float32)
    query, ref = query.to(dtype), ref.to(dtype)
    if not (bool(torch.isfinite(query).all()) and bool(torch.isfinite(ref).all())):
        raise ValueError("features contain NaN or inf")
    neighbours = [
        torch.sort(
            torch.cdist(chunk, ref, compute_mode="donot_use_mm_for_euclid_dist"),
            dim=1,
            stable=True,
        ).indices[:, :k]
        for chunk in query.split(chunk_size)
    ]
    return torch.cat(neighbours)


def _fit(
    method: CamMethod,
    model: nn.Module,
    target_layer: nn.Module | str,
    images: Tensor,
    target_classes: Tensor | list[int] | None,
    batch_size: int | None,
    progress: bool,
) -> tuple[Tensor, Tensor]:
    """(N x K weights, (N,) classes explained), computed by the library's own method."""
    name = _method_name(method)
    layer = _resolve_layer(model, target_layer)
    _check_images(images)
    n = images.shape[0]
    if n == 0:
        raise ValueError("images must hold at least one image")
    if target_classes is not None:
        target_classes = torch.as_tensor(target_classes).cpu()
        if target_classes.shape != (n,) or target_classes.is_floating_point():
            raise ValueError(
                f"target_classes must be {n} integers, got {target_classes.dtype} "
                f"of shape {tuple(target_classes.shape)}"
            )
        if int(target_classes.min()) < 0:
            raise ValueError("target_classes must be >= 0")
        target_classes = target_classes.long()
    if batch_size is None:
        batch_size = 1 if name == "Score-CAM" else 32
    _check_batch_size(batch_size)
    weights, classes = [], []
    with (
        torch.enable_grad(),
        _frozen_parameters(model),
        _cam(_RECORDING[name], model, layer) as cam,
        _score_cam_progress(progress),
    ):
        cam.compute_input_gradient = cam.uses_gradients
        for start in range(0, n, batch_size):
            chunk = slice(start, start + batch_size)
            targets = None
            if target_classes is not None:
                targets = [ClassifierOutputTarget(int(c)) for c in target_classes[chunk]]
            cam(images[chunk].detach(), targets=targets)
            weights.append(torch.from_numpy(cam.recorded))
            if target_classes is None:
                classes.append(cam.outputs.detach().argmax(dim=-1).cpu())
    return torch.cat(weights), target_classes if target_classes is not None else torch.cat(classes)


@contextlib.contextmanager
def _frozen_parameters(model: nn.Module) -> Iterator[None]:
    """Stop gradients to the parameters, restoring each flag on exit.

    Gradient methods then reach the target layer through the input's gradient
    (``compute_input_gradient``): same gradients there, no parameter gradients computed,
    and frozen models work.
    """
    flags = [(parameter, parameter.requires_grad) for parameter in model.parameters()]
    for parameter, _ in flags:
        parameter.requires_grad_(False)
    try:
        yield
    finally:
        for parameter, flag in flags:
            parameter.requires_grad_(flag)


@contextlib.contextmanager
def _cam(cls: type[BaseCAM], model: nn.Module, layer: nn.Module) -> Iterator[BaseCAM]:
    """A library CAM object on one layer, its hooks removed on exit.

    ``BaseCAM.__exit__`` is not used: it swallows IndexError.
    """
    with eval_mode(model):
        cam = cls(model, target_layers=[layer])
        try:
            yield cam
        finally:
            cam.activations_and_grads.release()


def _score_cam_progress(progress: bool) -> contextlib.AbstractContextManager:
    """Silence Score-CAM's tqdm bars unless ``progress`` (the library offers no switch)."""
    if progress:
        return contextlib.nullcontext()
    silent = types.SimpleNamespace(tqdm=lambda iterable, *args, **kwargs: iterable)
    return unittest.mock.patch.object(score_cam_module, "tqdm", silent)


def _method_name(method: CamMethod) -> str:
    for name, cls in CAM_METHODS.items():
        if method == name or method is cls:
            return name
    raise ValueError(f"unknown CAM method {method!r}; expected one of {list(CAM_METHODS)}")


def _resolve_layer(model: nn.Module, layer: nn.Module | str) -> nn.Module:
    if isinstance(layer, str):
        try:
            return model.get_submodule(layer)
        except AttributeError:
            raise ValueError(f"model has no layer named {layer!r}") from None
    if not any(module is layer for module in model.modules()):
        raise ValueError("target_layer is not a submodule of model")
    return layer


def _check_images(images: Tensor) -> None:
    if not isinstance(images, Tensor) or images.ndim != 4 or not images.is_floating_point():
        got = (images.dtype, tuple(images.shape)) if isinstance(images, Tensor) else type(images)
        raise ValueError(f"images must be a floating N x C x H x W tensor, got {got}")


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
