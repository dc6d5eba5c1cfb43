"""Models trained by a seeded `Recipe`, cached on disk by what made them (`trained_model`).

A model is named by the SHA-256 of its recipe's settings, its seed, the device type it was
trained on (CPU and CUDA round differently) and the fingerprint of its data (the pixels and
labels of both parts of the split, `fingerprint`): ``KEY.safetensors`` holds its weights and
``KEY.json`` what the training measured. Both are written atomically (`replace_file`), the
card after the weights; a model is reused only when its card (a JSON object) names the SHA-256
of the weights file beside it, else it is trained again, and a card whose recipe, seed, data or
device is not its name's (files swapped or moved) is refused. The cache folder is checked
before any training (`check_folder`: never an index or the partial folder of a fit, a file or
a path through one). Never pickle: weights are safetensors.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data.datasets import Split
from ..data.provenance import fingerprint
from ..models.train import Recipe
from ..models.zoo import DataShape, model_for, weights_bytes
from ..runtime.checksums import file_sha256
from ..runtime.devices import resolve_device
from ..runtime.version import VERSION
from .files import replace_file
from .outputs import check_folder

__all__ = ["TrainedModel", "default_cache", "model_key", "trained_model", "trained_on"]


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/repinterp/models`` (``~/.cache/repinterp/models`` without it)."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "repinterp" / "models"


@dataclass(frozen=True)
class TrainedModel:
    """A model a recipe trained, and what identifies it.

    Attributes:
        model: the classifier, in eval mode.
        path: its weights file in the cache.
        sha256: SHA-256 of that file.
        seed: the training seed (initialisation, shuffling, dropout).
        card: what the training measured (``recipe``, ``seed``, ``data``, ``device``,
            ``weights_sha256``, ``held_out_accuracy`` (%, on the split's unseen part),
            ``losses``, ``train_s``, ``torch``).
        cached: whether it was read from the cache rather than trained now.
    """

    model: nn.Module
    path: Path
    sha256: str
    seed: int
    card: dict[str, Any]
    cached: bool


def model_key(recipe: Recipe, seed: int, data: dict[str, Any], device_type: str) -> str:
    """The cache name of a model: SHA-256 of its recipe's settings, seed, device type and data
    fingerprint, as sorted JSON."""
    made_of = {"recipe": recipe.settings(), "seed": seed, "data": data, "device": device_type}
    return hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()


def _cached(weights: Path, card_file: Path, made_of: dict[str, Any]) -> dict[str, Any] | None:
    """The card of a cached model whose weights file is whole (its SHA-256 the card's), else
    None.

    Raises:
        ValueError: the card is of another model than ``made_of`` (its recipe, seed, data and
            device), which its name is the key of.
    """
    try:
        card = json.loads(card_file.read_text())
        if not (isinstance(card, dict) and card.get("weights_sha256") == file_sha256(weights)):
            return None
    except (OSError, ValueError):
        return None
    other = [key for key, value in made_of.items() if card.get(key) != value]
    if other:
        said = ", ".join(f"{key} {card.get(key)!r}, not {made_of[key]!r}" for key in other)
        raise ValueError(
            f"--model-cache: {card_file} is the card of another model than its name says "
            f"({said}): its files were swapped or moved; remove {card_file.name} and "
            f"{weights.name} to train it again"
        )
    return card


def trained_on(device: torch.device) -> str:
    """The machine a model is trained on, as its card records it: the same recipe, seed and data
    give other weights on another CPU (its floating-point kernels differ), so the card says
    which CPU (or GPU) made them."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, {platform.machine()}"
    cpu = platform.processor() or platform.machine()
    try:  # the model name where the kernel says it (Linux)
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {torch.get_num_threads()} torch thread(s), torch {torch.__version__}"


def trained_model(
    recipe: Recipe,
    data: Split,
    spec: str,
    data_seed: int,
    seed: int,
    cache: str | Path,
    device: str | torch.device | None = None,
    progress: bool = True,
) -> TrainedModel:
    """The model ``recipe`` trains with ``seed`` on ``data``'s reference part (held out: its
    unseen part), from ``cache`` when it is there, else trained and written there.

    Args:
        recipe: the recipe.
        data: the split (``load_dataset(spec, data_seed)``).
        spec, data_seed: the data set's name and split seed, for its fingerprint.
        seed: the training seed.
        cache: the cache folder (made when missing).
        device: where to train; the model is returned there.
        progress: show the training's progress bar.

    Raises:
        OutputError: ``cache`` is refused (see `check_folder`).
        ValueError: the cached card of this key is another model's.
    """
    device = resolve_device(device)
    key = model_key(recipe, seed, fingerprint(data, spec, data_seed), device.type)
    cache = Path(cache)
    check_folder(cache, "--model-cache")
    weights, card_file = cache / f"{key}.safetensors", cache / f"{key}.json"
    made_of = {
        "recipe": recipe.settings(),
        "seed": seed,
        "data": {"dataset": spec, "seed": data_seed},
        "device": device.type,
    }
    card = _cached(weights, card_file, made_of)
    if card is not None:
        model = model_for(recipe.arch, DataShape.of(data.reference), weights).to(device)
        return TrainedModel(model, weights, card["weights_sha256"], seed, card, cached=True)
    start = time.perf_counter()
    model, result = recipe.train(data.reference, data.unseen, seed, device, progress)
    seconds = time.perf_counter() - start
    cache.mkdir(parents=True, exist_ok=True)
    sha256 = replace_file(weights, weights_bytes(model))
    card = {
        **made_of,
        "weights_sha256": sha256,
        "held_out_accuracy": 100 * result.held_out_accuracy,
        "losses": result.losses,
        "train_s": seconds,
        "torch": torch.__version__,
        "repinterp": VERSION,
        "trained_on": trained_on(device),
    }
    replace_file(card_file, (json.dumps(card, indent=2) + "\n").encode())
    return TrainedModel(model.eval(), weights, sha256, seed, card, cached=False)
