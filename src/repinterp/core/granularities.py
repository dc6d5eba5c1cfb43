"""The granularities by name: the paper's ``class`` and the decision sets beyond it
([`decision_set`][repinterp.core.decision_set] says what a decision set is)."""

from __future__ import annotations

import warnings
from dataclasses import fields
from typing import Any

from torch import Tensor

from .decision_set import ClassSet, Decisions, DecisionSet
from .logic import LogicSet
from .strategy_set import StrategySet

__all__ = ["DECISION_SETS", "GRANULARITIES", "RETIRED", "decision_set", "load_decisions"]

DECISION_SETS: dict[str, type[DecisionSet]] = {
    kind.name: kind for kind in (ClassSet, LogicSet, StrategySet)
}
GRANULARITIES = tuple(DECISION_SETS)
RETIRED = (
    "granularity='logic' is retired and will be removed in 0.6: it won no row of the criterion "
    "of docs/results.md that another option does not win; granularity='strategy' finds the "
    "groups below the class (an index made with it still loads)"
)
"""Said when a ``logic`` decision set is made for a fit (not when an index is loaded)."""


def decision_set(granularity: str = "class", **settings: Any) -> DecisionSet:
    """The decision set of a granularity, with the user's settings (e.g. ``gamma`` for
    ``"logic"``); a setting given as None is left to the data.

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
    if kind is LogicSet:
        warnings.warn(RETIRED, FutureWarning, stacklevel=2)
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
