"""Building the reference index in one streaming pass over the reference set.

[`build_index`][repinterp.store.index_build.build_index] samples ``Q`` (Eq. 2 at ``|Q|`` reference
images drawn by [`boundaries`][repinterp.core.boundaries]), then streams the reference set once,
keeping per image its projections on ``Q``, logits, prediction and label; optionally in shards
([`shards`][repinterp.store.shards]) and across ``torch.distributed`` ranks. The feature maps of
``Q``'s sources are computed once, for Eq. 2, and the pass takes their rows from them.
"""

from __future__ import annotations

import hashlib
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..core.boundaries import Boundaries, eq2_boundaries, sample_sources
from ..core.config import FitConfig
from ..core.granularity import FitContext, FittedGranularity
from ..core.reference_index import FEATURE_FILE, INDEX_ROWS, ReferenceIndex, index_rows
from ..data.reference import (
    ReferenceSet,
    as_batch,
    check_finite_rows,
    first_image,
)
from ..models.fingerprint import model_fingerprint
from ..models.fixed_mode import CHECKED_IMAGES, check_image_function
from ..models.split import SplitModel, check_feature_map, split_at
from ..runtime.checksums import tensor_bytes, tensor_sha256
from ..runtime.distributed import broadcast, gather, rank_and_world
from ..runtime.precision import engine_dtype, exact_float32
from ..runtime.progress import progress_bar
from .index_folder import FORMAT_VERSION
from .outputs import claim, record
from .shards import DEFAULT_SHARD_SIZE, FeatureFile, PartialBuild, ShardPlan, Shards, partial_files

__all__ = ["build_index", "fit_index"]


def _feature_stream(
    split: SplitModel,
    reference: ReferenceSet,
    batch_size: int,
    device: torch.device,
    dtype: torch.dtype,
    workers: int,
) -> Iterator[Tensor]:
    """The reference set's feature maps, batch by batch, in order: one forward pass."""
    for images, _ in reference.batches(batch_size, workers):
        batch = as_batch(images, dtype, device, what="reference images")
        with torch.inference_mode():
            yield split.psi(batch)


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


_IMPLICIT = {"sampling": FitConfig().sampling, "granularity": FitConfig().granularity.name}
"""The settings a sharded build records only when they are not the paper's (its defaults)."""


def _build_settings(
    split: SplitModel,
    plan: ShardPlan,
    config: FitConfig,
    source_images: Tensor,
    device: torch.device,
    features: bool,
) -> dict[str, Any]:
    """What a sharded build depends on (the images behind ``Q`` stand in for the data)."""
    settings = {
        "format_version": FORMAT_VERSION,
        "model_fingerprint": model_fingerprint(torch.nn.ModuleList([split.psi, split.head])),
        "graph_fingerprint": split.fingerprint,
        "n_reference": plan.n,
        "n_boundaries": config.n_boundaries,
        "seed": config.seed,
        "batch_size": plan.batch,
        "shard_size": plan.shard,
        "boundary_images_sha256": tensor_sha256(source_images),
        "device": device.type,
        "features": features,
    }
    given = {"sampling": config.sampling, "granularity": config.granularity.name}
    for key, paper in _IMPLICIT.items():  # the paper's settings are left unsaid
        if given[key] != paper:
            settings[key] = given[key]
    return settings


def _source_features(split: SplitModel, images: Tensor, batch_size: int) -> Tensor:
    """The feature maps of ``Q``'s source images, in batches.

    Raises:
        ValueError: the target layer's output is not N x K x h x w.
    """
    parts = []
    for i in range(0, images.shape[0], batch_size):
        with torch.inference_mode():
            parts.append(split.psi(images[i : i + batch_size]))
        check_feature_map(parts[-1], split.layer)
    return torch.cat(parts)


