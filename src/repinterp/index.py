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
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from safetensors.torch import save as save_bytes
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler
from tqdm.auto import tqdm

from .boundaries import Boundaries, compute_boundaries, project
from .cover import sides
from .distributed import broadcast, gather, rank_and_world
from .model import SplitModel, model_fingerprint

__all__ = [
    "DEFAULT_SHARD_SIZE",
    "FEATURE_FILE",
    "FORMAT_VERSION",
    "IndexLoadError",
    "ReferenceIndex",
    "Shards",
    "build_index",
    "check_images",
    "iter_batches",
]

FORMAT_VERSION = 1
_TENSOR_FILE = "index.safetensors"
_MANIFEST = "manifest.json"
FEATURE_FILE = "features.npy"

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


class _RangeSampler(Sampler[list[int]]):
    """Batches of consecutive indices, one ``(start, stop)`` range each."""

    def __init__(self, ranges: Sequence[tuple[int, int]]) -> None:
        self.ranges = ranges

    def __iter__(self) -> Iterator[list[int]]:
        return (list(range(start, stop)) for start, stop in self.ranges)

    def __len__(self) -> int:
        return len(self.ranges)


def iter_batches(
    reference: Reference,
    batch_size: int,
    num_workers: int = 0,
    ranges: Sequence[tuple[int, int]] | None = None,
    pin_memory: bool = False,
) -> Iterator[tuple[Tensor, Tensor | None]]:
    """Yield ``(images N x C x H x W, labels N or None)`` from a tensor or a Dataset.

    A Dataset may yield images or ``(image, label)`` pairs; it is read with a DataLoader
    (``num_workers`` worker processes, pinned memory if asked).

    Args:
        ranges: the ``(start, stop)`` of each batch; default: consecutive batches of
            ``batch_size`` over the whole set.
    """
    if ranges is None:
        n = reference_size(reference)
        ranges = [(start, min(start + batch_size, n)) for start in range(0, n, batch_size)]
    if isinstance(reference, Tensor):
        for start, stop in ranges:
            yield reference[start:stop], None
        return
    loader = DataLoader(
        reference,
        batch_sampler=_RangeSampler(ranges),
        num_workers=num_workers,
        pin_memory=pin_memory,
    )
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


# ----------------------------------------------------------------------------- sharded build
DEFAULT_SHARD_SIZE = 1024
_PARTIAL_MANIFEST = "partial.json"
_SHARD_LOG = "shards.jsonl"
_BOUNDARY_FILE = "boundaries.safetensors"


def _shard_name(k: int) -> str:
    return f"shard-{k:06d}.safetensors"


@dataclass(frozen=True)
class Shards:
    """Where :func:`build_index` writes the index shard by shard, so that a killed build resumes.

    After every ``size`` images, the shard's projections, logits, predictions (and labels) go to
    ``directory`` as a safetensors file, and a line with its SHA-256 (and that of its rows of
    the feature file, if one is written) is appended to ``shards.jsonl``; ``Q`` and the
    settings of the build are kept in ``boundaries.safetensors`` and ``partial.json``. A resumed
    build reuses ``Q`` and every shard whose checksums hold, recomputes the others, and gives
    the index of one uninterrupted pass, bit for bit.

    Attributes:
        directory: the partial folder (created if missing).
        size: images per shard, rounded down to a multiple of the batch size (at least one
            batch) so that the batches are those of one pass.
        resume: reuse what ``directory`` holds (refused with ``ValueError`` if it was made with
            another model, data, seed or sizes); otherwise start over.
    """

    directory: Path
    size: int = DEFAULT_SHARD_SIZE
    resume: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory", Path(self.directory))
        if self.size < 1:
            raise ValueError(f"the shard size must be >= 1, got {self.size}")

    def remove(self) -> None:
        """Delete the partial files (the feature file kept there included), and ``directory``
        if that empties it: once the index is saved they are no longer needed."""
        _clear_partial(self.directory)
        if self.directory.is_dir() and not any(self.directory.iterdir()):
            self.directory.rmdir()


