"""How a notebook shows the method's objects without the method importing presentation.

``Interpretation``, ``RegionSet`` and ``Strategy`` answer ``show(...)`` and ``_repr_html_``
by asking this registry for the view of their type; [`repinterp.display`][repinterp.display]
registers its views here when it is imported (the interpreter imports it, so any object an
interpreter made can be shown).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["HtmlView", "View", "register_view", "render"]

View = Callable[..., "HtmlView"]
"""A view: ``view(obj, reference=None, **options) -> HtmlView``."""

_VIEWS: dict[type, View] = {}


@dataclass(frozen=True, repr=False)
class HtmlView:
    """HTML that a notebook displays as it is.

    Attributes:
        html: the self-contained HTML (images inline).
    """

    html: str

    def __repr__(self) -> str:
        return f"HtmlView({len(self.html)} characters of HTML, {self.html.count('<img ')} images)"

    def _repr_html_(self) -> str:
        return self.html


def register_view(kind: type, view: View) -> None:
    """Make ``view`` the one that shows objects of ``kind`` (and of its subclasses)."""
    _VIEWS[kind] = view


def render(obj: object, reference: Any = None, **options: Any) -> HtmlView:
    """``obj`` shown by the view registered for its type (the nearest in its MRO).

    Raises:
        LookupError: no view is registered for it (``repinterp.display`` was not imported).
    """
    for kind in type(obj).__mro__:
        if kind in _VIEWS:
            return _VIEWS[kind](obj, reference, **options)
    raise LookupError(
        f"no view shows a {type(obj).__name__}: import repinterp.display to register them"
    )
