"""Paired comparisons of two methods over the runs of a protocol, and the rule that calls a
difference a *win*.

Two methods in one run share the model, the images, Q and k-means, so they are compared run by
run: the mean ± sample std of the per-run difference ``a - b``, in how many runs ``a`` is
better, and a 95% interval of the mean difference from a two-level paired bootstrap
(`bootstrap_interval`): each draw resamples the runs (with their models) with replacement and,
within each drawn run, its images (``unseen``) or inputs (``reference``) with replacement, the
same ones for both methods. A difference is a *win* (`is_win`) when it has the same sign in
every run and its interval excludes 0.

The per-image values a run keeps for this (its ``units``) are those its means are made of:
``unseen``, each image's AD, AI (x 100) and perturbation scores; ``reference``, for each K,
each input's mean over its top-K images. A metric without them (``mAD_interp``: its groups
differ between methods) is bootstrapped over the runs alone (``levels`` says which).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .scoring import CURVE_KEYS

__all__ = [
    "DRAWS",
    "HIGHER_IS_BETTER",
    "Comparison",
    "bootstrap_interval",
    "compare",
    "is_win",
    "paired_comparisons",
]

# Whether a higher value of a compared score is better.
HIGHER_IS_BETTER = {"mAD": False, "mAI": True, "mAD_interp": False, "mAI_interp": True}
HIGHER_IS_BETTER |= CURVE_KEYS
HIGHER_IS_BETTER |= {"f1_marked": True, "mass_in_box": True}  # shortcut: more on the mark
# Bootstrap draws of every interval, and their seed.
DRAWS = 2000
SEED = 0


def bootstrap_interval(
    units: Sequence[Sequence[float]],
    draws: int = DRAWS,
    seed: int = SEED,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile interval of a mean over runs of per-run means, by a two-level bootstrap.

    Each of ``draws`` draws picks ``R`` runs with replacement and, for each pick, as many of
    its units with replacement as it has; its statistic is the mean over the picks of their
    units' mean. The interval is the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of
    the statistics.

    Args:
        units: per run, the paired differences of its units (images or inputs); NaN values
            are left out, and so is a run with none.
        draws: bootstrap draws.
        seed: seed of the draws.
        level: the interval's coverage.

    Returns:
        ``(low, high)``; ``(nan, nan)`` without any value.
    """
    runs = [u[np.isfinite(u)] for u in (np.asarray(v, dtype=float) for v in units)]
    runs = [u for u in runs if len(u)]
    if not runs:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    picks = rng.integers(len(runs), size=(draws, len(runs)))
    means = np.empty(picks.shape)
    for r, values in enumerate(runs):
        where = np.nonzero(picks == r)
        rows = rng.integers(len(values), size=(len(where[0]), len(values)))
        means[where] = values[rows].mean(1)
    tail = (1 - level) / 2
    low, high = np.quantile(means.mean(1), [tail, 1 - tail])
    return float(low), float(high)


def is_win(differences: Sequence[float], interval: tuple[float, float]) -> bool:
    """Whether a paired difference is a *win*: it has the same sign, never 0, in every run, and
    its interval excludes 0 on that side."""
    d = np.asarray(differences, dtype=float)
    low, high = interval
    if not len(d) or not np.isfinite(d).all():
        return False
    return bool((d > 0).all() and low > 0) or bool((d < 0).all() and high < 0)


@dataclass(frozen=True)
class Comparison:
    """``a - b`` over the runs.

    Attributes:
        mean: the mean of the per-run differences.
        std: their sample standard deviation (0 for one run).
        better: the runs in which ``a`` is better (an equal run counts for neither).
        runs: the runs compared.
        low, high: the 95% bootstrap interval of the mean difference.
        win: `is_win` (the same sign in every run, an interval that excludes 0).
        levels: what the bootstrap resampled: ``"runs and images"`` or ``"runs"``.
        differences: the per-run differences.
    """

    mean: float
    std: float
    better: int
    runs: int
    low: float
    high: float
    win: bool
    levels: str
    differences: list[float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare(
    differences: Sequence[float],
    higher_is_better: bool,
    units: Sequence[Sequence[float]] | None = None,
    draws: int = DRAWS,
    seed: int = SEED,
) -> Comparison:
    """The paired comparison of per-run differences ``a - b`` of a score.

    Args:
        differences: one per run.
        higher_is_better: of the score.
        units: per run, the differences of its units (`bootstrap_interval`); None: the
            interval resamples the runs alone.
        draws: bootstrap draws.
        seed: their seed.
    """
    d = np.asarray(differences, dtype=float)
    interval = bootstrap_interval([[v] for v in d] if units is None else units, draws, seed)
    better = int(((d > 0) if higher_is_better else (d < 0)).sum())
    return Comparison(
        mean=float(d.mean()),
        std=float(d.std(ddof=1)) if len(d) > 1 else 0.0,
        better=better,
        runs=len(d),
        low=interval[0],
        high=interval[1],
        win=is_win(d, interval),
        levels="runs" if units is None else "runs and images",
        differences=d.tolist(),
    )


def _units(run: dict[str, Any], reading: str, method: str, key: str) -> Any:
    """A run's units of a method's score, or None."""
    return run.get("units", {}).get(reading, {}).get(method, {}).get(key)


def _difference(a: Any, b: Any) -> np.ndarray:
    return np.asarray(a, dtype=float) - np.asarray(b, dtype=float)


def paired_comparisons(
    per_run: list[dict[str, Any]],
    a: str,
    b: str,
    reading: str = "methods",
    draws: int = DRAWS,
    seed: int = SEED,
) -> dict[str, Any]:
    """``a - b`` for every score of `HIGHER_IS_BETTER` both methods have in every run.

    Args:
        per_run: a protocol's ``per_run`` (``unseen`` or ``reference``).
        a: the first method.
        b: the method subtracted.
        reading: ``"methods"``, or ``reference``'s ``"common"``.
        draws: bootstrap draws.
        seed: their seed.

    Returns:
        By score: `Comparison.to_dict` (``unseen``), or a list with one per K (``reference``;
        None where a K was not scored).
    """
    out: dict[str, Any] = {}
    for key, higher in HIGHER_IS_BETTER.items():
        blocks = [run[reading] for run in per_run]
        if not all(key in block.get(a, {}) and key in block.get(b, {}) for block in blocks):
            continue
        diffs = np.array([_difference(bl[a][key], bl[b][key]) for bl in blocks], dtype=float)
        units = [(_units(run, reading, a, key), _units(run, reading, b, key)) for run in per_run]
        whole = all(u is not None and v is not None for u, v in units)
        if diffs.ndim == 1:
            paired = [_difference(u, v) for u, v in units] if whole else None
            out[key] = compare(diffs, higher, paired, draws, seed).to_dict()
            continue
        per_k = []
        for i, column in enumerate(diffs.T):
            if np.isnan(column).any():
                per_k.append(None)
                continue
            paired = [_difference(u[i], v[i]) for u, v in units] if whole else None
            per_k.append(compare(column, higher, paired, draws, seed).to_dict())
        out[key] = per_k
    return out
