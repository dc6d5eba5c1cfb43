"""Paired comparisons of two methods over the runs of a protocol, and the rule that calls a
difference a *win*.

Two methods in one run share the model, the images, Q and k-means, so they are compared run by
run (a run is one model in a model-seeds result). For the per-run differences ``a - b``:

- ``mean`` ± ``std`` (sample), and ``better``: in how many runs ``a`` is better;
- ``low``, ``high``: a 95% interval of the mean difference from a two-level paired bootstrap
  (`bootstrap_with_error`): each draw resamples the runs with replacement and, within each
  drawn run, its images (``unseen``) or inputs (``reference``), the same ones for both
  methods; ``mc_error``: the Monte Carlo standard error of its ends (`DRAWS` draws);
- ``t_interval``: the 95% t interval of the mean over the runs (``n - 1`` degrees of freedom;
  None with one run): with few models a percentile bootstrap over them is too narrow;
- ``p_signflip``: the exact two-sided sign-flip permutation p over the runs (`sign_flip_p`, all
  ``2^n`` flips; at least ``2 / 2^n``: 0.0625 with 5 models);
- ``p_holm``: ``p_signflip`` Holm-corrected (`holm`) over the family of the comparisons of a
  protocol's result: every pair, score, K and reading (`apply_holm`);
- ``verdict`` (`verdict`), from ``a``'s side: ``"win"`` (``a`` is better) or ``"loss"`` (``b``
  is) when ``p_holm`` < 0.05 *and* the t interval *and* the bootstrap interval exclude 0 on
  that side; else ``"undecided"`` when the difference has the same sign, never 0, in every run
  (the direction is consistent, but these runs cannot make it significant: "undecided at n
  models"); else ``"tie"``. ``win``: the verdict is ``"win"`` or ``"loss"``.

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
from scipy import stats

from .scoring import CURVE_KEYS

__all__ = [
    "ALPHA",
    "DRAWS",
    "HIGHER_IS_BETTER",
    "Comparison",
    "apply_holm",
    "bootstrap_interval",
    "bootstrap_with_error",
    "compare",
    "holm",
    "is_win",
    "paired_comparisons",
    "paired_family",
    "sign_flip_p",
    "t_interval",
    "verdict",
]

# Whether a higher value of a compared score is better.
HIGHER_IS_BETTER = {"mAD": False, "mAI": True, "mAD_interp": False, "mAI_interp": True}
HIGHER_IS_BETTER |= CURVE_KEYS
HIGHER_IS_BETTER |= {"f1_marked": True, "mass_in_box": True}  # shortcut: more on the mark
# Bootstrap draws of every interval, their seed, and the batches their Monte Carlo error is
# estimated from.
DRAWS = 20_000
SEED = 0
_BATCHES = 20
# The level of the family-wise error rate a win is held to.
ALPHA = 0.05
# Sign flips enumerated at a time by `sign_flip_p` (2^16).
_FLIP_BITS = 16


def bootstrap_with_error(
    units: Sequence[Sequence[float]],
    draws: int = DRAWS,
    seed: int = SEED,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """Percentile interval of a mean over runs of per-run means, by a two-level bootstrap.

    Each of ``draws`` draws picks ``R`` runs with replacement and, for each pick, as many of
    its units with replacement as it has; its statistic is the mean over the picks of their
    units' mean. The interval is the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of
    the statistics. Its Monte Carlo error is estimated by batches: the draws split into 20
    batches, each batch's quantiles, and their standard deviation over ``sqrt(20)``.

    Args:
        units: per run, the paired differences of its units (images or inputs); NaN values
            are left out, and so is a run with none.
        draws: bootstrap draws (a multiple of 20).
        seed: seed of the draws.
        level: the interval's coverage.

    Returns:
        ``(low, high, mc_error)``: ``mc_error`` is the larger of the two ends' Monte Carlo
        standard errors; ``(nan, nan, nan)`` without any value.
    """
    runs = [u[np.isfinite(u)] for u in (np.asarray(v, dtype=float) for v in units)]
    runs = [u for u in runs if len(u)]
    if not runs:
        return math.nan, math.nan, math.nan
    rng = np.random.default_rng(seed)
    picks = rng.integers(len(runs), size=(draws, len(runs)))
    means = np.empty(picks.shape)
    for r, values in enumerate(runs):
        where = np.flatnonzero(picks.ravel() == r)
        # in chunks: draws x images indices at once would not fit for large runs
        step = max(1, 2**22 // len(values))
        for i in range(0, len(where), step):
            rows = rng.integers(len(values), size=(len(where[i : i + step]), len(values)))
            means.ravel()[where[i : i + step]] = values[rows].mean(1)
    statistics = means.mean(1)
    tail = (1 - level) / 2
    low, high = np.quantile(statistics, [tail, 1 - tail])
    batches = np.quantile(statistics.reshape(_BATCHES, -1), [tail, 1 - tail], axis=1)
    mc_error = float(batches.std(1, ddof=1).max() / math.sqrt(_BATCHES))
    return float(low), float(high), mc_error


def bootstrap_interval(
    units: Sequence[Sequence[float]],
    draws: int = DRAWS,
    seed: int = SEED,
    level: float = 0.95,
) -> tuple[float, float]:
    """`bootstrap_with_error`'s interval alone: ``(low, high)``."""
    low, high, _ = bootstrap_with_error(units, draws, seed, level)
    return low, high


