"""The paper's evaluation protocols, run over seeds and reported as mean ± std.

Protocols (each a function of a `Setup` and `Options`, see `evaluate`):

- ``unseen`` (§6.4, Table 1): mAD / mAI on the unseen set of every method's ``|V|`` reused
  interpretations. RI: k-means regions (k-means seeded, ``Q`` sampled with the run's seed);
  an image is explained by the covering region of largest representativeness, else by the
  region of its nearest centre. CAM baselines: channel weights of the k-means inputs (the
  reference image nearest each centre), reused on every image whose nearest centre it is.
  ACE: one fit per k-means cluster (its reference images), reused on the images assigned to
  the cluster's centre.
- ``coverage`` (Appendix D, Table 2): ACU-GT, ACU-MD and CVR of the regions on the reference
  and the unseen set, beside the model's accuracy (ACU-GT of F).
- ``reference`` (Appendix C): for random reference inputs, mAD / mAI over the top-K similar
  reference images for each K: RI's covered images ranked by semantic distance, the
  baselines' Euclidean nearest neighbours in feature space; the input always comes first,
  so K = 1 evaluates the input alone.
- ``q-sweep`` (Appendix E): ACU-GT, ACU-MD and CVR of the regions for several ``|Q|``.
- ``similar`` (the case studies, made measurable on ``shapes``, whose sub-concepts and
  object masks are known): purity@k of similar-image rankings, and the share of each
  method's heat-map energy inside the object's mask on the unseen set.

All numbers are percentages. Every run uses seed ``options.seed + r``; the data split is
fixed (the one the bundled weights were trained on), so runs differ by ``Q``, k-means and the
sampled inputs. The same seed gives the same numbers on CPU.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from tqdm import tqdm

from ..data import Images, ImageSet, load_dataset
from ..interpreter import RepresentativeInterpreter
from ..regions import RegionSet, nearest_rows
from ..zoo import build_model, default_target_layer
from .baselines import CAM_METHODS, ReusableCAM, euclidean_neighbours
from .metrics import DropIncrease, average_drop_increase, average_drop_increase_from_mask

__all__ = [
    "DEFAULT_METHODS",
    "METHODS",
    "PROTOCOLS",
    "Method",
    "Options",
    "Run",
    "Setup",
    "check_protocol",
    "coverage_metrics",
    "energy_in_mask",
    "evaluate",
    "load_setup",
    "purity_at_k",
    "register_method",
    "results_markdown",
    "write_results",
]

PROTOCOLS = ("unseen", "coverage", "reference", "q-sweep", "similar")
BUNDLED = {"mnist5k": "mnist_cnn", "shapes": "shapes_cnn"}
WEIGHTS_DIR = Path(__file__).resolve().parent.parent / "weights"


# ----------------------------------------------------------------------------- setup
@dataclass
class Setup:
    """A model and the data the protocols run on.

    Attributes:
        dataset: the data set's name (``mnist5k``, ``shapes``, ``imagefolder:PATH``, ...).
        model: the classifier, in eval mode, on ``device``.
        target_layer: name of the layer whose output ``psi`` is interpreted.
        reference: the reference images (interpreters are fitted on them).
        unseen: the unseen images (never seen by the interpreters).
        device: where everything is computed.
        batch_size: images per forward pass.
        arch: the architecture's name, for the report.
        weights: the weights file, for the report.
    """

    dataset: str
    model: nn.Module
    target_layer: str
    reference: Images
    unseen: Images
    device: torch.device
    batch_size: int = 64
    arch: str | None = None
    weights: str | None = None

    @property
    def normalize(self) -> Callable[[Tensor], Tensor]:
        """Maps [0, 1] pixels (... x C x H x W) to model inputs."""
        return self.reference.normalization

    @property
    def n_classes(self) -> int:
        return len(self.reference.class_names)

    def part(self, name: str) -> Images:
        """``"reference"`` or ``"unseen"``."""
        return {"reference": self.reference, "unseen": self.unseen}[name]

    def pixels(self, part: str, indices: Tensor | list[int] | None = None) -> Tensor:
        """Images of a part in [0, 1], N x C x H x W on CPU (all of them when ``indices`` is
        None)."""
        data = self.part(part)
        if isinstance(data, ImageSet):
            return data.images if indices is None else data.images[torch.as_tensor(indices)]
        rows = range(len(data)) if indices is None else torch.as_tensor(indices).tolist()
        return torch.stack([data.pixels(int(i)) for i in rows])

    def inputs(self, part: str, indices: Tensor | list[int] | None = None) -> Tensor:
        """Model inputs of a part, N x C x H x W on the device."""
        return self.normalize(self.pixels(part, indices)).to(self.device)

    def chunks(self, part: str) -> Iterator[Tensor]:
        """Model inputs of a whole part, ``batch_size * 8`` images at a time."""
        step = self.batch_size * 8
        for start in range(0, len(self.part(part)), step):
            yield self.inputs(part, range(start, min(start + step, len(self.part(part)))))

    @cached_property
    def unseen_pixels(self) -> Tensor:
        """All unseen images in [0, 1], N x C x H x W on CPU."""
        return self.pixels("unseen")

    def labels(self, part: str) -> Tensor:
        return self.part(part).labels

    @cached_property
    def predictions(self) -> dict[str, Tensor]:
        """The model's predicted class of every image, per part (CPU long)."""
        out = {}
        with torch.no_grad():
            for part in ("reference", "unseen"):
                out[part] = torch.cat([self.model(x).argmax(1).cpu() for x in self.chunks(part)])
        return out

    def describe(self) -> dict[str, Any]:
        """What the report says about the setup."""
        return {
            "model": self.arch,
            "weights": self.weights,
            "target_layer": self.target_layer,
            "classes": list(self.reference.class_names),
            "n_reference": len(self.reference),
            "n_unseen": len(self.unseen),
            "device": str(self.device),
        }


