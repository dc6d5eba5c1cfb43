"""Evaluation: the paper's metrics and more, the CAM baselines with reused channel weights, ACE,
and the protocols that compare them (``evaluate``).

Modules: ``metrics`` (AD / AI, region metrics, purity, pointing game), ``perturbation``
(deletion / insertion AUC, ROAD), ``scoring`` (a method's explanations scored, pooled and per
interpretation), ``baselines`` (the CAMs through pytorch-grad-cam), ``ace`` (the ACE
algorithm), ``setup`` (model and data), ``run`` (one seeded run), ``methods`` (one module per
compared method, RI's variants included), ``options`` (how a protocol runs), ``protocols``
(the protocols and ``evaluate``), ``command`` (the ``repinterp evaluate`` options). Reports of
the results are written by :mod:`repinterp.report`.
"""

from .metrics import (
    AverageDropIncrease,
    DropIncrease,
    average_drop_increase,
    average_drop_increase_from_mask,
    keep_top_pixels,
    kept_pixel_count,
    region_metrics,
)
from .perturbation import DeletionInsertion, Road, deletion_insertion, road

_BASELINES = ("CAM_METHODS", "ReusableCAM", "channel_weights", "euclidean_neighbours", "reused_cam")
_ACE = ("ACE", "Concept")
_SETUP = ("Setup", "load_setup")
_METHODS = ("METHODS", "Method")
_OPTIONS = ("PROTOCOLS", "Options")
_PROTOCOLS = ("evaluate",)

__all__ = [
    "AverageDropIncrease",
    "DeletionInsertion",
    "DropIncrease",
    "Road",
    "average_drop_increase",
    "average_drop_increase_from_mask",
    "deletion_insertion",
    "keep_top_pixels",
    "kept_pixel_count",
    "region_metrics",
    "road",
    *_BASELINES,
    *_ACE,
    *_SETUP,
    *_METHODS,
    *_OPTIONS,
    *_PROTOCOLS,
]


def __getattr__(name: str) -> object:
    # The baselines need grad-cam (the optional `eval` extra): imported on first use only.
    if name in _BASELINES:
        from . import baselines

        return getattr(baselines, name)
    # ACE needs scikit-image (also in `eval`): likewise.
    if name in _ACE:
        from . import ace

        return getattr(ace, name)
    # The setup, the methods and the protocols (the methods use the baselines): likewise.
    if name in _SETUP:
        from . import setup

        return getattr(setup, name)
    if name in _METHODS:
        from . import methods

        return getattr(methods, name)
    if name in _OPTIONS:
        from . import options

        return getattr(options, name)
    if name in _PROTOCOLS:
        from . import protocols

        return getattr(protocols, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
