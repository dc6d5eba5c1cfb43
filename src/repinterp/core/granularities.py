"""The registry of granularities: their names, the paper's default, those removed, and the
one way to make one by name. The command line, the store, the viewer and the evaluation read
the names here; a granularity's class is imported only when one is made (so that ``repinterp
--help`` answers without torch). [`granularity`][repinterp.core.granularity] says what a
granularity is."""

from __future__ import annotations

from dataclasses import fields
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

    from .granularity import FittedGranularity, Granularity

__all__ = [
    "GRANULARITIES",
    "PAPERS",
    "REMOVED",
    "granularity",
    "granularity_class",
    "load_granularity",
    "removed",
]

_CLASSES = {
    "class": ("repinterp.core.granularity", "Granularity"),
    "strategy": ("repinterp.strategies.granularity", "StrategySet"),
}
"""Each granularity by name: the module and class that implement it."""
GRANULARITIES = tuple(_CLASSES)
"""The granularities' names, the paper's first."""
PAPERS = GRANULARITIES[0]
"""The paper's granularity, the default."""
REMOVED = {"logic": "0.6"}
"""Granularities removed, with the release that removed them: their indexes are refused."""


def removed(name: Any) -> str | None:
    """Why an index fitted at granularity ``name`` is refused (what to do), or None if ``name``
    is not a removed granularity."""
    if not isinstance(name, str) or name not in REMOVED:
        return None
    choices = " or ".join(repr(known) for known in GRANULARITIES)
    return (
        f"was fitted with granularity {name!r}, removed in {REMOVED[name]}: fit it again "
        f"with {choices}"
    )


def granularity_class(name: str) -> type[Granularity]:
    """The class of the granularity ``name``.

    Raises:
        ValueError: an unknown name.
    """
    if not isinstance(name, str) or name not in _CLASSES:
        raise ValueError(f"unknown granularity {name!r}; choose one of {', '.join(GRANULARITIES)}")
    module, attribute = _CLASSES[name]
    return getattr(import_module(module), attribute)


def granularity(name: str = PAPERS, **settings: Any) -> Granularity:
    """The granularity ``name`` with the user's settings (e.g. ``k_max`` for ``"strategy"``); a
    setting given as None is left to the data.

    Raises:
        ValueError: an unknown granularity, a setting it does not take, or a bad value.
    """
    kind = granularity_class(name)
    given = {k: v for k, v in settings.items() if v is not None}
    accepted = {f.name for f in fields(kind)}
    for key in given:
        if key not in accepted:
            takers = [
                n for n in GRANULARITIES if key in {f.name for f in fields(granularity_class(n))}
            ]
            where = f"granularity={takers[0]!r}" if takers else "no granularity"
            raise ValueError(f"{key} applies to {where} only")
    return kind(**given)


def load_granularity(fields_: dict[str, Any], tensors: dict[str, Tensor]) -> FittedGranularity:
    """The fitted granularity of a saved index, from its manifest's fields (no ``granularity``
    field: the paper's) and its tensors.

    Raises:
        ValueError: an unknown granularity, or its fields or tensors are missing or damaged.
    """
    name = fields_.get("granularity", PAPERS)
    if not isinstance(name, str) or name not in _CLASSES:
        raise ValueError(f"its granularity {name!r} is not one of {', '.join(GRANULARITIES)}")
    return granularity_class(name)().load(fields_, tensors)
