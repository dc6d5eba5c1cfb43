"""What the evaluation protocols run on: a model, its target layer and the data (`load_setup`).

The data split is the one with data seed 0: ``repinterp train`` trains on its reference part
(the bundled weights were made so), so its unseen part holds images the model has never seen.
Both parts may be cut to seeded random subsets once (`load_setup`), and each run may draw its
own stratified subsets of them (`Setup.draw`): reference images from the reference part,
unseen images from the unseen part, never across, so that an unseen image stays unseen by the
model as well as by the interpreter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..data.datasets import Images, ImageSet, load_dataset
from ..models.zoo import DataShape, check_model, model_for, target_layer_for

__all__ = ["BUNDLED", "WEIGHTS_DIR", "Setup", "load_setup", "stratified"]

BUNDLED = {
    "mnist5k": "mnist_cnn",
    "mnist-super": "mnist_super_cnn",
    "shapes": "shapes_cnn",
    "digits": "digits_cnn",
}
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

    def draw(self, seed: int, shares: tuple[float, float]) -> Setup:
        """This setup with a stratified random subset of each part (see `stratified`): the
        share ``shares[0]`` of the reference images, ``shares[1]`` of the unseen ones."""
        parts = {}
        for name, share in zip(("reference", "unseen"), shares, strict=True):
            data = self.part(name)
            n = max(1, round(share * len(data)))
            parts[name] = data.subset(stratified(self.labels(name), n, seed))
        return dataclasses.replace(self, **parts)

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
    image_size: int | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
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
        image_size, mean, std: an image folder's square side and R G B normalisation (224 and
            ImageNet's; see [`load_dataset`][repinterp.data.datasets.load_dataset]).

    Raises:
        ValueError: an unknown data set, a missing model or weights, a bad layer (one of 1 x 1
            at the data's size too).
        FileNotFoundError: the weights file is missing (said before the data set is read).
    """
    if arch is None and weights is not None:
        raise ValueError("--weights needs --model")
    if arch is None and dataset.startswith("imagefolder:"):
        raise ValueError("an image folder needs --model and --weights (and --layer)")
    if arch is not None:  # checked before the data set is read: an image folder takes long
        check_model(arch, weights)
    split = load_dataset(dataset, seed=0, image_size=image_size, mean=mean, std=std)
    arch = arch or BUNDLED.get(dataset)
    if arch is None:
        raise ValueError(f"no bundled model for data set {dataset!r}: give --model and --weights")
    if weights is None:
        if BUNDLED.get(dataset) != arch:
            raise ValueError(f"--model {arch} needs --weights (no bundled weights for it here)")
        weights = WEIGHTS_DIR / f"{arch}.safetensors"
        if not weights.is_file():
            raise ValueError(f"bundled weights {weights} not found; train them first")
    model = model_for(arch, DataShape.of(split.reference), weights).to(device)
    layer = target_layer_for(arch, split.reference[0][0].shape, layer)
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
