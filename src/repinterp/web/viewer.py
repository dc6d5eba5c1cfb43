"""What the web viewer shows, without HTTP: explanations of reference and uploaded images, their
similar images ranked by ``Dist`` and heat maps as PNGs, and a gallery of regions.

Images are named by keys, never by paths: ``r<i>`` is reference image ``i``, ``u<token>`` an
upload (kept in a small bounded store under a random token). The explanation of an image has the
same key as the image.

Explanations of reference images and PNGs are kept in per-viewer LRU caches
(``functools.lru_cache``); uploads in a store that forgets the oldest upload first.
"""

from __future__ import annotations

import functools
import io
import math
import re
import secrets
import threading
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from ..heatmap import overlay
from ..interpreter import Interpretation
from ..workspace import Workspace, load_image_file

__all__ = [
    "MAX_UPLOAD_BYTES",
    "MAX_UPLOAD_PIXELS",
    "BadRequest",
    "NotFound",
    "Viewer",
    "decode_upload",
    "encode_png",
]

MAX_UPLOAD_BYTES = 5 * 1024 * 1024
MAX_UPLOAD_PIXELS = 4096 * 4096
UPLOAD_FORMATS = ("PNG", "JPEG")
MIN_SIDE = 112
PAGE_SIZE = 12
MAX_PAGE = 60
MAX_OFFSET = 10**9
COVERED_SHOWN = 4
DEFAULT_REGIONS = 20
CACHED_EXPLANATIONS = 256

KEY = re.compile(r"r(?P<reference>0|[1-9][0-9]{0,8})|u(?P<upload>[A-Za-z0-9_-]{16})")


class NotFound(LookupError):
    """No such image, explanation or heat map (HTTP 404)."""


class BadRequest(ValueError):
    """A request the viewer cannot serve as asked: a broken upload, a bad page (HTTP 400)."""


@dataclass(frozen=True)
class Entry:
    """An explained image: its pixels (C x H x W in [0, 1]), its interpretation, and the
    reference images it covers, most similar first, with their ``Dist``."""

    key: str
    pixels: Tensor
    explanation: Interpretation
    ranked: Tensor
    distances: Tensor

    @classmethod
    def of(cls, key: str, pixels: Tensor, explanation: Interpretation) -> Entry:
        ranked = explanation.similar()
        position = torch.searchsorted(explanation.covered, ranked)
        return cls(key, pixels, explanation, ranked, explanation.distances()[position])


