"""The sanity checks of Adebayo et al. (2018), "Sanity checks for saliency maps", for RI and
each CAM, through Quantus (the ``sanity`` protocol).

- Cascading model-parameter randomisation (`cascade`: ``quantus.MPRT`` with
  ``layer_order="top_down"``): the layers with parameters (those with ``reset_parameters``,
  as Quantus finds them) are re-initialised one more at a time from the output down, and each
  method explains the same images with each randomised copy of the model. The similarity of
  an image's map to its map of the trained model is Spearman's rank correlation, as Quantus
  reports it (``correlation_spearman``). A method whose maps depend on the model loses
  similarity as layers are randomised. RI explains a randomised model with an index fitted
  anew on it (`repinterp.integrations.QuantusExplainer`), the CAMs with their gradients or
  scores on it (`CAMExplainer`).
- Random logit (`random_logit`: ``quantus.RandomLogit``): the similarity (SSIM, Quantus's
  default) of an image's map for its predicted class to its map for a random other class. RI
  explains the predicted class whatever the target (its map is that of the polytope ``P(x)``,
  ``other_targets="predicted"``), so its score is 1 by construction: the check measures
  whether a map depends on the class asked for, not whether it depends on the model.

Both take the model's predictions on the images as targets. A map that is constant (a CAM's
all-zero map, RI's map of an empty ``P(x)``) has no rank correlation or SSIM: its score is
NaN, left out of the means and counted (``*_undefined``, % of the images). Quantus refuses a
batch whose maps are all constant (RI on a randomised model that predicts one class has no
boundary to draw: all zeros), so in the cascade such a batch reaches it with a different
constant for each image, which leaves every rank correlation the same NaN
(`ConstantMapsAllowed`); batches of one image are avoided. Quantus
is imported when a check runs (the optional ``quantus`` extra).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from ..integrations import QuantusExplainer
from ..runtime.devices import model_device
from .baselines import CAM_METHODS, channel_weights, reused_cam
from .run import Run

__all__ = [
    "SANITY_METHODS",
    "CAMExplainer",
    "ConstantMapsAllowed",
    "cascade",
    "random_logit",
    "sanity",
]

SANITY_METHODS = ("RI", *CAM_METHODS)
"""The methods the sanity checks take."""

# A Quantus explain_func: (model, N x C x H x W inputs, N targets, device) -> N x 1 x H x W.
ExplainFunc = Callable[..., np.ndarray]

# Quantus's options for a quiet metric.
_QUIET = {"disable_warnings": True, "display_progressbar": False}


class CAMExplainer:
    """A CAM baseline as a Quantus ``explain_func``: pytorch-grad-cam's own map of each input
    (`baselines.channel_weights`, drawn by `baselines.reused_cam`) at ``target_layer`` of the
    model Quantus passes, the trained one or a randomised copy.

    Args:
        method: ``"Grad-CAM"``, ``"Grad-CAM++"`` or ``"Score-CAM"``.
        target_layer: the layer's name in the model (found again in each copy).

    Raises:
        ValueError: an unknown method.
    """

    def __init__(self, method: str, target_layer: str) -> None:
        if method not in CAM_METHODS:
            raise ValueError(f"unknown CAM method {method!r}; choose from {', '.join(CAM_METHODS)}")
        self.method = method
        self.target_layer = target_layer

    def __call__(
        self,
        model: nn.Module,
        inputs: np.ndarray,
        targets: np.ndarray | None,
        device: str | None = None,
    ) -> np.ndarray:
        """The maps of N inputs, as Quantus calls an ``explain_func``.

        Args:
            model: the classifier (any device; the inputs go there).
            inputs: N x C x H x W float, normalised as the model expects.
            targets: N classes to explain, or None (the predicted ones).
            device: Quantus's device, unused: the model's is used.

        Returns:
            N x 1 x H x W float32 in [0, 1] (NumPy).
        """
        images = torch.as_tensor(np.asarray(inputs, np.float32), device=model_device(model))
        classes = None if targets is None else torch.as_tensor(np.asarray(targets).reshape(-1))
        weights = channel_weights(self.method, model, self.target_layer, images, classes)
        maps = reused_cam(self.method, model, self.target_layer, images, weights)
        return maps.cpu().numpy()[:, None]


class ConstantMapsAllowed:
    """An ``explain_func`` whose batches of constant maps reach Quantus as maps of the
    constants 2, 3, 4, ... (one per image).

    Quantus refuses a batch whose values are all 0, all 1 or all one value (an assertion in
    every metric), which would end the whole cascade at the first randomised model on which a
    method draws nothing. A constant map has no rank correlation whatever its constant, so
    `cascade`'s scores are those of the maps as drawn: NaN, counted as undefined. (An SSIM
    against a map that is not constant would depend on the constant: `random_logit` does
    not use this.) A batch of one constant map cannot be passed; `sanity` makes no such batch.

    Args:
        explain: the method's ``explain_func``.
    """

    def __init__(self, explain: ExplainFunc) -> None:
        self.explain = explain

    def __call__(self, model: nn.Module, inputs: np.ndarray, targets: Any, **kwargs: Any) -> Any:
        maps = np.asarray(self.explain(model, inputs, targets, **kwargs))
        flat = maps.reshape(len(maps), -1)
        if flat.size and bool((flat == flat[:, :1]).all()):
            constants = np.arange(2, len(maps) + 2, dtype=maps.dtype)
            return np.broadcast_to(constants.reshape(-1, *[1] * (maps.ndim - 1)), maps.shape).copy()
        return maps


def _quantus() -> Any:
    import quantus

    return quantus


def _scores(
    metric: Any,
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    explain: ExplainFunc,
    device: str,
    batch_size: int,
) -> Any:
    """A Quantus metric's scores, without NumPy's warnings about the NaN of a constant map
    (counted instead)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "invalid value encountered", RuntimeWarning)
        return metric(
            model=model,
            x_batch=x,
            y_batch=y,
            explain_func=explain,
            device=device,
            batch_size=batch_size,
        )


