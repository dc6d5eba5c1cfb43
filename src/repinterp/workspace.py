"""An index folder together with the model and the data it was made from.

The command line and the web viewer open an index by its folder alone: ``fit`` records in the
manifest how to rebuild the model (architecture, weights file relative to the index and its
SHA-256, classes, channels), which data set the reference images came from and how it was read
(image size, normalisation), and a fingerprint of those images;
[`open_index`][repinterp.workspace.open_index] rebuilds both, and refuses an index whose reference
images changed since.
"""

from __future__ import annotations

import math
import os
import re
import reprlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .core.config import FitConfig
from .core.groups import composition
from .data.datasets import (
    ImageFolderSet,
    ImageFormat,
    Images,
    ImageTransform,
    Normalization,
    Split,
    load_dataset,
)
from .data.image_files import MAX_SIDE, load_image_file
from .data.provenance import describe_split, fingerprint, fingerprint_change
from .display.html import sub_label_colour
from .interpreter import RepresentativeInterpreter
from .models.zoo import DataShape, check_model, model_for, target_layer_for
from .runtime.checksums import file_sha256
from .store.index_folder import MAX_CHANNELS, MAX_CLASSES, IndexLoadError, read_manifest
from .store.outputs import distinct_names
from .store.shards import Shards

__all__ = [
    "BUNDLED_WEIGHTS",
    "ImageTransform",
    "Workspace",
    "bundled_weights",
    "fit_workspace",
    "load_image_file",
    "open_index",
    "resolve_images",
]

BUNDLED_WEIGHTS = Path(__file__).parent / "weights"
_BUNDLED = "bundled:"


def bundled_weights(arch: str) -> Path | None:
    """The weights bundled with repinterp for ``arch``, or None."""
    path = BUNDLED_WEIGHTS / f"{arch}.safetensors"
    return path if path.is_file() else None


@dataclass
class Workspace:
    """A fitted interpreter with its data.

    Attributes:
        interpreter: the fitted (or loaded) interpreter.
        data: the reference and unseen parts of the data set named in the manifest.
        recipe: how the model and data were made (``arch``, ``weights``, ``dataset``, ...).
        folder: the index folder it was opened from or last saved to; None for a fit not
            saved yet.
    """

    interpreter: RepresentativeInterpreter
    data: Split
    recipe: dict[str, Any]
    folder: Path | None = None
    _names: list[str] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def reference(self) -> Images:
        return self.data.reference

    @property
    def normalization(self) -> Normalization:
        return self.data.reference.normalization

    @property
    def sub_labels(self) -> tuple[Tensor, list[str] | None] | None:
        """The reference images' sub-labels (sub-concepts, known for evaluation only:
        ``mnist-super``'s digits, ``shapes``' shapes, an image folder's sub-folders of class
        folders) with their names, from the data set (its ``concepts``); None where it has
        none."""
        concepts = getattr(self.reference, "concepts", None)
        if concepts is None:
            return None
        return concepts, getattr(self.reference, "concept_names", None)

    def composition(self, members: list[int]) -> list[dict[str, Any]] | None:
        """What the reference images ``members`` are made of by sub-label
        ([`composition`][repinterp.core.groups.composition]), each with its colour
        (``repinterp.display.html.sub_label_colour``); None without sub-labels
        (`sub_labels`)."""
        known = self.sub_labels
        if known is None:
            return None
        return [
            {**c, "colour": sub_label_colour(int(c["sub_label"]))}
            for c in composition(members, *known)
        ]

    def reference_pixels(self, indices: Tensor | list[int]) -> Tensor:
        """Reference images at ``indices`` in [0, 1] pixel space, N x C x H x W (N may be 0)."""
        if len(indices) == 0:
            return torch.empty(0, *self.interpreter.index.input_shape)
        return torch.stack([self.reference.pixels(int(i)) for i in indices])

    def reference_name(self, i: int) -> str:
        """How reference image ``i`` is named wherever it is shown or written: an image
        folder's file by its path relative to the folder (``disc/21.png``; the rows follow
        the files' order, sorted as strings: ``disc/0.png, disc/1.png, disc/10.png, ...``),
        else as the command line takes it (``reference:61``)."""
        if self._names is None:
            reference = self.reference
            self._names = reference.image_names if isinstance(reference, ImageFolderSet) else []
        return self._names[i] if self._names else f"reference:{i}"

    def save(self, path: str | Path, overwrite: bool = False) -> None:
        """Save the index to the folder ``path`` (see
        [`save_index`][repinterp.store.index_folder.save_index]; ``overwrite`` as there), with the
        recipe's weights file recorded relative to it, so that the folder can be moved along
        with the weights (or opened with the weights given anew)."""
        recipe = dict(self.recipe)
        weights = recipe.get("weights")
        if weights is not None and not weights.startswith(_BUNDLED):
            relative = os.path.relpath(Path(weights).resolve(), Path(path).resolve())
            recipe["weights"] = Path(relative).as_posix()
        meta = self.interpreter.index.meta
        meta["recipe"] = recipe
        try:
            self.interpreter.save(path, overwrite)
        finally:
            meta["recipe"] = self.recipe
        self.folder = Path(path)