@dataclass
class _Sources:
    """``Q``'s source images, whose feature maps fit has computed for Eq. 2: their rows of the
    index, which the streaming pass then takes instead of computing them again.

    Attributes:
        positions: |Q| long, their ascending positions in the reference set (CPU).
        rows: what `index_rows` gives for them (CPU).
        features: their flattened feature maps (|Q| x d float32), if the index keeps them.
    """

    positions: Tensor
    rows: dict[str, Tensor]
    features: np.ndarray | None

    def split(self, first: int, last: int) -> tuple[Tensor, Tensor]:
        """For the batch of positions ``first..last - 1``: a mask of the images to compute
        (False at the sources; CPU) and the sources' row numbers in ``rows``."""
        lo, hi = (int(i) for i in torch.searchsorted(self.positions, torch.tensor([first, last])))
        compute = torch.ones(last - first, dtype=torch.bool)
        compute[self.positions[lo:hi] - first] = False
        return compute, torch.arange(lo, hi)

    def merge(
        self, part: dict[str, Tensor], compute: Tensor, held: Tensor, device: torch.device
    ) -> dict[str, Tensor]:
        """A batch's rows: ``part`` where ``compute``, the sources' rows ``held`` elsewhere."""
        out, compute = {}, compute.to(device)
        for name, known in self.rows.items():
            out[name] = known.new_empty((len(compute), *known.shape[1:]), device=device)
            out[name][~compute] = known[held].to(device)
            if name in part:
                out[name][compute] = part[name]
        return out


def _prepare(
    split: SplitModel,
    reference: ReferenceSet,
    plan: ShardPlan,
    config: FitConfig,
    device: torch.device,
    dtype: torch.dtype,
    shards: Shards | None,
    features: bool,
) -> tuple[_Sources, Boundaries, FittedGranularity, tuple[int, ...], PartialBuild | None]:
    """Rank 0's part before the pass: the sources of ``Q`` and their rows, ``Q`` (reloaded when
    resuming), the fitted granularity, the input shape and the partial folder."""

    def stream() -> Iterator[Tensor]:
        return _feature_stream(split, reference, plan.batch, device, dtype, config.num_workers)

    logits = None
    if config.sampling != "uniform":
        with torch.inference_mode():
            logits = torch.cat([split.head(t).cpu() for t in stream()])
    sources = sample_sources(plan.n, config.n_boundaries, config.seed, config.sampling, logits)
    source_images = as_batch(reference.gather(sources), dtype, device, what="reference images")
    partial = q = None
    if shards is not None:
        settings = _build_settings(split, plan, config, source_images, device, features)
        partial = PartialBuild(shards, settings, _IMPLICIT)
        q = partial.boundaries()
    t = _source_features(split, source_images, plan.batch)
    context = FitContext(split.head, t, config.n_boundaries, config.seed, stream)
    fitted = config.granularity.fit(context)
    if q is None:
        q = eq2_boundaries(split.head, t, plan.batch)
        if fitted.boundaries is not None:
            q = Boundaries.concat([q, fitted.boundaries.to(q.bias.device)])
        if partial is not None:
            partial.save_boundaries(q)
    q = q.to(device)
    rows = {name: value.cpu() for name, value in index_rows(split.head, t, q, fitted).items()}
    flat = t.flatten(1).float().cpu().numpy() if features else None
    shape = tuple(source_images.shape[1:])
    return _Sources(sources, rows, flat), q, fitted, shape, partial


ShardResult = tuple[int, dict[str, Tensor], np.ndarray | None, str]


def _add_batch(digest: Any, images: Tensor, labels: Tensor | None) -> None:
    """Add a batch of reference images (and labels), as the reference set yields them, to the
    SHA-256 ``digest`` of their shard."""
    digest.update(tensor_bytes(images))
    if labels is not None:
        digest.update(tensor_bytes(labels))


def _image_digests(
    reference: ReferenceSet, plan: ShardPlan, shard_ids: Sequence[int], num_workers: int
) -> dict[int, str]:
    """The SHA-256 of the images (and labels) of each of ``shard_ids`` as they are now, read
    in the batches a build reads them in (what a resumed build checks its shards against)."""
    batches = reference.batches(plan.batch, num_workers, plan.batches(shard_ids))
    digests = {}
    for k in shard_ids:
        digest = hashlib.sha256()
        for _ in plan.batches([k]):
            _add_batch(digest, *next(batches))
        digests[k] = digest.hexdigest()
    return digests


