"""Building the reference index in one streaming pass over the reference set.

:func:`build_index` samples ``Q`` (Eq. 2 at ``|Q|`` reference images), then streams the
reference set once, keeping per image its projections on ``Q``, logits, prediction and label;
optionally in shards (:mod:`repinterp.shards`) and across ``torch.distributed`` ranks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from .boundaries import Boundaries, compute_boundaries, project
from .distributed import broadcast, gather, rank_and_world
from .index import FORMAT_VERSION, ReferenceIndex
from .inputs import Reference, as_batch, as_reference, gather_images, iter_batches, reference_size
from .model import SplitModel, check_feature_map, model_fingerprint
from .precision import exact_float32
from .shards import DEFAULT_SHARD_SIZE, Shards, _FeatureFile, _Partial, _Plan
from .utils import tensor_sha256

__all__ = ["SAMPLINGS", "build_index", "sample_sources"]

SAMPLINGS = ("uniform", "balanced", "pairs")


def sample_sources(
    n_reference: int,
    n_boundaries: int,
    seed: int,
    sampling: str = "uniform",
    logits: Tensor | None = None,
) -> Tensor:
    """The reference indices whose boundaries form ``Q``: ``min(n_boundaries, |R|)`` of them,
    drawn without replacement with ``seed``, in ascending order.

    Args:
        n_reference: |R|.
        n_boundaries: ``|Q|``.
        seed: seeds the draw.
        sampling: ``"uniform"`` over R (the paper); ``"balanced"``: the predicted classes in
            turn (seeded order), uniform within a class; ``"pairs"``: the unordered classes
            ``{top-1, top-2}`` of the sources in turn (seeded order), within a pair the smallest
            margin ``G_top1 - G_top2`` first (ties: lower index), so that ``Q`` holds the
            boundaries between every pair of classes a cover may have to separate, each drawn
            where the two classes meet.
        logits: |R| x classes logits of the reference images (needed unless ``"uniform"``).

    Raises:
        ValueError: an unknown ``sampling``, or no ``logits`` for one that needs them.
    """
    if sampling not in SAMPLINGS:
        raise ValueError(f"unknown sampling {sampling!r}; choose one of {', '.join(SAMPLINGS)}")
    generator = torch.Generator().manual_seed(seed)
    if sampling == "uniform":
        return torch.randperm(n_reference, generator=generator)[:n_boundaries].sort().values
    if logits is None or logits.shape[0] != n_reference:
        raise ValueError(f"sampling {sampling!r} needs the {n_reference} reference logits")
    top = logits.detach().float().cpu().topk(min(2, logits.shape[1]), dim=1)
    if sampling == "balanced":
        keys, order = top.indices[:, 0], torch.randperm(n_reference, generator=generator)
    else:
        pair = top.indices.sort(1).values
        keys = pair[:, 0] * logits.shape[1] + pair[:, -1]
        order = torch.sort(top.values[:, 0] - top.values[:, -1], stable=True).indices
    return _round_robin(keys[order], order, n_boundaries, generator).sort().values


def _round_robin(keys: Tensor, items: Tensor, n: int, generator: torch.Generator) -> Tensor:
    """The first ``n`` of ``items`` taken one per key in turn (keys in a seeded order), each
    key's items in their given order."""
    groups = keys.unique()
    rank = torch.empty_like(groups)
    rank[torch.randperm(len(groups), generator=generator)] = torch.arange(len(groups))
    group = rank[torch.searchsorted(groups, keys)]
    turn = torch.empty_like(group)
    for g in range(len(groups)):
        rows = (group == g).nonzero().flatten()
        turn[rows] = torch.arange(len(rows))
    return items[torch.sort(turn * len(groups) + group, stable=True).indices[:n]]


def _reference_logits(
    split: SplitModel,
    reference: Reference,
    batch_size: int,
    device: torch.device,
    dtype: torch.dtype,
    workers: int,
) -> Tensor:
    """|R| x classes logits of the reference set, in one pass (CPU)."""
    parts = []
    for images, _ in iter_batches(reference, batch_size, workers):
        batch = as_batch(images, dtype, device, what="reference images")
        with torch.inference_mode():
            parts.append(split.head(split.psi(batch)).cpu())
    return torch.cat(parts)


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
        "boundary_images_sha256": tensor_sha256(source_images),
        "device": device.type,
        "features": features,
    }


