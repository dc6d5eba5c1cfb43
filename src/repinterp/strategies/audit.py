"""The audit: which of a model's strategies a user should look at first, and why, without
labels.

A strategy rests on a *cue* when a small part of its members decides their class; the causal
check (`repinterp.strategies.causal_checks`) tests it by intervention, reading only the model's
predictions and gradients, and this module reads its shares as reasons, a score, a flag and one
ranking over the whole model.

The reasons (`REASONS`, each in [0, 1]) are ``portable_cue`` (sufficiency minus its control, at
least 0: a small cue that carries the class wherever it is pasted), ``necessary_cue``
(necessity minus its control, at least 0), ``fine_detail`` (``detail_sufficiency``),
``blur_sensitive`` (``blur_necessity``), ``tint`` (``tint_sufficiency``), ``wide_portable_cue``
(the wide paste minus its control, at least 0), ``shared_pattern``, ``moved_pattern``,
``look_alike_pattern`` (the runner-up's pattern minus its tint, at least 0) and
``nearest_pattern`` (the nearest class's pattern minus its tint, at least 0: a pattern, such as
a texture, that turns the images the members look like into their class, and not by its colour
alone). A strategy is read against the model's own strategies: its score is the most by which
one of the `SCORED` reasons exceeds that reason's model-wide median (the median over the classes
of each class's median over its strategies, so that a class split into many strategies counts
once), times the reason's weight (a tint counts half), or by which one of the `CLASS_SCORED`
reasons (``wide_portable_cue``, and ``blur_sensitive`` at half weight) exceeds its median over
the other strategies of its class (a strategy alone in its class is not read so), whichever is
larger; it is ``flagged`` from `FLAG_SCORE`, or from `KIN_SCORE` (half) when another strategy of
its class is flagged from `FLAG_SCORE` (`flags_of`: a cue the discovery splits over several
strategies of a class). One ranking runs over the whole model (`model_ranking`), and a class's
main (largest) strategy is scored like any other.

How the rule was chosen (``python -m studies.audit_tuning``, model seeds 100-102, 200-204 and
300-304, and the criteria's saved runs on seeds 400-404 and 500-504), what was measured and not
used, and how each version was judged by criteria written before their runs on seeds it was not
tuned on (this one: the sixth, on seeds 600-604, which it passes, 32 of 32 lines) is in
docs/method.md (section 6.5), docs/results.md ("Shortcut audit ... criterion") and the
changelog. Cost of the whole audit on 1,000 reference images, one thread, beside two other runs
on two cores: 4.1-12 s on ``mnist``, 9.5-33 s on ``shapes``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "CLASS_SCORED",
    "FLAG_SCORE",
    "KIN_SCORE",
    "REASONS",
    "SCORED",
    "StrategyAudit",
    "audit_scores",
    "audit_strategies",
    "flags_of",
    "kept_audit_is_current",
    "model_ranking",
    "reasons_of",
    "standout_scores",
]

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
"""The reasons the score reads against the whole model (the median of its classes' medians),
each with its weight (see `standout_scores`)."""
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
        checks: the causal check's shares it was read from
            (`repinterp.strategies.causal_checks.causal_checks`).
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


def reasons_of(checks: dict[str, float]) -> dict[str, float]:
    """`REASONS` of one strategy's causal-check shares
    (`repinterp.strategies.causal_checks.causal_checks`)."""
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
    over_classes: bool = False,
) -> list[float]:
    """Each strategy's score: the most by which one of its ``scored`` reasons exceeds that
    reason's median over all the strategies given (the model's), times the reason's weight;
    with ``classes`` (each strategy's class), also by which one of its ``class_scored`` reasons
    exceeds that reason's median over the other strategies of its class (where it has
    others), whichever is larger. With ``sizes`` (each strategy's members), the medians are
    over images (each strategy counted once per member); with ``over_classes`` (and
    ``classes``), the model-wide median is the median over the classes of each class's median
    (a class the discovery splits into many strategies counts once, so a cue split over most
    of the model's strategies does not set its own baseline): the audit's reading
    (`audit_scores`), chosen on the tuning models and the criteria's saved runs
    (``studies.audit_tuning``).

    With both ``sizes`` and ``over_classes``, each class's median is over its images and the
    median across the classes counts each class once.

    Raises:
        ValueError: ``over_classes`` without ``classes``; ``classes`` or ``sizes`` not one per
            strategy.
    """
    if over_classes and classes is None:
        raise ValueError("over_classes needs each strategy's class")
    for name, given in (("classes", classes), ("sizes", sizes)):
        if given is not None and len(given) != len(reasons):
            raise ValueError(f"{name} must be one per strategy ({len(reasons)}), got {len(given)}")
    if not reasons:
        return []
    counts = sizes if sizes is not None else [1] * len(reasons)

    def median(rows: list[int], r: str) -> float:
        return _weighted_median([reasons[j][r] for j in rows], [counts[j] for j in rows])

    everyone = list(range(len(reasons)))
    if over_classes:
        groups: dict[int, list[int]] = {}
        for j, c in enumerate(classes or ()):
            groups.setdefault(c, []).append(j)
        medians = {
            r: statistics.median(median(rows, r) for rows in groups.values()) for r in scored
        }
    else:
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


def audit_scores(reasons: list[dict[str, float]], classes: list[int]) -> list[float]:
    """The audit's scores of a model's strategies (their reasons and classes, in one order):
    `standout_scores` with the model-wide medians over the classes."""
    return standout_scores(reasons, classes=classes, over_classes=True)


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
    scores = audit_scores(reasons, classes)
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
        checks: strategy id -> its causal-check shares
            (`repinterp.strategies.causal_checks.causal_checks`; every strategy of ``strategy``).
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
    scores = audit_scores(reasons, [owner[s] for s in ids])
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
