"""Representative interpretations of convolutional neural networks (Lam, Chu et al., ICCV 2021)."""

from .interpreter import Interpretation, RepresentativeInterpreter

__all__ = ["Interpretation", "RepresentativeInterpreter"]
__version__ = "0.1.0"
