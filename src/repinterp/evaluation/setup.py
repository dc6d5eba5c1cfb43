"""What the evaluation protocols run on: a model, its target layer and the data (`load_setup`).

The data split is the one with data seed 0: ``repinterp train`` trains on its reference part
(the bundled weights were made so), so its unseen part holds images the model has never seen.
Both parts may be cut to seeded random subsets once (`load_setup`), and each run may draw its
own stratified subsets of them (`Setup.draw`): reference images from the reference part,
unseen images from the unseen part, never across, so that an unseen image stays unseen by the
model as well as by the interpreter.

With ``model_seeds=N`` the setup holds N models its data set's recipe (`RECIPES`: the one that
made the bundled weights) trained with seeds S .. S + N - 1 (``model_seed_start`` S, 0 by
default) on that reference part, cached on disk (`store.model_cache`); run ``r`` uses model ``r``
(`Setup.for_run`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..data.datasets import MARKED_SETS, ImageFormat, Images, ImageSet, load_dataset
from ..models.train import Recipe
from ..models.zoo import DataShape, check_model, model_for, target_layer_for
from ..runtime.checksums import file_sha256
from ..store.model_cache import TrainedModel, default_cache, trained_model

__all__ = ["BUNDLED", "RECIPES", "WEIGHTS_DIR", "Setup", "load_setup", "recipe_for", "stratified"]

# The recipes that made the bundled weights (seed 0, data seed 0; README's `repinterp train`
# lines), and so the models of ``--model-seeds``.
RECIPES = {
    "mnist5k": Recipe("mnist_cnn", epochs=8),
    "mnist-super": Recipe("mnist_super_cnn", epochs=8),
    "shapes": Recipe("shapes_cnn", epochs=10),
    "shapes-mix": Recipe("shapes_cnn", epochs=10),  # every shapes-mix:P (no bundled weights)
    # Planted cues and their controls (`MARKED_SETS`), every F (no bundled weights): the
    # bundled recipes.
    **{name: Recipe("mnist_cnn", epochs=8) for name in MARKED_SETS if name[0] == "m"},
    **{name: Recipe("shapes_cnn", epochs=10) for name in MARKED_SETS if name[0] == "s"},
    "digits": Recipe("digits_cnn", epochs=20),
    # No bundled weights: the recipe of benchmarks/gpu_vgg_shapes.py (warm-up 1 epoch) for 4
    # epochs (500 steps) on all 4,000 reference images.
    "shapes:64": Recipe(
        "vgg11_bn",
        epochs=4,
        lr=0.01,
        batch_size=32,
        optimizer="sgd",
        weight_decay=5e-4,
        schedule="cosine",
        warmup_epochs=1.0,
        label_smoothing=0.1,
        hflip=True,
        dropout=0.0,
    ),
}
_FAMILIES = ("shapes-mix", *MARKED_SETS)
"""Recipes named without their ``:VALUE`` (every value shares one)."""
BUNDLED = {
    name: recipe.arch for name, recipe in RECIPES.items() if name not in (*_FAMILIES, "shapes:64")
}


def recipe_for(dataset: str) -> Recipe | None:
    """The recipe of a data set (`RECIPES`; ``shapes-mix:P`` has ``shapes-mix``'s,
    ``mnist-mark:F`` ``mnist-mark``'s, ...), or None."""
    family, colon, _ = dataset.partition(":")
    return RECIPES.get(family if colon and family in _FAMILIES else dataset)


WEIGHTS_DIR = Path(__file__).resolve().parent.parent / "weights"


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
        weights_sha256: SHA-256 of the weights file (None: no file).
        model_seed: the training seed of ``model`` when a recipe trained it here, else None.
        models: the models of the runs when a recipe trained several (run ``r`` uses
            ``models[r]``, see `for_run`); empty: every run uses ``model``.
        recipe: the recipe that trained ``models``, if any.
        model_cache: the folder ``models`` are cached in, if any.
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
    weights_sha256: str | None = None
    model_seed: int | None = None
    models: tuple[TrainedModel, ...] = ()
    recipe: Recipe | None = None
    model_cache: str | None = None

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

    def draw(self, seed: int, shares: tuple[float, float]) -> Setup:
        """This setup with a stratified random subset of each part (see `stratified`): the
        share ``shares[0]`` of the reference images, ``shares[1]`` of the unseen ones."""
        parts = {}
        for name, share in zip(("reference", "unseen"), shares, strict=True):
            data = self.part(name)
            n = max(1, round(share * len(data)))
            parts[name] = data.subset(stratified(self.labels(name), n, seed))
        return dataclasses.replace(self, **parts)

    def for_run(self, r: int) -> Setup:
        """The setup of run ``r``: with ``models[r]`` as its model (itself without
        ``models``).

        Raises:
            ValueError: there are models, but fewer than ``r + 1``.
        """
        if not self.models:
            return self
        if r >= len(self.models):
            raise ValueError(f"run {r} has no model: {len(self.models)} trained (--model-seeds)")
        trained = self.models[r]
        return dataclasses.replace(
            self,
            model=trained.model.to(self.device),
            weights=str(trained.path),
            weights_sha256=trained.sha256,
            model_seed=trained.seed,
            models=(),
        )

    def model_record(self) -> dict[str, Any]:
        """What identifies the model, for each run of the report: its training ``seed`` (None:
        given weights), ``weights_sha256`` and ``held_out_acc``, the share (%) of the setup's
        unseen images (before a run's draw; never trained on) it classifies correctly."""
        with torch.no_grad():
            predicted = torch.cat([self.model(x).argmax(1).cpu() for x in self.chunks("unseen")])
        correct = (predicted == self.labels("unseen").cpu()).double().mean()
        return {
            "seed": self.model_seed,
            "weights_sha256": self.weights_sha256,
            "held_out_acc": 100.0 * float(correct),
        }

    def describe(self) -> dict[str, Any]:
        """What the report says about the setup."""
        described = {
            "model": self.arch,
            "weights": self.weights,
            "weights_sha256": self.weights_sha256,
            "target_layer": self.target_layer,
            "classes": list(self.reference.class_names),
            "n_reference": len(self.reference),
            "n_unseen": len(self.unseen),
            "device": str(self.device),
        }
        if self.models:
            described |= {
                "model_seeds": [m.seed for m in self.models],
                "recipe": self.recipe.settings() if self.recipe else None,
                "model_cache": self.model_cache,
                "models": [m.card for m in self.models],
            }
        return described


def stratified(labels: Tensor, n: int, seed: int) -> Tensor:
    """``n`` indices drawn without replacement, as equally from every class as the class
    sizes allow (the paper's reference sets hold 2,500 images per class), in ascending order.

    Each class gets ``n // classes`` images, and the rest go one each to classes drawn at
    random; a class with fewer images gives them all and its shortfall goes to the others in
    the same way. Within a class, the images are drawn uniformly (seeded).

    Raises:
        ValueError: ``n`` is not in ``[1, len(labels)]``.
    """
    if not 1 <= n <= len(labels):
        raise ValueError(f"cannot draw {n} of {len(labels)} images")
    rng = np.random.default_rng(seed)
    classes = labels.cpu().unique().tolist()
    members = {c: rng.permutation((labels.cpu() == c).nonzero().flatten().numpy()) for c in classes}
    quota = dict.fromkeys(classes, 0)
    left = n
    while left:
        open_ = [c for c in classes if quota[c] < len(members[c])]
        share, extra = divmod(left, len(open_))
        lucky = set(rng.permutation(open_)[:extra].tolist())
        for c in open_:
            take = min(share + (c in lucky), len(members[c]) - quota[c])
            quota[c] += take
            left -= take
    return torch.from_numpy(np.sort(np.concatenate([members[c][: quota[c]] for c in classes])))


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
    image_format: ImageFormat | None = None,
    model_seeds: int | None = None,
    model_cache: str | Path | None = None,
    recipe: Recipe | None = None,
    progress: bool = False,
    model_seed_start: int = 0,
) -> Setup:
    """Load a data set and its model.

    Args:
        dataset: ``mnist5k``, ``mnist-super`` or ``shapes`` (bundled weights by default),
            ``digits``, ``shapes-mix:P`` or ``imagefolder:PATH`` (need ``arch`` and
            ``weights``). The split is the one with
            data seed 0, on which ``repinterp train`` trains by default.
        arch: an architecture of [`zoo`][repinterp.models.zoo]; None: the data set's bundled one.
        weights: a local weights file; None: the bundled weights.
        layer: the target layer; None: the architecture's default, or the last layer with
            more than one pixel where that one's maps are 1 x 1 at the data's size (see
            [`target_layer_for`][repinterp.models.zoo.target_layer_for]).
        device: torch device.
        n_reference: use a seeded random subset of this many reference images (None: all).
        n_unseen: the same for the unseen images (the paper samples 1,000).
        subset_seed: seed of both subsets.
        batch_size: images per forward pass.
        image_format: an image folder's square side and R G B normalisation (None: 224 and
            ImageNet's; see [`ImageFormat`][repinterp.data.image_folder.ImageFormat]).
        model_seeds: train this many models with seeds ``model_seed_start``, the next, ... by
            ``recipe`` on the split's
            reference part (or read them from ``model_cache``), one per run; None: one model,
            the given or bundled weights.
        model_cache: where the trained models are cached (None: `default_cache`).
        recipe: how they are trained; None: the data set's (`RECIPES`).
        progress: show the training's progress.
        model_seed_start: the first model's seed (seeds never used to choose a setting, for a
            pre-registered run).

    Raises:
        ValueError: an unknown data set, a missing model or weights, a bad layer (one of 1 x 1
            at the data's size too); ``model_seeds`` below 1, with ``weights``, with another
            architecture than the recipe's, or for a data set without a recipe;
            ``model_seed_start`` below 0.
        FileNotFoundError: the weights file is missing (said before the data set is read).
    """
    if arch is None and weights is not None:
        raise ValueError("--weights needs --model")
    if arch is None and dataset.startswith("imagefolder:"):
        raise ValueError("an image folder needs --model and --weights (and --layer)")
    if arch is not None:  # checked before the data set is read: an image folder takes long
        check_model(arch, weights)
    if model_seed_start < 0:
        raise ValueError(f"--model-seed-start must be >= 0, got {model_seed_start}")
    if model_seeds is not None:
        recipe = _recipe_of(dataset, arch, weights, model_seeds, recipe)
    split = load_dataset(dataset, seed=0, image_format=image_format)
    arch = arch or BUNDLED.get(dataset) or (recipe.arch if recipe is not None else None)
    if arch is None:
        raise ValueError(f"no bundled model for data set {dataset!r}: give --model and --weights")
    trained: tuple[TrainedModel, ...] = ()
    if recipe is not None and model_seeds is not None:
        cache = Path(model_cache) if model_cache is not None else default_cache()
        trained = tuple(
            trained_model(recipe, split, dataset, 0, seed, cache, device, progress)
            for seed in range(model_seed_start, model_seed_start + model_seeds)
        )
        model, weights = trained[0].model, trained[0].path
    elif weights is None:
        if BUNDLED.get(dataset) != arch:
            raise ValueError(f"--model {arch} needs --weights (no bundled weights for it here)")
        weights = WEIGHTS_DIR / f"{arch}.safetensors"
        if not weights.is_file():
            raise ValueError(f"bundled weights {weights} not found; train them first")
    if not trained:
        model = model_for(arch, DataShape.of(split.reference), weights)
    layer = target_layer_for(arch, split.reference[0][0].shape, layer)
    return Setup(
        dataset=dataset,
        model=model.to(device),
        target_layer=layer,
        reference=_take(split.reference, n_reference, subset_seed),
        unseen=_take(split.unseen, n_unseen, subset_seed),
        device=torch.device(device),
        batch_size=batch_size,
        arch=arch,
        weights=str(weights),
        weights_sha256=trained[0].sha256 if trained else file_sha256(weights),
        model_seed=trained[0].seed if trained else None,
        models=trained,
        recipe=recipe if trained else None,
        model_cache=str(trained[0].path.parent) if trained else None,
    )


def _recipe_of(
    dataset: str, arch: str | None, weights: str | Path | None, seeds: int, recipe: Recipe | None
) -> Recipe:
    """The recipe that trains the models of ``model_seeds`` (checked before anything is read).

    Raises:
        ValueError: see `load_setup`.
    """
    if seeds < 1:
        raise ValueError(f"--model-seeds must be >= 1, got {seeds}")
    if weights is not None:
        raise ValueError("--model-seeds trains its own models: give no --weights")
    recipe = recipe or recipe_for(dataset)
    if recipe is None:
        raise ValueError(
            f"--model-seeds: no training recipe for data set {dataset!r} (recipes: "
            f"{', '.join(RECIPES)})"
        )
    if arch is not None and arch != recipe.arch:
        raise ValueError(f"--model-seeds trains {recipe.arch} on {dataset}, not --model {arch}")
    return recipe
