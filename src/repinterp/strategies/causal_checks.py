"""The causal check of a model's strategies, without labels.

A strategy (a group of images of one predicted class, `repinterp.strategies.discovery`) rests on a
*cue* when a small part of its members decides their class. `causal_checks` tests it by
intervention, reading only the model's predictions and its gradients (never a label, a mask or
a ``marked`` flag); `repinterp.strategies.audit` reads its shares as reasons and a score:

- ``sufficiency``: a member's `CAUSAL_AREA` most relevant pixels (gradient x input of its
  predicted class, `relevant_masks`) pasted at their place onto an image the model predicts
  another class: the share of the pastes the model then predicts the strategy's class;
  ``sufficiency_control``: the same with the mask moved to a random place of the member;
- ``necessity``: those pixels filled with the member's mean: the share of the members whose
  prediction leaves the class; ``necessity_control``: the moved mask;
- ``detail_sufficiency``: a member's fine detail (the image minus its `blurred` self) added to
  an image of another class: the share predicted the strategy's class (a texture has no place);
- ``blur_necessity``: the share of members whose prediction leaves the class once `blurred`;
- ``tint_sufficiency``: a member's mean colour (per channel) given to an image of another class:
  the share predicted the strategy's class;
- ``wide_sufficiency``: the paste with `WIDE_AREA` (twice the area: a cue larger than the narrow
  paste), against ``wide_sufficiency_control``, its moved mask;
- ``pattern_sufficiency``: what the members share at the same place (their mean image minus the
  mean of all the images given, kept where it exceeds `PATTERN_DEVIATIONS` times the members'
  own standard deviation) added to images of other classes: the share predicted the strategy's
  class (a watermark, a frame, a fixed mark: a pattern at one place);
- ``moved_pattern_sufficiency``: the members' whole mean difference moved to a random place
  (wrapping) and added: the share predicted the strategy's class (a texture carries it anywhere);
- ``look_alike_sufficiency`` (not scored): the relevant pixels pasted onto images of the
  members' most common runner-up class: the share predicted the strategy's class.
- ``look_alike_pattern_sufficiency``: the members' whole mean difference moved to a random
  place (wrapping) and added to images of their runner-up class: the share predicted the
  strategy's class; ``look_alike_tint_sufficiency``: the same with only the difference's mean
  colour (per channel) added (0.6.2 scored these; measured, not scored since 0.6.3).
- ``nearest_pattern_sufficiency`` and ``nearest_tint_sufficiency``: the same two with images of
  the predicted class whose mean image is nearest the members' mean (other than theirs): the
  class they look like, which need not be the one the model nearly says.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from .discovery import MIN_SIZE

__all__ = [
    "BLUR_SIGMA",
    "CAUSAL_AREA",
    "CAUSAL_PASTES",
    "CAUSAL_REMOVALS",
    "PATTERN_DEVIATIONS",
    "WIDE_AREA",
    "blurred",
    "causal_checks",
    "relevant_masks",
]

CAUSAL_AREA = 0.05
"""The share of an image's pixels that `causal_checks` pastes or removes."""
CAUSAL_PASTES = 64
"""(member, recipient) pairs per strategy in `causal_checks`."""
CAUSAL_REMOVALS = 32
"""Members per strategy whose relevant pixels `causal_checks` removes."""
BLUR_SIGMA = 0.05
"""The blur of `blurred`: its standard deviation, as a share of the image's shorter side."""
WIDE_AREA = 2 * CAUSAL_AREA
"""The share of an image's pixels of `causal_checks`'s wide paste."""
PATTERN_DEVIATIONS = 2.0
"""A pixel is of a strategy's shared pattern when its members' mean differs from all images'
mean by more than this many times their standard deviation there. A strategy of fewer than
`MIN_SIZE` members (the discovery's smallest; a standard deviation of one member is 0) has no
shared pattern. A pattern that a share p of the members carry, and a share q of all images,
passes only where p - q > 2 sqrt(p (1 - p)): about p >= 0.82 for q = 0.05."""


def relevant_masks(relevance: Tensor, area: float = CAUSAL_AREA) -> Tensor:
    """N x H x W booleans: each map's ``area`` most relevant pixels (at least one; ties: the
    lower flat index)."""
    flat = relevance.flatten(1)
    top = max(1, round(area * flat.shape[1]))
    masks = torch.zeros_like(flat, dtype=torch.bool)
    masks.scatter_(1, flat.topk(top, dim=1, sorted=False).indices, True)
    return masks.reshape(relevance.shape)


def blurred(images: Tensor) -> Tensor:
    """N x C x H x W images under a Gaussian blur of standard deviation `BLUR_SIGMA` times the
    shorter side (reflected at the edges): what is left without their fine detail."""
    sigma = BLUR_SIGMA * min(images.shape[-2:])
    radius = max(1, min(math.ceil(3 * sigma), min(images.shape[-2:]) - 1))
    x = torch.arange(-radius, radius + 1, dtype=images.dtype, device=images.device)
    kernel = torch.exp(-(x**2) / (2 * sigma**2))
    kernel = kernel / kernel.sum()
    n, c, h, w = images.shape
    flat = images.reshape(n * c, 1, h, w)
    flat = nn.functional.pad(flat, (radius, radius, radius, radius), mode="reflect")
    flat = nn.functional.conv2d(flat, kernel.reshape(1, 1, 1, -1))
    flat = nn.functional.conv2d(flat, kernel.reshape(1, 1, -1, 1))
    return flat.reshape(n, c, h, w)


