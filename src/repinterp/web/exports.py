"""What the web viewer computes for a comparison and an export: one method's heat maps of an
image and its most similar images with the scores when only their hottest pixels are kept
(`comparison`), and the command line's case-study figure, or its numbers, of an explanation
(`case_study_of`, `export_file`)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from typing import Any

from torch import Tensor

from ..report.figures import (
    FRACTION,
    CaseStudy,
    case_study,
    class_scores,
    masked_class_scores,
    save_case_study_figure,
)
from .compare import METHODS
from .images import METRIC, Entry, Images

__all__ = ["COMPARE_K", "EXPORT_K", "MAX_COMPARE_K", "case_study_of", "comparison", "export_file"]

COMPARE_K = 4
MAX_COMPARE_K = 8
EXPORT_K = 8

# (explanation key, method, N x C x H x W images in [0, 1]) -> N x H x W heat maps
DrawMaps = Callable[[str, str, Tensor], Tensor]


def comparison(
    images: Images, maps: DrawMaps, class_names: list[str], key: str, method: str, k: int
) -> dict[str, Any]:
    """Method ``method``'s heat maps (drawn by ``maps``) of image ``key`` and its ``k`` most
    similar images (RI's ranking), each with the score of the predicted class when only the
    ``FRACTION`` hottest pixels are kept (``masked_score``)."""
    start = time.perf_counter()
    entry = images.entry(key)
    e = entry.explanation
    refs = entry.ranked[:k].tolist()
    pixels = images.with_references(entry, refs)
    interpreter = images.interpreter
    scores = class_scores(interpreter, images.inputs(pixels), e.predicted_class)
    drawn = method != "ri" or e.has_heatmap
    masked: list[float | None] = [None] * len(scores)
    if drawn:
        heat = maps(key, method, pixels)
        masked = masked_class_scores(
            interpreter, pixels, heat, images.workspace.normalization, e.predicted_class
        )
    own = images.reference(key)
    items = [
        {
            "key": key,
            "reference": own,
            "rank": 0,
            "score": scores[0],
            "masked_score": masked[0],
            "image": images.url(key),
            "heatmap": images.url(key, key, method) if drawn else None,
        }
    ]
    for n, ref in enumerate(refs):
        item = images.item(ref, entry, method)
        items.append({**item, "rank": n + 1, "score": scores[n + 1], "masked_score": masked[n + 1]})
    return {
        "key": key,
        "method": method,
        "name": METHODS[method],
        "predicted_class": e.predicted_class,
        "class_name": class_names[e.predicted_class],
        "kept_fraction": FRACTION,
        "message": None if drawn else e.message,
        "mean_masked_score": sum(masked) / len(masked) if drawn else None,
        "seconds": time.perf_counter() - start,
        "items": items,
    }


def case_study_of(images: Images, class_names: list[str], key: str) -> CaseStudy:
    """The case study of image ``key``: the input and its ``EXPORT_K`` most similar images."""
    entry = images.entry(key)
    refs = entry.ranked[:EXPORT_K].tolist()
    titles = ["input"] + [images.workspace.reference_name(ref) for ref in refs]
    class_name = class_names[entry.explanation.predicted_class]
    return case_study(
        entry.explanation,
        images.with_references(entry, refs),
        titles,
        images.workspace.normalization,
        class_name,
        references=refs,
        metric=METRIC,
    )


def export_file(
    images: Images, entry: Entry, study: CaseStudy, kind: str, opacity: float, cmap: str
) -> bytes:
    """The explanation ``entry`` as a file: ``png``, its case-study figure (``study``) drawn
    with the overlay's ``opacity`` (0 to 1) and colormap ``cmap``; ``json``, its numbers."""
    if kind == "png":
        buffer = io.BytesIO()
        title = entry.key if entry.key[0] == "u" else f"reference image {entry.key[1:]}"
        save_case_study_figure(study, buffer, title, cmap, opacity)
        return buffer.getvalue()
    summary = images.summary(entry)
    similar = images.similar(entry, 0, EXPORT_K)
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
