"""A protocol run over seeded runs and aggregated as mean ± std (`evaluate`).

Every run uses seed ``options.seed + r`` for ``Q``, k-means, the sampled inputs and, with
``split="per-run"``, its own stratified draw of reference and unseen images
(`setup.Setup.draw`) and, when the setup holds several trained models
(``load_setup(model_seeds=N)``), model ``r`` (`setup.Setup.for_run`). The same seed gives the
same numbers on CPU.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from ..comparison import paired_family
from ..options import Options, check_protocol
from ..run import Run
from ..setup import Setup
from .coverage import coverage
from .q_sweep import q_sweep
from .reference import reference
from .sanity import sanity
from .shortcut import shortcut, target_class
from .similar import similar
from .unseen import unseen

__all__ = ["evaluate"]


_RUNNERS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "unseen": unseen,
    "coverage": coverage,
    "reference": reference,
    "q-sweep": q_sweep,
    "similar": similar,
    "sanity": sanity,
    "shortcut": shortcut,
}


def _aggregate(runs: list[Any]) -> Any:
    """Mean over runs of nested dicts of numbers (or lists of numbers), with ``KEY_std``
    beside each ``KEY`` (sample standard deviation; 0 for one run); NaN where a run has NaN. A
    table (a list of dicts, e.g. ``shortcut``'s ``strategies``) stays in each run's numbers."""
    first = runs[0]
    if isinstance(first, dict):
        out = {}
        for key in (k for k in first if not _is_table(first[k])):
            value = _aggregate([run[key] for run in runs])
            if isinstance(first[key], dict):
                out[key] = value
            else:
                out[key], out[f"{key}_std"] = value
        return out
    values = np.asarray(runs, dtype=float)
    std = values.std(0, ddof=1) if len(runs) > 1 else np.zeros_like(values[0])
    return values.mean(0).tolist(), np.asarray(std).tolist()


def _is_table(value: Any) -> bool:
    return isinstance(value, list) and any(isinstance(row, dict) for row in value)


def _accuracy(setup: Setup) -> dict[str, float]:
    """The model's accuracy (%) on the run's reference and unseen images."""
    return {
        part: 100.0 * float((setup.predictions[part] == setup.labels(part)).double().mean())
        for part in ("reference", "unseen")
    }


def evaluate(setup: Setup, protocol: str, options: Options | None = None) -> dict[str, Any]:
    """Run a protocol ``options.runs`` times and aggregate the runs.

    Args:
        setup: model and data (see `load_setup`).
        protocol: one of `PROTOCOLS`.
        options: how to run it; None for the defaults.

    Returns:
        A JSON-ready dict: ``dataset``, ``protocol``, ``runs``, ``seeds``, ``setup``,
        ``options``, ``time_s``, ``model_acc`` (the model's accuracy on each part of the runs'
        images), ``fit_s`` (seconds per fit of each sampling used), ``per_run`` (each run's
        numbers, for paired comparisons, its ``model``: `Setup.model_record`, and for
        ``unseen`` and ``reference`` its ``units``, the per-image values its means are made of,
        `comparison`), ``paired`` (``unseen``, ``reference``: every pair of methods compared,
        `comparison.paired_family`), and the protocol's numbers (mean, and ``KEY_std``):
        ``methods`` (``unseen``, ``reference``, ``similar``, ``sanity``), ``common``
        (``reference``: the methods on RI's similar images), ``reference`` /
        ``unseen`` (``coverage``), ``samplings`` (``q-sweep``), ``rankings`` (``similar``).
    """
    options = options or Options()
    check_protocol(protocol)
    if protocol == "shortcut":
        target_class(setup.dataset)
    if setup.models and options.runs != len(setup.models):
        raise ValueError(
            f"{options.runs} runs on {len(setup.models)} models: run r uses model r, so --runs "
            "must equal --model-seeds"
        )
    start = time.perf_counter()
    seeds = [options.seed + r for r in range(options.runs)]
    per_run, units, models, fit_s, kmeans_s, sizes = [], [], [], [], [], []
    for r, seed in enumerate(tqdm(seeds, desc=protocol, unit="run", disable=not options.progress)):
        on_model = setup.for_run(r)
        drawn = on_model.draw(seed, options.draw) if options.split == "per-run" else on_model
        run = Run(drawn, seed, options)
        numbers = _RUNNERS[protocol](run)
        units.append(numbers.pop("units", None))
        per_run.append(numbers | {"model_acc": _accuracy(drawn)})
        models.append(on_model.model_record())
        fit_s.append(run.fit_seconds)
        kmeans_s.append(run.kmeans_s)
        sizes.append((len(drawn.reference), len(drawn.unseen)))
    summary = {
        "dataset": setup.dataset,
        "protocol": protocol,
        "runs": options.runs,
        "seeds": seeds,
        "setup": setup.describe() | {"run_sizes": sorted(set(sizes))},
        "options": options.describe(),
        **_aggregate(per_run),
        "per_run": [
            run | {"model": model} | ({"units": u} if u is not None else {})
            for run, model, u in zip(per_run, models, units, strict=True)
        ],
        "ri_fit_s": float(np.mean([f["uniform"] for f in fit_s])),
        "fit_s": {key: float(np.mean([f[key] for f in fit_s])) for key in fit_s[0]},
        "kmeans_s": float(np.mean(kmeans_s)),
        "n_regions": options.n_regions or 10 * setup.n_classes,
        "machine": {
            "platform": platform.platform(terse=True),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
    }
    if all(u is not None for u in units):
        paired = paired_family([run | {"units": u} for run, u in zip(per_run, units, strict=True)])
        summary |= {"paired": paired} if paired else {}
    summary["time_s"] = time.perf_counter() - start
    return summary
