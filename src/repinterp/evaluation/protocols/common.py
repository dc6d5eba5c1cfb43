"""What several protocols' runs compute alike: the methods' explanations of the unseen images
(timed, after the work they share), the regions' coverage of a part of the setup, and the
polytope groups of a part's images with the per-image values their AMI is made of."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import Tensor

from ...core.groups import polytope_key
from ...core.regions import RegionSet
from ...runtime.progress import progress_bar
from ..groupings import region_groups
from ..methods import Method, RIMethod
from ..metrics import coverage_metrics
from ..run import Run
from ..setup import Setup

__all__ = [
    "coverage_of",
    "explain_unseen",
    "group_stats",
    "group_units",
    "prepare",
    "ri_variants",
    "rounded",
    "sub_concepts",
    "timed",
]


def timed(function: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``function(*args)`` and the seconds it took."""
    start = time.perf_counter()
    value = function(*args)
    return value, time.perf_counter() - start


def explain_unseen(run: Run) -> Iterator[tuple[str, Any, Tensor, float]]:
    """``(name, method, explanations of the unseen images, seconds)`` of each method, after
    the shared work (indexes, k-means, nearest centres), which the seconds leave out."""
    methods = run.options.resolve_methods()
    prepare(run, methods.values())
    _ = run.regions, run.unseen_centre
    bar = progress_bar(
        total=len(methods), desc="methods", unit="method", leave=False, enabled=run.options.progress
    )
    with bar:
        for name, method in methods.items():
            bar.set_postfix_str(f"{name} on {len(run.setup.unseen)} images")
            explanations, seconds = timed(method.unseen, run, run.setup.unseen_pixels)
            yield name, method, explanations, seconds
            bar.update()


def prepare(run: Run, methods: Iterable[Method]) -> None:
    """Fit the indexes the methods use, before their clocks start."""
    for method in methods:
        for config in method.fit_configs(run):
            run.interpreter_for(config)


def coverage_of(regions: RegionSet, setup: Setup, part: str) -> dict[str, float]:
    """`coverage_metrics` of the regions on a part of the setup."""
    return coverage_metrics(
        regions, setup.chunks(part), setup.predictions[part], setup.labels(part)
    )


def sub_concepts(setup: Setup, part: str, rows: Tensor | list[int] | None = None) -> Tensor | None:
    """Sub-concept labels of a part's images (``rows`` of them; all when None), if it has
    them (``shapes``)."""
    concepts = getattr(setup.part(part), "concepts", None)
    return concepts if concepts is None or rows is None else concepts[torch.as_tensor(rows)]


def _outputs(run: Run, part: str, features: bool) -> tuple[Tensor | None, Tensor]:
    """A part's flattened feature maps at the run's layer (CPU; None unless ``features``) and
    logits (CPU), for the groups' `ami_ceiling` and `outside_main` (computed once per run:
    `group_stats` caches them)."""
    ri, chunks = run.interpreter, run.setup.chunks
    logits = torch.cat([ri.forward(x)[0].cpu() for x in chunks(part)])
    if not features:
        return None, logits
    if part == "reference":
        return run.features, logits
    return torch.cat([ri.features(x).flatten(1).cpu() for x in chunks(part)]), logits


def group_stats(run: Run, regions: RegionSet, region: Tensor | None, part: str) -> dict[str, float]:
    """The polytope groups of a part's images (`region_groups`, ``region`` None for
    the reference set's own assignment), with their sub-concept measures where the part has
    sub-concepts and the images outside their class's main polytope."""
    concepts = sub_concepts(run.setup, part)
    wanted = concepts is not None
    features, logits = run.cached(("outputs", part, wanted), lambda: _outputs(run, part, wanted))
    labels = run.setup.labels(part)
    return region_groups(regions, region, concepts, features, logits, labels, run.seed).to_dict()


def group_units(
    run: Run, regions: RegionSet, region: Tensor | None, part: str
) -> dict[str, list[int]]:
    """Per image of a part, what its within-class AMI (`group_stats`) is computed from, so that
    it can be recomputed (`core.groups.ami`): ``group`` (the index of its polytope among the
    distinct ones, in order of first image), ``group_class`` (that polytope's class) and
    ``subconcept``; empty where the part has no sub-concepts."""
    concepts = sub_concepts(run.setup, part)
    if concepts is None:
        return {}
    if region is None:
        region = regions.reference_assignment().region
    keys: dict[int, Any] = {}
    for v in region.tolist():
        keys.setdefault(v, polytope_key(regions.regions[v]))
    ids = {key: i for i, key in enumerate(dict.fromkeys(keys[v] for v in region.tolist()))}
    return {
        "group": [ids[keys[v]] for v in region.tolist()],
        "group_class": [int(keys[v][0]) for v in region.tolist()],
        "subconcept": [int(c) for c in concepts.tolist()],
    }


def rounded(values: Tensor | list[float]) -> list[float]:
    """Per-image values (a run's ``units``, `comparison`) as floats to 4 decimals (NaN kept)."""
    return [round(float(v), 4) for v in values]


def ri_variants(run: Run) -> dict[str, RIMethod]:
    """The RI variants among the run's methods other than the paper's RI, by name."""
    methods = run.options.resolve_methods().items()
    return {name: m for name, m in methods if isinstance(m, RIMethod) and name != "RI"}
