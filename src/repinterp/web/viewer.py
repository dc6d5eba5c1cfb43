"""What the web viewer shows, without HTTP: explanations of reference and uploaded images
(`images`), their similar images ranked by ``Dist`` (the `METRIC` distance), heat maps as PNGs
(RI's, or a CAM baseline's reused on the same images), the comparison of the four and exports
(`exports`), and a gallery of distinct regions (`gallery`).

Explanations of reference images, PNGs, comparisons and exports are kept in per-viewer LRU
caches (``functools.lru_cache``); uploads in a store that forgets the oldest upload first.
Everything that runs the model holds the viewer's lock: pytorch-grad-cam hooks the model's
target layer while it computes, and must not see another request's forward pass.
"""

from __future__ import annotations

import functools
import secrets
import threading
from typing import Any

from torch import Tensor

from ..core.heatmap import channel_means, heatmaps, normalize_maps
from ..core.interpretation import METRIC_MEANINGS
from ..display.colours import COLORMAPS, DEFAULT_COLORMAP, SCALE, colorbar_css, colorize
from ..report.figures import FRACTION, CaseStudy
from ..store.regions_file import DEFAULT_REGIONS, DEFAULT_SEED
from ..workspace import Workspace
from .compare import METHODS, CamWeights
from .exports import COMPARE_K, MAX_COMPARE_K, case_study_of, comparison, export_file
from .gallery import Gallery
from .image_codec import MAX_UPLOAD_BYTES, MAX_UPLOAD_PIXELS, decode_upload, encode_png
from .images import CACHED_EXPLANATIONS, METRIC, Changed, Entry, Images
from .parameters import BadRequest, NotFound, choice, whole_number

__all__ = ["DEFAULT_OPACITY", "DEFAULT_REGIONS", "METRIC", "Changed", "Entry", "Viewer"]

PAGE_SIZE = 12
MAX_PAGE = 60
MAX_OFFSET = 10**9
DEFAULT_OPACITY = 55  # the overlay's opacity (%) on the page and in the exported figure


