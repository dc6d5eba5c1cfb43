"""What a request names and asks, checked without HTTP: image keys, query parameters, and the
errors that refuse a request for an unknown thing (HTTP 404) or a malformed one (HTTP 400).

Images are named by keys, never by paths: ``r<i>`` is reference image ``i`` (no leading zeros),
``u<token>`` an upload (16 characters ``A-Z a-z 0-9 _ -``).
"""

from __future__ import annotations

import re

__all__ = ["KEY", "BadRequest", "NotFound", "choice", "reference_index", "whole_number"]

KEY = re.compile(r"r(?P<reference>0|[1-9][0-9]{0,8})|u(?P<upload>[A-Za-z0-9_-]{16})")


class NotFound(LookupError):
    """No such image, explanation or heat map (HTTP 404)."""


class BadRequest(ValueError):
    """A request the viewer cannot serve as asked: a broken upload, a bad page (HTTP 400)."""


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
