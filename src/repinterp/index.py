"""The reference index: everything the cover, ranking and heat maps need about ``R``.

For |R| reference images and |Q| boundaries it keeps the |R| x |Q| signed projections, the
predicted classes and logits (and labels when given), and the boundaries themselves; never the
reference feature maps. On disk it is a folder: ``manifest.json`` and ``index.safetensors``.

This module owns the format (the tensors, the manifest, the checksums, saving and loading);
:mod:`repinterp.build` builds an index, :mod:`repinterp.shards` keeps a build resumable.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from .boundaries import Boundaries
from .cover import CoverIndex, sides
from .heatmap import channel_means
from .utils import file_sha256

__all__ = ["FEATURE_FILE", "FORMAT_VERSION", "IndexLoadError", "ReferenceIndex"]

FORMAT_VERSION = 1
_TENSOR_FILE = "index.safetensors"
_MANIFEST = "manifest.json"
FEATURE_FILE = "features.npy"


class IndexLoadError(ValueError):
    """A saved index that is damaged or does not match the model it is loaded with."""


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

    @cached_property
    def sides(self) -> Tensor:
        """|R| x |Q| int8 signs of the projections (computed once; the dataclass is neither
        frozen nor slotted, so that the cache can live in the instance's ``__dict__``)."""
        return sides(self.projections)

    @cached_property
    def cover_index(self) -> CoverIndex:
        """The sides prepared for :func:`repinterp.cover.greedy_cover` (built once per index;
        each cover path builds its part on first use)."""
        return CoverIndex(self.sides)

    @cached_property
    def channel_means(self) -> Tensor:
        """|Q| x K spatial means of the boundaries' weights (see
        :func:`repinterp.heatmap.channel_means`; computed once)."""
        return channel_means(self.boundaries)

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
            checksums = {name: file_sha256(tmp / name) for name in names}
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
            if file_sha256(path / name) != expected:
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
