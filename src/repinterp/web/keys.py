"""Keys, explained entries and request parameters of the viewer, without HTTP.

Images are named by keys, never by paths: ``r<i>`` is reference image ``i`` (no leading zeros),
``u<token>`` an upload (16 characters ``A-Z a-z 0-9 _ -``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import Tensor

from ..interpreter import Interpretation
from .images import BadRequest, NotFound

__all__ = ["KEY", "Entry", "choice", "reference_index", "whole_number"]

KEY = re.compile(r"r(?P<reference>0|[1-9][0-9]{0,8})|u(?P<upload>[A-Za-z0-9_-]{16})")


def reference_index(key: str, n_reference: int) -> int | None:
    """The reference index that ``key`` names, or None for an upload key.

    Raises:
        NotFound: not a key, or a reference index not below ``n_reference``.
    """
    match = KEY.fullmatch(key)
    if match is None:
        raise NotFound(f"no image {key!r}: images are r<reference index> or u<upload id>")
    if match["upload"] is not None:
        return None
    i = int(match["reference"])
    if i >= n_reference:
        raise NotFound(f"no reference image {i}: the index has {n_reference}")
    return i


@dataclass(frozen=True)
class Entry:
    """An explained image: its pixels (C x H x W in [0, 1]), its interpretation, and the
    reference images it covers, most similar first, with their ``Dist``; a reference image
    itself is left out of its own list."""

    key: str
    pixels: Tensor
    explanation: Interpretation
    ranked: Tensor
    distances: Tensor

    @classmethod
    def of(
        cls, key: str, pixels: Tensor, explanation: Interpretation, own: int | None = None
    ) -> Entry:
        """``own``: the input's reference index (None for an upload), left out."""
        ranked = explanation.similar()
        position = torch.searchsorted(explanation.covered, ranked)
        distances = explanation.distances()[position]
        if own is not None:
            keep = ranked != own
            ranked, distances = ranked[keep], distances[keep]
        return cls(key, pixels, explanation, ranked, distances)


def whole_number(value: str | None, name: str, default: int, low: int, high: int) -> int:
    """``value`` as a whole number in [low, high]; ``default`` when None.

    Raises:
        BadRequest: not a whole number, or out of range.
    """
    try:
        number = default if value is None else int(value)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, got {value!r}") from None
    if not low <= number <= high:
        raise BadRequest(f"{name} must lie in [{low}, {high}], got {number}")
    return number


def choice(value: str | None, name: str, choices: tuple[str, ...], default: str) -> str:
    """``value`` if it is one of ``choices``; ``default`` when None.

    Raises:
        BadRequest: another value.
    """
    if value is None:
        return default
    if value not in choices:
        raise BadRequest(f"unknown {name} {value!r}; expected one of {', '.join(choices)}")
    return value