def _boundaries(split: SplitModel, images: Tensor, batch_size: int) -> Boundaries:
    """``Q``: Eq. 2 at each of ``images``, in batches.

    Raises:
        ValueError: the target layer's output is not N x K x h x w; some boundaries are not
            finite (the message says how many).
    """
    parts = []
    for i in range(0, images.shape[0], batch_size):
        with torch.inference_mode():
            t = split.psi(images[i : i + batch_size])
        check_feature_map(t, split.layer)
        parts.append(compute_boundaries(split.head, t))
    q = Boundaries.concat(parts)
    finite = torch.isfinite(q.weight.flatten(1)).all(1) & torch.isfinite(q.bias)
    if not bool(finite.all()):
        raise ValueError(
            f"{int((~finite).sum())} of the {len(q)} reference images behind Q give non-finite "
            "boundaries (NaN or Inf): check the model's weights and the images' values"
        )
    return q


def _prepare(
    split: SplitModel,
    reference: Reference,
    plan: _Plan,
    n_boundaries: int,
    seed: int,
    device: torch.device,
    dtype: torch.dtype,
    shards: Shards | None,
    features: bool,
    sampling: str = "uniform",
    num_workers: int = 0,
) -> tuple[Tensor, Boundaries, tuple[int, ...], _Partial | None]:
    """Rank 0's part before the pass: the sources of ``Q``, ``Q`` (reloaded when resuming),
    the input shape and the partial folder."""
    logits = None
    if sampling != "uniform":
        logits = _reference_logits(split, reference, plan.batch, device, dtype, num_workers)
    sources = sample_sources(plan.n, n_boundaries, seed, sampling, logits)
    source_images = as_batch(
        gather_images(reference, sources), dtype, device, what="reference images"
    )
    partial = q = None
    if shards is not None:
        config = _config(split, plan, n_boundaries, seed, source_images, device, features)
        config |= {"sampling": sampling} if sampling != "uniform" else {}
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
    dtype: torch.dtype,
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
        what = f"reference images {first}..{last - 1}"
        images = as_batch(images, dtype, device, input_shape, what, non_blocking=True)
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
    dtype: torch.dtype,
    features: bool,
) -> Iterator[ShardResult]:
    """Index ``shard_ids`` in one stream of batches: per shard, its id and what
    :func:`_index_shard` returns (not kept here once yielded, so that one shard of feature maps
    is alive at a time)."""
    ranges = plan.batches(shard_ids)
    batches = iter_batches(reference, plan.batch, num_workers, ranges, device.type == "cuda")
    for k in shard_ids:
        yield (k, *_index_shard(split, batches, plan, k, q, input_shape, device, dtype, features))


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


def _check_finite(tensors: dict[str, Tensor]) -> None:
    finite = torch.isfinite(tensors["logits"]).all(1) & torch.isfinite(tensors["projections"]).all(
        1
    )
    if not bool(finite.all()):
        bad = (~finite).nonzero().flatten()
        raise ValueError(
            f"{len(bad)} of the {len(finite)} reference images give non-finite logits or "
            f"projections (NaN or Inf), e.g. images {bad[:5].tolist()}: check the model's weights "
            "and the images' values"
        )


@exact_float32()
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
    dtype: torch.dtype = torch.float32,
    sampling: str = "uniform",
) -> ReferenceIndex:
    """Sample ``Q`` from ``reference`` and stream it once to build the index, in full float32
    (or wider) precision (:func:`repinterp.precision.exact_float32`).

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
        reference: a reference set (see :func:`repinterp.inputs.as_reference`): a tensor, a
            NumPy array, a Dataset, a DataLoader or a list of images.
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
        dtype: the model's floating dtype; images of any floating dtype are converted to it.
        sampling: how the sources of ``Q`` are drawn (see :func:`sample_sources`); other than
            ``"uniform"``, it takes one more forward pass over the reference set first.

    Raises:
        ValueError: an empty reference set, bad images, a target layer without N x K x h x w
            output, non-finite logits, projections or boundaries (saying for how many images),
            or a partial folder made with other settings.
    """
    reference = as_reference(reference)
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
            split,
            reference,
            plan,
            n_boundaries,
            seed,
            device,
            dtype,
            shards,
            wants_features,
            sampling,
            num_workers,
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
        dtype,
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
    _check_finite(t)
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
        checksums={feature_file.name: store.file_sha256()} if store is not None else {},
    )