def _recorded_weights(weights: Path | None) -> str | None:
    if weights is None:
        return None
    weights = weights.resolve()
    if weights.parent == BUNDLED_WEIGHTS.resolve():
        return _BUNDLED + weights.name
    return str(weights)


def fit_workspace(
    arch: str,
    weights: str | Path | None,
    dataset: str,
    layer: str | None = None,
    config: FitConfig | None = None,
    data_seed: int = 0,
    device: str | None = None,
    keep_features: bool = True,
    shards: Shards | None = None,
    image_format: ImageFormat | None = None,
    say: Callable[[str], object] | None = None,
) -> Workspace:
    """Build the model, load the data set and fit an interpreter on its reference part.

    Args:
        arch: a name from `ARCHS`.
        weights: a local weights file; None: the weights bundled for ``arch``.
        dataset: ``mnist5k``, ``digits``, ``shapes`` or ``imagefolder:PATH``.
        layer: target layer; None for the arch's default, or the last layer with more than one
            pixel where that one's maps are 1 x 1 at the data's size (a given layer of 1 x 1
            is refused: see [`target_layer_for`][repinterp.models.zoo.target_layer_for]).
        config: the fit's settings ([`FitConfig`][repinterp.core.config.FitConfig]); None: the
            defaults.
        data_seed: seed of the data set's reference/unseen split.
        device: torch device; None for CPU.
        keep_features: keep the reference feature maps (for regions and protocols).
        shards: write the index in shards as it goes, to resume a killed fit (see
            [`Shards`][repinterp.store.shards.Shards]).
        image_format: an image folder's image side and normalisation
            ([`ImageFormat`][repinterp.data.image_folder.ImageFormat]; None: 224 px, ImageNet's).
        say: called with a description of the data split (how many images of each class went
            to the reference and unseen parts, and why) once the data is loaded.

    Raises:
        ValueError: no weights given and none bundled for ``arch``, an unknown ``arch`` (before
            the data set is read), and the errors of the model, the data set and the fit.
        FileNotFoundError: the weights file is missing (before the data set is read).
    """
    check_model(arch, weights)  # before the data set is read: an image folder takes long
    if weights is None:
        weights = bundled_weights(arch)
        if weights is None:
            raise ValueError(f"--model {arch} has no bundled weights: give --weights FILE")
    weights = Path(weights)
    given = dataset
    if dataset.startswith("imagefolder:"):  # recorded absolute: explain/serve run from anywhere
        dataset = f"imagefolder:{Path(dataset.split(':', 1)[1]).resolve()}"
    data = load_dataset(dataset, seed=data_seed, image_format=image_format)
    if say is not None:
        say(describe_split(data, given, data_seed))
    shape = DataShape.of(data.reference)
    recipe: dict[str, Any] = {
        "arch": arch,
        "weights": _recorded_weights(weights),
        "weights_sha256": file_sha256(weights) if weights.is_file() else None,
        "num_classes": shape.num_classes,
        "in_channels": shape.in_channels,
        "dataset": dataset,
        "data_seed": data_seed,
    }
    if dataset.startswith("imagefolder:"):
        normalization = data.reference.normalization
        recipe["image_size"] = int(data.reference[0][0].shape[-1])
        recipe["mean"], recipe["std"] = list(normalization.mean), list(normalization.std)
    recipe["data"] = fingerprint(data, dataset, data_seed)
    model = model_for(arch, shape, weights)
    layer = target_layer_for(arch, data.reference[0][0].shape, layer)
    ri = RepresentativeInterpreter(model, layer, device=device or "cpu", config=config)
    ri.fit(
        data.reference,
        class_names=list(data.reference.class_names),
        keep_features=keep_features,
        shards=shards,
    )
    ri.index.meta["recipe"] = recipe
    return Workspace(_with_transform(ri, data), data, recipe)


