"""Representative interpretations of convolutional neural networks (Lam, Chu et al., ICCV 2021).

The public API is imported on first use, so that ``import repinterp`` (and the command line's
``--help``) does not pay for torch until it is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .runtime.version import VERSION

if TYPE_CHECKING:
    from .core.config import FitConfig
    from .core.regions import RegionSet
    from .interpreter import Interpretation, RepresentativeInterpreter

__all__ = ["FitConfig", "Interpretation", "RegionSet", "RepresentativeInterpreter"]
__version__ = VERSION


def __getattr__(name: str) -> Any:
    if name in ("Interpretation", "RepresentativeInterpreter"):
        from . import interpreter

        return getattr(interpreter, name)
    if name == "RegionSet":
        from .core.regions import RegionSet

        return RegionSet
    if name == "FitConfig":
        from .core.config import FitConfig

        return FitConfig
    raise AttributeError(f"module 'repinterp' has no attribute {name!r}")
