"""What the web viewer shows, without HTTP: explanations of reference and uploaded images, their
similar images ranked by ``Dist`` (the `METRIC` distance), heat maps as PNGs (RI's, or a
CAM baseline's reused on the same images), the comparison of the four, exports, and a gallery of
distinct regions.

Images are named by keys, never by paths: ``r<i>`` is reference image ``i``, ``u<token>`` an
upload (kept in a small bounded store under a random token). The explanation of an image has the
same key as the image. A reference image of an image folder is read from its file, which must
still be the one the index was fitted on (its size and SHA-256).

Explanations of reference images, PNGs, comparisons and exports are kept in per-viewer LRU
caches (``functools.lru_cache``); uploads in a store that forgets the oldest upload first.
Everything that runs the model holds the viewer's lock: pytorch-grad-cam hooks the model's
target layer while it computes, and must not see another request's forward pass.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import io
import json
import logging
import secrets
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.heatmap import channel_means, heatmaps, normalize_maps
from ..core.interpretation import METRIC_MEANINGS, Interpretation
from ..core.regions import Polytope, RegionSet, distinct_polytopes
from ..data.datasets import ImageFolderSet
from ..data.image_files import read_image
from ..display.colours import COLORMAPS, DEFAULT_COLORMAP, SCALE, colorbar_css, colorize
from ..evaluation.groupings import region_groups
from ..report.figures import (
    FRACTION,
    CaseStudy,
    case_study,
    class_scores,
    masked_class_scores,
    save_case_study_figure,
)
from ..store.regions_file import (
    DEFAULT_REGIONS,
    DEFAULT_SEED,
    REGIONS_FILE,
    load_regions,
    save_regions,
)
from ..strategies.model import Strategy
from ..workspace import Workspace
from .compare import METHODS, CamWeights
from .image_codec import MAX_UPLOAD_BYTES, MAX_UPLOAD_PIXELS, decode_upload, encode_png
from .parameters import BadRequest, NotFound, choice, reference_index, whole_number

__all__ = ["DEFAULT_OPACITY", "DEFAULT_REGIONS", "METRIC", "Changed", "Entry", "Viewer"]

logger = logging.getLogger(__name__)
PAGE_SIZE = 12
MAX_PAGE = 60
MAX_OFFSET = 10**9
COVERED_SHOWN = 4
CACHED_EXPLANATIONS = 256
COMPARE_K = 4
MAX_COMPARE_K = 8
EXPORT_K = 8
DEFAULT_OPACITY = 55  # the overlay's opacity (%) on the page and in the exported figure
METRIC = "semantic"  # the distance that ranks similar images: the paper's Dist (§5.2)

# Viewers whose regions thread may still run: stopped and joined when the interpreter exits, as a
# daemon thread killed inside torch's native code aborts the process (exit 134).
_RUNNING: weakref.WeakSet[Viewer] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for viewer in list(_RUNNING):
        viewer.stop()


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


class Viewer:
    """The state of the viewer for one workspace; thread-safe.

    Regions (k-means on the reference feature maps) are read from the index folder when it
    keeps them for these settings (see `regions_file`), else computed
    once and kept there; either in a background thread started here. Until they are ready the
    gallery says so. `stop` ends the thread early (at exit it is called for you).

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
        self.index = self.interpreter.index
        self.class_names = [str(c) for c in workspace.reference.class_names]
        self.labels = workspace.reference.labels
        self.version = secrets.token_hex(4)
        self.cams = CamWeights(workspace)
        self._lock = threading.RLock()
        self.max_uploads = max_uploads
        self._uploads: dict[str, Entry] = {}  # oldest first
        cached = functools.lru_cache(maxsize=CACHED_EXPLANATIONS)
        self._reference_entry = cached(self._explain_reference)
        self._compare = cached(self._comparison)
        self._case_study = functools.lru_cache(maxsize=16)(self._study)
        self._png = functools.lru_cache(maxsize=cache_size)(self._render_png)
        self._gallery: dict[str, Any] | None = None
        self._gallery_error: str | None = None
        self.n_regions = min(n_regions, len(self.index))
        self.folder = workspace.folder  # where computed regions are kept, as it is now
        self._computing = f"computing {self.n_regions} regions (k-means on the reference features)"
        kept = f"reading the {self.n_regions} regions kept with the index"
        self._progress = kept if REGIONS_FILE in self.index.files else self._computing
        self._stopping = threading.Event()
        self._regions_thread = threading.Thread(
            target=self._build_gallery, args=(seed,), name="repinterp-regions", daemon=True
        )
        _RUNNING.add(self)
        self._regions_thread.start()

    # ------------------------------------------------------------------ keys and entries
    def _reference(self, key: str) -> int | None:
        return reference_index(key, len(self.index))

    def _upload(self, key: str) -> Entry:
        entry = self._uploads.get(key)
        if entry is None:
            raise NotFound(f"no upload {key!r} (unknown, or forgotten after newer uploads)")
        return entry

    def _reference_pixels(self, i: int) -> Tensor:
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

    def _pixels(self, key: str) -> Tensor:
        i = self._reference(key)
        return self._upload(key).pixels if i is None else self._reference_pixels(i)

    def _known(self, key: str) -> None:
        """Raise `NotFound` unless ``key`` names a reference image or an upload still
        kept; asked before a cache is, which may still hold what a forgotten upload gave."""
        if self._reference(key) is None:
            self._upload(key)

    def _entry(self, key: str) -> Entry:
        i = self._reference(key)
        return self._upload(key) if i is None else self._reference_entry(i)

    def _explain_reference(self, i: int) -> Entry:
        explanation = self.interpreter.explain_reference([i])[0]
        return Entry.of(f"r{i}", self._reference_pixels(i), explanation, own=i)

    def _inputs(self, pixels: Tensor) -> Tensor:
        return self.workspace.normalization(pixels).to(self.interpreter.device)

    def _with_references(self, entry: Entry, refs: list[int]) -> Tensor:
        """The entry's pixels, then those of reference images ``refs``: (1 + k) x C x H x W."""
        images = [entry.pixels] + [self._reference_pixels(ref) for ref in refs]
        return torch.stack(images)

    # ------------------------------------------------------------------ JSON
    def url(self, key: str, heat: str | None = None, method: str = "ri") -> str:
        """Where the page fetches image ``key``, or its heat map under explanation ``heat``
        (drawn by ``method``: RI's, or a CAM's weights of ``heat`` reused)."""
        query = f"heat={heat}&" if heat else ""
        query += f"method={method}&" if heat and method != "ri" else ""
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

    def _item(self, ref: int, heat: Entry, method: str = "ri") -> dict[str, Any]:
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

    def _similar(self, entry: Entry, offset: int, limit: int) -> list[dict[str, Any]]:
        refs = entry.ranked[offset : offset + limit].tolist()
        distances = entry.distances[offset : offset + limit].tolist()
        return [
            {**self._item(ref, entry), "rank": offset + n + 1, "distance": d}
            for n, (ref, d) in enumerate(zip(refs, distances, strict=True))
        ]

    def _summary(self, entry: Entry) -> dict[str, Any]:
        e = entry.explanation
        i = self._reference(entry.key)
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
            entry = self._entry(key)
            summary = self._summary(entry)
            summary.update(
                image=self.url(key),
                heatmap=self.url(key, key) if entry.explanation.has_heatmap else None,
                similar={
                    "offset": start,
                    "limit": count,
                    "total": len(entry.ranked),
                    "input_left_out": summary["source"] == "reference",
                    "items": self._similar(entry, start, count),
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
            key = f"u{secrets.token_urlsafe(12)}"
            explanation = self.interpreter.explain(self._inputs(pixels))
            self._uploads[key] = Entry.of(key, pixels, explanation)
            while len(self._uploads) > self.max_uploads:
                del self._uploads[next(iter(self._uploads))]
            return self.explanation(key)

    # ------------------------------------------------------------------ heat maps and images
    def _maps(self, heat: str, method: str, pixels: Tensor, contrast: int | None = None) -> Tensor:
        """N x H x W heat maps of explanation ``heat`` on N images (pixels), by ``method``; with
        ``contrast``, RI's contrastive map of ``heat``'s predicted class and that class (beyond
        the paper: its channel weights at ``heat``'s input, reused on the images)."""
        entry = self._entry(heat)
        e = entry.explanation
        if contrast is not None:
            if contrast == e.predicted_class:
                raise BadRequest(
                    f"{heat} is predicted class {contrast}: its map is its polytope's (no contrast)"
                )
            b = self.interpreter.contrastive_boundaries(self._inputs(entry.pixels[None]), contrast)
            size = tuple(pixels.shape[-2:])
            return heatmaps(self.interpreter.features(self._inputs(pixels)), channel_means(b), size)
        if method == "ri":
            if not e.has_heatmap:
                raise NotFound(f"no heat map for {heat}: {e.message}")
            return e.heatmap(self._inputs(pixels)).cpu()
        return self.cams.maps(method, heat, entry.pixels, e.predicted_class, pixels)

    def _render_png(
        self, key: str, heat: str | None, method: str, cmap: str, contrast: int | None
    ) -> bytes:
        pixels = self._pixels(key)
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
                self._known(name)
            return self._png(key, heat, method, cmap, c)

    # ------------------------------------------------------------------ compare and export
    def compare(self, key: str, method: str | None, k: str | None = None) -> dict[str, Any]:
        """One method's heat maps of image ``key`` and its ``k`` most similar images (RI's
        ranking), each with the score of the predicted class when only the ``FRACTION``
        hottest pixels are kept (``masked_score``).

        Raises:
            NotFound: no such image.
            BadRequest: an unknown method or a bad ``k`` (1 to ``MAX_COMPARE_K``).
        """
        method = choice(method, "method", tuple(METHODS), "ri")
        count = whole_number(k, "k", COMPARE_K, 1, MAX_COMPARE_K)
        with self._lock:
            self._known(key)
            return self._compare(key, method, count)

    def _comparison(self, key: str, method: str, k: int) -> dict[str, Any]:
        start = time.perf_counter()
        entry = self._entry(key)
        e = entry.explanation
        refs = entry.ranked[:k].tolist()
        pixels = self._with_references(entry, refs)
        scores = class_scores(self.interpreter, self._inputs(pixels), e.predicted_class)
        drawn = method != "ri" or e.has_heatmap
        masked: list[float | None] = [None] * len(scores)
        if drawn:
            maps = self._maps(key, method, pixels)
            masked = masked_class_scores(
                self.interpreter, pixels, maps, self.workspace.normalization, e.predicted_class
            )
        own = self._reference(key)
        items = [
            {
                "key": key,
                "reference": own,
                "rank": 0,
                "score": scores[0],
                "masked_score": masked[0],
                "image": self.url(key),
                "heatmap": self.url(key, key, method) if drawn else None,
            }
        ]
        for n, ref in enumerate(refs):
            item = self._item(ref, entry, method)
            items.append(
                {**item, "rank": n + 1, "score": scores[n + 1], "masked_score": masked[n + 1]}
            )
        return {
            "key": key,
            "method": method,
            "name": METHODS[method],
            "predicted_class": e.predicted_class,
            "class_name": self.class_names[e.predicted_class],
            "kept_fraction": FRACTION,
            "message": None if drawn else e.message,
            "mean_masked_score": sum(masked) / len(masked) if drawn else None,
            "seconds": time.perf_counter() - start,
            "items": items,
        }

    def _study(self, key: str) -> CaseStudy:
        entry = self._entry(key)
        refs = entry.ranked[:EXPORT_K].tolist()
        titles = ["input"] + [self.workspace.reference_name(ref) for ref in refs]
        class_name = self.class_names[entry.explanation.predicted_class]
        return case_study(
            entry.explanation,
            self._with_references(entry, refs),
            titles,
            self.workspace.normalization,
            class_name,
            references=refs,
            metric=METRIC,
        )

    def export(
        self, key: str, kind: str, opacity: str | None = None, cmap: str | None = None
    ) -> bytes:
        """The explanation of image ``key`` as a file: ``png``, the case-study figure of the
        command line (the input and its ``EXPORT_K`` most similar images with their
        `METRIC` distances, heat maps, scores, colour bar and legend), drawn as the page
        shows it; ``json``, its numbers.

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
            entry = self._entry(key)
            study = self._case_study(key)
            if kind == "png":
                buffer = io.BytesIO()
                title = entry.key if entry.key[0] == "u" else f"reference image {entry.key[1:]}"
                save_case_study_figure(study, buffer, title, cmap, percent / 100)
                return buffer.getvalue()
            summary = self._summary(entry)
            similar = self._similar(entry, 0, EXPORT_K)
            masked = study.masked_scores or [None] * len(study.scores)
            for item, score in zip(similar, masked[1:], strict=True):
                for url in ("image", "heatmap"):
                    del item[url]
                item["masked_score"] = score
            summary.update(
                input_masked_score=masked[0],
                kept_fraction=FRACTION,
                similar_total=len(entry.ranked),
                similar=similar,
            )
            return (json.dumps(summary, indent=2) + "\n").encode()

    # ------------------------------------------------------------------ regions
    def _card(self, polytope: Polytope) -> dict[str, Any]:
        ref, e = polytope.inputs[0], polytope.explanation
        entry = Entry.of(f"r{ref}", self._reference_pixels(ref), e, own=ref)
        return {
            **self._item(ref, entry),
            "regions": polytope.regions,
            "inputs": polytope.inputs,
            "input_names": [self.workspace.reference_name(ref) for ref in polytope.inputs],
            "class_name": self.class_names[e.predicted_class],
            "representativeness": e.representativeness,
            "interpreted": polytope.interpreted,
            "sub_labels": self.workspace.composition(polytope.members),
            "delta": e.delta,
            "boundaries": sorted(e.boundary_ids.tolist()),
            "covered": self._similar(entry, 0, COVERED_SHOWN),
        }

    def _strategy_card(self, strategy: Strategy) -> dict[str, Any]:
        """A strategy of a ``granularity="strategy"`` index as the page's panel shows it: its
        input (the member nearest its centre) under its polytope's heat map, its audit, and
        the next members under the same map."""
        ref = strategy.input
        entry = Entry.of(f"r{ref}", self._reference_pixels(ref), strategy.interpretation, own=ref)
        audit = strategy.audit
        members = [int(m) for m in strategy.members[1 : COVERED_SHOWN + 1]]
        return {
            **self._item(ref, entry),
            "strategy": strategy.id,
            "class_name": self.class_names[strategy.predicted_class],
            "size": len(strategy.members),
            "rank": audit.rank,
            "score": audit.score,
            "flagged": audit.flagged,
            "main": audit.main,
            "reasons": audit.reasons,
            "inside": strategy.inside,
            "others_inside": strategy.others_inside,
            "sub_labels": self.workspace.composition(strategy.members.tolist()),
            "members": [self._item(m, entry) for m in members],
        }

    def _regions(self, seed: int) -> RegionSet:
        """The regions kept in the index folder for these settings, else k-means (then kept
        there, when the folder can be written)."""
        try:
            regions = load_regions(self.interpreter, self.n_regions, seed)
        except ValueError as exc:  # never used: computed again, and replaced
            logger.warning("%s: the regions are computed again", exc)
            regions = None
        if regions is not None:
            return regions
        self._progress = self._computing
        regions = self.interpreter.regions(n_regions=self.n_regions, seed=seed)
        if self.folder is not None:
            try:
                save_regions(regions, self.folder, seed)
            except (OSError, ValueError) as exc:  # OutputError, IndexLoadError among them
                logger.warning("the regions are not kept in %s: %s", self.folder, exc)
        return regions

    def _build_gallery(self, seed: int) -> None:
        try:
            regions = self._regions(seed)
            polytopes = distinct_polytopes(regions)
            finds = region_groups(regions).sentence()
            strategies = []
            if self.interpreter.config.granularity.has_strategies:
                strategies = self.interpreter.strategies(self.workspace.reference)
        except Exception as exc:  # whatever it is, the page must hear of it
            self._gallery_error = f"no regions: {exc}"
            return
        with self._lock:
            cards = []
            for polytope in polytopes:
                if self._stopping.is_set():
                    self._gallery_error = "no regions: the viewer stopped"
                    return
                cards.append(self._card(polytope))
            panel = [self._strategy_card(strategy) for strategy in strategies]
            self._gallery = {"cards": cards, "finds": finds, "strategies": panel}

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the thread computing the regions at its next step (the k-means itself runs to
        its end) and wait for it; False on timeout."""
        self._stopping.set()
        return self.wait_for_regions(timeout)

    def wait_for_regions(self, timeout: float | None = None) -> bool:
        """Block until the thread computing the regions has ended; False on timeout."""
        self._regions_thread.join(timeout)
        return not self._regions_thread.is_alive()

    def regions(self) -> dict[str, Any]:
        """The gallery: ``status`` is ``computing``, ``ready`` or ``unavailable``; one card per
        distinct polytope (see `repinterp.core.regions.distinct_polytopes`); when ready,
        ``finds`` says in one sentence what RI finds over the reference set
        (`repinterp.evaluation.groupings.GroupStats.sentence`) and, for an index of
        ``granularity="strategy"``, ``strategies`` lists its strategies in the audit's order
        (`repinterp.strategies.model`; empty otherwise)."""
        done = {"n_regions": self.n_regions, "n_reference": len(self.index)}
        if self._gallery_error is not None:
            return {"status": "unavailable", "message": self._gallery_error, **done, "regions": []}
        if self._gallery is None:
            return {"status": "computing", "message": self._progress, **done, "regions": []}
        gallery = self._gallery
        return {
            "status": "ready",
            "message": None,
            **done,
            "regions": gallery["cards"],
            "finds": gallery["finds"],
            "strategies": gallery["strategies"],
        }