_RECIPE_TYPES: dict[str, tuple[type, ...]] = {
    "arch": (str,),
    "num_classes": (int,),
    "in_channels": (int,),
    "dataset": (str,),
    "data_seed": (int,),
    "data": (dict,),
}
_OPTIONAL_TYPES: dict[str, tuple[type, ...]] = {
    "weights": (str, type(None)),
    "image_size": (int,),
    "mean": (list,),
    "std": (list,),
}
_RECIPE_LIMITS = {"num_classes": MAX_CLASSES, "in_channels": MAX_CHANNELS, "image_size": MAX_SIDE}


def _check_recipe(path: Path, recipe: Any) -> dict[str, Any]:
    """``recipe`` (a manifest's), its fields' types and the sizes the model and data are
    built with checked.

    Raises:
        IndexLoadError: no recipe, a field missing or of the wrong type, a size out of range
            (``num_classes``, ``in_channels``, ``image_size``), or a ``mean`` / ``std`` that is
            not one finite number per channel.
    """
    if not recipe:
        raise IndexLoadError(f"{path} does not say which model made it (no recipe in manifest)")
    damaged = f"{path / 'manifest.json'} is damaged: its recipe's"
    for key, types in {**_RECIPE_TYPES, **_OPTIONAL_TYPES}.items():
        value = recipe.get(key)
        if (key in _RECIPE_TYPES or key in recipe) and (
            not isinstance(value, types) or isinstance(value, bool)
        ):
            raise IndexLoadError(f"{damaged} {key} is {reprlib.repr(value)}")
    for key, high in _RECIPE_LIMITS.items():
        if key in recipe and not 1 <= recipe[key] <= high:
            raise IndexLoadError(f"{damaged} {key} is {recipe[key]}, not from 1 to {high}")
    channels = recipe["in_channels"]
    for key in ("mean", "std"):
        values = recipe.get(key)
        if values is not None and (len(values) != channels or not all(_finite(v) for v in values)):
            raise IndexLoadError(
                f"{damaged} {key} is {reprlib.repr(values)}, not {channels} finite numbers"
            )
    return recipe


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _weights_file(path: Path, recipe: dict[str, Any], weights: str | Path | None) -> Path | None:
    """The weights to build the model with: ``weights`` if given, else the recorded file."""
    if weights is not None:
        return Path(weights)
    recorded = recipe.get("weights")
    if recorded is None:
        return None
    if recorded.startswith(_BUNDLED):
        file = BUNDLED_WEIGHTS / Path(recorded[len(_BUNDLED) :]).name
    else:
        file = path / recorded
    if not file.is_file():
        raise IndexLoadError(
            f"the weights {path} was made with are not at {file} (recorded as {recorded!r}, "
            "relative to the index): give them with --weights FILE"
        )
    return file


