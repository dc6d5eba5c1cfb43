"""The images the web viewer knows, by key, never by path: ``r<i>`` is reference image ``i``,
``u<token>`` an upload (kept in a small bounded store under a random token). The explanation of
an image has the same key as the image (`Entry`). A reference image of an image folder is read
from its file, which must still be the one the index was fitted on (its size and SHA-256).

Also how the page fetches an image (`Images.url`), shows a reference image under an
explanation's heat map (`Images.item`) and an explanation's numbers (`Images.summary`).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.interpretation import Interpretation
from ..data.datasets import ImageFolderSet
from ..data.image_files import read_image
from ..workspace import Workspace
from .parameters import NotFound, reference_index

__all__ = ["CACHED_EXPLANATIONS", "METRIC", "Changed", "Entry", "Images"]

CACHED_EXPLANATIONS = 256
METRIC = "semantic"  # the distance that ranks similar images: the paper's Dist (§5.2)


class Changed(RuntimeError):
    """A reference image whose file changed since the index was fitted (HTTP 409): the index's
    numbers are those of the old image."""


@dataclass(frozen=True)
class Entry:
    """An explained image: its pixels (C x H x W in [0, 1]), its interpretation, and the
    reference images it covers, most similar first by `METRIC`, with their distances; a
    reference image itself is left out of its own list."""

    key: str
    pixels: Tensor
    explanation: Interpretation
    ranked: Tensor
    distances: Tensor

    @classmethod
    def of(
        cls, key: str, pixels: Tensor, explanation: Interpretation, own: int | None = None
    ) -> Entry:
        """``own``: the input's reference index (None for an upload), left out."""
        ranked = explanation.similar(metric=METRIC)
        position = torch.searchsorted(explanation.covered, ranked)
        distances = explanation.distances(METRIC)[position]
        if own is not None:
            keep = ranked != own
            ranked, distances = ranked[keep], distances[keep]
        return cls(key, pixels, explanation, ranked, distances)