def t_interval(differences: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """The t interval of the mean of ``n`` values: ``mean ± t(n - 1) x sd / sqrt(n)``, None for
    fewer than 2 values (no degree of freedom); NaN values are left out."""
    d = np.asarray(differences, dtype=float)
    d = d[np.isfinite(d)]
    if len(d) < 2:
        return None
    half = stats.t.ppf((1 + level) / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return float(d.mean() - half), float(d.mean() + half)


def sign_flip_p(differences: Sequence[float]) -> float | None:
    """The exact two-sided sign-flip permutation p of a mean of paired differences: the share of
    the ``2^n`` sign flips whose ``|sum|`` is at least the observed one (ties to 1e-12 relative
    count as at least); None without any finite value. NaN values are left out.

    Under the null that each difference is as likely to have either sign, this is exact; its
    smallest value is ``2 / 2^n`` (0.0625 for ``n = 5``)."""
    d = np.asarray(differences, dtype=float)
    d = d[np.isfinite(d)]
    if not len(d):
        return None
    observed = abs(d.sum()) * (1 - 1e-12)
    low_bits = min(len(d), _FLIP_BITS)
    codes = np.arange(2**low_bits)[:, None] >> np.arange(low_bits) & 1
    low_sums = ((1 - 2 * codes) * d[:low_bits]).sum(1)
    high = d[low_bits:]
    at_least = 0
    for code in range(2 ** len(high)):
        signs = 1 - 2 * (code >> np.arange(len(high)) & 1)
        at_least += int((np.abs(low_sums + (signs * high).sum()) >= observed).sum())
    return at_least / 2 ** len(d)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values of a family of ``m`` tests: sorted ascending,
    ``p_(i)`` becomes ``max_{j <= i} min(1, (m - j + 1) p_(j))``; in the input's order."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (len(p) - np.arange(len(p))) * p[order])
    adjusted = np.empty(len(p))
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted.tolist()


def is_win(differences: Sequence[float], interval: tuple[float, float]) -> bool:
    """The rule before the t interval and Holm (issue 29's criterion was written with it, and
    is judged by it): the difference has the same sign, never 0, in every run, and
    ``interval`` excludes 0 on that side."""
    d = np.asarray(differences, dtype=float)
    low, high = interval
    if not len(d) or not np.isfinite(d).all():
        return False
    return bool((d > 0).all() and low > 0) or bool((d < 0).all() and high < 0)


def verdict(
    differences: Sequence[float],
    higher_is_better: bool,
    bootstrap: tuple[float, float],
    t: tuple[float, float] | None,
    p_holm: float | None,
) -> str:
    """The verdict on ``a - b`` from ``a``'s side (the module's docstring says the rule).

    Returns:
        ``"win"``, ``"loss"``, ``"undecided"`` or ``"tie"``.
    """
    d = np.asarray(differences, dtype=float)
    if not len(d) or not np.isfinite(d).all():
        return "tie"
    sign = 1 if (d > 0).all() else -1 if (d < 0).all() else 0
    if not sign:
        return "tie"
    side = "win" if (sign > 0) == higher_is_better else "loss"
    excludes = [sign * v > 0 for v in (*bootstrap, *(t or (math.nan, math.nan)))]
    if p_holm is not None and p_holm < ALPHA and all(excludes):
        return side
    return "undecided"


@dataclass(frozen=True)
class Comparison:
    """``a - b`` over the runs (the module's docstring says what each field is).

    Attributes:
        mean: the mean of the per-run differences.
        std: their sample standard deviation (0 for one run).
        better: the runs in which ``a`` is better (an equal run counts for neither).
        runs: the runs compared.
        low, high: the 95% bootstrap interval of the mean difference.
        mc_error: the Monte Carlo standard error of ``low`` and ``high`` (the larger).
        t_interval: the 95% t interval of the mean, or None for one run.
        p_signflip: the exact sign-flip p over the runs.
        p_holm: ``p_signflip`` Holm-corrected over the comparison's family (`apply_holm`;
            the comparison alone until then).
        verdict: `verdict`.
        win: ``verdict`` is ``"win"`` or ``"loss"``.
        higher_is_better: of the score.
        levels: what the bootstrap resampled: ``"runs and images"`` or ``"runs"``.
        differences: the per-run differences.
    """

    mean: float
    std: float
    better: int
    runs: int
    low: float
    high: float
    mc_error: float
    t_interval: tuple[float, float] | None
    p_signflip: float | None
    p_holm: float | None
    verdict: str
    win: bool
    higher_is_better: bool
    levels: str
    differences: list[float]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["t_interval"] = None if self.t_interval is None else list(self.t_interval)
        return out


def compare(
    differences: Sequence[float],
    higher_is_better: bool,
    units: Sequence[Sequence[float]] | None = None,
    draws: int = DRAWS,
    seed: int = SEED,
) -> Comparison:
    """The paired comparison of per-run differences ``a - b`` of a score, a family of its own
    (`apply_holm` corrects it within a larger one).

    Args:
        differences: one per run.
        higher_is_better: of the score.
        units: per run, the differences of its units (`bootstrap_with_error`); None: the
            interval resamples the runs alone.
        draws: bootstrap draws.
        seed: their seed.
    """
    d = np.asarray(differences, dtype=float)
    low, high, mc_error = bootstrap_with_error(
        [[v] for v in d] if units is None else units, draws, seed
    )
    better = int(((d > 0) if higher_is_better else (d < 0)).sum())
    t = t_interval(d)
    p = sign_flip_p(d)
    call = verdict(d, higher_is_better, (low, high), t, p)
    return Comparison(
        mean=float(d.mean()),
        std=float(d.std(ddof=1)) if len(d) > 1 else 0.0,
        better=better,
        runs=len(d),
        low=low,
        high=high,
        mc_error=mc_error,
        t_interval=t,
        p_signflip=p,
        p_holm=p,
        verdict=call,
        win=call in ("win", "loss"),
        higher_is_better=higher_is_better,
        levels="runs" if units is None else "runs and images",
        differences=d.tolist(),
    )


def _comparisons(tree: Any) -> list[dict[str, Any]]:
    """Every `Comparison.to_dict` in a nest of dicts and lists (None left out)."""
    if isinstance(tree, dict):
        if "p_signflip" in tree:
            return [tree]
        return [c for value in tree.values() for c in _comparisons(value)]
    if isinstance(tree, list):
        return [c for value in tree for c in _comparisons(value)]
    return []


def apply_holm(tree: Any) -> int:
    """Holm-correct a family in place: every comparison (`Comparison.to_dict`) in ``tree`` (a
    protocol's ``paired``: readings, pairs, scores, K) with a ``p_signflip`` gets its
    ``p_holm`` over them all, and its ``verdict`` and ``win`` anew.

    Returns:
        The size of the family.
    """
    family = [c for c in _comparisons(tree) if c["p_signflip"] is not None]
    for c, p in zip(family, holm([c["p_signflip"] for c in family]), strict=True):
        c["p_holm"] = p
        c["verdict"] = verdict(
            c["differences"], c["higher_is_better"], (c["low"], c["high"]), c["t_interval"], p
        )
        c["win"] = c["verdict"] in ("win", "loss")
    return len(family)


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


def paired_family(
    runs: list[dict[str, Any]], draws: int = DRAWS, seed: int = SEED
) -> dict[str, Any]:
    """Every pair of the compared methods of a protocol's runs, ``a`` listed before ``b``, by
    reading: ``out[reading][a][b]`` is `paired_comparisons` of ``a - b``, Holm-corrected over
    them all (`apply_holm`).

    Args:
        runs: ``per_run``, each run with its ``units`` (by reading, as `paired_comparisons`;
            units under another key, such as ``coverage``'s ``groups``, are left out).
        draws: bootstrap draws.
        seed: their seed.
    """
    out: dict[str, Any] = {}
    for reading in (r for r in runs[0]["units"] if r in runs[0]):
        names = list(runs[0][reading])
        out[reading] = {
            a: {b: paired_comparisons(runs, a, b, reading, draws, seed) for b in names[i + 1 :]}
            for i, a in enumerate(names[:-1])
        }
    apply_holm(out)
    return out