def encode_png(image: np.ndarray) -> bytes:
    """An H x W (grey) or H x W x 3 array in [0, 1] as a PNG, upscaled by a whole factor with
    nearest neighbours so that its shorter side has at least ``MIN_SIDE`` pixels."""
    array = np.clip(np.rint(image * 255), 0, 255).astype(np.uint8)
    factor = max(1, math.ceil(MIN_SIDE / min(array.shape[:2])))
    picture = Image.fromarray(array)
    picture = picture.resize((picture.width * factor, picture.height * factor), Image.NEAREST)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def decode_upload(data: bytes, shape: tuple[int, int, int]) -> Tensor:
    """An uploaded PNG or JPEG as C x H x W pixels in [0, 1], fitted to the index's input size.

    Raises:
        BadRequest: too many bytes or pixels, another format, or a broken file.
    """
    if not data:
        raise BadRequest("the upload is empty")
    if len(data) > MAX_UPLOAD_BYTES:
        raise BadRequest(f"the upload has {len(data)} bytes; at most {MAX_UPLOAD_BYTES} accepted")
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data), formats=UPLOAD_FORMATS) as image:
                width, height = image.size
            if width * height <= MAX_UPLOAD_PIXELS:
                return load_image_file(io.BytesIO(data), shape)
        except UnidentifiedImageError:
            raise BadRequest("the upload is not a PNG or JPEG image") from None
        except (OSError, Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise BadRequest(f"the image cannot be decoded: {exc}") from None
        except ValueError as exc:  # load_image_file's, for a file that breaks off mid-image
            raise BadRequest(f"the image cannot be decoded: {exc.__cause__ or exc}") from None
    raise BadRequest(
        f"the image has {width} x {height} pixels; at most {MAX_UPLOAD_PIXELS} are accepted"
    )


def _page(value: str | None, name: str, default: int, low: int, high: int) -> int:
    try:
        number = default if value is None else int(value)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, got {value!r}") from None
    if not low <= number <= high:
        raise BadRequest(f"{name} must lie in [{low}, {high}], got {number}")
    return number


class Viewer:
    """The state of the viewer for one workspace; thread-safe.

    Regions (k-means on the reference feature maps) are computed once, in a background thread
    started here; until they are ready the gallery says so.

    Args:
        workspace: the fitted interpreter and its data.
        n_regions: regions in the gallery (at most ``|R|``).
        seed: seed of the k-means.
        max_uploads: uploaded images kept; the oldest is forgotten first.
        cache_size: PNG images kept in memory (the least recently used is dropped first).
    """

    def __init__(
        self,
        workspace: Workspace,
        n_regions: int = DEFAULT_REGIONS,
        seed: int = 0,
        max_uploads: int = 32,
        cache_size: int = 2048,
    ) -> None:
        self.workspace = workspace
        self.interpreter = workspace.interpreter
        self.index = self.interpreter.fitted_index
        self.class_names = [str(c) for c in workspace.reference.class_names]
        self.labels = workspace.reference.labels
        self.version = secrets.token_hex(4)
        self._lock = threading.RLock()
        self.max_uploads = max_uploads
        self._uploads: dict[str, Entry] = {}  # oldest first
        self._reference_entry = functools.lru_cache(maxsize=CACHED_EXPLANATIONS)(
            self._explain_reference
        )
        self._png = functools.lru_cache(maxsize=cache_size)(self._render_png)
        self._gallery: list[dict[str, Any]] | None = None
        self._gallery_error: str | None = None
        self.n_regions = min(n_regions, len(self.index))
        self._regions_thread = threading.Thread(
            target=self._build_gallery, args=(seed,), name="repinterp-regions", daemon=True
        )
        self._regions_thread.start()

    # ------------------------------------------------------------------ keys and entries
    def _reference(self, key: str) -> int | None:
        """The reference index that ``key`` names, or None for an upload key."""
        match = KEY.fullmatch(key)
        if match is None:
            raise NotFound(f"no image {key!r}: images are r<reference index> or u<upload id>")
        if match["upload"] is not None:
            return None
        i = int(match["reference"])
        if i >= len(self.index):
            raise NotFound(f"no reference image {i}: the index has {len(self.index)}")
        return i

    def _upload(self, key: str) -> Entry:
        entry = self._uploads.get(key)
        if entry is None:
            raise NotFound(f"no upload {key!r} (unknown, or forgotten after newer uploads)")
        return entry

    def _pixels(self, key: str) -> Tensor:
        i = self._reference(key)
        return self._upload(key).pixels if i is None else self.workspace.reference.pixels(i)

    def _entry(self, key: str) -> Entry:
        i = self._reference(key)
        return self._upload(key) if i is None else self._reference_entry(i)

    def _explain_reference(self, i: int) -> Entry:
        explanation = self.interpreter.explain_reference([i])[0]
        return Entry.of(f"r{i}", self.workspace.reference.pixels(i), explanation)

    # ------------------------------------------------------------------ JSON
    def url(self, key: str, heat: str | None = None) -> str:
        """Where the page fetches image ``key``, plain or under the heat map of ``heat``."""
        query = f"heat={heat}&" if heat else ""
        return f"/api/image/{key}.png?{query}v={self.version}"

    def info(self) -> dict[str, Any]:
        """What the page shows about the index, and the limits it enforces."""
        recipe = self.workspace.recipe
        return {
            "dataset": recipe.get("dataset"),
            "arch": recipe.get("arch"),
            "target_layer": self.interpreter.target_layer,
            "n_reference": len(self.index),
            "n_boundaries": len(self.index.boundaries),
            "class_names": self.class_names,
            "input_shape": list(self.index.input_shape),
            "n_regions": self.n_regions,
            "page_size": PAGE_SIZE,
            "max_page": MAX_PAGE,
            "max_upload_bytes": MAX_UPLOAD_BYTES,
            "max_upload_pixels": MAX_UPLOAD_PIXELS,
            "version": self.version,
        }

    def _item(self, ref: int, heat: Entry) -> dict[str, Any]:
        """Reference image ``ref`` as the page shows it, under ``heat``'s heat map; ``score`` is
        the model's probability of ``heat``'s predicted class."""
        predicted = heat.explanation.predicted_class
        key = f"r{ref}"
        return {
            "key": key,
            "reference": ref,
            "score": float(self.index.logits[ref].float().softmax(0)[predicted]),
            "predicted_class": int(self.index.predictions[ref]),
            "label": int(self.labels[ref]),
            "image": self.url(key),
            "heatmap": self.url(key, heat.key) if heat.explanation.has_heatmap else None,
        }

    def _similar(self, entry: Entry, offset: int, limit: int) -> list[dict[str, Any]]:
        refs = entry.ranked[offset : offset + limit].tolist()
        distances = entry.distances[offset : offset + limit].tolist()
        return [
            {**self._item(ref, entry), "rank": offset + n + 1, "distance": d}
            for n, (ref, d) in enumerate(zip(refs, distances, strict=True))
        ]

    def explanation(
        self, key: str, offset: str | None = None, limit: str | None = None
    ) -> dict[str, Any]:
        """The interpretation of image ``key`` with one page of its similar images.

        Raises:
            NotFound: no such image.
            BadRequest: ``offset`` or ``limit`` is not a whole number in range.
        """
        start = _page(offset, "offset", 0, 0, MAX_OFFSET)
        count = _page(limit, "limit", PAGE_SIZE, 1, MAX_PAGE)
        with self._lock:
            entry = self._entry(key)
            e = entry.explanation
            similar = self._similar(entry, start, count)
            i = self._reference(key)
            summary = e.to_dict(top_k=0)
            summary.update(
                key=key,
                source="upload" if i is None else "reference",
                reference=i,
                label=None if i is None else int(self.labels[i]),
                n_reference=e.n_reference,
                has_heatmap=e.has_heatmap,
                image=self.url(key),
                heatmap=self.url(key, key) if e.has_heatmap else None,
                similar={
                    "offset": start,
                    "limit": count,
                    "total": len(entry.ranked),
                    "items": similar,
                },
            )
            return summary

    def upload(self, data: bytes) -> dict[str, Any]:
        """Explain an uploaded PNG or JPEG; keep it under a new key; return its explanation.

        Raises:
            BadRequest: the upload is too large or not a readable image.
        """
        pixels = decode_upload(data, self.index.input_shape)
        normalized = self.workspace.normalization(pixels).to(self.interpreter.device)
        with self._lock:
            key = f"u{secrets.token_urlsafe(12)}"
            self._uploads[key] = Entry.of(key, pixels, self.interpreter.explain(normalized))
            while len(self._uploads) > self.max_uploads:
                del self._uploads[next(iter(self._uploads))]
            return self.explanation(key)

    # ------------------------------------------------------------------ regions
    def _build_gallery(self, seed: int) -> None:
        try:
            regions = self.interpreter.regions(n_regions=self.n_regions, seed=seed)
        except Exception as exc:  # whatever it is, the page must hear of it
            self._gallery_error = f"no regions: {exc}"
            return
        cards: dict[int, dict[str, Any]] = {}
        with self._lock:
            inputs = regions.inputs.tolist()
            for v, (ref, e) in enumerate(zip(inputs, regions.regions, strict=True)):
                if ref in cards:
                    cards[ref]["regions"].append(v)
                    continue
                entry = Entry.of(f"r{ref}", self.workspace.reference.pixels(ref), e)
                covered = self._similar(entry, 0, COVERED_SHOWN + 1)
                cards[ref] = {
                    **self._item(ref, entry),
                    "regions": [v],
                    "class_name": self.class_names[e.predicted_class],
                    "representativeness": e.representativeness,
                    "delta": e.delta,
                    "covered": [item for item in covered if item["reference"] != ref][
                        :COVERED_SHOWN
                    ],
                }
        self._gallery = sorted(cards.values(), key=lambda card: -card["representativeness"])

    def wait_for_regions(self, timeout: float | None = None) -> bool:
        """Block until the thread computing the regions has ended; False on timeout."""
        self._regions_thread.join(timeout)
        return not self._regions_thread.is_alive()

    def regions(self) -> dict[str, Any]:
        """The gallery: ``status`` is ``computing``, ``ready`` or ``unavailable``."""
        if self._gallery_error is not None:
            return {"status": "unavailable", "message": self._gallery_error, "regions": []}
        if self._gallery is None:
            message = f"computing {self.n_regions} regions (k-means on the reference features)"
            return {"status": "computing", "message": message, "regions": []}
        return {"status": "ready", "message": None, "regions": self._gallery}

    # ------------------------------------------------------------------ images
    def _render_png(self, key: str, heat: str | None) -> bytes:
        """Image ``key`` as a PNG, or overlaid with the heat map of explanation ``heat``."""
        pixels = self._pixels(key)
        if heat is None:
            image = pixels[0] if pixels.shape[0] == 1 else pixels.permute(1, 2, 0)
            return encode_png(image.numpy())
        entry = self._entry(heat)
        if not entry.explanation.has_heatmap:
            raise NotFound(f"no heat map for {heat}: {entry.explanation.message}")
        inputs = self.workspace.normalization(pixels.unsqueeze(0)).to(self.interpreter.device)
        return encode_png(overlay(pixels, entry.explanation.heatmap(inputs)[0]))

    def png(self, key: str, heat: str | None = None) -> bytes:
        """Image ``key`` as a PNG, or overlaid with the heat map of explanation ``heat``.

        Raises:
            NotFound: no such image or explanation, or that explanation has no heat map.
        """
        with self._lock:
            return self._png(key, heat)