def _take(data: Images, n: int | None, seed: int) -> Images:
    """A seeded random subset of ``n`` images (all of them when ``n`` is None or too big)."""
    if n is None or n >= len(data):
        return data
    if n < 1:
        raise ValueError(f"subset sizes must be >= 1, got {n}")
    return data.subset(np.sort(np.random.default_rng(seed).permutation(len(data))[:n]))


def load_setup(
    dataset: str,
    arch: str | None = None,
    weights: str | Path | None = None,
    layer: str | None = None,
    device: str | torch.device = "cpu",
    n_reference: int | None = None,
    n_unseen: int | None = 1000,
    subset_seed: int = 0,
    batch_size: int = 64,
) -> Setup:
    """Load a data set and its model.

    Args:
        dataset: ``mnist5k`` or ``shapes`` (bundled weights by default), ``digits`` or
            ``imagefolder:PATH`` (need ``arch`` and ``weights``). The split is the one with
            data seed 0, on which ``repinterp train`` trains by default.
        arch: an architecture of :mod:`repinterp.zoo`; None: the data set's bundled one.
        weights: a local weights file; None: the bundled weights.
        layer: the target layer; None: the architecture's default.
        device: torch device.
        n_reference: use a seeded random subset of this many reference images (None: all).
        n_unseen: the same for the unseen images (the paper samples 1,000).
        subset_seed: seed of both subsets.
        batch_size: images per forward pass.

    Raises:
        ValueError: an unknown data set, a missing model or weights, a bad layer.
    """
    if arch is None and weights is not None:
        raise ValueError("--weights needs --model")
    if arch is None and dataset.startswith("imagefolder:"):
        raise ValueError("an image folder needs --model and --weights (and --layer)")
    split = load_dataset(dataset, seed=0)
    arch = arch or BUNDLED.get(dataset)
    if arch is None:
        raise ValueError(f"no bundled model for data set {dataset!r}: give --model and --weights")
    if weights is None:
        if BUNDLED.get(dataset) != arch:
            raise ValueError(f"--model {arch} needs --weights (no bundled weights for it here)")
        weights = WEIGHTS_DIR / f"{arch}.safetensors"
        if not weights.is_file():
            raise ValueError(f"bundled weights {weights} not found; train them first")
    sample = split.reference[0][0]
    model = build_model(
        arch,
        num_classes=len(split.reference.class_names),
        in_channels=int(sample.shape[0]),
        weights=weights,
    ).to(device)
    layer = layer or default_target_layer(arch)
    if layer not in dict(model.named_modules()):
        raise ValueError(f"model {arch!r} has no layer {layer!r}")
    return Setup(
        dataset=dataset,
        model=model,
        target_layer=layer,
        reference=_take(split.reference, n_reference, subset_seed),
        unseen=_take(split.unseen, n_unseen, subset_seed),
        device=torch.device(device),
        batch_size=batch_size,
        arch=arch,
        weights=str(weights),
    )


