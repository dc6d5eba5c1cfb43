"""Evaluation: the paper's metrics and the CAM baselines with reused channel weights."""

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

__all__ = [
    "AverageDropIncrease",
    "DropIncrease",
    "average_drop_increase",
    "average_drop_increase_from_mask",
    "keep_top_pixels",
    "kept_pixel_count",
    "region_metrics",
    *_BASELINES,
]


def __getattr__(name: str) -> object:
    # The baselines need grad-cam (the optional `eval` extra): imported on first use only.
    if name in _BASELINES:
        from . import baselines

        return getattr(baselines, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
