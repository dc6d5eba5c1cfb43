"""The audit: which strategies of a class a user should look at first, and why, without labels.

Each strategy (a group of images of one predicted class, `repinterp.strategies.discovery`) is set
against its class's *main* strategy (the largest; ties: the lowest id) on reasons that are each
a number in [0, 1], 0 for the main strategy itself:

- ``fixed_position``: its members' heat maps pile up on one place more than the main
  strategy's do: ``max(0, C(s) - C(main))``, ``C`` the share of a mean map's mass (the members'
  maps averaged, then divided by their sum) on its `TOP_AREA` most relevant pixels;
- ``map_shift``: it looks elsewhere: ``1 - sum min(m_s, m_main)`` of the two mean maps, each
  divided by its sum (0: the same map, 1: no overlap);
- ``logic_distance``: ``(1 - cos) / 2`` of its members' mean vector (channel relevances or
  pooled features) and the main strategy's;
- ``look_alike``: its members share one runner-up class more than the main strategy's do:
  ``max(0, r(s) - r(main))``, ``r`` the share of members whose second-highest logit is the
  group's most common runner-up class;
- ``size``: small groups rank up: ``1 - n_s / n_main``.

The score is the mean of the reasons (`REASONS`); a class's strategies rank by it, highest
first (rank 1; ties: the smaller strategy, then the lower id), so the main strategy ranks last.
A strategy is ``flagged`` when its score reaches `FLAG_SCORE`. Nothing here reads a label, a
mask or a ``marked`` flag: only the model's logits, the heat maps and the vectors.

The rule (the mean, 0.3) was written before the measurements. Measured on one model per data
set (seed 0, default layer, 2,000 reference images; strategies by `repinterp.strategies.discovery`'
defaults; maps: gradient x input at the target layer summed over channels, ReLU, upsampled,
min-max scaled; vectors: channel relevances, L2-normalised): the strategy holding most marked
images ranks first in its class and scores 0.501 (``mnist-mark:0.3``) and 0.416
(``shapes-mark:0.3``), every other strategy of those models at most 0.186 and 0.240; the
highest score of the clean models is 0.172 (``mnist-mark:0``), 0.170 (``mnist-super``), 0.217
(``shapes-mark:0``) and 0.242 (``shapes``): nothing flagged. ``fixed_position`` separates best
(0.306 and 0.377 against at most 0.104 for every other strategy of the six models);
``map_shift`` is high on clean ``shapes`` strategies too (up to 0.81).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor

__all__ = [
    "FLAG_SCORE",
    "REASONS",
    "TOP_AREA",
    "StrategyAudit",
    "audit_strategies",
    "concentration",
]

REASONS = ("fixed_position", "map_shift", "logic_distance", "look_alike", "size")
TOP_AREA = 0.05
"""The share of a map's pixels whose mass `concentration` measures."""
FLAG_SCORE = 0.3
"""The score from which a strategy is flagged."""


@dataclass(frozen=True)
class StrategyAudit:
    """One strategy's audit.

    Attributes:
        id: the strategy's id.
        predicted_class: the class its members are predicted.
        size: its members.
        main: whether it is its class's main (largest) strategy.
        reasons: `REASONS` -> value in [0, 1] (see the module's docstring).
        score: the mean of the reasons.
        rank: 1 for the strategy of its class to look at first.
        flagged: ``score >= flag_score``.
        runner_up: its members' most common second-highest class.
        margin: its members' mean top-1 minus top-2 logit.
    """

    id: int
    predicted_class: int
    size: int
    main: bool
    reasons: dict[str, float]
    score: float
    rank: int
    flagged: bool
    runner_up: int
    margin: float

    def to_dict(self) -> dict[str, object]:
        """JSON-able."""
        return asdict(self)


def concentration(mean_map: Tensor, top_area: float = TOP_AREA) -> float:
    """The share of a non-negative map's mass on its ``top_area`` most massive pixels (at least
    one): ``top_area`` for a uniform map, 1 for one whose mass lies on so few pixels; a map
    without mass counts as uniform."""
    values = mean_map.flatten().double()
    top = max(1, round(top_area * len(values)))
    total = float(values.sum())
    if total <= 0:
        return top / len(values)
    return float(values.topk(top).values.sum()) / total


def _unit_mass(mean_map: Tensor) -> Tensor:
    total = mean_map.sum()
    if total <= 0:
        return torch.full_like(mean_map, 1 / mean_map.numel())
    return mean_map / total


