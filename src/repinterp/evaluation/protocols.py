"""The paper's evaluation protocols, run over seeds and reported as mean ± std.

Protocols (each a function of a `Setup` and `Options`, see `evaluate`):

- ``unseen`` (§6.4, Table 1): mAD / mAI on the unseen set of every method's ``|V|`` reused
  interpretations. RI: k-means regions (k-means seeded, ``Q`` sampled with the run's seed);
  an image is explained by the covering region of largest representativeness, else by the
  region of its nearest centre. CAM baselines: channel weights of the k-means inputs (the
  reference image nearest each centre), reused on every image whose nearest centre it is.
  ACE: one fit per k-means cluster (its reference images), reused on the images assigned to
  the cluster's centre.
- ``coverage`` (Appendix D, Table 2): ACU-GT, ACU-MD and CVR of the regions on the reference
  and the unseen set, beside the model's accuracy (ACU-GT of F).
- ``reference`` (Appendix C): for random reference inputs, mAD / mAI over the top-K similar
  reference images for each K: RI's covered images ranked by semantic distance, the
  baselines' Euclidean nearest neighbours in feature space; the input always comes first,
  so K = 1 evaluates the input alone.
- ``q-sweep`` (Appendix E): ACU-GT, ACU-MD and CVR of the regions for several ``|Q|``.
- ``similar`` (the case studies, made measurable on ``shapes``, whose sub-concepts and
  object masks are known): purity@k of similar-image rankings, and the share of each
  method's heat-map energy inside the object's mask on the unseen set.

All numbers are percentages. Every run uses seed ``options.seed + r``; the data split is
fixed (the one the bundled weights were trained on), so runs differ by ``Q``, k-means and the
sampled inputs. The same seed gives the same numbers on CPU.

The pieces: the model and data (`setup.Setup`), one seeded run (`run.Run`), the compared
methods (`methods`), the metrics (`metrics`). Reports of the results: `repinterp.report`.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from ..regions import RegionSet
from ..utils import nearest_rows
from .methods import METHODS, Method
from .metrics import (
    DropIncrease,
    average_drop_increase,
    average_drop_increase_from_mask,
    coverage_metrics,
    energy_in_mask,
    purity_at_k,
)
from .run import Run
from .setup import Setup

__all__ = ["FULL", "PROTOCOLS", "QUICK", "Options", "check_protocol", "drop_increase", "evaluate"]

PROTOCOLS = ("unseen", "coverage", "reference", "q-sweep", "similar")


@dataclass(frozen=True)
class Options:
    """How a protocol runs.

    Attributes:
        runs: number of seeded runs (seeds ``seed``, ``seed + 1``, ...).
        seed: the first run's seed.
        methods: the methods compared by ``unseen``, ``reference`` and ``similar`` (the
            pointing game): names of built-in methods (:data:`methods.METHODS`), or `Method`
            instances of one's own (reported under their ``name``).
        n_boundaries: ``|Q|``.
        n_regions: ``|V|``; None: 10 x classes.
        n_inputs: random reference inputs of ``reference`` and ``similar`` (the paper: 1,000).
        ks: the K of ``reference`` (top-K similar images).
        q_values: the ``|Q|`` of ``q-sweep``.
        purity_ks: the k of purity@k in ``similar``.
        ace_images: most discovery images of one ACE fit (the reference images nearest the
            k-means centre in ``unseen``; the input and its nearest neighbours in
            ``reference``, as the paper's 50).
        progress: show progress bars.
    """

    runs: int = 5
    seed: int = 0
    methods: tuple[str | Method, ...] = ("RI", "Grad-CAM", "Grad-CAM++", "Score-CAM")
    n_boundaries: int = 50
    n_regions: int | None = None
    n_inputs: int = 200
    ks: tuple[int, ...] = (1, 5, 10, 20, 50)
    q_values: tuple[int, ...] = (1, 5, 10, 30, 50, 70)
    purity_ks: tuple[int, ...] = (5, 10, 20)
    ace_images: int = 50
    progress: bool = True

    def __post_init__(self) -> None:
        counts = {"runs": self.runs, "n_boundaries": self.n_boundaries, "n_inputs": self.n_inputs}
        counts |= {"ace_images": self.ace_images, "n_regions": self.n_regions}
        for name, value in counts.items():
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        for name in ("ks", "q_values", "purity_ks"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                raise ValueError(f"{name} must be a non-empty list of integers >= 1")
        unknown = [str(m) for m in self.methods if not isinstance(m, Method) and m not in METHODS]
        if unknown or not self.methods:
            raise ValueError(
                f"unknown method(s) {', '.join(unknown) or '(none given)'}; "
                f"choose from {', '.join(METHODS)}"
            )

    def resolve_methods(self) -> dict[str, Method]:
        """The methods to compare, by name, in order."""
        resolved = [m if isinstance(m, Method) else METHODS[m] for m in self.methods]
        return {method.name: method for method in resolved}

    def describe(self) -> dict[str, Any]:
        """What the report says about the options (JSON-ready; methods by name)."""
        described = {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in self.__dict__.items()
            if key != "progress"
        }
        described["methods"] = [m.name if isinstance(m, Method) else m for m in self.methods]
        return described


# Sizes of a full and a quick (``--quick``) evaluation.
FULL = {"n_reference": None, "n_unseen": 1000, "runs": 5, "n_inputs": 200}
QUICK = {"n_reference": 600, "n_unseen": 200, "runs": 2, "n_inputs": 30}


# ----------------------------------------------------------------------------- scoring
def drop_increase(setup: Setup, images01: Tensor, explanations: Tensor) -> DropIncrease:
    """AD/AI per image: keep the 20% hottest pixels of a heat map, or the given kept pixels."""
    if explanations.dtype == torch.bool:
        return average_drop_increase_from_mask(
            setup.model, images01, explanations, setup.normalize, setup.batch_size
        )
    return average_drop_increase(
        setup.model, images01, explanations, setup.normalize, batch_size=setup.batch_size
    )


# ----------------------------------------------------------------------------- protocols
def _timed(function: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``function(*args)`` and the seconds it took."""
    start = time.perf_counter()
    value = function(*args)
    return value, time.perf_counter() - start


def _explain_unseen(run: Run) -> Iterator[tuple[str, Tensor, float]]:
    """``(method, explanations of the unseen images, seconds)`` of each method, after the
    shared k-means and nearest-centre assignment (which the seconds leave out)."""
    _ = run.regions, run.unseen_centre  # built before the clocks start
    for name, method in run.options.resolve_methods().items():
        explanations, seconds = _timed(method.unseen, run, run.setup.unseen_pixels)
        yield name, explanations, seconds


def _unseen(run: Run) -> dict[str, Any]:
    methods = {}
    for name, explanations, seconds in _explain_unseen(run):
        scores = drop_increase(run.setup, run.setup.unseen_pixels, explanations)
        methods[name] = {"mAD": scores.ad, "mAI": scores.ai, "time_s": seconds}
    return {"methods": methods}


def _coverage_of(regions: RegionSet, setup: Setup, part: str) -> dict[str, float]:
    """`coverage_metrics` of the regions on a part of the setup."""
    return coverage_metrics(
        regions, setup.chunks(part), setup.predictions[part], setup.labels(part)
    )


def _coverage(run: Run) -> dict[str, Any]:
    return {part: _coverage_of(run.regions, run.setup, part) for part in ("reference", "unseen")}


def _reference(run: Run) -> dict[str, Any]:
    ks, inputs = run.options.ks, run.inputs.tolist()
    run.neighbours(max(ks))  # shared by the baselines, left out of their seconds
    methods = {}
    for name, method in run.options.resolve_methods().items():
        drops, increases, sizes, seconds = [], [], [], 0.0
        for index in tqdm(inputs, desc=name, leave=False, disable=not run.options.progress):
            (similar, explanations), spent = _timed(method.reference, run, index, max(ks))
            seconds += spent
            scores = drop_increase(run.setup, run.setup.pixels("reference", similar), explanations)
            drops.append(scores.drop)
            increases.append(scores.increase.double())
            sizes.append(len(similar))
        methods[name] = {
            "mAD": [100 * float(np.mean([float(d[:k].mean()) for d in drops])) for k in ks],
            "mAI": [100 * float(np.mean([float(a[:k].mean()) for a in increases])) for k in ks],
            "similar": [float(np.mean([min(k, s) for s in sizes])) for k in ks],
            "time_s": seconds,
        }
    return {"methods": methods}


def _q_sweep(run: Run) -> dict[str, Any]:
    regions = run.regions
    out: dict[str, Any] = {"reference": {}, "unseen": {}}
    for q in run.options.q_values:
        ri = run.interpreter if q == run.options.n_boundaries else run.fit(q)
        swept = RegionSet(ri, regions.inputs, ri.explain_reference(regions.inputs), regions.centres)
        for part in out:
            for key, value in _coverage_of(swept, run.setup, part).items():
                out[part].setdefault(key, []).append(value)
    return out


RANKINGS = ("semantic (RI)", "euclidean (all reference)", "euclidean (covered)", "cosine (covered)")


def _rankings(run: Run, index: int) -> dict[str, Tensor]:
    """Each ranking of the reference images similar to reference image ``index`` (itself
    excluded), most similar first: ``Interpretation.similar`` with each metric, and the
    paper's baseline, Euclidean nearest neighbours among all reference images."""
    explanation = run.interpreter.explain_reference([index])[0]
    k = min(max(run.options.purity_ks) + 1, len(run.features))
    nearest = nearest_rows(run.features[index : index + 1], run.features, k)[0][0]
    rankings = {
        RANKINGS[0]: explanation.similar(metric="semantic"),
        RANKINGS[1]: nearest,
        RANKINGS[2]: explanation.similar(metric="euclidean"),
        RANKINGS[3]: explanation.similar(metric="cosine"),
    }
    return {name: ranking.cpu()[ranking.cpu() != index] for name, ranking in rankings.items()}


def _similar(run: Run) -> dict[str, Any]:
    setup = run.setup
    concepts, masks = setup.reference.concepts, getattr(setup.unseen, "masks", None)
    purity: dict[str, dict[str, list[float]]] = {name: {} for name in RANKINGS}
    sizes = []
    for index in tqdm(
        run.inputs.tolist(), "rankings", leave=False, disable=not run.options.progress
    ):
        rankings = _rankings(run, index)
        sizes.append(len(rankings[RANKINGS[0]]))
        for name, ranking in rankings.items():
            for k in run.options.purity_ks:
                score = purity_at_k(concepts[ranking], int(concepts[index]), k)
                purity[name].setdefault(f"purity@{k}", []).append(score)
    methods = {
        name: {"energy": 100 * float(energy_in_mask(explanations, masks).nanmean()), "time_s": s}
        for name, explanations, s in _explain_unseen(run)
    }
    return {
        "rankings": {
            name: {key: 100 * float(np.nanmean(v)) for key, v in scores.items()}
            for name, scores in purity.items()
        },
        "methods": methods,
        "covered_others": float(np.mean(sizes)),
        "mask_area": 100 * float(masks.double().mean()),
    }


_RUNNERS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "unseen": _unseen,
    "coverage": _coverage,
    "reference": _reference,
    "q-sweep": _q_sweep,
    "similar": _similar,
}