def _clear_partial(directory: Path) -> None:
    if not directory.is_dir():
        return
    names = [_PARTIAL_MANIFEST, _SHARD_LOG, _BOUNDARY_FILE, FEATURE_FILE]
    paths = [directory / name for name in names] + list(directory.glob("shard-*.safetensors*"))
    for path in paths:
        path.unlink(missing_ok=True)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@dataclass(frozen=True)
class _Plan:
    """|R| images cut into shards of whole batches of ``batch`` images."""

    n: int
    batch: int
    shard: int

    @classmethod
    def make(cls, n: int, batch: int, shard: int) -> _Plan:
        return cls(n, batch, max(batch, shard // batch * batch))

    @property
    def n_shards(self) -> int:
        return -(-self.n // self.shard)

    def bounds(self, k: int) -> tuple[int, int]:
        """``(start, stop)`` of shard ``k``."""
        start = k * self.shard
        return start, min(start + self.shard, self.n)

    def batches(self, shards: Sequence[int]) -> list[tuple[int, int]]:
        """``(start, stop)`` of every batch of ``shards``, in order."""
        out = []
        for k in shards:
            start, stop = self.bounds(k)
            out += [(b, min(b + self.batch, stop)) for b in range(start, stop, self.batch)]
        return out


class _FeatureFile:
    """Flattened feature maps, an |R| x d float32 ``.npy`` written a block of rows at a time.

    The rows go through plain file writes, so they sit in the page cache, not in this
    process's resident memory as they would through a writable memmap.
    """

    def __init__(self, path: Path, n_rows: int, dim: int, reuse: bool) -> None:
        self.path = path
        self.row_bytes = 4 * dim
        if not (reuse and self._fits(n_rows, dim)):
            path.unlink(missing_ok=True)  # a new file, never one shared with a saved index
            np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n_rows, dim))
        self.offset = np.load(path, mmap_mode="r").offset

    def _fits(self, n_rows: int, dim: int) -> bool:
        try:
            array = np.load(self.path, mmap_mode="r")
        except (OSError, ValueError):
            return False
        return array.shape == (n_rows, dim) and array.dtype == np.float32

    def write(self, start: int, rows: np.ndarray) -> str:
        """Write ``rows`` (n x d) from row ``start`` on; returns their SHA-256."""
        data = np.ascontiguousarray(rows, dtype=np.float32)
        with open(self.path, "r+b") as f:
            f.seek(self.offset + start * self.row_bytes)
            f.write(memoryview(data).cast("B"))
        return hashlib.sha256(data).hexdigest()

    def sha256(self, start: int, stop: int) -> str:
        """SHA-256 of rows ``start`` to ``stop`` as they are on disk."""
        digest = hashlib.sha256()
        remaining = (stop - start) * self.row_bytes
        with open(self.path, "rb") as f:
            f.seek(self.offset + start * self.row_bytes)
            while remaining > 0 and (block := f.read(min(remaining, 1 << 20))):
                digest.update(block)
                remaining -= len(block)
        return digest.hexdigest()


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 20 else text[:13] + "…"


class _Partial:
    """The partial folder of a sharded build; only rank 0 touches it.

    Args:
        shards: the folder and whether to resume from it.
        config: what the build depends on; resuming from a folder made with another config is
            refused.
    """

    def __init__(self, shards: Shards, config: dict[str, Any]) -> None:
        self.dir = shards.directory
        self.config = config
        previous = self._previous() if shards.resume else None
        if previous is not None:
            old = previous.get("config", {})
            changed = [k for k in sorted(config.keys() | old.keys()) if old.get(k) != config.get(k)]
            if changed:
                what = ", ".join(
                    f"{k} {_short(old.get(k))} there, {_short(config.get(k))} here" for k in changed
                )
                raise ValueError(
                    f"cannot resume from {self.dir}: it was made with other settings ({what}); "
                    "start over without resume"
                )
        self.resumed = previous is not None
        self.boundary_sha: str | None = previous.get("boundaries_sha256") if previous else None
        if not self.resumed:
            self._start_over()

    def _previous(self) -> dict[str, Any] | None:
        path = self.dir / _PARTIAL_MANIFEST
        if not path.is_file():
            return None
        try:
            manifest = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            warnings.warn(f"{path} is damaged: starting the build over", stacklevel=4)
            return None
        return manifest if isinstance(manifest, dict) else None

    def _start_over(self) -> None:
        _clear_partial(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.resumed, self.boundary_sha = False, None
        self._write_manifest()

    def _write_manifest(self) -> None:
        manifest = {"config": self.config, "boundaries_sha256": self.boundary_sha}
        _write_atomic(
            self.dir / _PARTIAL_MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode()
        )

    def boundaries(self) -> Boundaries | None:
        """The stored ``Q`` if its checksum holds; if it is damaged, the build starts over."""
        path = self.dir / _BOUNDARY_FILE
        if not self.resumed or self.boundary_sha is None:
            return None
        if not path.is_file() or _sha256(path) != self.boundary_sha:
            warnings.warn(f"{path} is damaged: starting the build over", stacklevel=3)
            self._start_over()
            return None
        t = load_file(str(path))
        return Boundaries(t["weight"], t["bias"], t["top_classes"])

    def save_boundaries(self, q: Boundaries) -> None:
        data = save_bytes(
            {"weight": q.weight, "bias": q.bias, "top_classes": q.top_classes},
        )
        _write_atomic(self.dir / _BOUNDARY_FILE, data)
        self.boundary_sha = hashlib.sha256(data).hexdigest()
        self._write_manifest()

    def complete(self, plan: _Plan, features: _FeatureFile | None) -> dict[int, dict[str, Tensor]]:
        """The shards recorded as complete whose checksums hold, loaded (on the CPU); a damaged
        one is reported with a warning and left to be recomputed."""
        log = self.dir / _SHARD_LOG
        if not self.resumed or not log.is_file():
            return {}
        records = {}
        for line in log.read_text().splitlines():
            try:
                record = json.loads(line)
                records[int(record["shard"])] = record
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue  # a line torn by the kill: its shard is recomputed
        done = {}
        for k, record in sorted(records.items()):
            if not 0 <= k < plan.n_shards:
                continue
            path, (start, stop) = self.dir / _shard_name(k), plan.bounds(k)
            intact = (
                path.is_file()
                and _sha256(path) == record.get("sha256")
                and (features is None or features.sha256(start, stop) == record.get("features"))
            )
            if not intact:
                warnings.warn(f"shard {k} in {self.dir} is damaged: recomputing it", stacklevel=3)
                continue
            done[k] = load_file(str(path))
        return done

    def save_shard(self, k: int, tensors: dict[str, Tensor], features_sha: str | None) -> None:
        """Write shard ``k`` and record its checksums (the shard file first, then the record)."""
        data = save_bytes(tensors)
        _write_atomic(self.dir / _shard_name(k), data)
        record = {"shard": k, "sha256": hashlib.sha256(data).hexdigest(), "features": features_sha}
        with open(self.dir / _SHARD_LOG, "a") as f:
            f.write(json.dumps(record) + "\n")


class _Assembly:
    """The index's per-image tensors (|R| rows each, on the CPU), filled shard by shard."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.tensors: dict[str, Tensor] = {}

    def put(self, start: int, part: dict[str, Tensor]) -> None:
        if self.tensors and part.keys() != self.tensors.keys():
            raise ValueError("the reference Dataset yields labels for some images only")
        for name, value in part.items():
            if name not in self.tensors:
                self.tensors[name] = value.new_empty((self.n, *value.shape[1:]))
            self.tensors[name][start : start + len(value)] = value


def _bytes_sha256(tensor: Tensor) -> str:
    flat = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
    return hashlib.sha256(flat.numpy()).hexdigest()


def _config(
    split: SplitModel,
    plan: _Plan,
    n_boundaries: int,
    seed: int,
    source_images: Tensor,
    device: torch.device,
    features: bool,
) -> dict[str, Any]:
    """What a sharded build depends on (the images behind ``Q`` stand in for the data)."""
    return {
        "format_version": FORMAT_VERSION,
        "model_fingerprint": model_fingerprint(torch.nn.ModuleList([split.psi, split.head])),
        "n_reference": plan.n,
        "n_boundaries": n_boundaries,
        "seed": seed,
        "batch_size": plan.batch,
        "shard_size": plan.shard,
        "boundary_images_sha256": _bytes_sha256(source_images),
        "device": device.type,
        "features": features,
    }


def _boundaries(split: SplitModel, images: Tensor, batch_size: int) -> Boundaries:
    """``Q``: Eq. 2 at each of ``images``, in batches."""
    parts = []
    for i in range(0, images.shape[0], batch_size):
        with torch.inference_mode():
            t = split.psi(images[i : i + batch_size])
        parts.append(compute_boundaries(split.head, t))
    return Boundaries.concat(parts)


def _prepare(
    split: SplitModel,
    reference: Reference,
    plan: _Plan,
    n_boundaries: int,
    seed: int,
    device: torch.device,
    shards: Shards | None,
    features: bool,
) -> tuple[Tensor, Boundaries, tuple[int, ...], _Partial | None]:
    """Rank 0's part before the pass: the sources of ``Q``, ``Q`` (reloaded when resuming),
    the input shape and the partial folder."""
    sources = sample_sources(plan.n, n_boundaries, seed)
    source_images = _gather(reference, sources).to(device)
    check_images(source_images, what="reference images")
    partial = q = None
    if shards is not None:
        config = _config(split, plan, n_boundaries, seed, source_images, device, features)
        partial = _Partial(shards, config)
        q = partial.boundaries()
    if q is None:
        q = _boundaries(split, source_images, plan.batch)
        if partial is not None:
            partial.save_boundaries(q)
    return sources, q.to(device), tuple(source_images.shape[1:]), partial


ShardResult = tuple[int, dict[str, Tensor], np.ndarray | None]


def _index_shard(
    split: SplitModel,
    batches: Iterator[tuple[Tensor, Tensor | None]],
    plan: _Plan,
    k: int,
    q: Boundaries,
    input_shape: tuple[int, ...],
    device: torch.device,
    features: bool,
) -> tuple[dict[str, Tensor], np.ndarray | None]:
    """Index shard ``k``, whose batches are the next ones of ``batches``.

    Returns:
        Its projections (n x |Q|), logits (n x classes), predictions (n) and labels (n, if the
        Dataset has them), on the CPU; its flattened feature maps (n x d float32) if
        ``features``, else None.
    """
    start, stop = plan.bounds(k)
    parts = []
    rows = np.empty((stop - start, q.weight[0].numel()), np.float32) if features else None
    for first, last in plan.batches([k]):
        images, labels = next(batches)
        images = images.to(device, non_blocking=True)
        check_images(images, input_shape, what=f"reference images {first}..{last - 1}")
        with torch.inference_mode():
            t = split.psi(images)
            logits = split.head(t)
            part = {"projections": project(t, q), "logits": logits}
            part["predictions"] = logits.argmax(1)
        if labels is not None:
            part["labels"] = labels.long()
        parts.append(part)
        if rows is not None:
            rows[first - start : last - start] = t.flatten(1).float().cpu().numpy()
    return {name: torch.cat([p[name] for p in parts]).cpu() for name in parts[0]}, rows


def _index_shards(
    split: SplitModel,
    reference: Reference,
    plan: _Plan,
    shard_ids: Sequence[int],
    q: Boundaries,
    input_shape: tuple[int, ...],
    num_workers: int,
    device: torch.device,
    features: bool,
) -> Iterator[ShardResult]:
    """Index ``shard_ids`` in one stream of batches: per shard, its id and what
    :func:`_index_shard` returns (not kept here once yielded, so that one shard of feature maps
    is alive at a time)."""
    ranges = plan.batches(shard_ids)
    batches = iter_batches(reference, plan.batch, num_workers, ranges, device.type == "cuda")
    for k in shard_ids:
        yield (k, *_index_shard(split, batches, plan, k, q, input_shape, device, features))


def _keep(
    results: list[ShardResult | None],
    plan: _Plan,
    assembly: _Assembly,
    store: _FeatureFile | None,
    partial: _Partial | None,
    bar: tqdm,
) -> None:
    """Rank 0: put gathered shards (None: a rank with none left) in the index, the feature file
    and the partial folder."""
    for result in results:
        if result is None:
            continue
        k, tensors, rows = result
        start, stop = plan.bounds(k)
        features_sha = store.write(start, rows) if store is not None else None
        if partial is not None:
            partial.save_shard(k, tensors, features_sha)
        assembly.put(start, tensors)
        bar.update(stop - start)


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
    shards: Shards | None = None,
) -> ReferenceIndex:
    """Sample ``Q`` from ``reference`` and stream it once to build the index.

    Memory: besides the model, one batch of feature maps, the |Q| boundaries, one shard of
    results (and of flattened feature maps, if they are written); what is kept grows as
    |R| x (|Q| + classes), never as |R| x feature size.

    Under ``torch.distributed`` (e.g. ``torchrun``) every rank calls it with the same
    arguments: rank 0 computes (or reloads) ``Q`` and broadcasts it; the shards are dealt to the
    ranks in turn (shard ``k`` to rank ``k mod world``); each rank indexes its shards and rank
    0 gathers them, writing the shards and the feature file; every rank returns the same index,
    equal to the one-process one.

    Args:
        split: the model split at the target layer, on ``device``.
        reference: N x C x H x W tensor, or a Dataset of images or ``(image, label)``.
        n_boundaries: ``|Q|``; at most |R| are sampled.
        seed: seeds the sample of ``Q``.
        batch_size: images per forward pass.
        device: where the model and the index live.
        progress: show a progress bar (rank 0).
        num_workers: DataLoader workers for a Dataset.
        feature_file: if given, the flattened reference feature maps are also written there
            (by rank 0) as a |R| x (K h w) float32 ``.npy``, never all in RAM, for the
            protocols that need them (k-means regions, Euclidean neighbours).
        shards: write the index in shards as it goes, to resume a killed build (see
            :class:`Shards`); keep ``feature_file`` in the same folder so that it survives too.

    Raises:
        ValueError: an empty reference set, bad images, or a partial folder made with other
            settings.
    """
    n_ref = reference_size(reference)
    if n_ref == 0:
        raise ValueError("the reference set is empty")
    if n_boundaries < 1:
        raise ValueError(f"n_boundaries must be >= 1, got {n_boundaries}")
    rank, world = rank_and_world()
    plan = _Plan.make(n_ref, batch_size, shards.size if shards else DEFAULT_SHARD_SIZE)
    wants_features = feature_file is not None
    header, partial, store, done = None, None, None, {}
    if rank == 0:
        sources, q, input_shape, partial = _prepare(
            split, reference, plan, n_boundaries, seed, device, shards, wants_features
        )
        if feature_file is not None:
            dim = q.weight[0].numel()
            store = _FeatureFile(feature_file, n_ref, dim, partial is not None and partial.resumed)
        done = partial.complete(plan, store) if partial is not None else {}
        header = (sources, q.to("cpu"), input_shape, sorted(done))
    sources, q, input_shape, done_ids = broadcast(header)
    q = q.to(device)

    assembly = _Assembly(n_ref)
    for k, tensors in done.items():
        assembly.put(plan.bounds(k)[0], tensors)
    pending = sorted(set(range(plan.n_shards)) - set(done_ids))
    results = _index_shards(
        split,
        reference,
        plan,
        pending[rank::world],
        q,
        input_shape,
        num_workers,
        device,
        wants_features,
    )
    finished = sum(plan.bounds(k)[1] - plan.bounds(k)[0] for k in done_ids)
    bar = tqdm(
        total=n_ref,
        initial=finished,
        desc="indexing reference",
        unit="img",
        disable=not progress or rank != 0,
    )
    with bar:
        for _ in range(-(-len(pending) // world)):
            _keep(gather(next(results, None)), plan, assembly, store, partial, bar)
    t = broadcast(assembly.tensors if rank == 0 else None)
    return ReferenceIndex(
        boundaries=q,
        sources=sources.to(device),
        projections=t["projections"].to(device),
        predictions=t["predictions"].to(device),
        logits=t["logits"].to(device),
        labels=t["labels"].to(device) if "labels" in t else None,
        input_shape=input_shape,  # type: ignore[arg-type]
        meta={},
        files={feature_file.name: feature_file} if store is not None else {},
    )
