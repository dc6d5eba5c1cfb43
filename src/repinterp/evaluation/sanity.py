"""The sanity checks of Adebayo et al. (2018), "Sanity checks for saliency maps", for RI,
RI+logic (``granularity="logic"``) and each CAM, mostly through Quantus (the ``sanity``
protocol: `repinterp.evaluation.protocols.sanity`).

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
- The same cascade from the bottom layer up (``layer_order="bottom_up"``, the order
  Quantus's eMPRT code advises), and eMPRT (`efficient_mprt`: the rise in the maps'
  complexity once every layer is randomised). Quantus's sMPRT is not run: in the installed
  Quantus (0.6) it draws its noisy maps with ``quantus.explain``, not with the given
  ``explain_func``.
- Data randomisation (`shuffled_label_model`): the same architecture trained on the
  reference images with permuted labels; each method's maps of it against the trained
  model's (`map_similarity`: Spearman and SSIM).
- The floor (`RANDOM_METHODS`): RI (and RI+logic) is refitted on every randomised model, so
  its own sampling of ``Q`` is part of any drop; its maps on the trained model with ``Q`` sampled
  with another seed, against the run's, are what a randomisation must fall below.

Each check counts, per step, the images whose map is constant (`no_map`): a method that
draws no map is untested there, not passed. No map, never a score: an image without a map is
left out of every metric (its score NaN), and a metric with no map on any image has no score
(NaN, ``null`` in ``results.json``), never a number.

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

import dataclasses
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from ..data.datasets import ImageSet
from ..models.train import Recipe, accuracy, train
from ..models.zoo import DataShape, model_for
from ..runtime.devices import model_device
from .baselines import CAM_METHODS, cam_weights, reused_cam
from .setup import Setup

__all__ = [
    "RANDOM_METHODS",
    "RESEED_OFFSET",
    "SANITY_METHODS",
    "CAMExplainer",
    "Cascade",
    "ConstantMapsAllowed",
    "can_shuffle",
    "cascade",
    "draw_maps",
    "efficient_mprt",
    "map_similarity",
    "no_map",
    "random_logit",
    "shuffled_label_model",
]

SANITY_METHODS = ("RI", "RI+logic", *CAM_METHODS)
"""The methods the sanity checks take."""

RANDOM_METHODS = ("RI", "RI+logic")
"""The methods of `SANITY_METHODS` that draw something at random: RI and RI+logic (their
sample of ``Q``). The CAMs draw nothing: their maps are a function of the model and the
image."""

RESEED_OFFSET = 10_000
"""RI's ``Q`` of the reseeded floor is sampled with the run's seed plus this (no run's own);
RI+logic's too (and its default ``gamma``, read off a sample drawn with that seed)."""

# A Quantus explain_func: (model, N x C x H x W inputs, N targets, device) -> N x 1 x H x W.
ExplainFunc = Callable[..., np.ndarray]

# Quantus's options for a quiet metric.
_QUIET = {"disable_warnings": True, "display_progressbar": False}


class CAMExplainer:
    """A CAM baseline as a Quantus ``explain_func``: pytorch-grad-cam's own map of each input
    (`baselines.cam_weights`, drawn by `baselines.reused_cam`) at ``target_layer`` of the
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
        weights = cam_weights(self.method, model, self.target_layer, images, classes)
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

    Attributes:
        constant: per call, in order, which of its maps were constant (bool NumPy arrays).
    """

    def __init__(self, explain: ExplainFunc) -> None:
        self.explain = explain
        self.constant: list[np.ndarray] = []

    def __call__(self, model: nn.Module, inputs: np.ndarray, targets: Any, **kwargs: Any) -> Any:
        maps = np.asarray(self.explain(model, inputs, targets, **kwargs))
        constant = no_map(maps)
        self.constant.append(constant)
        if constant.size and bool(constant.all()):
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


class Cascade(NamedTuple):
    """What `cascade` measured, per step (``"original"``, then each layer randomised).

    Attributes:
        scores: the N Spearman rank correlations of the maps with the trained model's (NaN
            where either map is constant).
        no_map: N bools, True where the step's model draws no map (a constant one).
    """

    scores: dict[str, np.ndarray]
    no_map: dict[str, np.ndarray]


def cascade(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    explain: ExplainFunc,
    seed: int,
    device: str = "cpu",
    batch_size: int = 64,
    order: str = "top_down",
) -> Cascade:
    """Cascading model-parameter randomisation (``quantus.MPRT``) in ``order``: from the top
    layer down (``"top_down"``) or from the bottom layer up (``"bottom_up"``).

    Args:
        model: the trained classifier (left as it is: Quantus randomises a copy).
        x: N x C x H x W model inputs (NumPy float).
        y: N classes explained (the model's predictions).
        explain: the method's ``explain_func``.
        seed: Quantus's seed of the re-initialisations.
        device: where Quantus runs the model.
        batch_size: images per ``explain`` call.
        order: ``"top_down"`` or ``"bottom_up"``.

    Returns:
        Per step, in order (``"original"``: the trained model's maps again, then the name of
        each layer randomised, every layer before it in ``order`` randomised too): the scores
        and the images without a map (`Cascade`).

    Raises:
        RuntimeError: the maps drawn do not line up with Quantus's scores (a Quantus whose
            MPRT explains in another order than this one's).
    """
    allowed = ConstantMapsAllowed(explain)
    mprt = _quantus().MPRT(layer_order=order, seed=seed, **_QUIET)
    scores = _scores(mprt, model, x, y, allowed, device, batch_size)
    scores = {layer: np.asarray(values, dtype=float) for layer, values in scores.items()}
    # MPRT explains the images of each step in turn, in batches, after its own first call(s).
    n = len(x)
    flags = np.concatenate(allowed.constant)[-len(scores) * n :].reshape(len(scores), n)
    missing = dict(zip(scores, flags, strict=True))
    if any((~np.isnan(scores[step][missing[step]])).any() for step in scores):
        raise RuntimeError("the maps MPRT drew do not line up with its scores")
    return Cascade(scores, missing)


def efficient_mprt(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    explain: ExplainFunc,
    seed: int,
    device: str = "cpu",
    batch_size: int = 64,
) -> tuple[np.ndarray, np.ndarray]:
    """eMPRT (``quantus.EfficientMPRT``, Hedström et al. 2023): each map's relative rise in
    complexity (discrete entropy) from the trained model to the one with every layer
    randomised (bottom up), ``(H_random - H_trained) / H_trained``; higher: the map loses its
    structure with the weights, as a sanity check expects. An image without a map on either
    model is not scored: a constant map's entropy is 0, so Quantus would give it -1.

    Args: as in `cascade`.

    Returns:
        N rises (NaN where either model draws no map, or the trained map has no complexity),
        and N bools: where either model draws no map.

    Raises:
        RuntimeError: the maps drawn do not line up with Quantus's scores.
    """
    metric = _quantus().EfficientMPRT(seed=seed, **_QUIET)
    allowed = ConstantMapsAllowed(explain)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = _scores(metric, model, x, y, allowed, device, batch_size)
    values = np.asarray(values, dtype=float)
    # Its last two passes over the images: the trained model's maps, then the randomised one's.
    trained, randomised = np.concatenate(allowed.constant)[-2 * len(x) :].reshape(2, len(x))
    flagged = values[randomised & ~trained]
    if not (np.isclose(flagged, -1.0) | ~np.isfinite(flagged)).all():
        raise RuntimeError("the maps eMPRT drew do not line up with its scores")
    missing = trained | randomised
    return np.where(np.isfinite(values) & ~missing, values, np.nan), missing


def no_map(maps: np.ndarray) -> np.ndarray:
    """N bools: which of N maps (N x ...) are constant, i.e. draw nothing (a CAM's all-zero
    map, RI's map of an empty ``P(x)``)."""
    flat = np.asarray(maps).reshape(len(maps), -1)
    if not flat.size:
        return np.zeros(len(flat), dtype=bool)
    return (flat == flat[:, :1]).all(1)


def draw_maps(
    explain: ExplainFunc, model: nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int
) -> np.ndarray:
    """N x H x W: ``explain``'s maps of ``x`` (classes ``y``) on ``model``, in batches."""
    parts = [
        np.asarray(explain(model, x[i : i + batch_size], y[i : i + batch_size]))
        for i in range(0, len(x), batch_size)
    ]
    return np.concatenate(parts).reshape(len(x), *x.shape[-2:])


def map_similarity(maps: np.ndarray, others: np.ndarray) -> dict[str, np.ndarray]:
    """Image by image, how alike two sets of N maps (N x H x W) are, as the cascade and random
    logit measure it: ``Spearman`` (Quantus's ``correlation_spearman`` of the flattened maps)
    and ``SSIM`` (Quantus's ``ssim``), both NaN where either map is constant (no map);
    ``no_map``: N bools, where either draws none (the images not scored)."""
    similarity = _quantus().functions.similarity_func
    missing = no_map(maps) | no_map(others)
    spearman, ssim = np.full(len(maps), np.nan), np.full(len(maps), np.nan)
    for i in np.flatnonzero(~missing):
        spearman[i] = similarity.correlation_spearman(maps[i].ravel(), others[i].ravel())
        ssim[i] = similarity.ssim(maps[i], others[i])
    return {"Spearman": spearman, "SSIM": ssim, "no_map": missing}


def can_shuffle(setup: Setup) -> bool:
    """Whether `shuffled_label_model` can train the setup's model anew: a zoo architecture
    (``setup.arch``) and reference images held in memory (a bundled data set)."""
    return setup.arch is not None and isinstance(setup.reference, ImageSet)


def shuffled_label_model(setup: Setup, seed: int, epochs: int) -> tuple[nn.Module, dict[str, Any]]:
    """The data-randomisation test's model (Adebayo et al. 2018, §4.2): the setup's
    architecture, initialised with ``seed``, trained (`models.train.train`, the recipe of the
    bundled weights: Adam, lr 1e-3, batch 64) for ``epochs`` on the setup's reference images
    with their labels permuted at random (seeded).

    Returns:
        The model (eval mode, on the setup's device) and what its training measured:
        ``epochs``, ``train_accuracy`` (% of the permuted labels it fits), ``unseen_accuracy``
        (% of the unseen images' true labels, about chance) and ``train_s``.

    Raises:
        ValueError: the setup's model is not a zoo architecture or its reference set is not
            held in memory (an image folder).
    """
    reference = setup.reference
    if not can_shuffle(setup):
        raise ValueError(
            "the data-randomisation test trains the setup's architecture on its reference "
            "images in memory: it needs a zoo model (--model) and a bundled data set"
        )
    generator = torch.Generator().manual_seed(seed)
    permuted = reference.labels[torch.randperm(len(reference), generator=generator)]
    shuffled = dataclasses.replace(reference, labels=permuted)
    model = model_for(setup.arch, DataShape.of(reference), None, seed=seed)
    start = time.perf_counter()
    recipe = Recipe(setup.arch, epochs=epochs)
    train(model, shuffled, recipe, seed, device=setup.device, progress=False)
    seconds = time.perf_counter() - start
    return model.eval(), {
        "epochs": epochs,
        "train_accuracy": 100 * accuracy(model, shuffled, device=setup.device),
        "unseen_accuracy": 100 * accuracy(model, setup.unseen, device=setup.device),
        "train_s": seconds,
    }


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
