"""Integrations: RI behind the interfaces of the libraries users already call.

Owns ``RepresentativeCAM``, pytorch-grad-cam's CAM interface (``gradcam``), and
``QuantusExplainer``, Quantus's ``explain_func`` (``quantus``), both drawing each input's heat
map of its own polytope ``P(x)`` as ``maps`` makes it. Neither library is imported: their
interfaces are duck-typed. May import every tier up to ``interpreter`` and ``workspace``.
"""

from .gradcam import RepresentativeCAM
from .quantus import QuantusExplainer

__all__ = ["QuantusExplainer", "RepresentativeCAM"]