class Viewer:
    """The state of the viewer for one workspace; thread-safe.

    Its images and their explanations are `images`; its regions `gallery` (read or computed
    in a background thread started here: `stop` ends it early, and at exit it is called for
    you).

    Args:
        workspace: the fitted interpreter and its data.
        n_regions: k-means regions behind the gallery (at most ``|R|``).
        seed: seed of the k-means.
        max_uploads: uploaded images kept; the oldest is forgotten first.
        cache_size: PNG images kept in memory (the least recently used is dropped first).
    """

    def __init__(
        self,
        workspace: Workspace,
        n_regions: int = DEFAULT_REGIONS,
        seed: int = DEFAULT_SEED,
        max_uploads: int = 32,
        cache_size: int = 2048,
    ) -> None:
        self.workspace = workspace
        self.interpreter = workspace.interpreter
        self.index = self.interpreter.fitted_index
        self.class_names = [str(c) for c in workspace.reference.class_names]
        self.labels = workspace.reference.labels
        self.version = secrets.token_hex(4)
        self.cams = CamWeights(workspace)
        self._lock = threading.RLock()
        self.images = Images(workspace, self.version, max_uploads)
        self._compare = functools.lru_cache(maxsize=CACHED_EXPLANATIONS)(self._comparison)
        self._case_study = functools.lru_cache(maxsize=16)(self._study)
        self._png = functools.lru_cache(maxsize=cache_size)(self._render_png)
        self.gallery = Gallery(self.images, self._lock, n_regions, seed)
        self.n_regions = self.gallery.n_regions

    # ------------------------------------------------------------------ JSON
    def url(self, key: str, heat: str | None = None, method: str = "ri") -> str:
        """Where the page fetches image ``key``, or its heat map under explanation ``heat``
        (`Images.url`)."""
        return self.images.url(key, heat, method)

    def info(self) -> dict[str, Any]:
        """What the page shows about the index, and the limits it enforces."""
        recipe = self.workspace.recipe
        return {
            "dataset": recipe.get("dataset"),
            "arch": recipe.get("arch"),
            "target_layer": self.interpreter.target_layer,
            "n_reference": len(self.index),
            "n_boundaries": len(self.index.boundaries),
            "granularity": self.interpreter.granularity,
            "granularity_text": self.interpreter.granularity_text,
            "sub_labels": self.workspace.sub_labels is not None,
            "class_names": self.class_names,
            "input_shape": list(self.index.input_shape),
            "n_regions": self.n_regions,
            "page_size": PAGE_SIZE,
            "max_page": MAX_PAGE,
            "max_upload_bytes": MAX_UPLOAD_BYTES,
            "max_upload_pixels": MAX_UPLOAD_PIXELS,
            "methods": METHODS,
            "compare_k": COMPARE_K,
            "max_compare_k": MAX_COMPARE_K,
            "kept_fraction": FRACTION,
            "metric": METRIC,
            "metric_meaning": METRIC_MEANINGS[METRIC],
            "colormaps": {name: colorbar_css(name) for name in COLORMAPS},
            "default_colormap": DEFAULT_COLORMAP,
            "default_opacity": DEFAULT_OPACITY,
            "scale": SCALE,
            "version": self.version,
        }

    def explanation(
        self, key: str, offset: str | None = None, limit: str | None = None
    ) -> dict[str, Any]:
        """The interpretation of image ``key`` with one page of its similar images.

        Raises:
            NotFound: no such image.
            BadRequest: ``offset`` or ``limit`` is not a whole number in range.
            Changed: a reference image's file changed since the index was fitted.
        """
        start = whole_number(offset, "offset", 0, 0, MAX_OFFSET)
        count = whole_number(limit, "limit", PAGE_SIZE, 1, MAX_PAGE)
        with self._lock:
            entry = self.images.entry(key)
            summary = self.images.summary(entry)
            summary.update(
                image=self.url(key),
                heatmap=self.url(key, key) if entry.explanation.has_heatmap else None,
                similar={
                    "offset": start,
                    "limit": count,
                    "total": len(entry.ranked),
                    "input_left_out": summary["source"] == "reference",
                    "items": self.images.similar(entry, start, count),
                },
            )
            return summary

    def upload(self, data: bytes) -> dict[str, Any]:
        """Explain an uploaded PNG or JPEG; keep it under a new key; return its explanation.

        Raises:
            BadRequest: the upload is too large or not a readable image.
        """
        pixels = decode_upload(data, self.index.input_shape)
        with self._lock:
            return self.explanation(self.images.add_upload(pixels))

    # ------------------------------------------------------------------ heat maps and images
    def _maps(self, heat: str, method: str, pixels: Tensor, contrast: int | None = None) -> Tensor:
        """N x H x W heat maps of explanation ``heat`` on N images (pixels), by ``method``; with
        ``contrast``, RI's contrastive map of ``heat``'s predicted class and that class (beyond
        the paper: its channel weights at ``heat``'s input, reused on the images)."""
        entry = self.images.entry(heat)
        e = entry.explanation
        inputs = self.images.inputs
        if contrast is not None:
            if contrast == e.predicted_class:
                raise BadRequest(
                    f"{heat} is predicted class {contrast}: its map is its polytope's (no contrast)"
                )
            b = self.interpreter.contrastive_boundaries(inputs(entry.pixels[None]), contrast)
            size = tuple(pixels.shape[-2:])
            return heatmaps(self.interpreter.features(inputs(pixels)), channel_means(b), size)
        if method == "ri":
            if not e.has_heatmap:
                raise NotFound(f"no heat map for {heat}: {e.message}")
            return e.heatmap(inputs(pixels)).cpu()
        return self.cams.maps(method, heat, entry.pixels, e.predicted_class, pixels)

    def _render_png(
        self, key: str, heat: str | None, method: str, cmap: str, contrast: int | None
    ) -> bytes:
        pixels = self.images.pixels(key)
        if heat is None:
            image = pixels[0] if pixels.shape[0] == 1 else pixels.permute(1, 2, 0)
            return encode_png(image.numpy())
        heat_map = self._maps(heat, method, pixels.unsqueeze(0), contrast)[0].cpu()
        return encode_png(colorize(normalize_maps(heat_map), cmap))

    def png(
        self,
        key: str,
        heat: str | None = None,
        method: str | None = None,
        cmap: str | None = None,
        contrast: str | None = None,
    ) -> bytes:
        """Image ``key`` as a PNG, or, with ``heat``, the heat map of explanation ``heat`` on it
        in colour (per-image min-max; the page lays it over the image or beside it).

        Args:
            key: the image.
            heat: the explanation whose heat map is drawn; None for the image itself.
            method: ``ri`` (default), or a CAM (see `METHODS`)
                whose channel weights on image ``heat`` are reused on image ``key``.
            cmap: one of `COLORMAPS` (default ``inferno``).
            contrast: a class other than ``heat``'s predicted one: RI's contrastive map of the
                two classes instead (beyond the paper; see
                [`contrastive_heatmap`][repinterp.interpreter.RepresentativeInterpreter.contrastive_heatmap]).

        Raises:
            NotFound: no such image or explanation, or RI's heat map of it does not exist.
            BadRequest: an unknown method or colormap, or a bad contrast class.
            Changed: a reference image's file changed since the index was fitted.
        """
        method = choice(method, "method", tuple(METHODS), "ri")
        cmap = choice(cmap, "colormap", COLORMAPS, DEFAULT_COLORMAP)
        n_classes = self.index.n_classes
        c = None if contrast is None else whole_number(contrast, "contrast", 0, 0, n_classes - 1)
        if c is not None and (heat is None or method != "ri"):
            raise BadRequest("contrast draws RI's map of an explanation: give heat=KEY, no method")
        with self._lock:
            for name in (key, heat) if heat else (key,):
                self.images.known(name)
            return self._png(key, heat, method, cmap, c)

    # ------------------------------------------------------------------ compare and export
    def compare(self, key: str, method: str | None, k: str | None = None) -> dict[str, Any]:
        """One method's heat maps of image ``key`` and its ``k`` most similar images (RI's
        ranking), each with the score of the predicted class when only the ``FRACTION``
        hottest pixels are kept (``masked_score``; `exports.comparison`).

        Raises:
            NotFound: no such image.
            BadRequest: an unknown method or a bad ``k`` (1 to ``MAX_COMPARE_K``).
        """
        method = choice(method, "method", tuple(METHODS), "ri")
        count = whole_number(k, "k", COMPARE_K, 1, MAX_COMPARE_K)
        with self._lock:
            self.images.known(key)
            return self._compare(key, method, count)

    def _comparison(self, key: str, method: str, k: int) -> dict[str, Any]:
        return comparison(self.images, self._maps, self.class_names, key, method, k)

    def _study(self, key: str) -> CaseStudy:
        return case_study_of(self.images, self.class_names, key)

    def export(
        self, key: str, kind: str, opacity: str | None = None, cmap: str | None = None
    ) -> bytes:
        """The explanation of image ``key`` as a file: ``png``, the case-study figure of the
        command line (the input and its ``EXPORT_K`` most similar images with their
        `METRIC` distances, heat maps, scores, colour bar and legend), drawn as the page
        shows it; ``json``, its numbers (`exports.export_file`).

        Args:
            key: the image.
            kind: ``png`` or ``json``.
            opacity: the overlay's opacity in percent, 0 to 100 (default
                `DEFAULT_OPACITY`, the page's).
            cmap: one of `COLORMAPS` (default ``inferno``).

        Raises:
            NotFound: no such image, or another kind.
            BadRequest: a bad opacity or an unknown colormap.
        """
        if kind not in ("png", "json"):
            raise NotFound(f"no export as {kind!r}: png or json")
        percent = whole_number(opacity, "opacity", DEFAULT_OPACITY, 0, 100)
        cmap = choice(cmap, "colormap", COLORMAPS, DEFAULT_COLORMAP)
        with self._lock:
            entry = self.images.entry(key)
            study = self._case_study(key)
            return export_file(self.images, entry, study, kind, percent / 100, cmap)

    # ------------------------------------------------------------------ regions
    def stop(self, timeout: float | None = None) -> bool:
        """Stop the thread computing the regions (`Gallery.stop`); False on timeout."""
        return self.gallery.stop(timeout)

    def wait_for_regions(self, timeout: float | None = None) -> bool:
        """Block until the thread computing the regions has ended; False on timeout."""
        return self.gallery.wait_for_regions(timeout)

    def regions(self) -> dict[str, Any]:
        """The gallery (`Gallery.regions`)."""
        return self.gallery.regions()