def _rolled(masks: Tensor, shifts: Tensor) -> Tensor:
    """Each mask (or image) moved by its own (rows, columns) shift, wrapping round."""
    moved = [m.roll(tuple(t.tolist()), (-2, -1)) for m, t in zip(masks, shifts, strict=True)]
    return torch.stack(moved) if moved else masks


def causal_checks(
    strategy: Tensor,
    predicted: Tensor,
    images_of: Callable[[Tensor], Tensor],
    predict: Callable[[Tensor], Tensor],
    relevance_of: Callable[[Tensor], Tensor],
    seed: int = 0,
    area: float = CAUSAL_AREA,
    pastes: int = CAUSAL_PASTES,
    removals: int = CAUSAL_REMOVALS,
) -> dict[int, dict[str, float]]:
    """The causal check of each strategy, without labels: are its members' most relevant
    pixels enough to make an image of another class the strategy's class (sufficient), and
    does its class leave its members without them (necessary)? Each against the same area taken
    from a random place of the same image (the control).

    For ``pastes`` seeded (member, recipient) pairs, the recipient an image predicted another
    class: the member's ``area`` most relevant pixels (``relevance_of``, `relevant_masks`)
    pasted onto the recipient at their place, and as control the same mask moved by a random
    shift (wrapping); for ``removals`` members, those pixels filled with the member's mean
    (per channel), and the moved mask as control.

    Args:
        strategy: N int64, each row's strategy.
        predicted: N, each row's predicted class (a strategy's rows share one).
        images_of: row indices -> their images (M x C x H x W).
        predict: images -> logits (M x classes).
        relevance_of: images -> relevance maps (M x H x W, larger: more relevant).
        seed: of the pairs, members and shifts.
        area: the share of an image's pixels pasted or removed.
        pastes: (member, recipient) pairs per strategy.
        removals: members per strategy whose relevant pixels are removed.

    Returns:
        strategy id -> ``sufficiency`` (share of the pastes predicted the strategy's class),
        ``sufficiency_control``, ``necessity`` (share of the removals predicted another
        class), ``necessity_control``, ``detail_sufficiency``, ``blur_necessity``,
        ``tint_sufficiency``, ``sufficiency_probability`` and
        ``sufficiency_control_probability`` (the mean probability of the strategy's class
        after the pastes), ``look_alike_sufficiency``, ``wide_sufficiency``,
        ``wide_sufficiency_control``, ``pattern_sufficiency``, ``moved_pattern_sufficiency``,
        ``look_alike_pattern_sufficiency``, ``look_alike_tint_sufficiency``,
        ``nearest_pattern_sufficiency`` and ``nearest_tint_sufficiency`` (see the module's
        docstring); a strategy whose model predicts no other class gets 0 sufficiencies.
    """
    generator = torch.Generator().manual_seed(seed)
    alike = torch.Generator().manual_seed(seed + 1)
    kin_draws = torch.Generator().manual_seed(seed + 2)
    strategy, predicted = strategy.cpu(), predicted.cpu()
    if not len(strategy):
        return {}
    moments, overall, class_means = _strategy_moments(strategy, predicted, images_of)
    out = {}
    for s in strategy.unique().tolist():
        own = (strategy == s).nonzero().flatten()
        c = int(predicted[own[0]])
        others = (predicted != c).nonzero().flatten()
        n_paste = pastes if len(others) else 0
        donors = own[torch.randint(len(own), (n_paste,), generator=generator)]
        recipients = others[torch.randint(max(1, len(others)), (n_paste,), generator=generator)]
        removed = own[torch.randperm(len(own), generator=generator)[:removals]]
        members = images_of(torch.cat([donors, removed]))
        side = torch.tensor(members.shape[-2:])
        shifts = (torch.rand(len(members), 2, generator=generator) * side).long()
        relevance = relevance_of(members)
        masks = relevant_masks(relevance, area).to(members.device)
        moved = _rolled(masks, shifts)
        wide = relevant_masks(relevance[:n_paste], min(1.0, WIDE_AREA / CAUSAL_AREA * area))
        wide = wide.to(members.device)
        wide_moved = _rolled(wide, shifts[:n_paste])
        donor, member = members[:n_paste], members[n_paste:]
        recipient = images_of(recipients).to(members.device)
        fill = member.mean((2, 3), keepdim=True).expand_as(member)
        mean, spread = moments[s]
        pattern = (mean - overall).to(members.device)
        agree = pattern.abs() > PATTERN_DEVIATIONS * spread.to(members.device)
        shared = pattern * agree if len(own) >= MIN_SIZE else torch.zeros_like(pattern)
        near = own[:0]
        if n_paste:  # the images of the class the donors look most like (their runner-up)
            second = predict(donor).float().cpu().topk(2, dim=1).indices[:, 1]
            near = (predicted == int(second.mode().values)).nonzero().flatten()
        picked = torch.randint(max(1, len(near)), (n_paste if len(near) else 0,), generator=alike)
        look_alike = images_of(near[picked]).to(members.device)
        closest = min(
            (k for k in class_means if k != c),
            key=lambda k: float((class_means[k] - mean).norm()),
            default=None,
        )
        kin = own[:0] if closest is None or not n_paste else (predicted == closest).nonzero()[:, 0]
        drawn = torch.randint(max(1, len(kin)), (n_paste if len(kin) else 0,), generator=kin_draws)
        nearest = images_of(kin[drawn]).to(members.device)
        batch = [
            torch.where(masks[:n_paste, None], donor, recipient),
            torch.where(moved[:n_paste, None], donor, recipient),
            torch.where(masks[n_paste:, None], fill, member),
            torch.where(moved[n_paste:, None], fill, member),
            recipient + donor - blurred(donor),
            blurred(member),
            recipient + donor.mean((2, 3), keepdim=True) - recipient.mean((2, 3), keepdim=True),
            torch.where(masks[: len(look_alike), None], donor[: len(look_alike)], look_alike),
            torch.where(wide[:, None], donor, recipient),
            torch.where(wide_moved[:, None], donor, recipient),
            recipient + shared,
            recipient + _rolled(pattern.expand(n_paste, *pattern.shape), shifts[:n_paste]),
            look_alike
            + _rolled(pattern.expand(len(look_alike), *pattern.shape), shifts[: len(look_alike)]),
            look_alike + pattern.mean((-2, -1), keepdim=True),
            nearest + _rolled(pattern.expand(len(nearest), *pattern.shape), shifts[: len(nearest)]),
            nearest + pattern.mean((-2, -1), keepdim=True),
        ]
        logits = predict(torch.cat(batch)).float().cpu()
        classes = logits.argmax(1).split([len(b) for b in batch])
        chance = logits.softmax(1)[:, c].split([len(b) for b in batch])
        out[s] = {
            "sufficiency": _share(classes[0] == c),
            "sufficiency_control": _share(classes[1] == c),
            "necessity": _share(classes[2] != c),
            "necessity_control": _share(classes[3] != c),
            "detail_sufficiency": _share(classes[4] == c),
            "blur_necessity": _share(classes[5] != c),
            "tint_sufficiency": _share(classes[6] == c),
            "sufficiency_probability": _mean(chance[0]),
            "sufficiency_control_probability": _mean(chance[1]),
            "look_alike_sufficiency": _share(classes[7] == c),
            "wide_sufficiency": _share(classes[8] == c),
            "wide_sufficiency_control": _share(classes[9] == c),
            "pattern_sufficiency": _share(classes[10] == c),
            "moved_pattern_sufficiency": _share(classes[11] == c),
            "look_alike_pattern_sufficiency": _share(classes[12] == c),
            "look_alike_tint_sufficiency": _share(classes[13] == c),
            "nearest_pattern_sufficiency": _share(classes[14] == c),
            "nearest_tint_sufficiency": _share(classes[15] == c),
        }
    return out