@dataclass(frozen=True)
class Options:
    """How a protocol runs.

    Attributes:
        runs: number of seeded runs (seeds ``seed``, ``seed + 1``, ...).
        seed: the first run's seed.
        methods: names in :data:`METHODS` compared by ``unseen``, ``reference`` and
            ``similar`` (the pointing game).
        n_boundaries: ``|Q|``.
        n_regions: ``|V|``; None: 10 x classes.
        n_inputs: random reference inputs of ``reference`` and ``similar`` (the paper: 1,000).
        ks: the K of ``reference`` (top-K similar images).
        q_values: the ``|Q|`` of ``q-sweep``.
        purity_ks: the k of purity@k in ``similar``.
        ace_images: most discovery images of one ACE fit (the reference images nearest the
            k-means centre in ``unseen``; the input and its nearest neighbours in
            ``reference``, as the paper's 50).
        progress: show progress bars.
    """

    runs: int = 5
    seed: int = 0
    methods: tuple[str, ...] = ("RI", "Grad-CAM", "Grad-CAM++", "Score-CAM")
    n_boundaries: int = 50
    n_regions: int | None = None
    n_inputs: int = 200
    ks: tuple[int, ...] = (1, 5, 10, 20, 50)
    q_values: tuple[int, ...] = (1, 5, 10, 30, 50, 70)
    purity_ks: tuple[int, ...] = (5, 10, 20)
    ace_images: int = 50
    progress: bool = True

    def __post_init__(self) -> None:
        counts = {"runs": self.runs, "n_boundaries": self.n_boundaries, "n_inputs": self.n_inputs}
        counts |= {"ace_images": self.ace_images, "n_regions": self.n_regions}
        for name, value in counts.items():
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        for name in ("ks", "q_values", "purity_ks"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                raise ValueError(f"{name} must be a non-empty list of integers >= 1")
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ValueError(
                f"unknown method(s) {', '.join(unknown) or '(none given)'}; "
                f"choose from {', '.join(METHODS)}"
            )


# Sizes of a full and a quick (``--quick``) evaluation.
FULL = {"n_reference": None, "n_unseen": 1000, "runs": 5, "n_inputs": 200}
QUICK = {"n_reference": 600, "n_unseen": 200, "runs": 2, "n_inputs": 30}


# ----------------------------------------------------------------------------- one run
class Run:
    """One seeded run: an interpreter with ``Q`` sampled by ``seed``, and what derives from it.

    Attributes:
        setup: the setup.
        seed: the run's seed (``Q``, k-means, sampled inputs, ACE).
        options: the options.
        interpreter: fitted on the reference set, with its feature maps kept.
        fit_s: seconds the fit took.
        kmeans_s: seconds k-means and the regions' covers took (0 until ``regions`` is used).
    """

    def __init__(self, setup: Setup, seed: int, options: Options) -> None:
        self.setup = setup
        self.seed = seed
        self.options = options
        start = time.perf_counter()
        self.interpreter = self.fit(options.n_boundaries, keep_features=True)
        self.fit_s = time.perf_counter() - start
        self.kmeans_s = 0.0
        self._neighbours: dict[int, Tensor] = {}

    def fit(self, n_boundaries: int, keep_features: bool = False) -> RepresentativeInterpreter:
        """An interpreter with ``n_boundaries`` boundaries sampled with the run's seed."""
        setup = self.setup
        reference = setup.reference
        ri = RepresentativeInterpreter(
            setup.model,
            setup.target_layer,
            n_boundaries=n_boundaries,
            seed=self.seed,
            device=setup.device,
            batch_size=setup.batch_size,
            progress=False,
        )
        source = reference.inputs() if isinstance(reference, ImageSet) else reference
        return ri.fit(source, list(reference.class_names), keep_features=keep_features)

    @cached_property
    def regions(self) -> RegionSet:
        """``|V|`` k-means regions (k-means seeded with the run's seed)."""
        start = time.perf_counter()
        regions = self.interpreter.regions(self.options.n_regions, seed=self.seed)
        self.kmeans_s = time.perf_counter() - start
        return regions

    @cached_property
    def features(self) -> Tensor:
        """|R| x d flattened reference feature maps (CPU, memory-mapped)."""
        return self.interpreter.reference_features

    @cached_property
    def reference_centre(self) -> tuple[Tensor, Tensor]:
        """Nearest k-means centre of every reference image, and the distance to it."""
        return nearest_rows(self.features, self.regions.centres)

    @cached_property
    def unseen_centre(self) -> Tensor:
        """Nearest k-means centre of every unseen image (CPU long)."""
        features = torch.cat([self.interpreter.features(x) for x in self.setup.chunks("unseen")])
        return nearest_rows(features.flatten(1).cpu(), self.regions.centres)[0]

    @cached_property
    def inputs(self) -> Tensor:
        """``n_inputs`` reference indices drawn with the run's seed, without replacement."""
        n = min(self.options.n_inputs, len(self.setup.reference))
        rng = np.random.default_rng(self.seed)
        return torch.from_numpy(rng.choice(len(self.setup.reference), n, replace=False))

    def neighbours(self, k: int) -> Tensor:
        """n_inputs x min(k, |R|): each input's Euclidean nearest reference images in feature
        space, the input first (ties by lower index)."""
        k = min(k, len(self.setup.reference))
        if k not in self._neighbours:
            near = euclidean_neighbours(self.features[self.inputs], self.features, k)
            self._neighbours[k] = torch.stack(
                [self_first(row, int(i), k) for row, i in zip(near, self.inputs, strict=True)]
            )
        return self._neighbours[k]


def self_first(ranking: Tensor, index: int, k: int | None = None) -> Tensor:
    """``ranking`` with ``index`` moved (or added) to the front, cut to ``k``."""
    return torch.cat([ranking.new_tensor([index]), ranking[ranking != index]])[:k]


# ----------------------------------------------------------------------------- methods
class Method:
    """An interpretation method compared by the protocols.

    An explanation of N images is an N x H x W tensor: a heat map (float; AD/AI keep its 20%
    hottest pixels) or the kept pixels themselves (bool, e.g. ACE's segments).
    """

    name: str

    def unseen(self, run: Run, images01: Tensor) -> Tensor:
        """Explanations of the unseen images (N x C x H x W in [0, 1]) by ``|V|`` reused
        interpretations (§6.4)."""
        raise NotImplementedError

    def reference(self, run: Run, index: int, k: int) -> tuple[Tensor, Tensor]:
        """The interpretation of reference image ``index`` reused on its top-``k`` similar
        reference images (Appendix C).

        Returns:
            (the similar images' reference indices, ``index`` first; their explanations).
        """
        raise NotImplementedError


class RIMethod(Method):
    """Representative interpretations: regions on unseen images, semantic distance on the
    reference set."""

    name = "RI"

    def unseen(self, run: Run, images01: Tensor) -> Tensor:
        return run.regions.heatmap(run.setup.normalize(images01).to(run.setup.device))

    def reference(self, run: Run, index: int, k: int) -> tuple[Tensor, Tensor]:
        explanation = run.interpreter.explain_reference([index])[0]
        similar = self_first(explanation.similar().cpu(), index, k)
        return similar, explanation.heatmap(run.setup.inputs("reference", similar))


class CAMMethod(Method):
    """A CAM method with reused channel weights (``baselines.ReusableCAM``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _cam(self, run: Run) -> ReusableCAM:
        return ReusableCAM(self.name, run.setup.model, run.setup.target_layer)

    def unseen(self, run: Run, images01: Tensor) -> Tensor:
        cam = self._cam(run)
        cam.fit(run.setup.inputs("reference", run.regions.inputs.cpu()))
        inputs = run.setup.normalize(images01).to(run.setup.device)
        return cam.heatmaps(inputs, run.unseen_centre)

    def reference(self, run: Run, index: int, k: int) -> tuple[Tensor, Tensor]:
        similar = run.neighbours(k)[run.inputs.tolist().index(index)]
        cam = self._cam(run)
        cam.fit(run.setup.inputs("reference", [index]))
        return similar, cam.heatmaps(run.setup.inputs("reference", similar), [0] * len(similar))


class ACEMethod(Method):
    """ACE (``evaluation.ace``): one fit per group of discovery images, reused on new images
    by assigning their segments to the concepts."""

    name = "ACE"

    def _fit(self, run: Run, discovery: Tensor, target_class: int) -> Any:
        from .ace import ACE

        ace = ACE(run.setup.model, run.setup.target_layer, run.setup.normalize, seed=run.seed)
        return ace.fit(run.setup.pixels("reference", discovery), target_class=target_class)

    def unseen(self, run: Run, images01: Tensor) -> Tensor:
        keep = torch.zeros(images01.shape[0], *images01.shape[2:], dtype=torch.bool)
        centre, distance = run.reference_centre
        for v in range(len(run.regions)):
            rows = (run.unseen_centre == v).nonzero().flatten()
            if not rows.numel():
                continue
            members = (centre == v).nonzero().flatten()
            members = members[torch.sort(distance[members], stable=True).indices]
            ace = self._fit(run, members[: run.options.ace_images], int(run.regions.classes[v]))
            keep[rows] = ace.keep_masks(images01[rows])
        return keep

    def reference(self, run: Run, index: int, k: int) -> tuple[Tensor, Tensor]:
        row = run.inputs.tolist().index(index)
        similar = run.neighbours(k)[row]
        discovery = run.neighbours(run.options.ace_images)[row]
        target = int(run.setup.predictions["reference"][index])
        ace = self._fit(run, discovery, target)
        return similar, ace.keep_masks(run.setup.pixels("reference", similar))


METHODS: dict[str, Method] = {
    "RI": RIMethod(),
    **{name: CAMMethod(name) for name in CAM_METHODS},
    "ACE": ACEMethod(),
}
DEFAULT_METHODS = Options.methods


def register_method(method: Method) -> None:
    """Add (or replace) a method of the protocols, under ``method.name``."""
    METHODS[method.name] = method


# ----------------------------------------------------------------------------- scoring
def drop_increase(setup: Setup, images01: Tensor, explanations: Tensor) -> DropIncrease:
    """AD/AI per image: keep the 20% hottest pixels of a heat map, or the given kept pixels."""
    if explanations.dtype == torch.bool:
        return average_drop_increase_from_mask(
            setup.model, images01, explanations, setup.normalize, setup.batch_size
        )
    return average_drop_increase(
        setup.model, images01, explanations, setup.normalize, batch_size=setup.batch_size
    )


def energy_in_mask(explanations: Tensor, masks: Tensor) -> Tensor:
    """Energy-based pointing game: the share of each map's heat inside the mask.

    Args:
        explanations: N x H x W non-negative heat maps (bool: kept pixels, each worth 1).
        masks: N x H x W bool ground-truth masks.

    Returns:
        (N,) ``sum(heat * mask) / sum(heat)`` in [0, 1]; NaN for a map with no heat.
    """
    heat = explanations.detach().float().cpu()
    if heat.shape != masks.shape:
        raise ValueError(f"maps {tuple(heat.shape)} and masks {tuple(masks.shape)} differ")
    total = heat.flatten(1).sum(1)
    inside = (heat * masks.cpu()).flatten(1).sum(1)
    return torch.where(total > 0, inside / total, torch.nan)


def purity_at_k(ranked_concepts: Tensor, concept: int, k: int) -> float:
    """Share of the first ``k`` ranked images (all when fewer) of the given concept.

    Args:
        ranked_concepts: concept of each ranked image, most similar first (the input itself
            excluded).
        concept: the input's concept.
        k: how many to look at.

    Returns:
        A share in [0, 1]; NaN when nothing is ranked.
    """
    top = ranked_concepts[:k]
    return float((top == concept).double().mean()) if top.numel() else math.nan


def coverage_metrics(regions: RegionSet, setup: Setup, part: str) -> dict[str, float]:
    """ACU-GT, ACU-MD, CVR of the regions on a part, and the model's accuracy (all in %).

    ACU-GT and ACU-MD count covered images only, as the paper's Appendix D.
    """
    from .metrics import region_metrics

    assigned = [regions.assign(x) for x in setup.chunks(part)]
    region = torch.cat([a.region for a in assigned]).cpu()
    covered = torch.cat([a.covered for a in assigned]).cpu()
    region_pred = torch.where(covered, regions.classes.cpu()[region], -1)
    model_pred, labels = setup.predictions[part], setup.labels(part)
    metrics = region_metrics(region_pred, model_pred, labels)
    return {
        "ACU-GT": metrics["ACU-GT"],
        "ACU-MD": metrics["ACU-MD"],
        "CVR": metrics["CVR"],
        "model_acc": 100.0 * float((model_pred == labels).double().mean()),
    }


# ----------------------------------------------------------------------------- protocols
def _timed(function: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``function(*args)`` and the seconds it took."""
    start = time.perf_counter()
    value = function(*args)
    return value, time.perf_counter() - start


def _explain_unseen(run: Run) -> Iterator[tuple[str, Tensor, float]]:
    """``(method, explanations of the unseen images, seconds)`` of each method, after the
    shared k-means and nearest-centre assignment (which the seconds leave out)."""
    _ = run.regions, run.unseen_centre  # built before the clocks start
    for name in run.options.methods:
        explanations, seconds = _timed(METHODS[name].unseen, run, run.setup.unseen_pixels)
        yield name, explanations, seconds


def _unseen(run: Run) -> dict[str, Any]:
    methods = {}
    for name, explanations, seconds in _explain_unseen(run):
        scores = drop_increase(run.setup, run.setup.unseen_pixels, explanations)
        methods[name] = {"mAD": scores.ad, "mAI": scores.ai, "time_s": seconds}
    return {"methods": methods}


def _coverage(run: Run) -> dict[str, Any]:
    return {
        part: coverage_metrics(run.regions, run.setup, part) for part in ("reference", "unseen")
    }


def _reference(run: Run) -> dict[str, Any]:
    ks, inputs = run.options.ks, run.inputs.tolist()
    run.neighbours(max(ks))  # shared by the baselines, left out of their seconds
    methods = {}
    for name in run.options.methods:
        drops, increases, sizes, seconds = [], [], [], 0.0
        for index in tqdm(inputs, desc=name, leave=False, disable=not run.options.progress):
            (similar, explanations), spent = _timed(METHODS[name].reference, run, index, max(ks))
            seconds += spent
            scores = drop_increase(run.setup, run.setup.pixels("reference", similar), explanations)
            drops.append(scores.drop)
            increases.append(scores.increase.double())
            sizes.append(len(similar))
        methods[name] = {
            "mAD": [100 * float(np.mean([float(d[:k].mean()) for d in drops])) for k in ks],
            "mAI": [100 * float(np.mean([float(a[:k].mean()) for a in increases])) for k in ks],
            "similar": [float(np.mean([min(k, s) for s in sizes])) for k in ks],
            "time_s": seconds,
        }
    return {"methods": methods}


def _q_sweep(run: Run) -> dict[str, Any]:
    regions = run.regions
    out: dict[str, Any] = {"reference": {}, "unseen": {}}
    for q in run.options.q_values:
        ri = run.interpreter if q == run.options.n_boundaries else run.fit(q)
        swept = RegionSet(ri, regions.inputs, ri.explain_reference(regions.inputs), regions.centres)
        for part in out:
            for key, value in coverage_metrics(swept, run.setup, part).items():
                out[part].setdefault(key, []).append(value)
    return out


RANKINGS = ("semantic (RI)", "euclidean (all reference)", "euclidean (covered)", "cosine (covered)")


def _rankings(run: Run, index: int) -> dict[str, Tensor]:
    """Each ranking of the reference images similar to reference image ``index`` (itself
    excluded), most similar first: ``Interpretation.similar`` with each metric, and the
    paper's baseline, Euclidean nearest neighbours among all reference images."""
    explanation = run.interpreter.explain_reference([index])[0]
    k = min(max(run.options.purity_ks) + 1, len(run.features))
    nearest = euclidean_neighbours(run.features[index : index + 1], run.features, k)[0]
    rankings = {
        RANKINGS[0]: explanation.similar(metric="semantic"),
        RANKINGS[1]: nearest,
        RANKINGS[2]: explanation.similar(metric="euclidean"),
        RANKINGS[3]: explanation.similar(metric="cosine"),
    }
    return {name: ranking.cpu()[ranking.cpu() != index] for name, ranking in rankings.items()}


def _similar(run: Run) -> dict[str, Any]:
    setup = run.setup
    concepts, masks = setup.reference.concepts, getattr(setup.unseen, "masks", None)
    purity: dict[str, dict[str, list[float]]] = {name: {} for name in RANKINGS}
    sizes = []
    for index in tqdm(
        run.inputs.tolist(), "rankings", leave=False, disable=not run.options.progress
    ):
        rankings = _rankings(run, index)
        sizes.append(len(rankings[RANKINGS[0]]))
        for name, ranking in rankings.items():
            for k in run.options.purity_ks:
                score = purity_at_k(concepts[ranking], int(concepts[index]), k)
                purity[name].setdefault(f"purity@{k}", []).append(score)
    methods = {
        name: {"energy": 100 * float(energy_in_mask(explanations, masks).nanmean()), "time_s": s}
        for name, explanations, s in _explain_unseen(run)
    }
    return {
        "rankings": {
            name: {key: 100 * float(np.nanmean(v)) for key, v in scores.items()}
            for name, scores in purity.items()
        },
        "methods": methods,
        "covered_others": float(np.mean(sizes)),
        "mask_area": 100 * float(masks.double().mean()),
    }


_RUNNERS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "unseen": _unseen,
    "coverage": _coverage,
    "reference": _reference,
    "q-sweep": _q_sweep,
    "similar": _similar,
}