def open_index(
    path: str | Path,
    device: str | None = None,
    progress: bool = True,
    weights: str | Path | None = None,
) -> Workspace:
    """Open an index folder written by ``repinterp fit`` (or
    [`fit_workspace`][repinterp.workspace.fit_workspace] + save).

    Args:
        path: the index folder.
        device: torch device; None for CPU.
        progress: show progress bars.
        weights: the model's weights file, if not where the manifest says (a moved index);
            weights other than those the index was made with are refused.

    Raises:
        IndexLoadError: the folder is not an index, is damaged, lacks the recipe, its model
            does not match, or its reference images changed since it was fitted (the message
            says which).
    """
    path = Path(path)
    recipe = _check_recipe(path, read_manifest(path).get("recipe"))
    file = _weights_file(path, recipe, weights)
    recipe = {**recipe, "weights": _recorded_weights(file)}
    model = model_for(recipe["arch"], DataShape(recipe["num_classes"], recipe["in_channels"]), file)
    ri = RepresentativeInterpreter.load(path, model, device=device or "cpu", progress=progress)
    recorded = ImageFormat(recipe.get("image_size"), recipe.get("mean"), recipe.get("std"))
    data = load_dataset(recipe["dataset"], seed=recipe["data_seed"], image_format=recorded)
    current = fingerprint(data, recipe["dataset"], recipe["data_seed"])
    change = fingerprint_change(recipe["data"], current)
    if change or len(data.reference) != len(ri.index):
        raise IndexLoadError(
            f"the reference data of {path} changed since it was fitted "
            f"({change or f'{len(ri.index)} images then, {len(data.reference)} now'}): "
            "fit the index again"
        )
    ri.reference = data.reference  # so that a notebook's `show` draws the similar images
    return Workspace(_with_transform(ri, data), data, recipe, path)


def _with_transform(ri: RepresentativeInterpreter, data: Split) -> RepresentativeInterpreter:
    """``ri``, given the command line's [`ImageTransform`][repinterp.workspace.ImageTransform] for
    ``data``'s images."""
    shape = tuple(ri.index.input_shape)
    ri.transform = ImageTransform(shape, data.reference.normalization)
    return ri


def _file_name(text: str) -> str:
    return re.sub(r"[^\w.-]", "_", text).lstrip(".") or "image"


def _unique_names(names: list[str], folders: list[Path | None]) -> list[str]:
    """``names`` made distinct: a file's name that another shares gets its folder's name, then
    those still alike are numbered (``-1``, ``-2``, ...), and any that a number made alike
    another name are numbered past it (`distinct_names`)."""
    out = [_file_name(name) for name in names]
    clashes = [out.count(name) > 1 for name in out]
    for i, folder in enumerate(folders):
        if clashes[i] and folder is not None:
            out[i] = _file_name(f"{folder.name}-{out[i]}")
    counts = {name: out.count(name) for name in out}
    seen: dict[str, int] = {}
    for i, name in enumerate(out):
        seen[name] = seen.get(name, 0) + 1
        out[i] = name if counts[name] == 1 else f"{name}-{seen[name]}"
    return distinct_names(out, lambda name: [name])


def resolve_images(workspace: Workspace, specs: list[str]) -> tuple[Tensor, list[str]]:
    """Images named on the command line, as N x C x H x W pixels in [0, 1], with names.

    A spec is an image file, or ``reference:I`` / ``unseen:I`` for image I of the data set.
    The names are distinct (and safe as file names): two files of the same name in different
    folders are told apart by their folders' names (or numbered).
    """
    shape = workspace.interpreter.index.input_shape
    images, names, folders = [], [], []
    for spec in specs:
        part, _, number = spec.partition(":")
        if part in ("reference", "unseen") and number.isascii() and number.isdigit():
            data = workspace.data.reference if part == "reference" else workspace.data.unseen
            if int(number) >= len(data):
                raise ValueError(f"{spec}: the {part} set has {len(data)} images")
            images.append(data.pixels(int(number)))
            names.append(f"{part}-{number}")
            folders.append(None)
        else:
            if part in ("reference", "unseen") and not Path(spec).exists():
                raise ValueError(f"{spec}: {part}:I takes a whole number I (or give an image file)")
            images.append(load_image_file(spec, shape))
            names.append(Path(spec).stem)
            folders.append(Path(spec).resolve().parent)
    return torch.stack(images), _unique_names(names, folders)
