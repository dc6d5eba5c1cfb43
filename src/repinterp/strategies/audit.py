"""The audit: which of a model's strategies a user should look at first, and why, without
labels.

A strategy (a group of images of one predicted class, `repinterp.strategies.discovery`) rests on a
*cue* when a small part of its members decides their class. `causal_checks` tests it by
intervention, reading only the model's predictions and its gradients (never a label, a mask or
a ``marked`` flag):

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

The reasons (`REASONS`, each in [0, 1]) are ``portable_cue`` (sufficiency minus its control, at
least 0: a small cue that carries the class wherever it is pasted), ``necessary_cue``
(necessity minus its control, at least 0), ``fine_detail`` (``detail_sufficiency``),
``blur_sensitive`` (``blur_necessity``), ``tint`` (``tint_sufficiency``), ``wide_portable_cue``
(the wide paste minus its control, at least 0), ``shared_pattern``, ``moved_pattern``,
``look_alike_pattern`` (the runner-up's pattern minus its tint, at least 0) and
``nearest_pattern`` (the nearest class's pattern minus its tint, at least 0: a pattern, such as
a texture, that turns the images the members look like into their class, and not by its colour
alone). A strategy is read against the model's own strategies: its score is the most by which
one of the `SCORED` reasons exceeds that reason's median over all the model's strategies, times
the reason's weight (a tint counts half), or by which one of the `CLASS_SCORED` reasons
(``wide_portable_cue``, and ``blur_sensitive`` at half weight) exceeds its median over the
other strategies of its class (a strategy alone in its class is not read so), whichever is
larger; it is ``flagged`` from `FLAG_SCORE`, or from `KIN_SCORE` (half) when another strategy
of its class is flagged from `FLAG_SCORE` (`flags_of`: a cue the discovery splits over several
strategies of a class). One ranking runs over the whole model (`model_ranking`), and a class's
main (largest) strategy is scored like any other.

How the rule was chosen (``python -m studies.audit_tuning``, model seeds 100-102, 200-204 and
300-304, and for `KIN_SCORE` the fourth criterion's saved runs), what was measured and not used,
and how each version was judged by criteria written before their runs on seeds it was not tuned
on (this one: 23 of 24 lines on seeds 500-504, failing the ``shapes`` moving mark's cued images
told a flagged strategy) is in docs/method.md (section 6.5), docs/results.md ("Shortcut audit
... criterion") and the changelog. Cost of the whole audit on 1,000 reference images, one
thread, beside two other runs on two cores: 4.1-12 s on ``mnist``, 9.5-33 s on ``shapes``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .discovery import MIN_SIZE

__all__ = [
    "BLUR_SIGMA",
    "CAUSAL_AREA",
    "CAUSAL_PASTES",
    "CAUSAL_REMOVALS",
    "CLASS_SCORED",
    "FLAG_SCORE",
    "KIN_SCORE",
    "PATTERN_DEVIATIONS",
    "REASONS",
    "SCORED",
    "WIDE_AREA",
    "StrategyAudit",
    "audit_strategies",
    "blurred",
    "causal_checks",
    "flags_of",
    "kept_audit_is_current",
    "model_ranking",
    "reasons_of",
    "relevant_masks",
    "standout_scores",
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
REASONS = (
    "portable_cue",
    "necessary_cue",
    "fine_detail",
    "blur_sensitive",
    "tint",
    "wide_portable_cue",
    "shared_pattern",
    "moved_pattern",
    "look_alike_pattern",
    "nearest_pattern",
)
"""The audit's reasons, each in [0, 1] (see the module's docstring)."""
SCORED = {
    "portable_cue": 1.0,
    "fine_detail": 1.0,
    "tint": 0.5,
    "shared_pattern": 1.0,
    "moved_pattern": 1.0,
    "nearest_pattern": 1.0,
}
"""The reasons the score reads against all the model's strategies, each with its weight (see
`standout_scores`)."""
CLASS_SCORED = {"wide_portable_cue": 1.0, "blur_sensitive": 0.5}
"""The reasons the score reads against the other strategies of the strategy's class (see
`standout_scores`)."""
FLAG_SCORE = 0.4
"""The score from which a strategy is flagged."""
KIN_SCORE = FLAG_SCORE / 2
"""The score from which a strategy is flagged when another strategy of its class scores
`FLAG_SCORE` or more (a cue the discovery splits over several strategies of a class)."""


@dataclass(frozen=True)
class StrategyAudit:
    """One strategy's audit.

    Attributes:
        id: the strategy's id.
        predicted_class: the class its members are predicted.
        size: its members.
        main: whether it is its class's main (largest) strategy.
        reasons: `REASONS` -> value in [0, 1] (see the module's docstring).
        checks: the causal check's shares it was read from (`causal_checks`).
        score: how far it stands out of the model's strategies (`standout_scores`).
        rank: its rank among its class's strategies (1: look at it first).
        model_rank: its rank among all the model's strategies (`model_ranking`).
        flagged: by `flags_of` (its score, and its class's strategies' scores).
        runner_up: its members' most common second-highest class.
        margin: its members' mean top-1 minus top-2 logit.
    """

    id: int
    predicted_class: int
    size: int
    main: bool
    reasons: dict[str, float]
    checks: dict[str, float]
    score: float
    rank: int
    model_rank: int
    flagged: bool
    runner_up: int
    margin: float

    def to_dict(self) -> dict[str, object]:
        """JSON-able."""
        return asdict(self)


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


def reasons_of(checks: dict[str, float]) -> dict[str, float]:
    """`REASONS` of one strategy's `causal_checks` shares."""
    return {
        "portable_cue": max(0.0, checks["sufficiency"] - checks["sufficiency_control"]),
        "necessary_cue": max(0.0, checks["necessity"] - checks["necessity_control"]),
        "fine_detail": checks["detail_sufficiency"],
        "blur_sensitive": checks["blur_necessity"],
        "tint": checks["tint_sufficiency"],
        "wide_portable_cue": max(
            0.0, checks["wide_sufficiency"] - checks["wide_sufficiency_control"]
        ),
        "shared_pattern": checks["pattern_sufficiency"],
        "moved_pattern": checks["moved_pattern_sufficiency"],
        "look_alike_pattern": max(
            0.0, checks["look_alike_pattern_sufficiency"] - checks["look_alike_tint_sufficiency"]
        ),
        "nearest_pattern": max(
            0.0, checks["nearest_pattern_sufficiency"] - checks["nearest_tint_sufficiency"]
        ),
    }


def standout_scores(
    reasons: list[dict[str, float]],
    scored: dict[str, float] = SCORED,
    classes: list[int] | None = None,
    class_scored: dict[str, float] = CLASS_SCORED,
    sizes: list[int] | None = None,
) -> list[float]:
    """Each strategy's score: the most by which one of its ``scored`` reasons exceeds that
    reason's median over all the strategies given (the model's), times the reason's weight;
    with ``classes`` (each strategy's class), also by which one of its ``class_scored`` reasons
    exceeds that reason's median over the other strategies of its class (where it has
    others), whichever is larger. With ``sizes`` (each strategy's members), the medians are
    over images (each strategy counted once per member: a cue split over many small strategies
    does not set its own baseline); the audit reads medians over strategies, which raised fewer
    false alarms on the tuning models (``studies.audit_tuning``)."""
    if not reasons:
        return []
    counts = sizes if sizes is not None else [1] * len(reasons)

    def median(rows: list[int], r: str) -> float:
        return _weighted_median([reasons[j][r] for j in rows], [counts[j] for j in rows])

    everyone = list(range(len(reasons)))
    medians = {r: median(everyone, r) for r in scored}
    scores = [max(w * (x[r] - medians[r]) for r, w in scored.items()) for x in reasons]
    if classes is None or not class_scored:
        return scores
    for i, (x, c) in enumerate(zip(reasons, classes, strict=True)):
        others = [j for j in everyone if classes[j] == c and j != i]
        if others:
            within = max(w * (x[r] - median(others, r)) for r, w in class_scored.items())
            scores[i] = max(scores[i], within)
    return scores


def kept_audit_is_current(audits: list[dict[str, Any]]) -> bool:
    """Whether audits kept with an index (every strategy of a model, each `StrategyAudit`'s
    ``to_dict``) are this version's: the same `REASONS`, and their scores and flags those this
    rule gives their reasons (an audit kept by a version of another rule or reasons is not)."""
    if not audits or any(set(a.get("reasons", ())) != set(REASONS) for a in audits):
        return False
    try:
        reasons = [{r: float(a["reasons"][r]) for r in REASONS} for a in audits]
        classes = [int(a["predicted_class"]) for a in audits]
        kept = [(float(a["score"]), bool(a["flagged"])) for a in audits]
    except (KeyError, TypeError, ValueError):
        return False
    scores = standout_scores(reasons, classes=classes)
    flags = flags_of(scores, classes)
    return all(
        math.isclose(score, old, rel_tol=1e-9, abs_tol=1e-12) and flag == was
        for score, flag, (old, was) in zip(scores, flags, kept, strict=True)
    )


def flags_of(
    scores: list[float],
    classes: list[int],
    flag_score: float = FLAG_SCORE,
    kin_score: float = KIN_SCORE,
) -> list[bool]:
    """Each strategy's flag: its score is ``flag_score`` or more, or ``kin_score`` or more in a
    class where another strategy's score is ``flag_score`` or more (once a class is flagged,
    the other parts of a cue the discovery split over several of its strategies are too).

    Args:
        scores: each strategy's score (`standout_scores`).
        classes: each strategy's predicted class.
        flag_score: the score from which a strategy is flagged.
        kin_score: the lower score from which a flagged strategy's class's others are.
    """
    alarmed = {c for score, c in zip(scores, classes, strict=True) if score >= flag_score}
    return [
        score >= flag_score or (c in alarmed and score >= kin_score)
        for score, c in zip(scores, classes, strict=True)
    ]


def _weighted_median(values: list[float], weights: list[int]) -> float:
    """The median of ``values``, each repeated ``weights`` times (the mean of the two middle
    ones for an even total, as `statistics.median`)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    total = sum(weights)

    def at(k: int) -> float:
        seen = 0
        for i in order:
            seen += weights[i]
            if seen > k:
                return values[i]
        raise ValueError("weights must be positive")

    return at(total // 2) if total % 2 else (at(total // 2 - 1) + at(total // 2)) / 2


def model_ranking(scores: list[float], sizes: list[int]) -> list[int]:
    """Each strategy's rank over the whole model (1: look at it first): by score, highest
    first; ties: the smaller strategy, then the earlier one."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], sizes[i], i))
    ranks = [0] * len(scores)
    for rank, i in enumerate(order, 1):
        ranks[i] = rank
    return ranks


def audit_strategies(
    strategy: Tensor,
    logits: Tensor,
    checks: dict[int, dict[str, float]],
    flag_score: float = FLAG_SCORE,
    kin_score: float = KIN_SCORE,
) -> list[StrategyAudit]:
    """The audit of every strategy of a model, in the model-wide ranking's order.

    Args:
        strategy: N int64, each image's strategy (a strategy holds images of one predicted
            class).
        logits: N x classes, the model's; the predicted class is the top one.
        checks: strategy id -> its `causal_checks` shares (every strategy of ``strategy``).
        flag_score: the score from which a strategy is flagged.
        kin_score: the score from which a strategy is flagged when another strategy of its
            class scores ``flag_score`` or more (`flags_of`).

    Returns:
        One `StrategyAudit` per strategy, ``model_rank`` 1 first.

    Raises:
        ValueError: shapes that do not match, NaN or infinite logits, a strategy holding images
            of two predicted classes or without checks.
    """
    if strategy.ndim != 1 or strategy.dtype.is_floating_point:
        raise ValueError(
            f"strategy must be N integers, got {strategy.dtype} {tuple(strategy.shape)}"
        )
    if logits.ndim != 2 or len(logits) != len(strategy) or logits.shape[1] < 2:
        raise ValueError(
            f"logits must be {len(strategy)} x classes (at least 2), got {tuple(logits.shape)}"
        )
    if not torch.isfinite(logits).all():
        raise ValueError("logits hold NaN or infinite values")
    strategy = strategy.cpu()
    top2 = logits.detach().float().cpu().topk(2, dim=1)
    predicted, runner = top2.indices[:, 0], top2.indices[:, 1]
    margins = top2.values[:, 0] - top2.values[:, 1]
    ids = strategy.unique().tolist()
    missing = [s for s in ids if s not in checks]
    if missing:
        raise ValueError(f"no causal checks for strategies {', '.join(map(str, missing))}")
    owner, rows = {}, {}
    for s in ids:
        rows[s] = strategy == s
        owned = predicted[rows[s]].unique()
        if len(owned) > 1:
            names = ", ".join(map(str, owned.tolist()))
            raise ValueError(f"strategy {s} holds images of predicted classes {names}")
        owner[s] = int(owned[0])
    sizes = [int(rows[s].sum()) for s in ids]
    reasons = [reasons_of(checks[s]) for s in ids]
    scores = standout_scores(reasons, classes=[owner[s] for s in ids])
    model_ranks = model_ranking(scores, sizes)
    flags = flags_of(scores, [owner[s] for s in ids], flag_score, kin_score)
    main, class_rank = {}, {}
    for c in set(owner.values()):
        own = [i for i, s in enumerate(ids) if owner[s] == c]
        main[c] = ids[max(own, key=lambda i: (sizes[i], -ids[i]))]
        for rank, i in enumerate(sorted(own, key=lambda i: model_ranks[i]), 1):
            class_rank[ids[i]] = rank
    audits = [
        StrategyAudit(
            id=s,
            predicted_class=owner[s],
            size=sizes[i],
            main=main[owner[s]] == s,
            reasons=reasons[i],
            checks=dict(checks[s]),
            score=scores[i],
            rank=class_rank[s],
            model_rank=model_ranks[i],
            flagged=flags[i],
            runner_up=int(torch.bincount(runner[rows[s]]).argmax()),
            margin=float(margins[rows[s]].mean()),
        )
        for i, s in enumerate(ids)
    ]
    return sorted(audits, key=lambda a: a.model_rank)