def _index_shard(
    split: SplitModel,
    batches: Iterator[tuple[Tensor, Tensor | None]],
    plan: ShardPlan,
    k: int,
    q: Boundaries,
    sources: _Sources,
    input_shape: tuple[int, ...],
    device: torch.device,
    dtype: torch.dtype,
    fitted: FittedGranularity,
) -> tuple[dict[str, Tensor], np.ndarray | None, str]:
    """Index shard ``k``, whose batches are the next ones of ``batches``; the rows of ``Q``'s
    sources are taken from ``sources``, not computed again.

    Returns:
        Its projections (n x |Q|), logits (n x classes), predictions (n) and labels (n, if the
        Dataset has them), on the CPU; its flattened feature maps (n x d float32) if
        ``sources`` has them, else None; the SHA-256 of its images and labels as they were read
        (see `_image_digests`).
    """
    start, stop = plan.bounds(k)
    parts = []
    digest = hashlib.sha256()
    rows = None
    if sources.features is not None:
        rows = np.empty((stop - start, sources.features.shape[1]), np.float32)
    for first, last in plan.batches([k]):
        images, labels = next(batches)
        _add_batch(digest, images, labels)
        what = f"reference images {first}..{last - 1}"
        images = as_batch(images, dtype, device, input_shape, what, non_blocking=True)
        compute, held = sources.split(first, last)
        t = None
        if len(held) < len(compute):
            with torch.inference_mode():
                t = split.psi(images[compute.to(device)] if len(held) else images)
        part = index_rows(split.head, t, q, fitted) if t is not None else {}
        if len(held):
            part = sources.merge(part, compute, held, device)
        if labels is not None:
            part["labels"] = labels.long()
        parts.append(part)
        if rows is not None:
            block = rows[first - start : last - start]
            if t is not None:
                block[compute.numpy()] = t.flatten(1).float().cpu().numpy()
            block[~compute.numpy()] = sources.features[held.numpy()]
    tensors = {name: torch.cat([p[name] for p in parts]).cpu() for name in parts[0]}
    return tensors, rows, digest.hexdigest()


def _index_shards(
    split: SplitModel,
    reference: ReferenceSet,
    plan: ShardPlan,
    shard_ids: Sequence[int],
    q: Boundaries,
    sources: _Sources,
    input_shape: tuple[int, ...],
    num_workers: int,
    device: torch.device,
    dtype: torch.dtype,
    fitted: FittedGranularity,
) -> Iterator[ShardResult]:
    """Index ``shard_ids`` in one stream of batches: per shard, its id and what
    `_index_shard` returns (not kept here once yielded, so that one shard of feature maps
    is alive at a time)."""
    ranges = plan.batches(shard_ids)
    batches = reference.batches(plan.batch, num_workers, ranges, device.type == "cuda")
    for k in shard_ids:
        yield (
            k,
            *_index_shard(split, batches, plan, k, q, sources, input_shape, device, dtype, fitted),
        )


def _keep(
    results: list[ShardResult | None],
    plan: ShardPlan,
    assembly: _Assembly,
    store: FeatureFile | None,
    partial: PartialBuild | None,
    bar: Any,
) -> None:
    """Rank 0: put gathered shards (None: a rank with none left) in the index, the feature file
    and the partial folder."""
    for result in results:
        if result is None:
            continue
        k, tensors, rows, images_sha = result
        start, stop = plan.bounds(k)
        features_sha = store.write(start, rows) if store is not None else None
        if partial is not None:
            partial.save_shard(k, tensors, features_sha, images_sha)
        assembly.put(start, tensors)
        bar.update(stop - start)


