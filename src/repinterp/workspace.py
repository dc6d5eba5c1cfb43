"""An index folder together with the model and the data it was made from.

The command line and the web viewer open an index by its folder alone: ``fit`` records in the
manifest how to rebuild the model (architecture, weights file, classes, channels) and which
data set the reference images came from, and :func:`open_index` rebuilds both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from .data import Images, Normalization, Split, load_dataset
from .index import IndexLoadError, ReferenceIndex
from .interpreter import RepresentativeInterpreter
from .shards import Shards
from .zoo import build_model, default_target_layer

__all__ = ["Workspace", "fit_workspace", "load_image_file", "open_index", "resolve_images"]

BUNDLED_WEIGHTS = Path(__file__).parent / "weights"


@dataclass
class Workspace:
    """A fitted interpreter with its data.

    Attributes:
        interpreter: the fitted (or loaded) interpreter.
        data: the reference and unseen parts of the data set named in the manifest.
        recipe: how the model and data were made (``arch``, ``weights``, ``dataset``, ...).
    """

    interpreter: RepresentativeInterpreter
    data: Split
    recipe: dict[str, Any]

    @property
    def reference(self) -> Images:
        return self.data.reference

    @property
    def normalization(self) -> Normalization:
        return self.data.reference.normalization

    def reference_pixels(self, indices: Tensor | list[int]) -> Tensor:
        """Reference images at ``indices`` in [0, 1] pixel space, N x C x H x W."""
        return torch.stack([self.reference.pixels(int(i)) for i in indices])


def _model(recipe: dict[str, Any]) -> torch.nn.Module:
    return build_model(
        recipe["arch"],
        num_classes=recipe["num_classes"],
        in_channels=recipe["in_channels"],
        weights=recipe["weights"],
    )


def fit_workspace(
    arch: str,
    weights: str | Path | None,
    dataset: str,
    layer: str | None = None,
    n_boundaries: int = 50,
    seed: int = 0,
    data_seed: int = 0,
    device: str | None = None,
    batch_size: int = 64,
    progress: bool = True,
    keep_features: bool = True,
    num_workers: int = 0,
    shards: Shards | None = None,
) -> Workspace:
    """Build the model, load the data set and fit an interpreter on its reference part.

    Args:
        arch: a name from :data:`repinterp.zoo.ARCHS`.
        weights: a local weights file (None: random weights).
        dataset: ``mnist5k``, ``digits``, ``shapes`` or ``imagefolder:PATH``.
        layer: target layer; None for the arch's default.
        n_boundaries: ``|Q|``.
        seed: seed of ``Q``.
        data_seed: seed of the data set's reference/unseen split.
        device: torch device; None for CPU.
        batch_size: images per forward pass.
        progress: show progress bars.
        keep_features: keep the reference feature maps (for regions and protocols).
        num_workers: DataLoader worker processes reading the reference images.
        shards: write the index in shards as it goes, to resume a killed fit (see
            :class:`repinterp.shards.Shards`).
    """
    data = load_dataset(dataset, seed=data_seed)
    sample = data.reference[0][0]
    recipe = {
        "arch": arch,
        "weights": None if weights is None else str(Path(weights).resolve()),
        "num_classes": len(data.reference.class_names),
        "in_channels": int(sample.shape[0]),
        "dataset": dataset,
        "data_seed": data_seed,
    }
    model = _model(recipe)
    ri = RepresentativeInterpreter(
        model,
        layer or default_target_layer(arch),
        n_boundaries=n_boundaries,
        seed=seed,
        device=device or "cpu",
        batch_size=batch_size,
        progress=progress,
        num_workers=num_workers,
    )
    ri.fit(
        data.reference,
        class_names=list(data.reference.class_names),
        keep_features=keep_features,
        shards=shards,
    )
    ri.fitted_index.meta["recipe"] = recipe
    return Workspace(ri, data, recipe)


def open_index(path: str | Path, device: str | None = None, progress: bool = True) -> Workspace:
    """Open an index folder written by ``repinterp fit`` (or :func:`fit_workspace` + save).

    Raises:
        IndexLoadError: the folder is not an index, is damaged, lacks the recipe, or its model
            does not match (the message says which).
    """
    manifest = ReferenceIndex.read_manifest(path)
    recipe = manifest.get("recipe")
    if not recipe:
        raise IndexLoadError(f"{path} does not say which model made it (no recipe in manifest)")
    model = _model(recipe)
    ri = RepresentativeInterpreter.load(path, model, device=device or "cpu", progress=progress)
    data = load_dataset(recipe["dataset"], seed=recipe["data_seed"])
    if len(data.reference) != len(ri.fitted_index):
        raise IndexLoadError(
            f"{path} indexes {len(ri.fitted_index)} reference images but data set "
            f"{recipe['dataset']!r} now has {len(data.reference)}"
        )
    return Workspace(ri, data, recipe)


def load_image_file(path: str | Path, shape: tuple[int, int, int]) -> Tensor:
    """Read an image file as C x H x W pixels in [0, 1], resized (shorter side) and centre-
    cropped to the index's input size, grey or RGB as the model expects.

    Raises:
        ValueError: the file is missing or is not a readable image.
    """
    channels, height, width = shape
    try:
        with Image.open(path) as image:
            image = image.convert("L" if channels == 1 else "RGB")
    except (FileNotFoundError, IsADirectoryError) as exc:
        raise ValueError(f"image file not found: {path}") from exc
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise ValueError(f"cannot read {path} as an image: {exc}") from exc
    scale = max(height / image.height, width / image.width)
    size = (max(width, round(image.width * scale)), max(height, round(image.height * scale)))
    image = image.resize(size, Image.BILINEAR)
    left, top = (size[0] - width) // 2, (size[1] - height) // 2
    image = image.crop((left, top, left + width, top + height))
    array = np.asarray(image, dtype=np.float32) / 255
    if channels == 1:
        array = array[None]
    else:
        array = array.transpose(2, 0, 1)
    return torch.from_numpy(np.ascontiguousarray(array))


def resolve_images(workspace: Workspace, specs: list[str]) -> tuple[Tensor, list[str]]:
    """Images named on the command line, as N x C x H x W pixels in [0, 1], with labels.

    A spec is an image file, or ``reference:I`` / ``unseen:I`` for image I of the data set.
    """
    shape = workspace.interpreter.fitted_index.input_shape
    images, names = [], []
    for spec in specs:
        part, _, number = spec.partition(":")
        if part in ("reference", "unseen") and number.isdigit():
            data = workspace.data.reference if part == "reference" else workspace.data.unseen
            if int(number) >= len(data):
                raise ValueError(f"{spec}: the {part} set has {len(data)} images")
            images.append(data.pixels(int(number)))
            names.append(f"{part}-{number}")
        else:
            images.append(load_image_file(spec, shape))
            names.append(Path(spec).stem)
    return torch.stack(images), names
