"""Representative interpretations of convolutional neural networks (Lam, Chu et al., ICCV 2021)."""

from .interpreter import Interpretation, RepresentativeInterpreter
from .regions import RegionSet

__all__ = ["Interpretation", "RegionSet", "RepresentativeInterpreter"]
__version__ = "0.1.0"
