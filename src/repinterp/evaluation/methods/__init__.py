"""The interpretation methods the protocols compare, one module each: `RIMethod` (``ri``),
`CAMMethod` for Grad-CAM, Grad-CAM++ and Score-CAM (``cam``), `ACEMethod` (``ace``), on the
interface `Method` (``base``).

:data:`METHODS` maps the built-in methods' names to them; it is read-only. A method of one's own
is given to the protocols as an instance in ``Options.methods``.
"""

from collections.abc import Mapping
from types import MappingProxyType

from ..baselines import CAM_METHODS
from .ace import ACEMethod
from .base import Method
from .cam import CAMMethod
from .ri import RIMethod

__all__ = ["METHODS", "ACEMethod", "CAMMethod", "Method", "RIMethod"]

METHODS: Mapping[str, Method] = MappingProxyType(
    {
        "RI": RIMethod(),
        **{name: CAMMethod(name) for name in CAM_METHODS},
        "ACE": ACEMethod(),
    }
)