def check_protocol(protocol: str) -> None:
    """Raise ValueError for a name not in :data:`PROTOCOLS`."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")


def _check(setup: Setup, protocol: str) -> None:
    check_protocol(protocol)
    if protocol == "similar" and (
        getattr(setup.reference, "concepts", None) is None
        or getattr(setup.unseen, "masks", None) is None
    ):
        raise ValueError(
            f"protocol 'similar' needs known sub-concepts and object masks (the shapes data "
            f"set); {setup.dataset!r} has none"
        )


def _aggregate(runs: list[Any]) -> Any:
    """Mean over runs of nested dicts of numbers (or lists of numbers), with ``KEY_std``
    beside each ``KEY`` (sample standard deviation; 0 for one run)."""
    first = runs[0]
    if isinstance(first, dict):
        out = {}
        for key in first:
            value = _aggregate([run[key] for run in runs])
            if isinstance(first[key], dict):
                out[key] = value
            else:
                out[key], out[f"{key}_std"] = value
        return out
    values = np.asarray(runs, dtype=float)
    std = values.std(0, ddof=1) if len(runs) > 1 else np.zeros_like(values[0])
    return values.mean(0).tolist(), np.asarray(std).tolist()


def evaluate(setup: Setup, protocol: str, options: Options | None = None) -> dict[str, Any]:
    """Run a protocol ``options.runs`` times and aggregate the runs.

    Args:
        setup: model and data (see `load_setup`).
        protocol: one of :data:`PROTOCOLS`.
        options: how to run it; None for the defaults.

    Returns:
        A JSON-ready dict: ``dataset``, ``protocol``, ``runs``, ``seeds``, ``setup``,
        ``options``, ``time_s``, and the protocol's numbers (mean, and ``KEY_std``):
        ``methods`` (``unseen``, ``reference``, ``similar``), ``reference`` / ``unseen``
        (``coverage``, ``q-sweep``), ``rankings`` (``similar``).
    """
    options = options or Options()
    _check(setup, protocol)
    start = time.perf_counter()
    seeds = [options.seed + r for r in range(options.runs)]
    per_run, fit_s, kmeans_s = [], [], []
    for seed in tqdm(seeds, desc=protocol, unit="run", disable=not options.progress):
        run = Run(setup, seed, options)
        per_run.append(_RUNNERS[protocol](run))
        fit_s.append(run.fit_s)
        kmeans_s.append(run.kmeans_s)
    summary = {
        "dataset": setup.dataset,
        "protocol": protocol,
        "runs": options.runs,
        "seeds": seeds,
        "setup": setup.describe(),
        "options": options.describe(),
        **_aggregate(per_run),
        "ri_fit_s": float(np.mean(fit_s)),
        "kmeans_s": float(np.mean(kmeans_s)),
        "n_regions": options.n_regions or 10 * setup.n_classes,
        "machine": {
            "platform": platform.platform(terse=True),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
    }
    summary["time_s"] = time.perf_counter() - start
    return summary