def check_protocol(protocol: str) -> None:
    """Raise ValueError for a name not in :data:`PROTOCOLS`."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")


def _check(setup: Setup, protocol: str) -> None:
    check_protocol(protocol)
    if protocol == "similar" and (
        getattr(setup.reference, "concepts", None) is None
        or getattr(setup.unseen, "masks", None) is None
    ):
        raise ValueError(
            f"protocol 'similar' needs known sub-concepts and object masks (the shapes data "
            f"set); {setup.dataset!r} has none"
        )


def _aggregate(runs: list[Any]) -> Any:
    """Mean over runs of nested dicts of numbers (or lists of numbers), with ``KEY_std``
    beside each ``KEY`` (sample standard deviation; 0 for one run)."""
    first = runs[0]
    if isinstance(first, dict):
        out = {}
        for key in first:
            value = _aggregate([run[key] for run in runs])
            if isinstance(first[key], dict):
                out[key] = value
            else:
                out[key], out[f"{key}_std"] = value
        return out
    values = np.asarray(runs, dtype=float)
    std = values.std(0, ddof=1) if len(runs) > 1 else np.zeros_like(values[0])
    return values.mean(0).tolist(), np.asarray(std).tolist()


def evaluate(setup: Setup, protocol: str, options: Options | None = None) -> dict[str, Any]:
    """Run a protocol ``options.runs`` times and aggregate the runs.

    Args:
        setup: model and data (see `load_setup`).
        protocol: one of :data:`PROTOCOLS`.
        options: how to run it; None for the defaults.

    Returns:
        A JSON-ready dict: ``dataset``, ``protocol``, ``runs``, ``seeds``, ``setup``,
        ``options``, ``time_s``, and the protocol's numbers (mean, and ``KEY_std``):
        ``methods`` (``unseen``, ``reference``, ``similar``), ``reference`` / ``unseen``
        (``coverage``, ``q-sweep``), ``rankings`` (``similar``).
    """
    options = options or Options()
    _check(setup, protocol)
    start = time.perf_counter()
    seeds = [options.seed + r for r in range(options.runs)]
    per_run, fit_s, kmeans_s = [], [], []
    for seed in tqdm(seeds, desc=protocol, unit="run", disable=not options.progress):
        run = Run(setup, seed, options)
        per_run.append(_RUNNERS[protocol](run))
        fit_s.append(run.fit_s)
        kmeans_s.append(run.kmeans_s)
    summary = {
        "dataset": setup.dataset,
        "protocol": protocol,
        "runs": options.runs,
        "seeds": seeds,
        "setup": setup.describe(),
        "options": {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in options.__dict__.items()
            if key != "progress"
        },
        **_aggregate(per_run),
        "ri_fit_s": float(np.mean(fit_s)),
        "kmeans_s": float(np.mean(kmeans_s)),
        "n_regions": options.n_regions or 10 * setup.n_classes,
        "machine": {
            "platform": platform.platform(terse=True),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
    }
    summary["time_s"] = time.perf_counter() - start
    return summary


# ----------------------------------------------------------------------------- output
def _cell(block: dict[str, Any], key: str, index: int | None = None, best: bool = False) -> str:
    mean, std = block.get(key), block.get(f"{key}_std")
    if index is not None:
        mean, std = mean[index], std[index]
    if mean is None or not math.isfinite(mean):
        return "n/a"
    text = f"{mean:.2f} ± {std:.2f}"
    return f"**{text}**" if best else text


def _best(methods: dict[str, Any], key: str, lower: bool, index: int | None = None) -> str:
    def value(name: str) -> float:
        v = methods[name][key] if index is None else methods[name][key][index]
        return v if v is not None and math.isfinite(v) else math.inf * (1 if lower else -1)

    return (min if lower else max)(methods, key=value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _md_methods(results: dict[str, Any]) -> list[str]:
    """Table 1: mAD and mAI of each method, the best in bold."""
    methods = results["methods"]
    best_ad, best_ai = _best(methods, "mAD", True), _best(methods, "mAI", False)
    rows = [
        [
            name,
            _cell(m, "mAD", best=name == best_ad),
            _cell(m, "mAI", best=name == best_ai),
            f"{m['time_s']:.1f}",
        ]
        for name, m in methods.items()
    ]
    return _table(["Method", "mAD (%)", "mAI (%)", "time (s)"], rows)


def _md_coverage(results: dict[str, Any]) -> list[str]:
    """Table 2: the regions' ACU-GT, ACU-MD and CVR beside the model's."""
    header = ["Set", "ACU-GT of RI", "ACU-GT of F", "ACU-MD of RI", "ACU-MD of F", "CVR of RI"]
    rows = [
        [
            label,
            _cell(results[part], "ACU-GT"),
            f"{results[part]['model_acc']:.2f}",
            _cell(results[part], "ACU-MD"),
            "100.00",
            _cell(results[part], "CVR"),
            "100.00",
        ]
        for part, label in (("reference", "Ref."), ("unseen", "Unseen"))
    ]
    return _table([*header, "CVR of F"], rows)


def _md_reference(results: dict[str, Any]) -> list[str]:
    """Appendix C: mAD and mAI per K, then run times and the mean size of the similar sets."""
    methods, ks = results["methods"], results["options"]["ks"]
    lines = []
    for key, lower in (("mAD", True), ("mAI", False)):
        best = [_best(methods, key, lower, i) for i in range(len(ks))]
        rows = [
            [name, *[_cell(m, key, i, best[i] == name) for i in range(len(ks))]]
            for name, m in methods.items()
        ]
        lines += [f"{key} (%) over the top-K similar reference images:", ""]
        lines += [*_table(["Method", *[f"K = {k}" for k in ks]], rows), ""]
    rows = [
        [name, f"{m['time_s']:.1f}", ", ".join(f"{s:.1f}" for s in m["similar"])]
        for name, m in methods.items()
    ]
    return lines + _table(["Method", "time (s)", "mean size of S per K"], rows)


def _md_q_sweep(results: dict[str, Any]) -> list[str]:
    """Appendix E: the regions' metrics for each |Q|."""
    columns = [
        (part, key) for part in ("reference", "unseen") for key in ("ACU-GT", "ACU-MD", "CVR")
    ]
    rows = [
        [str(q), *[_cell(results[part], key, i) for part, key in columns]]
        for i, q in enumerate(results["options"]["q_values"])
    ]
    header = ["|Q|", *[f"{key} {part}" for part, key in columns]]
    model = f"ACU-GT of F: {results['reference']['model_acc'][0]:.2f} (reference), "
    model += f"{results['unseen']['model_acc'][0]:.2f} (unseen)."
    return [*_table(header, rows), "", model]


