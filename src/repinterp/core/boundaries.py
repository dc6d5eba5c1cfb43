"""``Q``: the linear boundaries of a piecewise-linear head ``G`` (Eq. 2 of the paper), batched,
signed projections on them, and how ``Q``'s source images are drawn from the reference set:
uniformly (the paper), balanced over the predicted classes, or by pairs of top classes nearest
their boundary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

__all__ = [
    "SAMPLINGS",
    "Boundaries",
    "compute_boundaries",
    "eq2_boundaries",
    "project",
    "sample_sources",
]


@dataclass
class Boundaries:
    """A set ``Q`` of hyperplanes ``<W_h, t> + b_h = 0`` in feature-map space.

    Attributes:
        weight: ``W``, |Q| x K x h x w (the feature map's shape).
        bias: ``b``, |Q|.
        top_classes: |Q| x 2, the classes ``c1, c2`` whose score difference each boundary is.
    """

    weight: Tensor
    bias: Tensor
    top_classes: Tensor

    def __len__(self) -> int:
        return self.bias.shape[0]

    def to(self, device: torch.device | str) -> Boundaries:
        return Boundaries(self.weight.to(device), self.bias.to(device), self.top_classes.to(device))

    @staticmethod
    def concat(parts: Sequence[Boundaries]) -> Boundaries:
        """The boundaries of ``parts``, one after another."""
        return Boundaries(
            torch.cat([p.weight for p in parts]),
            torch.cat([p.bias for p in parts]),
            torch.cat([p.top_classes for p in parts]),
        )

    def select(self, indices: Tensor) -> Boundaries:
        """The boundaries at ``indices``, in that order."""
        return Boundaries(self.weight[indices], self.bias[indices], self.top_classes[indices])


def compute_boundaries(
    head: nn.Module, features: Tensor, classes: Tensor | None = None
) -> Boundaries:
    """Eq. 2 for each feature map ``t'`` in ``features``, with one backward pass.

    ``W = d(G_c1 - G_c2)/dt`` at ``t'`` and ``b = (G_c1 - G_c2)(t') - <W, t'>``, where
    ``c1, c2`` are the top-2 classes of ``G(t')``. Samples do not interact in ``G`` (eval mode),
    so the gradient of the summed differences gives every per-sample gradient at once.

    Args:
        head: ``G``, feature maps N x K x h x w -> logits N x classes (at least 2).
        features: N x K x h x w.
        classes: N x 2, the classes ``(c1, c2)`` of each boundary, given (beyond the paper: a
            contrastive boundary, see
            [`contrastive_boundaries`][repinterp.interpreter.RepresentativeInterpreter.contrastive_boundaries]);
            None: the top-2 classes of ``G(t')``, the paper's.

    Returns:
        N boundaries, on the device and in the dtype of ``features``.
    """
    t = features.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        logits = head(t)
        if logits.ndim != 2 or logits.shape[1] < 2:
            raise ValueError(
                "the head must give N x classes logits with >= 2 classes, "
                f"got {tuple(logits.shape)}"
            )
        if classes is None:
            classes = logits.topk(2, dim=1).indices
        classes = classes.to(logits.device)
        pair = logits.gather(1, classes)
        diff = pair[:, 0] - pair[:, 1]
        (weight,) = torch.autograd.grad(diff.sum(), t)
    bias = diff.detach() - (weight * t.detach()).flatten(1).sum(1)
    return Boundaries(weight=weight.detach(), bias=bias, top_classes=classes.detach())


def eq2_boundaries(head: nn.Module, features: Tensor, batch_size: int) -> Boundaries:
    """``Q``: Eq. 2 (`compute_boundaries`) at each of the feature maps ``features`` (|Q| x K x h
    x w), in batches of ``batch_size``.

    Raises:
        ValueError: some boundaries are not finite (the message says how many).
    """
    parts = [compute_boundaries(head, t) for t in features.split(batch_size)]
    q = Boundaries.concat(parts)
    finite = torch.isfinite(q.weight.flatten(1)).all(1) & torch.isfinite(q.bias)
    if not bool(finite.all()):
        raise ValueError(
            f"{int((~finite).sum())} of the {len(q)} reference images behind Q give non-finite "
            "boundaries (NaN or Inf): check the model's weights and the images' values"
        )
    return q


def project(features: Tensor, boundaries: Boundaries) -> Tensor:
    """Signed projections ``s[n, h] = <W_h, t_n> + b_h``.

    Args:
        features: N x K x h x w.
        boundaries: |Q| boundaries of the same feature shape.

    Returns:
        N x |Q|.
    """
    if features.shape[1:] != boundaries.weight.shape[1:]:
        raise ValueError(
            f"feature maps of shape {tuple(features.shape[1:])} do not match the boundaries' "
            f"{tuple(boundaries.weight.shape[1:])}"
        )
    w = _aligned(boundaries.weight.flatten(1).to(features.dtype))
    # |Q| x N, then transposed: BLAS runs this orientation 10-20 % faster on the CPU
    s = torch.addmm(boundaries.bias.to(features.dtype)[:, None], w, _aligned(features.flatten(1)).T)
    return s.T.contiguous()


def _aligned(matrix: Tensor) -> Tensor:
    """``matrix``, copied unless it is contiguous and starts on a 64-byte boundary: MKL's
    products round differently for operands that do not (e.g. a slice, or weights read from a
    file at an odd offset), and a projection must not depend on where its operands lie."""
    if matrix.is_contiguous() and matrix.data_ptr() % 64 == 0:
        return matrix
    return matrix.clone(memory_format=torch.contiguous_format)


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