class Images:
    """The reference images and uploads of one workspace, by key, with their explanations
    (a reference image's kept in an LRU cache; uploads in a store that forgets the oldest
    first). Not thread-safe: the viewer holds its lock around every call.

    Args:
        workspace: the fitted interpreter and its data.
        version: a token in every image URL, so that the browser never shows another run's.
        max_uploads: uploaded images kept; the oldest is forgotten first.
    """

    def __init__(self, workspace: Workspace, version: str, max_uploads: int = 32) -> None:
        self.workspace = workspace
        self.interpreter = workspace.interpreter
        self.index = self.interpreter.fitted_index
        self.labels = workspace.reference.labels
        self.version = version
        self.max_uploads = max_uploads
        self._uploads: dict[str, Entry] = {}  # oldest first
        self._reference_entry = functools.lru_cache(maxsize=CACHED_EXPLANATIONS)(
            self._explain_reference
        )

    def reference(self, key: str) -> int | None:
        """The reference index ``key`` names; None for an upload's key."""
        return reference_index(key, len(self.index))

    def upload(self, key: str) -> Entry:
        """The upload kept under ``key``.

        Raises:
            NotFound: no such upload, or it was forgotten.
        """
        entry = self._uploads.get(key)
        if entry is None:
            raise NotFound(f"no upload {key!r} (unknown, or forgotten after newer uploads)")
        return entry

    def add_upload(self, pixels: Tensor) -> str:
        """Explain an upload (C x H x W in [0, 1]) and keep it under a new key, forgetting the
        oldest beyond ``max_uploads``: its key."""
        key = f"u{secrets.token_urlsafe(12)}"
        explanation = self.interpreter.explain(self.inputs(pixels))
        self._uploads[key] = Entry.of(key, pixels, explanation)
        while len(self._uploads) > self.max_uploads:
            del self._uploads[next(iter(self._uploads))]
        return key

    def reference_pixels(self, i: int) -> Tensor:
        """Reference image ``i``, C x H x W in [0, 1]. An image folder's file is read once,
        checked against the size and SHA-256 that opening the index verified, and decoded from
        the bytes checked.

        Raises:
            Changed: the file changed (or went) since.
        """
        reference = self.workspace.reference
        if not isinstance(reference, ImageFolderSet):
            return reference.pixels(i)
        path = Path(reference.samples[i][0])
        name = path.relative_to(reference.root).as_posix()
        try:
            data = path.read_bytes()
        except OSError:
            data = None
        if data is None or [len(data), hashlib.sha256(data).hexdigest()] != list(
            reference.files[name]
        ):
            raise Changed(
                f"reference image {i} ({name}) changed on disk since the index was fitted: "
                "it is not shown with another image's numbers (fit the index again)"
            )
        return reference.transform(read_image(data, 3, name=name))

    def pixels(self, key: str) -> Tensor:
        """Image ``key``, C x H x W in [0, 1]."""
        i = self.reference(key)
        return self.upload(key).pixels if i is None else self.reference_pixels(i)

    def known(self, key: str) -> None:
        """Raise `NotFound` unless ``key`` names a reference image or an upload still
        kept; asked before a cache is, which may still hold what a forgotten upload gave."""
        if self.reference(key) is None:
            self.upload(key)

    def entry(self, key: str) -> Entry:
        """The explained image ``key``."""
        i = self.reference(key)
        return self.upload(key) if i is None else self._reference_entry(i)

    def _explain_reference(self, i: int) -> Entry:
        explanation = self.interpreter.explain_reference([i])[0]
        return Entry.of(f"r{i}", self.reference_pixels(i), explanation, own=i)

    def inputs(self, pixels: Tensor) -> Tensor:
        """Images in [0, 1] as the model takes them (normalised, on its device)."""
        return self.workspace.normalization(pixels).to(self.interpreter.device)

    def with_references(self, entry: Entry, refs: list[int]) -> Tensor:
        """The entry's pixels, then those of reference images ``refs``: (1 + k) x C x H x W."""
        images = [entry.pixels] + [self.reference_pixels(ref) for ref in refs]
        return torch.stack(images)

    def url(self, key: str, heat: str | None = None, method: str = "ri") -> str:
        """Where the page fetches image ``key``, or its heat map under explanation ``heat``
        (drawn by ``method``: RI's, or a CAM's weights of ``heat`` reused)."""
        query = f"heat={heat}&" if heat else ""
        query += f"method={method}&" if heat and method != "ri" else ""
        return f"/api/image/{key}.png?{query}v={self.version}"

    def item(self, ref: int, heat: Entry, method: str = "ri") -> dict[str, Any]:
        """Reference image ``ref`` as the page shows it, under ``heat``'s heat map; ``score`` is
        the model's probability of ``heat``'s predicted class."""
        predicted = heat.explanation.predicted_class
        key = f"r{ref}"
        drawn = method != "ri" or heat.explanation.has_heatmap
        return {
            "key": key,
            "reference": ref,
            "name": self.workspace.reference_name(ref),
            "score": float(self.index.logits[ref].float().softmax(0)[predicted]),
            "predicted_class": int(self.index.predictions[ref]),
            "label": int(self.labels[ref]),
            "image": self.url(key),
            "heatmap": self.url(key, heat.key, method) if drawn else None,
        }

    def similar(self, entry: Entry, offset: int, limit: int) -> list[dict[str, Any]]:
        """One page of the entry's similar images (`item`s), with their rank and distance."""
        refs = entry.ranked[offset : offset + limit].tolist()
        distances = entry.distances[offset : offset + limit].tolist()
        return [
            {**self.item(ref, entry), "rank": offset + n + 1, "distance": d}
            for n, (ref, d) in enumerate(zip(refs, distances, strict=True))
        ]

    def summary(self, entry: Entry) -> dict[str, Any]:
        """The explanation's numbers (`Interpretation.to_dict`, without its similar images)
        and where its image comes from."""
        e = entry.explanation
        i = self.reference(entry.key)
        summary = e.to_dict(top_k=0, metric=METRIC)
        del summary["similar"]
        summary.update(
            key=entry.key,
            source="upload" if i is None else "reference",
            reference=i,
            name=None if i is None else self.workspace.reference_name(i),
            label=None if i is None else int(self.labels[i]),
            n_reference=e.n_reference,
            has_heatmap=e.has_heatmap,
        )
        return summary