def _md_similar(results: dict[str, Any]) -> list[str]:
    """Purity@k of the rankings, then the pointing game of the methods."""
    ks, rankings, methods = results["options"]["purity_ks"], results["rankings"], results["methods"]
    best = {k: _best(rankings, f"purity@{k}", False) for k in ks}
    rows = [
        [name, *[_cell(r, f"purity@{k}", best=best[k] == name) for k in ks]]
        for name, r in rankings.items()
    ]
    best_energy = _best(methods, "energy", False)
    energy = [
        [name, _cell(m, "energy", best=name == best_energy), f"{m['time_s']:.1f}"]
        for name, m in methods.items()
    ]
    return [
        "Share of the top-k similar reference images with the input's sub-concept (%):",
        "",
        *_table(["Ranking", *[f"purity@{k}" for k in ks]], rows),
        "",
        "Reference images covered by RI's P(x), besides the input, on average: "
        f"{results['covered_others']:.1f}.",
        "",
        "Share of the heat-map energy inside the object's mask on the unseen set (%); the mask "
        f"covers {results['mask_area']:.1f}% of the pixels on average:",
        "",
        *_table(["Method", "energy in mask (%)", "time (s)"], energy),
    ]


_MARKDOWN = {
    "unseen": _md_methods,
    "coverage": _md_coverage,
    "reference": _md_reference,
    "q-sweep": _md_q_sweep,
    "similar": _md_similar,
}


