"""Representative interpretation (Lam, Chu et al., ICCV 2021) for one input, as the paper
states it: the reference the fast paths are held to (tests/core/test_paper_reference.py), used
by nothing on the run path. Plain loops, autograd and exact fractions; no batching, no bit sets.

``psi`` maps an image to its feature map ``t`` (K x h x w), ``head`` (``G``) a batch of feature
maps to logits; ``G`` is piecewise linear. docs/method.md links each formula here.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["PaperExplanation", "PaperIndex", "algorithm_1", "distance", "explain", "fit", "heatmap"]


@dataclass
class PaperIndex:
    """``Q`` and what the cover reads of the reference set ``R``.

    Attributes:
        weight: |Q| x K x h x w, each boundary's ``W``; bias: |Q|, its ``b``.
        projections: |R| x |Q|, ``s_h(x') = <W_h, psi(x')> + b_h``.
        predictions: |R|, the class the model predicts for each reference image.
    """

    weight: Tensor
    bias: Tensor
    projections: Tensor
    predictions: Tensor


@dataclass
class PaperExplanation:
    """One input's ``P(x)``: its class, its projections on ``Q``, the boundaries chosen (in
    the order chosen), the reference images covered (ascending) and ``delta = tau(x)``."""

    predicted: int
    projections: Tensor
    boundaries: list[int]
    covered: list[int]
    delta: int


def boundary(head: nn.Module, t: Tensor) -> tuple[Tensor, Tensor]:
    """Eq. 2 at one feature map ``t``: with ``c1, c2`` the top-2 classes of ``G(t)``,
    ``W = d(G_c1 - G_c2)/dt`` and ``b = (G_c1 - G_c2)(t) - <W, t>``."""
    t = t.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        logits = head(t[None])[0]
        c1, c2 = logits.topk(2).indices.tolist()
        margin = logits[c1] - logits[c2]
        (weight,) = torch.autograd.grad(margin, t)
    return weight, margin.detach() - (weight * t.detach()).sum()


def fit(psi: nn.Module, head: nn.Module, reference: Tensor, sources: list[int]) -> PaperIndex:
    """``Q`` = Eq. 2 at the reference images ``sources`` (in that order), and every reference
    image's projections on ``Q`` and predicted class."""
    with torch.no_grad():
        t = torch.stack([psi(image[None])[0] for image in reference])
        predictions = torch.stack([head(ti[None])[0].argmax() for ti in t])
    planes = [boundary(head, t[s]) for s in sources]
    weight = torch.stack([w for w, _ in planes])
    bias = torch.stack([b for _, b in planes])
    projections = (t.flatten(1) @ weight.flatten(1).T) + bias
    return PaperIndex(weight, bias, projections, predictions)


def algorithm_1(reference_sides: Tensor, x_sides: Tensor, in_d: Tensor) -> tuple[list, list, int]:
    """Algorithm 1: ``delta`` = images of ``D(x)`` on ``x``'s side (same sign) of every ``h``
    in ``Q``. From ``P = {}``, while ``|P ∩ D| > delta``, add the ``h`` that minimises (covered
    images it removes) / (covered images of ``D(x)`` it removes), over those removing at least
    one image of ``D(x)``; equal ratios go to the larger denominator, then to the lower index.

    Returns:
        ``P(x)`` in the order chosen, the covered images (ascending), ``delta``.
    """
    rows, x, d = reference_sides.tolist(), x_sides.tolist(), in_d.tolist()
    apart = [[side != x[h] for h, side in enumerate(row)] for row in rows]
    delta = sum(1 for r, row in enumerate(apart) if d[r] and not any(row))
    covered, chosen = set(range(len(rows))), []
    while sum(1 for r in covered if d[r]) > delta:
        candidates = []
        for h in range(len(x)):
            removed = [r for r in covered if apart[r][h]]
            removed_d = sum(1 for r in removed if d[r])
            if removed_d:  # (ratio, larger denominator first, lower index first)
                candidates.append((Fraction(len(removed), removed_d), -removed_d, h))
        h = min(candidates)[2]
        chosen.append(h)
        covered = {r for r in covered if not apart[r][h]}
    return chosen, sorted(covered), delta


def explain(psi: nn.Module, head: nn.Module, index: PaperIndex, x: Tensor) -> PaperExplanation:
    """Eq. 3 for one image ``x`` (C x H x W): ``D(x)`` = the reference images predicted
    another class, ``P(x)`` by Algorithm 1 on the signs of the projections."""
    with torch.no_grad():
        t = psi(x[None])[0]
        predicted = int(head(t[None])[0].argmax())
    projections = (index.weight.flatten(1) @ t.flatten()) + index.bias
    in_d = index.predictions != predicted
    chosen, covered, delta = algorithm_1(
        torch.sign(index.projections), torch.sign(projections), in_d
    )
    return PaperExplanation(predicted, projections, chosen, covered, delta)


def heatmap(psi: nn.Module, index: PaperIndex, e: PaperExplanation, images: Tensor) -> Tensor:
    """§5.1: for each ``h`` in ``P(x)``, ``W`` flipped so that ``x`` is on its positive side,
    ``alpha_k`` = the mean of ``W`` over channel ``k``'s positions; a map is ``ReLU(sum_k
    alpha_k psi_k(image))``, upsampled bilinearly to the image's H x W, then ``(m - min) / (max -
    min + 1e-7)``; the map of ``P(x)`` is their mean (N x H x W; ``P(x)`` must not be empty)."""
    with torch.no_grad():
        t = torch.stack([psi(image[None])[0] for image in images])
    maps = []
    for h in e.boundaries:
        flip = -1.0 if e.projections[h] < 0 else 1.0
        alpha = flip * index.weight[h].mean((1, 2))
        raw = F.relu((alpha[None, :, None, None] * t).sum(1, keepdim=True))
        up = F.interpolate(raw, size=images.shape[-2:], mode="bilinear", align_corners=False)[:, 0]
        low = up.flatten(1).min(1).values[:, None, None]
        high = up.flatten(1).max(1).values[:, None, None]
        maps.append((up - low) / (high - low + 1e-7))
    return torch.stack(maps).mean(0)


def distance(index: PaperIndex, e: PaperExplanation, reference: int) -> float:
    """§5.2: ``Dist(x, x') = sum_{h in P(x)} |s_h(x) - s_h(x')|`` (the ``b``s cancel)."""
    return sum(
        float((e.projections[h] - index.projections[reference, h]).abs()) for h in e.boundaries
    )