def _strategy_moments(
    strategy: Tensor, predicted: Tensor, images_of: Callable[[Tensor], Tensor], chunk: int = 256
) -> tuple[dict[int, tuple[Tensor, Tensor]], Tensor, dict[int, Tensor]]:
    """Each strategy's mean image and its pixels' standard deviation over its members (C x H x
    W each, on the CPU), the mean of all rows, and each predicted class's mean image (over its
    rows, whatever their strategy), in one pass of ``chunk`` images at a time."""
    sums: dict[int, Tensor] = {}
    squares: dict[int, Tensor] = {}
    by_class: dict[int, Tensor] = {}
    for rows in torch.arange(len(strategy)).split(chunk):
        images = images_of(rows).cpu().double()
        for s in strategy[rows].unique().tolist():
            block = images[strategy[rows] == s]
            sums[s] = sums[s] + block.sum(0) if s in sums else block.sum(0)
            squares[s] = squares[s] + (block**2).sum(0) if s in squares else (block**2).sum(0)
        for k in predicted[rows].unique().tolist():
            block = images[predicted[rows] == k].sum(0)
            by_class[k] = by_class[k] + block if k in by_class else block
    counts = dict(zip(*(t.tolist() for t in strategy.unique(return_counts=True)), strict=True))
    overall = sum(sums.values()) / len(strategy)
    moments = {}
    for s, total in sums.items():
        mean = total / counts[s]
        spread = (squares[s] / counts[s] - mean**2).clamp(min=0).sqrt()
        moments[s] = (mean.float(), spread.float())
    sizes = dict(zip(*(t.tolist() for t in predicted.unique(return_counts=True)), strict=True))
    class_means = {k: (total / sizes[k]).float() for k, total in by_class.items()}
    return moments, overall.float(), class_means


def _mean(values: Tensor) -> float:
    return float(values.double().mean()) if len(values) else 0.0


def _share(hits: Tensor) -> float:
    return float(hits.double().mean()) if len(hits) else 0.0