@exact_float32()
def build_index(
    split: SplitModel,
    reference: ReferenceSet,
    config: FitConfig,
    device: torch.device,
    feature_file: Path | None = None,
    shards: Shards | None = None,
    dtype: torch.dtype = torch.float32,
) -> ReferenceIndex:
    """Sample ``Q`` from ``reference`` and stream it once to build the index, in full float32
    (or wider) precision ([`exact_float32`][repinterp.runtime.precision.exact_float32]).

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
        reference: the reference set, wrapped where it entered
            ([`as_reference`][repinterp.data.reference.as_reference]).
        config: how ``Q`` is sampled and the reference set read (see
            [`FitConfig`][repinterp.core.config.FitConfig]); the progress bar shows on rank 0 only.
        device: where the model and the index live.
        feature_file: if given, the flattened reference feature maps are also written there
            (by rank 0) as a |R| x (K h w) float32 ``.npy``, never all in RAM, for the
            protocols that need them (k-means regions, Euclidean neighbours).
        shards: write the index in shards as it goes, to resume a killed build (see
            [`Shards`][repinterp.store.index_build.Shards]); keep ``feature_file`` in the same
            folder so that it survives too. The folder follows the rule of ``fit --shards``
            (`claim`): new, empty or the shards of an earlier build, never an index or a folder
            of other files.
        dtype: the model's floating dtype; images of any floating dtype are converted to it.

    Raises:
        ValueError: an empty reference set, bad images, a target layer without N x K x h x w
            output, non-finite logits, projections or boundaries (saying for how many images),
            or a partial folder made with other settings.
        OutputError: the folder of ``shards`` is refused, or another process is writing to it.
    """
    n_ref = len(reference)
    if n_ref == 0:
        raise ValueError("the reference set is empty")
    plan = ShardPlan.make(n_ref, config.batch_size, shards.size if shards else DEFAULT_SHARD_SIZE)
    with ExitStack() as claimed:
        # the rule of fit --shards: a folder of its own, its files listed before they are written
        if shards is not None and rank_and_world()[0] == 0:
            claimed.enter_context(claim(shards.directory, "partial"))
            names = partial_files(plan)
            if feature_file is not None and feature_file.parent == shards.directory:
                names.append(feature_file.name)
            record(shards.directory, names)
        return _build(split, reference, config, device, feature_file, shards, dtype, plan)


