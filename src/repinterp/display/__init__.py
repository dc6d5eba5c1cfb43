"""Presentation: what people see of the method's objects, outside the method (imports ``core``).

Owns the colours of heat maps (``colours``: colormaps, the scale, colour bars, overlays), the
pieces of self-contained HTML (``html``: inline PNGs, tiles, pages, compositions) and the
notebook views built from them: the case-study strip of an ``Interpretation``
(``interpretation``), one card per distinct polytope of a ``RegionSet`` (``regions``) and a
``Strategy`` with its audit (``strategy``).

The design: ``core`` never imports this package. Its objects keep ``show(reference, **options)``
and ``_repr_html_``, which ask the registry of [`repinterp.core.views`][repinterp.core.views]
for the view of their type; importing this package registers the three views there. The
interpreter imports it, so every object an interpreter made shows itself in a notebook;
``repinterp.display.show(obj, ...)`` is the same call by name.
"""

from __future__ import annotations

from typing import Any

from ..core.interpretation import Interpretation
from ..core.regions import RegionSet
from ..core.views import HtmlView, register_view, render
from ..strategies.model import Strategy
from .colours import COLORMAPS, DEFAULT_COLORMAP, SCALE, colorbar_css, colorize, overlay
from .interpretation import show_interpretation
from .regions import show_regions
from .strategy import show_strategy

__all__ = [
    "COLORMAPS",
    "DEFAULT_COLORMAP",
    "SCALE",
    "HtmlView",
    "colorbar_css",
    "colorize",
    "overlay",
    "show",
    "show_interpretation",
    "show_regions",
    "show_strategy",
]

register_view(Interpretation, show_interpretation)
register_view(RegionSet, show_regions)
register_view(Strategy, show_strategy)


def show(
    obj: Interpretation | RegionSet | Strategy, reference: Any = None, **options: Any
) -> HtmlView:
    """``obj`` as self-contained HTML: `show_interpretation`, `show_regions` or
    `show_strategy`, by its type, with their arguments."""
    return render(obj, reference, **options)