def _check(strategy: Tensor, maps: Tensor, vectors: Tensor, logits: Tensor) -> None:
    n = len(strategy)
    if strategy.ndim != 1 or strategy.dtype.is_floating_point:
        raise ValueError(
            f"strategy must be N integers, got {strategy.dtype} {tuple(strategy.shape)}"
        )
    for name, value, ndim in (("maps", maps, 3), ("vectors", vectors, 2), ("logits", logits, 2)):
        if value.ndim != ndim or len(value) != n:
            raise ValueError(
                f"{name} must have {ndim} dimensions and {n} rows, got shape {tuple(value.shape)}"
            )
        if not torch.isfinite(value).all():
            raise ValueError(f"{name} hold NaN or infinite values")
    if logits.shape[1] < 2:
        raise ValueError(f"logits must have at least 2 classes, got {logits.shape[1]}")
    if n and (maps.min() < 0 or maps.max() > 1):
        raise ValueError("maps must lie in [0, 1]")


def audit_strategies(
    strategy: Tensor,
    maps: Tensor,
    vectors: Tensor,
    logits: Tensor,
    flag_score: float = FLAG_SCORE,
) -> list[StrategyAudit]:
    """The audit of every strategy, class by class (ascending), each class's in rank order.

    Args:
        strategy: N int64, each image's strategy (a strategy holds images of one predicted
            class).
        maps: N x H x W heat maps in [0, 1] (each image's, by any method).
        vectors: N x D, e.g. channel relevances or spatially pooled feature maps.
        logits: N x classes, the model's; the predicted class is the top one.
        flag_score: the score from which a strategy is flagged.

    Returns:
        One `StrategyAudit` per strategy.

    Raises:
        ValueError: shapes that do not match, NaN or infinite values, maps outside [0, 1], a
            strategy holding images of two predicted classes.
    """
    _check(strategy, maps, vectors, logits)
    strategy = strategy.cpu()
    top2 = logits.detach().float().cpu().topk(2, dim=1)
    predicted, runner = top2.indices[:, 0], top2.indices[:, 1]
    margins = top2.values[:, 0] - top2.values[:, 1]
    maps, vectors = maps.detach(), vectors.detach()
    ids = strategy.unique()
    owner = {}
    for s in ids.tolist():
        owned = predicted[strategy == s].unique()
        if len(owned) > 1:
            names = ", ".join(map(str, owned.tolist()))
            raise ValueError(f"strategy {s} holds images of predicted classes {names}")
        owner[s] = int(owned[0])
    audits = []
    for c in sorted(set(owner.values())):
        members = {s: strategy == s for s in owner if owner[s] == c}
        sizes = {s: int(rows.sum()) for s, rows in members.items()}
        main = max(sizes, key=lambda s: (sizes[s], -s))
        stats = {s: _stats(rows, maps, vectors, runner) for s, rows in members.items()}
        rows = []
        for s in members:
            reasons = (
                dict.fromkeys(REASONS, 0.0)
                if s == main
                else _reasons(stats[s], stats[main], sizes[s] / sizes[main])
            )
            score = sum(reasons.values()) / len(reasons)
            rows.append((s, reasons, score))
        rows.sort(key=lambda row: (-row[2], sizes[row[0]], row[0]))
        for rank, (s, reasons, score) in enumerate(rows, 1):
            audits.append(
                StrategyAudit(
                    id=s,
                    predicted_class=c,
                    size=sizes[s],
                    main=s == main,
                    reasons=reasons,
                    score=score,
                    rank=rank,
                    flagged=score >= flag_score,
                    runner_up=stats[s]["runner_up"],
                    margin=float(margins[members[s]].mean()),
                )
            )
    return audits


def _stats(rows: Tensor, maps: Tensor, vectors: Tensor, runner: Tensor) -> dict:
    """A strategy's mean map (unit mass), its concentration, mean vector, runner-up share."""
    mean_map = maps[rows.to(maps.device)].double().mean(0).cpu()
    counts = torch.bincount(runner[rows])
    return {
        "map": _unit_mass(mean_map),
        "concentration": concentration(mean_map),
        "vector": vectors[rows.to(vectors.device)].double().mean(0).cpu(),
        "runner_up": int(counts.argmax()),
        "runner_share": float(counts.max()) / int(rows.sum()),
    }


def _reasons(own: dict, main: dict, relative_size: float) -> dict[str, float]:
    cosine = torch.nn.functional.cosine_similarity(own["vector"], main["vector"], dim=0)
    return {
        "fixed_position": max(0.0, own["concentration"] - main["concentration"]),
        "map_shift": 1.0 - float(torch.minimum(own["map"], main["map"]).sum()),
        "logic_distance": float((1 - cosine.clamp(-1, 1)) / 2),
        "look_alike": max(0.0, own["runner_share"] - main["runner_share"]),
        "size": 1.0 - relative_size,
    }
