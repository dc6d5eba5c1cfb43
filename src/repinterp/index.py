"""The reference index: everything the cover, ranking and heat maps need about ``R``.

For |R| reference images and |Q| boundaries it keeps the |R| x |Q| signed projections, the
predicted classes and logits (and labels when given), and the boundaries themselves; never the
reference feature maps. On disk it is a folder: ``manifest.json`` and ``index.safetensors``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from .boundaries import Boundaries, compute_boundaries, project
from .cover import sides
from .model import SplitModel

__all__ = [
    "FORMAT_VERSION",
    "IndexLoadError",
    "ReferenceIndex",
    "build_index",
    "check_images",
    "iter_batches",
]

FORMAT_VERSION = 1
_TENSOR_FILE = "index.safetensors"
_MANIFEST = "manifest.json"

Reference = Tensor | Dataset


class IndexLoadError(ValueError):
    """A saved index that is damaged or does not match the model it is loaded with."""


def check_images(images: Tensor, shape: Sequence[int] | None = None, what: str = "images") -> None:
    """Raise ``ValueError`` unless ``images`` is a finite float N x C x H x W batch.

    Args:
        images: the batch.
        shape: the expected C x H x W, if known.
        what: how to name the batch in the message.
    """
    if not isinstance(images, Tensor):
        raise TypeError(f"{what} must be a tensor, got {type(images).__name__}")
    if images.ndim != 4:
        raise ValueError(f"{what} must be N x C x H x W, got shape {tuple(images.shape)}")
    if not images.is_floating_point():
        raise ValueError(f"{what} must be floating point, got {images.dtype}")
    if shape is not None and tuple(images.shape[1:]) != tuple(shape):
        raise ValueError(
            f"{what} have C x H x W = {tuple(images.shape[1:])}, the index expects {tuple(shape)}"
        )
    finite = torch.isfinite(images).flatten(1).all(1)
    if not bool(finite.all()):
        bad = (~finite).nonzero().flatten()[:5].tolist()
        raise ValueError(f"{what} contain NaN or Inf values (batch positions {bad})")


def _split_item(item: Any) -> tuple[Tensor, Tensor | None]:
    if isinstance(item, (tuple, list)):
        images = item[0]
        labels = torch.as_tensor(item[1]) if len(item) > 1 else None
        return images, labels
    return item, None


def iter_batches(
    reference: Reference, batch_size: int, num_workers: int = 0
) -> Iterator[tuple[Tensor, Tensor | None]]:
    """Yield ``(images N x C x H x W, labels N or None)`` from a tensor or a Dataset.

    A Dataset may yield images or ``(image, label)`` pairs; it is read with a DataLoader.
    """
    if isinstance(reference, Tensor):
        for start in range(0, reference.shape[0], batch_size):
            yield reference[start : start + batch_size], None
        return
    loader = DataLoader(reference, batch_size=batch_size, shuffle=False, num_workers=num_workers)
    for item in loader:
        yield _split_item(item)


def _gather(reference: Reference, indices: Tensor) -> Tensor:
    if isinstance(reference, Tensor):
        return reference[indices.to(reference.device)]
    return torch.stack([_split_item(reference[int(i)])[0] for i in indices])


@dataclass
class ReferenceIndex:
    """Projections of the reference images on the sampled boundaries ``Q``.

    Attributes:
        boundaries: ``Q``.
        sources: |Q| long, the reference images behind ``Q``, in ``Q``'s order.
        projections: |R| x |Q|, ``<W_h, psi(x')> + b_h``.
        predictions: |R| long, the model's predicted classes.
        logits: |R| x classes.
        labels: |R| long ground-truth labels, or None.
        input_shape: C x H x W of the images.
        meta: manifest fields (layer, seed, fingerprint, class names, ...).
        files: extra files saved with the index (e.g. ``features.npy``), by name.
    """

    boundaries: Boundaries
    sources: Tensor
    projections: Tensor
    predictions: Tensor
    logits: Tensor
    labels: Tensor | None
    input_shape: tuple[int, int, int]
    meta: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.projections.shape[0]

    @property
    def n_classes(self) -> int:
        return self.logits.shape[1]

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return tuple(self.boundaries.weight.shape[1:])

    @property
    def sides(self) -> Tensor:
        """|R| x |Q| int8 signs of the projections."""
        if "_sides" not in self.__dict__:
            self.__dict__["_sides"] = sides(self.projections)
        return self.__dict__["_sides"]

    def to(self, device: torch.device | str) -> ReferenceIndex:
        return ReferenceIndex(
            boundaries=self.boundaries.to(device),
            sources=self.sources.to(device),
            projections=self.projections.to(device),
            predictions=self.predictions.to(device),
            logits=self.logits.to(device),
            labels=None if self.labels is None else self.labels.to(device),
            input_shape=self.input_shape,
            meta=dict(self.meta),
            files=dict(self.files),
        )

    def tensors(self) -> dict[str, Tensor]:
        out = {
            "boundary_weight": self.boundaries.weight,
            "boundary_bias": self.boundaries.bias,
            "boundary_classes": self.boundaries.top_classes,
            "sources": self.sources,
            "projections": self.projections,
            "predictions": self.predictions,
            "logits": self.logits,
        }
        if self.labels is not None:
            out["labels"] = self.labels
        return {k: v.detach().cpu().contiguous() for k, v in out.items()}

    def save(self, path: str | Path, extra_files: dict[str, Path] | None = None) -> None:
        """Write the index folder atomically: an existing index at ``path`` is replaced only
        once the new one is complete.

        Args:
            path: the folder.
            extra_files: files copied into the folder under the given names, with checksums.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            save_file(self.tensors(), str(tmp / _TENSOR_FILE))
            for name, source in (extra_files or {}).items():
                shutil.copyfile(source, tmp / name)
            names = [_TENSOR_FILE, *(extra_files or {})]
            checksums = {name: _sha256(tmp / name) for name in names}
            manifest = {
                "format_version": FORMAT_VERSION,
                **self.meta,
                "input_shape": list(self.input_shape),
                "feature_shape": list(self.feature_shape),
                "n_reference": len(self),
                "n_boundaries": len(self.boundaries),
                "n_classes": self.n_classes,
                "has_labels": self.labels is not None,
                "sha256": checksums,
            }
            (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
            if path.exists():
                old = path.with_name(f".{path.name}.old")
                shutil.rmtree(old, ignore_errors=True)
                os.replace(path, old)
                os.replace(tmp, path)
                shutil.rmtree(old)
            else:
                os.replace(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @staticmethod
    def read_manifest(path: str | Path) -> dict[str, Any]:
        """The manifest of an index folder.

        Raises:
            IndexLoadError: no manifest, a damaged one or an unknown format version.
        """
        path = Path(path)
        manifest_path = path / _MANIFEST
        if not manifest_path.is_file():
            raise IndexLoadError(f"{path} is not a repinterp index: {_MANIFEST} is missing")
        try:
            manifest = json.loads(manifest_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise IndexLoadError(f"{manifest_path} is damaged: {exc}") from exc
        if not isinstance(manifest, dict) or manifest.get("format_version") != FORMAT_VERSION:
            version = manifest.get("format_version") if isinstance(manifest, dict) else None
            raise IndexLoadError(
                f"{path} has index format {version!r}, this repinterp reads {FORMAT_VERSION}"
            )
        return manifest

    @classmethod
    def load(cls, path: str | Path, device: torch.device | str = "cpu") -> ReferenceIndex:
        """Read an index folder, verifying its checksum and format.

        Raises:
            IndexLoadError: missing files, a damaged file or an unknown format version.
        """
        path = Path(path)
        manifest = cls.read_manifest(path)
        tensor_path = path / _TENSOR_FILE
        if not tensor_path.is_file():
            raise IndexLoadError(f"{tensor_path} is missing")
        for name, expected in manifest.get("sha256", {_TENSOR_FILE: None}).items():
            if not (path / name).is_file():
                raise IndexLoadError(f"{path / name} is missing")
            if _sha256(path / name) != expected:
                raise IndexLoadError(
                    f"{path / name} is damaged: its checksum differs from the manifest"
                )
        try:
            t = load_file(str(tensor_path), device=str(device))
        except (SafetensorError, OSError) as exc:
            raise IndexLoadError(f"{tensor_path} is damaged: {exc}") from exc
        reserved = {"input_shape", "feature_shape", "n_reference", "n_boundaries", "n_classes"}
        reserved |= {"has_labels", "sha256", "format_version"}
        return cls(
            boundaries=Boundaries(t["boundary_weight"], t["boundary_bias"], t["boundary_classes"]),
            sources=t["sources"],
            projections=t["projections"],
            predictions=t["predictions"],
            logits=t["logits"],
            labels=t.get("labels"),
            input_shape=tuple(manifest["input_shape"]),
            meta={k: v for k, v in manifest.items() if k not in reserved},
            files={
                name: path / name for name in manifest.get("sha256", {}) if name != _TENSOR_FILE
            },
        )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def reference_size(reference: Reference) -> int:
    """Number of images in a tensor or a sized Dataset."""
    if isinstance(reference, Tensor):
        return reference.shape[0]
    try:
        return len(reference)  # type: ignore[arg-type]
    except TypeError as exc:
        raise TypeError("the reference Dataset must define __len__") from exc


def sample_sources(n_reference: int, n_boundaries: int, seed: int) -> Tensor:
    """The reference indices whose boundaries form ``Q``: ``min(n_boundaries, |R|)`` of them,
    drawn without replacement with ``seed``, in ascending order."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(n_reference, generator=generator)[:n_boundaries].sort().values


@torch.inference_mode()
def _features(split: SplitModel, images: Tensor) -> Tensor:
    return split.psi(images)


def build_index(
    split: SplitModel,
    reference: Reference,
    n_boundaries: int,
    seed: int,
    batch_size: int,
    device: torch.device,
    progress: bool = True,
    num_workers: int = 0,
    feature_file: Path | None = None,
) -> ReferenceIndex:
    """Sample ``Q`` from ``reference`` and stream it once to build the index.

    Memory: besides the model, one batch of feature maps and the |Q| boundaries; what is kept
    grows as |R| x (|Q| + classes).

    Args:
        split: the model split at the target layer, on ``device``.
        reference: N x C x H x W tensor, or a Dataset of images or ``(image, label)``.
        n_boundaries: ``|Q|``; at most |R| are sampled.
        seed: seeds the sample of ``Q``.
        batch_size: images per forward pass.
        device: where the model and the index live.
        progress: show a progress bar.
        num_workers: DataLoader workers for a Dataset.
        feature_file: if given, the flattened reference feature maps are also written there as
            a |R| x (K h w) float32 ``.npy`` (memory-mapped, never all in RAM), for the
            protocols that need them (k-means regions, Euclidean neighbours).
    """
    n_ref = reference_size(reference)
    if n_ref == 0:
        raise ValueError("the reference set is empty")
    if n_boundaries < 1:
        raise ValueError(f"n_boundaries must be >= 1, got {n_boundaries}")
    sources = sample_sources(n_ref, n_boundaries, seed)
    source_images = _gather(reference, sources).to(device)
    check_images(source_images, what="reference images")
    input_shape = tuple(source_images.shape[1:])
    parts = [
        compute_boundaries(split.head, _features(split, source_images[i : i + batch_size]))
        for i in range(0, len(sources), batch_size)
    ]
    q = Boundaries.concat(parts)

    projections: Tensor | None = None
    predictions = torch.empty(n_ref, dtype=torch.long, device=device)
    logits: Tensor | None = None
    labels: Tensor | None = None
    start = 0
    bar = tqdm(total=n_ref, desc="indexing reference", unit="img", disable=not progress)
    with torch.inference_mode(), bar:
        for images, batch_labels in iter_batches(reference, batch_size, num_workers):
            images = images.to(device)
            check_images(images, input_shape, what=f"reference images {start}..")
            t = split.psi(images)
            out = split.head(t)
            stop = start + images.shape[0]
            if projections is None:
                projections = torch.empty(n_ref, len(q), dtype=t.dtype, device=device)
                logits = torch.empty(n_ref, out.shape[1], dtype=out.dtype, device=device)
                if feature_file is not None:
                    store = np.lib.format.open_memmap(
                        feature_file, mode="w+", dtype=np.float32, shape=(n_ref, t[0].numel())
                    )
            if feature_file is not None:
                store[start:stop] = t.flatten(1).float().cpu().numpy()
            projections[start:stop] = project(t, q)
            logits[start:stop] = out
            predictions[start:stop] = out.argmax(1)
            if batch_labels is not None:
                if labels is None:
                    labels = torch.full((n_ref,), -1, dtype=torch.long, device=device)
                labels[start:stop] = batch_labels.to(device).long()
            start = stop
            bar.update(images.shape[0])
    if feature_file is not None:
        store.flush()
        del store
    if start != n_ref:
        raise ValueError(f"the reference Dataset yielded {start} images but has length {n_ref}")
    assert projections is not None and logits is not None
    return ReferenceIndex(
        boundaries=q,
        sources=sources.to(device),
        projections=projections,
        predictions=predictions,
        logits=logits,
        labels=labels,
        input_shape=input_shape,  # type: ignore[arg-type]
        meta={},
    )
