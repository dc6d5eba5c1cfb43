"""Explanations written as files: for each image a case-study PNG and a JSON summary, and with a
contrast class its contrastive map (`explain_to_files`: what ``repinterp explain``, ``report``
and ``demo`` write)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

    from ..workspace import Workspace

__all__ = ["explain_to_files"]


def explain_to_files(
    workspace: Workspace,
    pixels: Tensor,
    names: list[str],
    out: Path,
    top_k: int,
    progress: bool = False,
    own: list[int | None] | None = None,
    metric: str = "semantic",
    contrast: int | None = None,
    extra: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Explain images (N x C x H x W in [0, 1]); write a case-study PNG and a JSON each, the
    pair replacing any earlier one together (`write_outputs`: a failure while writing leaves
    the earlier pair as it was).

    Args:
        workspace: the index with its model and data.
        pixels: the images, N x C x H x W in [0, 1].
        names: one file name (without extension) per image; names whose files would share a
            file (``a`` with ``contrast`` 2 and ``a-vs-2``, two alike) or pass 255 bytes are
            made distinct (`distinct_names`), as the entries say.
        out: the folder written into (claimed by the caller).
        top_k: similar reference images shown per image.
        progress: show a bar over the figures.
        own: per image, its reference index when it is a reference image (left out of its own
            similar images, as the viewer does), else None.
        metric: the distance that ranks the similar images (see ``Interpretation.similar``),
            shown in the figure and named in the JSON.
        contrast: a class ``c'``: each image predicted another class also gets a figure of
            its contrastive map against ``c'`` (see
            [`contrastive_heatmap`][repinterp.interpreter.RepresentativeInterpreter.contrastive_heatmap]),
            ``NAME-vs-C.png`` (``C`` the class's index), which the JSON's ``contrast`` names.
        extra: per image, more fields of its JSON summary (written with it, once).

    Returns:
        One report entry per image (see `write_report`).

    Raises:
        IsADirectoryError: a folder is where one of the files goes (before any is explained).
    """
    import json

    import torch
    from tqdm.auto import tqdm

    from ..store.files import refuse_folders
    from ..store.outputs import distinct_names, write_outputs
    from .figures import case_study, save_case_study_figure

    def files_of(name: str) -> list[str]:
        vs = [] if contrast is None else [_contrast_figure(name, contrast)]
        return [f"{name}.png", f"{name}.json", *vs]

    names = distinct_names(names, files_of)
    refuse_folders(out / file for name in names for file in files_of(name))
    ri = workspace.interpreter
    normalize = workspace.normalization
    names_of_classes = ri.class_names or []
    entries = []
    explanations = ri.explain_batch(normalize(pixels).to(ri.device))
    n = len(names)
    done = zip(names, pixels, explanations, own or [None] * n, extra or [{}] * n, strict=True)
    for name, image, e, me, more in tqdm(done, total=n, desc="figures", disable=not progress):
        similar = [i for i in e.similar(top_k + 1, metric).tolist() if i != me][:top_k]
        shown = torch.cat([image.unsqueeze(0), workspace.reference_pixels(similar)])
        class_name = (
            names_of_classes[e.predicted_class] if names_of_classes else str(e.predicted_class)
        )
        titles = ["input"] + [workspace.reference_name(i) for i in similar]
        study = case_study(
            e, shown, titles, normalize, class_name, references=similar, metric=metric
        )
        figure = io.BytesIO()
        save_case_study_figure(study, figure, name)
        summary = e.to_dict(top_k=top_k + 1, metric=metric)
        summary["similar"] = [
            {**s, "name": workspace.reference_name(s["reference"])}
            for s in summary["similar"]
            if s["reference"] != me
        ][:top_k]
        summary["input"] = name
        summary["distance_percentile"] = e.distance_percentile()
        if me is not None:
            summary["reference"], summary["reference_name"] = me, workspace.reference_name(me)
        if study.masked_scores is not None:
            summary["masked_scores"] = dict(zip(study.titles, study.masked_scores, strict=True))
        files = {out / f"{name}.png": figure.getvalue()}
        if contrast is not None:
            c = e.predicted_class
            summary["contrast"] = _contrast(workspace, image, c, contrast, name, out, files)
        summary.update(more)
        files[out / f"{name}.json"] = (json.dumps(summary, indent=2) + "\n").encode()
        write_outputs(files)
        entries.append(
            {"name": name, "figure": f"{name}.png", "json": f"{name}.json", "summary": summary}
        )
    return entries


def _contrast(
    workspace: Workspace,
    pixels: Tensor,
    predicted: int,
    contrast: int,
    name: str,
    out: Path,
    files: dict[Path, bytes],
) -> dict[str, Any]:
    """The contrastive map of one image (C x H x W in [0, 1]) against class ``contrast``, drawn
    as ``NAME-vs-C.png`` into ``files`` (path: bytes, written with the image's other files)
    unless the image is predicted ``contrast``: its JSON summary."""
    from .figures import contrastive_case_study, save_case_study_figure

    names = workspace.interpreter.class_names or [str(c) for c in range(contrast + 1)]
    summary: dict[str, Any] = {"class": contrast, "class_name": names[contrast]}
    if predicted == contrast:
        summary["message"] = (
            "the image is predicted this class: its map is its interpretation's own"
        )
        return summary
    study = contrastive_case_study(
        workspace.interpreter, pixels, workspace.normalization, contrast, names[predicted]
    )
    figure = _contrast_figure(name, contrast)
    drawn = io.BytesIO()
    save_case_study_figure(study, drawn, f"{name}, contrast with {names[contrast]!r}")
    files[out / figure] = drawn.getvalue()
    summary.update(figure=figure, masked_score=study.masked_scores[0])
    return summary


def _contrast_figure(name: str, contrast: int) -> str:
    return f"{name}-vs-{contrast}.png"