def cascade(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    explain: ExplainFunc,
    seed: int,
    device: str = "cpu",
    batch_size: int = 64,
) -> dict[str, np.ndarray]:
    """Cascading model-parameter randomisation from the top layer down (``quantus.MPRT``).

    Args:
        model: the trained classifier (left as it is: Quantus randomises a copy).
        x: N x C x H x W model inputs (NumPy float).
        y: N classes explained (the model's predictions).
        explain: the method's ``explain_func``.
        seed: Quantus's seed of the re-initialisations.
        device: where Quantus runs the model.
        batch_size: images per ``explain`` call.

    Returns:
        Per step, in order (``"original"``: the trained model's maps again, then the name of
        each layer randomised, the top one first, every layer above it randomised too): the
        N Spearman rank correlations of the maps with the trained model's (NaN for a constant
        map).
    """
    mprt = _quantus().MPRT(layer_order="top_down", seed=seed, **_QUIET)
    scores = _scores(mprt, model, x, y, ConstantMapsAllowed(explain), device, batch_size)
    return {layer: np.asarray(values, dtype=float) for layer, values in scores.items()}


def random_logit(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    explain: ExplainFunc,
    n_classes: int,
    seed: int,
    device: str = "cpu",
    batch_size: int = 64,
) -> np.ndarray:
    """Random logit (``quantus.RandomLogit``): the SSIM of each image's map for its class in
    ``y`` to its map for another class drawn at random (seeded).

    Args: as in `cascade`; ``n_classes``: the classes the other one is drawn from.

    Returns:
        N SSIMs (NaN where both maps are constant).
    """
    metric = _quantus().RandomLogit(num_classes=n_classes, seed=seed, **_QUIET)
    return np.asarray(_scores(metric, model, x, y, explain, device, batch_size), dtype=float)


def _mean(values: np.ndarray) -> float:
    """The mean of the finite values (NaN when there is none)."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if len(finite) else float("nan")


def _undefined(values: np.ndarray) -> float:
    """The share (%) of NaN values."""
    return 100 * float(np.isnan(values).mean())


def _explainer(run: Run, name: str) -> ExplainFunc:
    """The run's ``explain_func`` of a method: RI's interpreter (fitted anew for a randomised
    model), or a CAM."""
    if name == "RI":
        return QuantusExplainer(run.interpreter, other_targets="predicted")
    return CAMExplainer(name, run.setup.target_layer)


def sanity(run: Run) -> dict[str, Any]:
    """The sanity checks of one run, on ``options.sanity_images`` unseen images drawn with the
    run's seed (`Run.unseen_rows`), Quantus seeded with it too.

    Returns:
        ``{"methods": {name: block}}``, a block holding ``MPRT`` (per step of `cascade`: the
        mean Spearman correlation over the images), ``MPRT_undefined`` (per step: % of images
        with a constant map), ``RandomLogit`` (mean SSIM), ``RandomLogit_undefined`` (%) and
        ``time_s`` (both checks, RI's refits included).

    Raises:
        ValueError: a method other than `SANITY_METHODS`.
    """
    setup, options = run.setup, run.options
    names = list(options.resolve_methods())
    other = [name for name in names if name not in SANITY_METHODS]
    if other:
        raise ValueError(
            f"the sanity protocol checks {', '.join(SANITY_METHODS)}, not {', '.join(other)}"
        )
    rows = run.unseen_rows(options.sanity_images)
    if len(rows) < 2:
        raise ValueError(f"the sanity checks need at least 2 unseen images, got {len(rows)}")
    batch_size = setup.batch_size if len(rows) % setup.batch_size != 1 else len(rows)
    x = setup.inputs("unseen", rows).cpu().numpy()
    y = setup.predictions["unseen"][rows].numpy()
    device = str(setup.device)
    methods = {}
    for name in names:
        start = time.perf_counter()
        explain = _explainer(run, name)
        steps = cascade(setup.model, x, y, explain, run.seed, device, batch_size)
        logit = random_logit(
            setup.model, x, y, explain, setup.n_classes, run.seed, device, batch_size
        )
        methods[name] = {
            "MPRT": {layer: _mean(v) for layer, v in steps.items()},
            "MPRT_undefined": {layer: _undefined(v) for layer, v in steps.items()},
            "RandomLogit": _mean(logit),
            "RandomLogit_undefined": _undefined(logit),
            "time_s": time.perf_counter() - start,
        }
    return {"methods": methods}
