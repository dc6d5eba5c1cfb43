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

Score-CAM's weights are the library's (``ScoreCAM.get_cam_weights``: the softmax over channels
of the class score of the image masked by each channel's upsampled, min-max normalised map),
computed here with the masked copies forwarded in batches of their own and without the
library's hooks on them (`_score_cam`); they equal the library's to float tolerance
(tests/evaluation/test_baselines.py).

Images here are the model's inputs (already normalised), as pytorch-grad-cam expects; the
model is put in eval mode during a call (each module's mode is restored after) and the
library's hooks are removed before a call returns.
"""

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from pytorch_grad_cam import GradCAM, GradCAMPlusPlus, ScoreCAM
from pytorch_grad_cam.base_cam import BaseCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
from torch import Tensor, nn

from ..core.nearest import nearest_rows
from ..data.reference import check_images
from ..models.split import resolve_module
from ..runtime.devices import eval_mode
from ..runtime.progress import progress_bar

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


def cam_weights(
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
        batch_size: images per library call; for Score-CAM, masked copies of an image per
            forward pass. None: 32; for Score-CAM 16 on the CPU (faster per image than larger
            batches there), 256 on a GPU.
        progress: show a progress bar of Score-CAM's images.

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
        method: the CAM method that computed ``weights`` (see ``cam_weights``).
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
    _, layer = resolve_module(model, target_layer)
    check_images(images)
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
        """Args: as in ``cam_weights``; ``batch_size`` None uses 32 for ``heatmaps``."""
        self.method = _method_name(method)
        self.model = model
        self.target_layer = resolve_module(model, target_layer)[1]
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
    """The ``k`` reference images nearest each query by Euclidean distance of feature maps:
    ``utils.nearest_rows(features_query, features_ref, k, chunk_size)``'s indices.

    Returns:
        N x k LongTensor of reference indices (CPU), nearest first; equal distances by lower
        index.
    """
    return nearest_rows(features_query, features_ref, k, chunk_size)[0]


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
    _, layer = resolve_module(model, target_layer)
    check_images(images, nonempty=True)
    n = images.shape[0]
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
    if name == "Score-CAM":
        if batch_size is None:
            batch_size = 16 if images.device.type == "cpu" else 256
        _check_batch_size(batch_size)
        return _score_cam(model, layer, images, target_classes, batch_size, progress)
    batch_size = 32 if batch_size is None else batch_size
    _check_batch_size(batch_size)
    weights, classes = [], []
    with (
        torch.enable_grad(),
        _frozen_parameters(model),
        _cam(_RECORDING[name], model, layer) as cam,
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


def _score_cam(
    model: nn.Module,
    layer: nn.Module,
    images: Tensor,
    target_classes: Tensor | None,
    batch_size: int,
    progress: bool,
) -> tuple[Tensor, Tensor]:
    """Score-CAM's (N x K weights, (N,) classes explained), as ``ScoreCAM.get_cam_weights``
    computes them: each channel's map upsampled (bilinear, ``align_corners=True``) to the
    image, min-max normalised (``+ 1e-8``), multiplied into the image; the class logit of each
    masked copy, softmax over the channels. The copies go ``batch_size`` per forward pass, with
    no hook on the layer (the library records its activations at every pass)."""
    seen: list[Tensor] = []
    handle = layer.register_forward_hook(lambda _, __, out: seen.append(out.detach()))
    try:
        with torch.no_grad(), eval_mode(model):
            logits = torch.cat([model(images[i : i + 32]) for i in range(0, len(images), 32)])
    finally:
        handle.remove()
    activations = torch.cat(seen)
    classes = logits.argmax(-1).cpu() if target_classes is None else target_classes
    n, k = activations.shape[:2]
    scores = torch.empty(n, k)
    bar = progress_bar(total=n * k, desc="Score-CAM weights", unit="pass", enabled=progress)
    with torch.no_grad(), eval_mode(model), bar:
        for i in range(n):
            up = F.interpolate(
                activations[i : i + 1], size=images.shape[-2:], mode="bilinear", align_corners=True
            )[0]
            flat = up.flatten(1)
            low, high = flat.min(1).values[:, None, None], flat.max(1).values[:, None, None]
            masks = (up - low) / (high - low + 1e-8)
            c = int(classes[i])
            for start in range(0, k, batch_size):
                masked = images[i] * masks[start : start + batch_size, None]
                scores[i, start : start + len(masked)] = model(masked)[:, c].float().cpu()
                bar.update(len(masked))
    return scores.softmax(-1), classes


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


def _method_name(method: CamMethod) -> str:
    for name, cls in CAM_METHODS.items():
        if method == name or method is cls:
            return name
    raise ValueError(f"unknown CAM method {method!r}; expected one of {list(CAM_METHODS)}")


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
