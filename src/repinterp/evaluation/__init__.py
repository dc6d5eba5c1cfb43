"""Evaluation: the paper's metrics and more, the CAM baselines with reused channel weights, ACE,
the analysis of what RI finds, and the protocols that compare them (``evaluate``).

Modules: ``metrics`` (AD / AI, region metrics, purity, pointing game), ``perturbation``
(deletion / insertion AUC, ROAD), ``scoring`` (a method's explanations scored, pooled and per
interpretation), ``baselines`` (the CAMs through pytorch-grad-cam), ``ace`` (the ACE
algorithm), ``setup`` (model and data), ``run`` (one seeded run and what the methods share),
``methods`` (one module per compared method, RI's variants included), ``options`` (how a
protocol runs), ``groupings`` (images grouped by their polytope: counts, merged groups, AMI
with sub-concepts, its null and k-means reference point), ``convexity`` (how convex the class
regions are), ``subclass`` (groupings below the class beside RI's polytopes), ``comparison``
(paired differences of two methods over the runs), ``sanity`` (the sanity checks of RI and the
CAMs through Quantus), ``names`` (methods' names in tables and plots), ``protocols`` (one module
per protocol, its computation and its tables, and ``evaluate``). The ``repinterp evaluate``
options are `repinterp.cli.evaluate`'s; the results' files are written by `report`.
"""

import importlib

# Every name is imported from its module on first use: the package imports no torch until then
# (``repinterp --help`` builds the evaluate options in `repinterp.cli` without it), and the
# baselines (grad-cam) and ACE (scikit-image) need the optional `eval` extra.
_MODULES = {
    "metrics": (
        "AverageDropIncrease",
        "DropIncrease",
        "average_drop_increase",
        "average_drop_increase_from_mask",
        "keep_top_pixels",
        "kept_pixel_count",
        "region_metrics",
    ),
    "perturbation": ("DeletionInsertion", "Road", "deletion_insertion", "road"),
    "baselines": (
        "CAM_METHODS",
        "ReusableCAM",
        "cam_weights",
        "euclidean_neighbours",
        "reused_cam",
    ),
    "ace": ("ACE", "Concept"),
    "setup": ("Setup", "load_setup"),
    "methods": ("METHODS", "Method"),
    "options": ("PROTOCOLS", "Options"),
    "protocols": ("evaluate",),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
