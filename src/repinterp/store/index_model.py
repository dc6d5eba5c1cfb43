"""What an index records of the model that made it, and the checks that a saved index is
opened with that model: the same weights, graph, target layer and granularity, the transform
of ``repinterp fit`` given back, and the fitted granularity restored.

[`RepresentativeInterpreter`][repinterp.interpreter.RepresentativeInterpreter]'s ``save`` and
``load`` call these; the folder format itself is [`index_folder`][repinterp.store.index_folder].
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from torch import nn

from ..core.config import FitConfig
from ..core.granularities import granularity, granularity_class
from ..core.granularity import Granularity
from ..core.reference_index import ReferenceIndex
from ..data.datasets import ImageTransform
from ..models.fingerprint import model_fingerprint
from ..runtime.version import VERSION
from .index_folder import IndexLoadError, load_index, save_index

__all__ = [
    "check_model",
    "check_opening",
    "open_saved",
    "record_model",
    "restore_granularity",
    "save_with_model",
    "saved_transform",
]


def record_model(index: ReferenceIndex, model: nn.Module, graph: str, transform: Any) -> None:
    """Record in ``index.meta`` the fingerprints of ``model``'s weights and of its traced
    ``graph`` (so that ``check_model`` can refuse another model), and ``transform`` when it is
    an `ImageTransform` (so that ``saved_transform`` gives it back)."""
    index.meta["model_fingerprint"] = model_fingerprint(model)
    index.meta["graph_fingerprint"] = graph
    if isinstance(transform, ImageTransform):
        index.meta["transform"] = transform.record()


def check_opening(
    index: ReferenceIndex, path: str | Path, model: nn.Module, granularity: str | None
) -> str:
    """The target layer of the index at ``path``, checked before ``model`` is split there.

    Args:
        index: the index loaded from ``path``.
        path: its folder, for the messages.
        model: the model it is opened with.
        granularity: the granularity it must have; None: its own.

    Raises:
        IndexLoadError: it has another granularity, or ``model`` lacks its layer.
    """
    made = index.granularity.name
    if granularity is not None and granularity_class(granularity).name != made:
        raise IndexLoadError(
            f"{path} was fitted with granularity={made!r}, not {granularity!r}: fit it "
            f"again with granularity={granularity!r} (repinterp fit --granularity "
            f"{granularity})"
        )
    layer = index.meta.get("target_layer")
    if layer not in dict(model.named_modules()):
        raise IndexLoadError(f"{path} was made at layer {layer!r}, which the model lacks")
    return layer


def saved_transform(index: ReferenceIndex, path: str | Path) -> ImageTransform | None:
    """The transform the index records (that of ``repinterp fit``), or None.

    Raises:
        IndexLoadError: the record is damaged.
    """
    if "transform" not in index.meta:
        return None
    try:
        return ImageTransform.from_record(index.meta["transform"])
    except ValueError as exc:
        raise IndexLoadError(f"{Path(path) / 'manifest.json'} is damaged: {exc}") from None


def check_model(index: ReferenceIndex, path: str | Path, model: nn.Module, graph: str) -> None:
    """Raise unless ``model`` (split, with traced ``graph`` fingerprint) is the one that made
    the index: the same weights and, when the index records it (from repinterp 0.4), the same
    graph.

    Raises:
        IndexLoadError: other weights, or another graph (a module of another type or setting,
            another operation: the same weights in another architecture); the message says
            which, and names the version that made the index when it is not this one (an
            index of 0.4, whose manifest records no version, has a graph fingerprint of
            another kind).
    """
    meta = index.meta
    fingerprint = model_fingerprint(model)
    if meta.get("model_fingerprint") != fingerprint:
        raise IndexLoadError(
            f"{path} was made with other weights (model fingerprint "
            f"{str(meta.get('model_fingerprint'))[:12]}…, this model's {fingerprint[:12]}…)"
        )
    saved = meta.get("graph_fingerprint")
    made = meta.get("repinterp_version")
    if saved is not None and saved != graph and made is None:
        raise IndexLoadError(
            f"{path} was made by repinterp 0.4: fit it again (its manifest records no version, "
            f"and its graph fingerprint, {saved[:12]}…, is not this model's, {graph[:12]}…: "
            "0.4 fingerprinted graphs otherwise; had 0.5.0 made it, these weights were then in "
            "another graph)"
        )
    if saved is not None and saved != graph and made != VERSION:
        raise IndexLoadError(
            f"{path} was made by repinterp {made}, this is {VERSION}, and its graph "
            f"fingerprint, {saved[:12]}…, is not this model's, {graph[:12]}…: fit it again "
            "(or give the model it was made with)"
        )
    if saved is not None and saved != graph:
        raise IndexLoadError(
            f"{path} was made with another graph of the model: the same weights, but "
            "modules of other types or settings, or other operations (graph fingerprint "
            f"{str(saved)[:12]}…, this model's {graph[:12]}…)"
        )


def restore_granularity(index: ReferenceIndex, path: str | Path, plug: Granularity) -> None:
    """Give ``index`` its fitted granularity back, made by ``plug`` (whose settings take the
    place of the saved ones) from the manifest and the saved tensors.

    Raises:
        IndexLoadError: the granularity's fields or tensors are missing or damaged.
    """
    try:
        state = {**index.columns, **index.granularity.state()[1]}
        index.granularity = plug.load(index.meta, state)
    except ValueError as exc:
        raise IndexLoadError(f"{path} is damaged: {exc}") from None


def save_with_model(
    index: ReferenceIndex,
    path: str | Path,
    model: nn.Module,
    graph: str,
    transform: Any,
    overwrite: bool = False,
) -> None:
    """Save ``index`` to the folder ``path`` with what it records of ``model``
    (`record_model`); its kept files (the feature maps) go with it and are read from there
    afterwards."""
    record_model(index, model, graph, transform)
    save_index(index, path, extra_files=index.files, overwrite=overwrite)
    index.files = {name: Path(path) / name for name in index.files}


def open_saved(
    path: str | Path, model: nn.Module, plug: str | None, keywords: dict[str, Any]
) -> tuple[ReferenceIndex, str, dict[str, Any]]:
    """The saved index at ``path`` opened for ``model`` (`check_opening`), its target layer,
    and the interpreter's ``keywords`` (``RepresentativeInterpreter.load``'s) completed from
    it: ``config`` with the fit settings the index was made with (``n_boundaries``, ``seed``,
    ``sampling``, ``granularity``; ``batch_size`` and ``progress`` from ``keywords``) and,
    without ``transform``, the one it records (`saved_transform`), if any."""
    index = load_index(path)
    meta = index.meta
    layer = check_opening(index, path, model, plug)
    keywords = dict(keywords)
    transform = saved_transform(index, path)
    if "transform" not in keywords and transform is not None:
        keywords["transform"] = transform
    own = {name: keywords.pop(name) for name in ("batch_size", "progress") if name in keywords}
    keywords["config"] = replace(
        keywords.pop("config", None) or FitConfig(),
        **own,
        n_boundaries=meta.get("requested_boundaries", len(index.boundaries)),
        seed=meta.get("seed", 0),
        sampling=meta.get("sampling", "uniform"),
        granularity=granularity(index.granularity.name),
    )
    return index, layer, keywords
