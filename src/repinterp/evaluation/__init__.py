"""Evaluation: the paper's metrics, the CAM baselines with reused channel weights, ACE, and the
protocols that compare them (``evaluate``)."""

from .metrics import (
    AverageDropIncrease,
    DropIncrease,
    average_drop_increase,
    average_drop_increase_from_mask,
    keep_top_pixels,
    kept_pixel_count,
    region_metrics,
)

_BASELINES = ("CAM_METHODS", "ReusableCAM", "channel_weights", "euclidean_neighbours", "reused_cam")
_ACE = ("ACE", "Concept")
_PROTOCOLS = (
    "METHODS",
    "PROTOCOLS",
    "Method",
    "Options",
    "Setup",
    "evaluate",
    "load_setup",
    "register_method",
    "results_markdown",
    "write_results",
)

__all__ = [
    "AverageDropIncrease",
    "DropIncrease",
    "average_drop_increase",
    "average_drop_increase_from_mask",
    "keep_top_pixels",
    "kept_pixel_count",
    "region_metrics",
    *_BASELINES,
    *_ACE,
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
    # The protocols use the baselines: likewise.
    if name in _PROTOCOLS:
        from . import protocols

        return getattr(protocols, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