def _build(
    split: SplitModel,
    reference: ReferenceSet,
    config: FitConfig,
    device: torch.device,
    feature_file: Path | None,
    shards: Shards | None,
    dtype: torch.dtype,
    plan: ShardPlan,
) -> ReferenceIndex:
    """`build_index` once its partial folder is claimed."""
    rank, world = rank_and_world()
    n_ref = plan.n
    wants_features = feature_file is not None
    header, partial, store, done = None, None, None, {}
    if rank == 0:
        sources, q, fitted, input_shape, partial = _prepare(
            split, reference, plan, config, device, dtype, shards, wants_features
        )
        if feature_file is not None:
            dim = q.weight[0].numel()
            store = FeatureFile(feature_file, n_ref, dim, partial is not None and partial.resumed)

        def now(ks: Sequence[int]) -> dict[int, str]:
            return _image_digests(reference, plan, ks, config.num_workers)

        done = partial.complete(plan, store, now) if partial is not None else {}
        header = (sources, q.to("cpu"), fitted, input_shape, sorted(done))
    sources, q, fitted, input_shape, done_ids = broadcast(header)
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
        sources,
        input_shape,
        config.num_workers,
        device,
        dtype,
        fitted,
    )
    finished = sum(plan.bounds(k)[1] - plan.bounds(k)[0] for k in done_ids)
    bar = progress_bar(
        total=n_ref,
        initial=finished,
        desc="indexing reference",
        unit="img",
        enabled=config.progress and rank == 0,
    )
    with bar:
        for _ in range(-(-len(pending) // world)):
            _keep(gather(next(results, None)), plan, assembly, store, partial, bar)
    t = broadcast(assembly.tensors if rank == 0 else None)
    check_finite_rows("logits or projections of the reference set", t["logits"], t["projections"])
    columns = {name: value for name, value in t.items() if name not in INDEX_ROWS}
    extra = torch.full((len(q) - len(sources.positions),), -1, dtype=torch.long)
    index = ReferenceIndex(
        boundaries=q,
        sources=torch.cat([sources.positions, extra]).to(device),
        projections=t["projections"].to(device),
        predictions=t["predictions"].to(device),
        logits=t["logits"].to(device),
        labels=t["labels"].to(device) if "labels" in t else None,
        columns={name: value.to(device) for name, value in columns.items()},
        granularity=fitted,
        input_shape=input_shape,  # type: ignore[arg-type]
        meta={},
        files={feature_file.name: feature_file} if store is not None else {},
        checksums={feature_file.name: store.file_sha256()} if store is not None else {},
    )
    if store is not None:  # mapped now: a later fit saved over the file does not change it
        with open(feature_file, "rb") as file:
            index.map_features(file)
    return index


def fit_index(
    model: nn.Module,
    split: SplitModel | None,
    reference: ReferenceSet,
    config: FitConfig,
    device: torch.device,
    class_names: list[str] | None = None,
    keep_features: bool = False,
    shards: Shards | None = None,
) -> tuple[SplitModel, ReferenceIndex, tempfile.TemporaryDirectory | None]:
    """``RepresentativeInterpreter.fit``'s work: the target layer found with the first image's
    shape when ``split`` is None, a few images checked to be a fixed function of the model, the
    index built, warnings for a short ``Q`` or one predicted class, and its ``meta`` (the target
    layer, the fit's settings, the model's class, ``class_names``).

    Returns:
        The split, the index, and the temporary folder of its feature maps (kept without
        ``shards``).

    Raises:
        ValueError: see ``fit``, and ``class_names`` of another number than the classes.
    """
    dtype = engine_dtype(model)
    if split is None:
        shape = tuple(first_image(reference, dtype, device).shape[1:])
        split = split_at(model, None, config, dtype, shape)
    if len(reference) > 0:  # a few images: the same twice, and alone as in a batch
        few = reference.gather(torch.arange(min(CHECKED_IMAGES, len(reference))))
        check_image_function(split.psi, split.head, split.layer, as_batch(few, dtype, device))
    feature_dir = None
    if keep_features and shards is None:
        feature_dir = tempfile.TemporaryDirectory(prefix="repinterp-")
    feature_file = None
    if keep_features:
        folder = shards.directory if shards is not None else Path(feature_dir.name)
        feature_file = folder / FEATURE_FILE
    index = build_index(
        split, reference, config, device, feature_file=feature_file, shards=shards, dtype=dtype
    )
    if len(index.boundaries) < config.n_boundaries:
        warnings.warn(
            f"n_boundaries={config.n_boundaries} > |R|={len(index)}: Q has "
            f"{len(index.boundaries)} boundaries, one per reference image",
            stacklevel=4,
        )
    predicted = index.predictions.unique()
    if len(predicted) == 1 and index.n_classes > 1:
        warnings.warn(
            f"the model predicts class {int(predicted[0])} for all {len(index)} reference "
            "images: every other class is empty, so no explanation has a boundary to draw "
            "(is the normalisation the one the model was trained with?)",
            stacklevel=4,
        )
    if class_names is not None and len(class_names) != index.n_classes:
        raise ValueError(
            f"{len(class_names)} class names given for a model with {index.n_classes} classes"
        )
    index.meta = {
        "target_layer": split.layer,
        "seed": config.seed,
        "requested_boundaries": config.n_boundaries,
        "model_class": type(model).__name__,
        "class_names": class_names,
    }
    if config.sampling != "uniform":  # the paper's sampling is the default, left unsaid
        index.meta["sampling"] = config.sampling
    index.meta.update(index.granularity.state()[0])  # the paper's granularity: nothing
    return split, index, feature_dir
