"""``RepresentativeCAM``: RI behind pytorch-grad-cam's CAM interface.

A pytorch-grad-cam CAM is made with the model and its target layers, and called on a batch of
model inputs: ``cam(input_tensor, targets)`` returns N x H x W float32 NumPy maps in [0, 1],
one per input, at the input's size. ``RepresentativeCAM`` returns RI's map of each input there:
the heat map of its own polytope ``P(x)`` (§5.1), or, for a target class other than the
predicted one, the contrastive map of the two classes (beyond the paper), so that
``show_cam_on_image``, the library's metrics (``CamMultImageConfidenceChange``, ROAD) and a loop
written for ``GradCAM`` take it unchanged. pytorch_grad_cam itself is not imported: a target is
read by its ``category``, as ``ClassifierOutputTarget`` (and the library's other classifier
targets) hold it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from torch import Tensor, nn

from ..models.split import LayerSpec
from .maps import check_other_targets, interpreter_for, own_heatmaps

__all__ = ["RepresentativeCAM"]


def _category(target: Any) -> int:
    """The class a pytorch-grad-cam target names (its ``category``): an integer, also as a
    0-d tensor or array (``ClassifierOutputTarget(logits.argmax())``)."""
    category = getattr(target, "category", None)
    if isinstance(category, (Tensor, np.ndarray)) and category.ndim == 0:
        category = category.item()
    if not isinstance(category, (int, np.integer)) or isinstance(category, bool):
        held = "" if category is None else f" whose category is {category!r}"
        raise ValueError(
            "RepresentativeCAM's targets name classes, as ClassifierOutputTarget(category) "
            "does with an integer (or targets=None: the predicted classes), got a "
            f"{type(target).__name__}{held}"
        )
    return int(category)


class RepresentativeCAM:
    """Representative interpretations as a pytorch-grad-cam CAM.

    ``RepresentativeCAM(model, target_layers=[model.layer4], reference=train)`` fits an
    interpreter on the reference set at that layer; ``cam(input_tensor)`` then gives each
    input's map of its own ``P(x)`` (``explain_batch``, then ``heatmap``), as
    ``GradCAM(model, target_layers)(input_tensor)`` gives Grad-CAM's.

    RI explains the class the model predicts. With ``targets`` naming another class ``c'`` for
    an input, that input gets, beyond the paper, the contrastive map of why the model says its
    predicted class rather than ``c'`` (``other_targets="contrast"``, the default: the heat map
    of the boundary between the two classes at the input, see
    [`contrastive_heatmap`][repinterp.interpreter.RepresentativeInterpreter.contrastive_heatmap]);
    or the call is refused (``"refuse"``), or that input gets its predicted class's map all the
    same (``"predicted"``).

    Args:
        model: the classifier, in eval mode.
        target_layers: the layer to split the model at: a list of one module, as in
            pytorch-grad-cam (or the module, or its name).
        reference: the reference set (anything ``RepresentativeInterpreter.fit`` takes),
            normalised as the model expects; or a fitted ``RepresentativeInterpreter`` of
            ``model`` at that layer, used as it is.
        reshape_transform: must be None: RI splits a CNN at a layer with N x K x h x w
            feature maps, not a transformer's tokens.
        other_targets: ``"contrast"``, ``"refuse"`` or ``"predicted"`` (see above).
        options: settings of the interpreter fitted on ``reference`` (``n_boundaries``,
            ``seed``, ``device``, ``batch_size``, ``progress``, ...; see
            ``RepresentativeInterpreter``).

    Attributes:
        interpreter: the fitted ``RepresentativeInterpreter``.

    Raises:
        ValueError: a ``reshape_transform``, more than one target layer, an interpreter of
            another model or layer, and the errors of the interpreter and its fit.
    """

    def __init__(
        self,
        model: nn.Module,
        target_layers: LayerSpec,
        reference: Any,
        reshape_transform: Callable[[Tensor], Tensor] | None = None,
        other_targets: str = "contrast",
        **options: Any,
    ) -> None:
        if reshape_transform is not None:
            raise ValueError(
                "reshape_transform is not supported: RI splits a CNN at a layer whose output is "
                "N x K x h x w feature maps (pass reshape_transform=None)"
            )
        self.model = model
        self.target_layers = target_layers
        self.other_targets = check_other_targets(other_targets)
        self.interpreter = interpreter_for(model, target_layers, reference, **options)

    def __call__(
        self,
        input_tensor: Tensor,
        targets: Sequence[Any] | None = None,
        aug_smooth: bool = False,
        eigen_smooth: bool = False,
    ) -> np.ndarray:
        """RI's maps of N inputs.

        Args:
            input_tensor: N x C x H x W, normalised as the model expects (any device).
            targets: None (each input's predicted class), or one target per input with a
                ``category`` (``ClassifierOutputTarget``); see ``other_targets``.
            aug_smooth: must be False: test-time augmentation would average the maps of
                other images' polytopes.
            eigen_smooth: must be False: RI's map is ``P(x)``'s channel weights on the feature
                map, not a projection of the activations.

        Returns:
            N x H x W float32 in [0, 1], as ``Interpretation.heatmap`` draws them (NumPy); an
            input whose ``P(x)`` is empty (every reference image predicted one class) gets
            zeros, and a warning says why.

        Raises:
            ValueError: ``aug_smooth`` or ``eigen_smooth``, bad targets (see above), or bad
                images.
        """
        for name, value in (("aug_smooth", aug_smooth), ("eigen_smooth", eigen_smooth)):
            if value:
                raise ValueError(
                    f"{name}=True is not supported by RepresentativeCAM: RI's map of an input is "
                    "that of its own polytope P(x), with no smoothing"
                )
        classes = None if targets is None else [_category(t) for t in targets]
        return own_heatmaps(self.interpreter, input_tensor, classes, self.other_targets)

    def __enter__(self) -> RepresentativeCAM:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Nothing to release (RI leaves no hooks on the model); an error propagates, where
        pytorch-grad-cam's CAMs print an ``IndexError`` and swallow it."""
