"""How ``Q``'s sources are drawn from the reference set: uniformly (the paper), balanced over
the predicted classes, or by pairs of top classes nearest their boundary."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["SAMPLINGS", "sample_sources"]

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
