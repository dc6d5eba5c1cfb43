"""What the integrations share: the interpreter of a model, and the heat maps of inputs' own
polytopes with the classes they are asked for.

RI explains the class a model predicts for an input: ``P(x)`` is the polytope, of the head's
linear regions, that holds ``x`` and as many reference images of that class as possible. A
caller that asks for another class ``c'`` (pytorch-grad-cam's ``targets``, Quantus's labels) is
refused (``other_targets="refuse"``), given the predicted class's map all the same
(``"predicted"``), or, beyond the paper, given the contrastive map of the boundary between the
predicted class and ``c'`` at the input (``"contrast"``, see
[`contrastive_heatmap`][repinterp.interpreter.RepresentativeInterpreter.contrastive_heatmap]).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..core.heatmap import polytope_heatmaps
from ..interpreter import RepresentativeInterpreter
from ..models.split import LayerSpec, resolve_layer
from ..runtime.precision import exact_float32

__all__ = ["OTHER_TARGETS", "check_other_targets", "interpreter_for", "own_heatmaps"]

OTHER_TARGETS = ("refuse", "predicted", "contrast")
"""What a target class other than an input's predicted one gets: an error, the predicted
class's map, or the contrastive map of the two classes."""


def check_other_targets(value: str) -> str:
    """``value`` if it is one of [`OTHER_TARGETS`][repinterp.integrations.maps.OTHER_TARGETS].

    Raises:
        ValueError: it is not.
    """
    if value not in OTHER_TARGETS:
        raise ValueError(f"other_targets must be one of {', '.join(OTHER_TARGETS)}, got {value!r}")
    return value


def interpreter_for(
    model: nn.Module, target_layer: LayerSpec, reference: Any, **options: Any
) -> RepresentativeInterpreter:
    """The interpreter that explains ``model`` at ``target_layer``.

    Args:
        model: the classifier, in eval mode.
        target_layer: a name, the module, or a list of one module (pytorch-grad-cam's
            ``target_layers=[model.layer4]``).
        reference: a reference set (anything ``RepresentativeInterpreter.fit`` takes), fitted
            on here; or a fitted ``RepresentativeInterpreter`` of ``model`` at that layer,
            used as it is.
        options: keywords of ``RepresentativeInterpreter`` (``n_boundaries``, ``seed``,
            ``device``, ``progress``, ...) for the fit on a reference set.

    Raises:
        ValueError: an interpreter of another model object or another layer, or ``options``
            given with an interpreter; the errors of the interpreter and of its fit.
        RuntimeError: an interpreter that is not fitted.
    """
    layer = resolve_layer(model, target_layer)
    if not isinstance(reference, RepresentativeInterpreter):
        return RepresentativeInterpreter(model, layer, **options).fit(reference)
    if options:
        raise ValueError(
            f"{', '.join(sorted(options))}: settings of a fit, but reference is an interpreter "
            "fitted already"
        )
    if reference.model is not model:
        raise ValueError(
            "reference is an interpreter of another model object: pass the model it was made "
            "with, or a reference set to fit on"
        )
    if reference.target_layer != layer:
        raise ValueError(
            f"reference is an interpreter split at {reference.target_layer!r}, not at the "
            f"target layer {layer!r}"
        )
    reference.index  # noqa: B018 (raises if it is not fitted)
    return reference


@exact_float32()
def own_heatmaps(
    interpreter: RepresentativeInterpreter,
    images: Any,
    targets: Sequence[int | None] | None,
    other_targets: str = "refuse",
) -> np.ndarray:
    """Each image's heat map of its own polytope ``P(x)`` (``explain_batch``, then each
    interpretation's ``heatmap`` of its input, drawn in one batch). An image whose ``P(x)`` is
    empty, because the model predicts one class for every reference image (as a randomised
    model may), has no map to draw: it gets zeros (no pixel counts more than another), and a
    warning says why.

    Args:
        interpreter: a fitted interpreter.
        images: N x C x H x W, as the model takes them (anything ``explain_batch`` takes).
        targets: None, or the class asked for each image (None in it: the predicted one).
        other_targets: ``"refuse"``: a target other than its image's predicted class raises;
            ``"predicted"``: the image's map is its predicted class's all the same;
            ``"contrast"``: the image's map is the contrastive map of its predicted class and
            the target (see
            [`contrastive_heatmap`][repinterp.interpreter.RepresentativeInterpreter.contrastive_heatmap]).

    Returns:
        N x H x W float32 in [0, 1], as ``Interpretation.heatmap`` draws them (or as
        ``contrastive_heatmap`` does), on the CPU.

    Raises:
        ValueError: ``targets`` of another length than the images, or a target other than
            the predicted class (with ``"refuse"``).
    """
    explanations = interpreter.explain_batch(images)
    if targets is not None and len(targets) != len(explanations):
        raise ValueError(f"{len(targets)} targets for {len(explanations)} images")
    mode = check_other_targets(other_targets)
    other = [
        (i, int(t), e.predicted_class)
        for i, (t, e) in enumerate(zip(targets or [], explanations, strict=False))
        if t is not None and int(t) != e.predicted_class
    ]
    if other and mode == "refuse":
        i, t, c = other[0]
        raise ValueError(
            f"RI explains the class the model predicts (the polytope P(x) of the input): "
            f"image {i} is predicted class {c}, its target is class {t} ({len(other)} of "
            f"{len(explanations)} images differ); pass no targets, other_targets='contrast' "
            "for the contrastive maps of the two classes, or other_targets='predicted' to have "
            "the predicted classes' maps all the same"
        )
    contrasted = [i for i, _, _ in other] if mode == "contrast" else []
    n = len(explanations)
    maps = np.zeros((n, *interpreter.index.input_shape[-2:]), np.float32)
    if contrasted:
        images = torch.stack([explanations[i].image for i in contrasted])
        classes = [int(targets[i]) for i in contrasted]
        maps[contrasted] = interpreter.contrastive_heatmap(images, classes).float().cpu().numpy()
    drawn = [i for i, e in enumerate(explanations) if e.has_heatmap and i not in contrasted]
    if drawn:
        images = torch.stack([explanations[i].image for i in drawn])
        weights = [explanations[i].channel_weights for i in drawn]
        which = torch.arange(len(drawn))
        size = tuple(images.shape[-2:])
        heat = polytope_heatmaps(interpreter.features(images), weights, which, size)
        maps[drawn] = heat.float().cpu().numpy()
    if len(drawn) + len(contrasted) < n:
        empty = next(e for e in explanations if not e.has_heatmap)
        warnings.warn(
            f"{n - len(drawn)} of {n} images are drawn as maps of zeros: {empty.message}",
            stacklevel=4,  # own_heatmaps, exact_float32, the integration, its caller
        )
    return maps
