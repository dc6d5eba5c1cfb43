"""The interpretation methods the protocols compare, one module each: `RIMethod` (``ri``) and
its variants, `CAMMethod` (``cam``) for Grad-CAM, Grad-CAM++ and Score-CAM and their controls
``+cluster`` and ``+class`` (weights averaged over many images), `ACEMethod` (``ace``), on the
interface `Method` (``base``).

`METHODS` maps the built-in methods' names to them; it is read-only. `method` also
resolves any RI variant by name (``RI+exact``, ``RI+pairs+score``, ...). A method of one's own
is given to the protocols as an instance in ``Options.methods``.
"""

from collections.abc import Mapping
from types import MappingProxyType

from ..baselines import CAM_METHODS
from .ace import ACEMethod
from .base import Method
from .cam import AVERAGES, CAMMethod
from .ri import KNOBS, RIMethod

__all__ = ["METHODS", "PAPER", "ACEMethod", "CAMMethod", "Method", "RIMethod", "method"]

# The paper's comparison (ACE aside: it is slow).
PAPER = ("RI", *CAM_METHODS)

# RI and its variants with one knob away from the paper's value.
_RI = [RIMethod(**{knob: value}) for knob, values in KNOBS.items() for value in values[1:]]

METHODS: Mapping[str, Method] = MappingProxyType(
    {
        "RI": RIMethod(),
        **{variant.name: variant for variant in _RI},
        **{name: CAMMethod(name) for name in CAM_METHODS},
        **{
            f"{name}+{average}": CAMMethod(name, average)
            for average in AVERAGES
            for name in CAM_METHODS
        },
        "ACE": ACEMethod(),
    }
)


def method(name: str) -> Method:
    """A built-in method by name, or an RI variant: ``RI`` then ``+value`` per knob not at the
    paper's value (values of `KNOBS`).

    Raises:
        ValueError: an unknown name (the message lists the choices).
    """
    if name in METHODS:
        return METHODS[name]
    head, *values = name.split("+")
    knobs = {}
    for value in values if head == "RI" else [None]:
        knob = next((k for k, choices in KNOBS.items() if value in choices[1:]), None)
        if knob is None or knob in knobs:
            break
        knobs[knob] = value
    else:
        return RIMethod(**knobs)
    choices = ", ".join("|".join(values[1:]) for values in KNOBS.values())
    raise ValueError(
        f"unknown method {name!r}; choose from {', '.join(METHODS)}, "
        f"or RI with one +value of each of: {choices}"
    )
