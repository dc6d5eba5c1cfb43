"""The granularities by name: the paper's ``class`` and the decision sets beyond it
([`decision_set`][repinterp.core.decision_set] says what a decision set is)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from torch import Tensor

from .decision_set import ClassSet, Decisions, DecisionSet
from .strategy_set import StrategySet

__all__ = ["DECISION_SETS", "GRANULARITIES", "REMOVED", "decision_set", "load_decisions", "removed"]

DECISION_SETS: dict[str, type[DecisionSet]] = {kind.name: kind for kind in (ClassSet, StrategySet)}
GRANULARITIES = tuple(DECISION_SETS)
REMOVED = {"logic": "0.6"}
"""Granularities removed, with the release that removed them: their indexes are refused."""


def removed(granularity: Any) -> str | None:
    """Why an index fitted at ``granularity`` is refused (what to do), or None if it is not a
    removed granularity."""
    if not isinstance(granularity, str) or granularity not in REMOVED:
        return None
    choices = " or ".join(repr(name) for name in GRANULARITIES)
    return (
        f"was fitted with granularity {granularity!r}, removed in {REMOVED[granularity]}: "
        f"fit it again with {choices}"
    )


def decision_set(granularity: str = "class", **settings: Any) -> DecisionSet:
    """The decision set of a granularity, with the user's settings (e.g. ``k_max`` for
    ``"strategy"``); a setting given as None is left to the data.

    Raises:
        ValueError: an unknown granularity, a setting it does not take, or a bad value.
    """
    kind = DECISION_SETS.get(granularity)
    if kind is None:
        raise ValueError(
            f"unknown granularity {granularity!r}; choose one of {', '.join(GRANULARITIES)}"
        )
    given = {k: v for k, v in settings.items() if v is not None}
    accepted = {f.name for f in fields(kind)}
    for key in given:
        if key not in accepted:
            takers = [n for n, k in DECISION_SETS.items() if key in {f.name for f in fields(k)}]
            where = f"granularity={takers[0]!r}" if takers else "no granularity"
            raise ValueError(f"{key} applies to {where} only")
    return kind(**given)


def load_decisions(manifest: dict[str, Any], tensors: dict[str, Tensor]) -> Decisions:
    """The fitted decision set of a saved index (no ``granularity`` field: the paper's).

    Raises:
        ValueError: an unknown granularity, or its fields or tensors are missing or damaged.
    """
    name = manifest.get("granularity", "class")
    kind = DECISION_SETS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise ValueError(f"its granularity {name!r} is not one of {', '.join(GRANULARITIES)}")
    return kind().load(manifest, tensors)