def _machine(results: dict[str, Any]) -> str:
    machine = results["machine"]
    return (
        f"{machine['cpus']} CPU cores, {machine['torch_threads']} torch thread(s), "
        f"torch {machine['torch']}, {machine['platform']}"
    )


def results_markdown(results: dict[str, Any], plots: list[str] | None = None) -> str:
    """A Markdown report of ``evaluate``'s results, with tables shaped like the paper's.

    Args:
        results: what `evaluate` returned.
        plots: file names of plots to link below the tables.
    """
    setup, options = results["setup"], results["options"]
    lines = [
        f"### `{results['protocol']}` on `{results['dataset']}`",
        "",
        f"Model `{setup['model']}` at layer `{setup['target_layer']}`; "
        f"{setup['n_reference']} reference / {setup['n_unseen']} unseen images; "
        f"|Q| = {options['n_boundaries']}, |V| = {results['n_regions']}; "
        f"{results['runs']} run(s) with seeds {results['seeds']}; mean ± std; "
        f"{results['time_s']:.0f} s in all on {setup['device']} ({_machine(results)}); per run, "
        f"RI's index took {results['ri_fit_s']:.1f} s"
        + (f" and k-means {results['kmeans_s']:.1f} s" if results["kmeans_s"] else "")
        + " (not in the methods' times, which cover making the explanations, not scoring them).",
        "",
        *([f"Command: `{results['command']}`", ""] if "command" in results else []),
        *_MARKDOWN[results["protocol"]](results),
        "",
        *[f"![{name}]({name})" for name in plots or []],
    ]
    return "\n".join(lines).rstrip() + "\n"


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _json_ready(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_results(results: dict[str, Any], out: str | Path) -> list[Path]:
    """Write ``results.json``, ``results.md`` and the protocol's PNG plots into ``out``.

    Returns:
        The files written.
    """
    from ..report.plots import save_plots

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plots = save_plots(results, out)
    (out / "results.json").write_text(json.dumps(_json_ready(results), indent=2) + "\n")
    (out / "results.md").write_text(results_markdown(results, [p.name for p in plots]))
    return [out / "results.json", out / "results.md", *plots]
