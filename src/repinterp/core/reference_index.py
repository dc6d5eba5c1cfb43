"""The reference index in memory: everything the cover, ranking and heat maps need about ``R``.

For |R| reference images and |Q| boundaries it keeps the |R| x |Q| signed projections, the
predicted classes and logits (and labels when given), and the boundaries themselves; never the
reference feature maps, which stay in a memory-mapped file (``features.npy``) when they are
kept. Its folder on disk is [`index_folder`][repinterp.store.index_folder]'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch
from torch import Tensor, nn

from ..runtime.checksums import file_sha256
from .boundaries import Boundaries
from .cover import CoverIndex, sides
from .granularity import FittedGranularity, extra_count, project_blocks
from .heatmap import channel_means

__all__ = ["FEATURE_FILE", "INDEX_ROWS", "ReferenceIndex", "index_rows", "input_rows"]

FEATURE_FILE = "features.npy"
INDEX_ROWS = ("projections", "logits", "predictions", "labels")
"""The index's own per-image tensors; the others are its granularity's columns."""


def index_rows(
    head: nn.Module, features: Tensor, boundaries: Boundaries, granularity: FittedGranularity
) -> dict[str, Tensor]:
    """A batch's rows of the index, for reference images at fit and for inputs at explain
    alike: ``logits`` (``G``), ``predictions``, ``projections`` on ``Q`` (Eq. 2's block apart
    from the granularity's, see [`project_blocks`][repinterp.core.granularity.project_blocks])
    and the granularity's columns (N rows each).

    Args:
        head: ``G``.
        features: N x K x h x w feature maps ``psi(x)``.
        boundaries: ``Q``.
        granularity: the fitted granularity (its columns hook).

    Raises:
        ValueError: a column of the granularity is named as one of `INDEX_ROWS`.
    """
    with torch.inference_mode():
        logits = head(features)
        projections = project_blocks(features, boundaries, extra_count(boundaries))
    columns = granularity.columns(head, features, logits)
    clash = set(columns) & set(INDEX_ROWS)
    if clash:
        raise ValueError(f"the granularity's columns {sorted(clash)} clash with the index's")
    rows = {"projections": projections, "logits": logits, "predictions": logits.argmax(1)}
    return rows | columns


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
        columns: per-image columns of its granularity (|R| rows each, by name; e.g. the
            strategy of each image at ``granularity="strategy"``), none for the paper's.
        granularity: its fitted granularity
            ([`FittedGranularity`][repinterp.core.granularity.FittedGranularity]; its ``name``
            and capabilities): the paper's (empty) by default.
        input_shape: C x H x W of the images.
        meta: manifest fields (layer, seed, fingerprint, class names, ...).
        files: extra files saved with the index (e.g. ``features.npy``), by name.
        checksums: the SHA-256 of (some of) ``files`` as they were written; saving refuses a
            file that no longer has it.
        mapped_features: the feature file's memory map, once it is made (see `features`).
    """

    boundaries: Boundaries
    sources: Tensor
    projections: Tensor
    predictions: Tensor
    logits: Tensor
    labels: Tensor | None
    input_shape: tuple[int, int, int]
    columns: dict[str, Tensor] = field(default_factory=dict)
    granularity: FittedGranularity = field(default_factory=FittedGranularity)
    meta: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)
    checksums: dict[str, str] = field(default_factory=dict)
    mapped_features: Tensor | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return self.projections.shape[0]

    def __repr__(self) -> str:
        layer = self.meta.get("target_layer")
        kept = ", feature maps kept" if FEATURE_FILE in self.files else ""
        return (
            f"ReferenceIndex(|R| = {len(self)}, |Q| = {len(self.boundaries)}, "
            f"{self.n_classes} classes, input {tuple(self.input_shape)}, feature map "
            f"{self.feature_shape}{f' at {layer!r}' if layer else ''}{kept})"
        )

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

    @property
    def features(self) -> Tensor:
        """|R| x (K h w) flattened reference feature maps, memory-mapped from the feature file
        (CPU), mapped once per index object, as soon as it is built or loaded (see
        `map_features`): a file that replaces it later (a new fit saved to the same folder)
        does not change what this index reads.

        Raises:
            ValueError: the index was built without its feature maps (``keep_features``), or
                the file no longer has the checksum it was written with.
        """
        if self.mapped_features is None:
            self.map_features()
        if self.mapped_features is None:
            raise ValueError(
                "the reference feature maps were not kept: fit with keep_features=True "
                "(repinterp fit without --no-features)"
            )
        return self.mapped_features

    def rows(
        self, indices: Tensor | list[int]
    ) -> tuple[Tensor, Tensor, Tensor | None, dict[str, Tensor]]:
        """The rows of reference images by index, as `input_rows` gives an input's: logits,
        projections, flattened feature maps (None when they are not kept) and columns.

        Raises:
            IndexError: an index outside ``[0, |R|)``.
        """
        rows = torch.as_tensor(indices, dtype=torch.long, device=self.projections.device)
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= len(self)):
            raise IndexError(f"reference indices must lie in [0, {len(self)})")
        features = None
        if FEATURE_FILE in self.files:
            features = self.features[rows.cpu()]
        columns = {name: value[rows] for name, value in self.columns.items()}
        return self.logits[rows], self.projections[rows], features, columns

    def map_features(self, file: BinaryIO | None = None) -> None:
        """Memory-map the feature file now (nothing if the index has none, or has mapped it).

        Args:
            file: the feature file, open and already checked by the caller (`load_index`
                checks it as it loads it, the build as it writes it); None: open it by its path
                and check it here against its checksum in `checksums`, when there is one.

        Raises:
            ValueError: the file opened here no longer has its checksum (another fit wrote
                over it), or is not an ``.npy`` file.
        """
        path = self.files.get(FEATURE_FILE)
        if path is None or self.mapped_features is not None:
            return
        if file is None:
            with open(path, "rb") as opened:
                expected = self.checksums.get(FEATURE_FILE)
                if expected is not None and file_sha256(opened) != expected:
                    raise ValueError(
                        f"{path} changed since this index was made (another fit saved over "
                        "it?): its checksum differs; open the index again"
                    )
                self.mapped_features = _memory_map(opened, path)
        else:
            self.mapped_features = _memory_map(file, path)

    @cached_property
    def cover_index(self) -> CoverIndex:
        """The sides prepared for [`greedy_cover`][repinterp.core.cover.greedy_cover] (built once
        per index; each cover path builds its part on first use)."""
        return CoverIndex(self.sides)

    @cached_property
    def n_extra(self) -> int:
        """How many hyperplanes of ``Q`` its granularity added (the last ones)."""
        return extra_count(self.boundaries)

    @cached_property
    def eq2_cover_index(self) -> CoverIndex:
        """The sides on Eq. 2's boundaries alone (``Q`` less the granularity's hyperplanes),
        prepared for the cover (built once per index; `cover_index` itself when it added none)."""
        if self.n_extra == 0:
            return self.cover_index
        return CoverIndex(self.sides[:, : len(self.boundaries) - self.n_extra])

    @cached_property
    def channel_means(self) -> Tensor:
        """|Q| x K spatial means of the boundaries' weights (see
        [`channel_means`][repinterp.core.heatmap.channel_means]; computed once)."""
        return channel_means(self.boundaries)

    def to(self, device: torch.device | str) -> ReferenceIndex:
        return ReferenceIndex(
            boundaries=self.boundaries.to(device),
            sources=self.sources.to(device),
            projections=self.projections.to(device),
            predictions=self.predictions.to(device),
            logits=self.logits.to(device),
            labels=None if self.labels is None else self.labels.to(device),
            columns={name: value.to(device) for name, value in self.columns.items()},
            granularity=self.granularity,
            input_shape=self.input_shape,
            meta=dict(self.meta),
            files=dict(self.files),
            checksums=dict(self.checksums),
            mapped_features=self.mapped_features,
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
        out.update(self.columns)
        out.update(self.granularity.state()[1])
        return {k: v.detach().cpu().contiguous() for k, v in out.items()}


def _memory_map(file: BinaryIO, path: Path) -> Tensor:
    """The array of the open ``.npy`` file ``file`` (named ``path`` in messages), memory-mapped
    copy-on-write: the mapping keeps the file's data while it exists, also once the file is
    closed, removed or replaced."""
    file.seek(0)
    try:
        version = np.lib.format.read_magic(file)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(file)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(file)
        else:
            raise ValueError(f"version {version} of the format is not read")
    except ValueError as exc:
        raise ValueError(f"{path} is not a feature file: {exc}") from exc
    array = np.memmap(
        file, dtype=dtype, mode="c", shape=shape, order="F" if fortran else "C", offset=file.tell()
    )
    return torch.from_numpy(array)


def input_rows(
    psi: Callable[[Tensor], Tensor],
    head: nn.Module,
    batches: Iterable[Tensor],
    index: ReferenceIndex,
    empty: Tensor,
    keep_features: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None, dict[str, Tensor]]:
    """Inputs' rows on ``index``, batch by batch, as at fit (`index_rows`).

    Args:
        psi: the model up to the index's target layer.
        head: ``G``.
        batches: the inputs, in batches on the model's device, in its dtype.
        index: whose ``Q`` and granularity.
        empty: an empty tensor of the model's device and dtype (the rows of no batch).
        keep_features: also return the inputs' feature maps.

    Returns:
        Logits (N x classes), projections on ``Q`` (N x |Q|), the flattened feature maps
        (N x K h w, float32 on the CPU; None without ``keep_features`` or batches) and the
        columns of the index's granularity (N rows each; none without batches).
    """
    logits = [empty.new_empty(0, index.n_classes)]
    proj = [empty.new_empty(0, len(index.boundaries))]
    features: list[Tensor] = []
    parts: list[dict[str, Tensor]] = []
    for part in batches:
        with torch.inference_mode():
            t = psi(part)
        rows = index_rows(head, t, index.boundaries, index.granularity)
        logits.append(rows.pop("logits"))
        proj.append(rows.pop("projections"))
        del rows["predictions"]
        if keep_features:
            features.append(t.flatten(1).float().cpu())
        parts.append(rows)
    columns = {name: torch.cat([p[name] for p in parts]) for name in parts[0]} if parts else {}
    kept = torch.cat(features) if features else None
    return torch.cat(logits), torch.cat(proj), kept, columns
