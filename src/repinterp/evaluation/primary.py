"""The pre-registered primary family (issue 43; docs/results.md, "Primary family"): a few
endpoints, each tested once over trained models, Holm over the family alone.

An endpoint is the per-model difference ``a - b`` of one score on one data set. A
*difference* endpoint is tested by the two-sided one-sample t test of the differences; an
*equivalence* endpoint by TOST (`tost`): two one-sided t tests against ``-margin`` and
``+margin``, whose p is the larger of the two. Both assume normal per-model differences; the
exact sign-flip p (`comparison.sign_flip_p`) is reported beside as a sensitivity analysis,
Holm-corrected over the same family. The verdict (`primary_verdict`): ``"win"`` or ``"loss"``
(a difference endpoint whose Holm p is below `comparison.ALPHA`, from ``a``'s side),
``"equivalent within ±m"`` (an equivalence endpoint whose Holm p is below it), else
``"undecided"``; an endpoint with fewer models than pre-registered is ``"undecided"`` whatever
its p (its numbers are still given).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from .comparison import ALPHA, HIGHER_IS_BETTER, holm, sign_flip_p, t_interval

__all__ = [
    "FAMILY",
    "Endpoint",
    "decide",
    "primary_section",
    "primary_table",
    "primary_verdict",
    "t_test_p",
    "tost",
]

DIFFERENCE = "difference"
EQUIVALENCE = "equivalence"


@dataclass(frozen=True)
class Endpoint:
    """One pre-registered endpoint: ``a - b`` of ``score`` on ``dataset``'s ``unseen`` runs.

    Attributes:
        dataset: the data set.
        a: the method whose side the verdict takes.
        b: the method subtracted.
        score: a score of `comparison.HIGHER_IS_BETTER`.
        hypothesis: ``"difference"`` (t test) or ``"equivalence"`` (TOST within ``margin``).
        margin: the equivalence margin, in the score's units (TOST of every endpoint uses it).
        models: the number of trained models pre-registered.
    """

    dataset: str
    a: str
    b: str
    score: str
    hypothesis: str
    margin: float
    models: int

    @property
    def name(self) -> str:
        return f"{self.dataset}: {self.a} − {self.b}, {self.score}"


# Pre-registered on 2026-11-28 before any of its runs (docs/results.md).
FAMILY = (
    Endpoint("mnist5k", "RI", "Grad-CAM", "mAD", DIFFERENCE, 3.0, 15),
    Endpoint("mnist5k", "RI", "Score-CAM", "mAD", DIFFERENCE, 3.0, 15),
    Endpoint("mnist5k", "RI", "Grad-CAM+class", "mAD", DIFFERENCE, 3.0, 15),
    Endpoint("shapes", "RI", "Grad-CAM", "mAD", DIFFERENCE, 3.0, 17),
    Endpoint("shapes", "RI", "Grad-CAM+class", "mAD", DIFFERENCE, 3.0, 17),
    Endpoint("shapes", "RI", "Score-CAM", "mAD", EQUIVALENCE, 3.0, 17),
)


def _finite(differences: Sequence[float]) -> np.ndarray:
    d = np.asarray(differences, dtype=float)
    return d[np.isfinite(d)]


def t_test_p(differences: Sequence[float]) -> float | None:
    """The two-sided p of the one-sample t test of mean 0 (``n - 1`` degrees of freedom); None
    for fewer than 2 finite values or none spread (SD 0). NaN values are left out."""
    d = _finite(differences)
    if len(d) < 2 or d.std(ddof=1) == 0:
        return None
    t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    return float(2 * stats.t.sf(abs(t), len(d) - 1))


def tost(differences: Sequence[float], margin: float) -> float | None:
    """The p of TOST, equivalence of the mean to 0 within ``±margin``: the larger of the
    one-sided t tests' p of ``mean <= -margin`` (against ``> -margin``) and of ``mean >=
    margin`` (against ``< margin``), ``n - 1`` degrees of freedom; None for fewer than 2
    finite values or none spread. NaN values are left out.

    Raises:
        ValueError: ``margin`` is not positive.
    """
    if not margin > 0:
        raise ValueError(f"the equivalence margin must be positive, got {margin}")
    d = _finite(differences)
    if len(d) < 2 or d.std(ddof=1) == 0:
        return None
    se = d.std(ddof=1) / math.sqrt(len(d))
    lower = stats.t.sf((d.mean() + margin) / se, len(d) - 1)
    upper = stats.t.cdf((d.mean() - margin) / se, len(d) - 1)
    return float(max(lower, upper))


def primary_verdict(endpoint: Endpoint, mean: float, p_holm: float | None, runs: int) -> str:
    """The verdict on an endpoint (the module's docstring says the rule)."""
    if runs < endpoint.models or p_holm is None or p_holm >= ALPHA:
        return "undecided"
    if endpoint.hypothesis == EQUIVALENCE:
        return f"equivalent within ±{endpoint.margin:g}"
    return "win" if (mean > 0) == HIGHER_IS_BETTER[endpoint.score] else "loss"


def decide(
    differences: Mapping[Endpoint, Sequence[float]],
    family: Sequence[Endpoint] = FAMILY,
) -> list[dict[str, Any]]:
    """Test every endpoint of ``family`` and Holm-correct over it.

    Args:
        differences: by endpoint, its per-model differences ``a - b`` (an endpoint without
            any, or with fewer than 2, gets no p: 1 in Holm's family, which keeps its size).
        family: the pre-registered endpoints.

    Returns:
        Per endpoint, in ``family``'s order: its settings (``endpoint``, ``dataset``, ``a``,
        ``b``, ``score``, ``hypothesis``, ``margin``, ``models``), ``runs`` (models measured),
        ``mean``, ``std``, ``t_interval`` (95 %), ``p_t``, ``p_tost``, ``p`` (the
        pre-registered test's), ``p_holm``, ``p_signflip``, ``p_signflip_holm``, ``verdict``,
        ``verdict_signflip`` (the same rule on ``p_signflip_holm``: Holm over the family with each
        difference endpoint's t p swapped for its sign-flip p; None for an equivalence
        endpoint) and ``differences``.
    """
    rows = []
    for endpoint in family:
        d = _finite(differences.get(endpoint, ()))
        p_t, p_tost = t_test_p(d), tost(d, endpoint.margin)
        rows.append(
            {
                "endpoint": endpoint.name,
                "dataset": endpoint.dataset,
                "a": endpoint.a,
                "b": endpoint.b,
                "score": endpoint.score,
                "hypothesis": endpoint.hypothesis,
                "margin": endpoint.margin,
                "models": endpoint.models,
                "runs": len(d),
                "mean": float(d.mean()) if len(d) else None,
                "std": float(d.std(ddof=1)) if len(d) > 1 else None,
                "t_interval": t_interval(d),
                "p_t": p_t,
                "p_tost": p_tost,
                "p": p_tost if endpoint.hypothesis == EQUIVALENCE else p_t,
                "p_signflip": sign_flip_p(d),
                "differences": d.tolist(),
            }
        )
    # The sensitivity family swaps each difference endpoint's t p for its sign-flip p (the
    # equivalence endpoint keeps its TOST p: no sign-flip version of it is pre-registered).
    for key, holm_key in (("p", "p_holm"), ("p_signflip", "p_signflip_holm")):
        tested = [row[key] if row["hypothesis"] == DIFFERENCE else row["p"] for row in rows]
        adjusted = holm([1.0 if p is None else p for p in tested])
        for row, p in zip(rows, adjusted, strict=True):
            shown = row[key] is not None and (key == "p" or row["hypothesis"] == DIFFERENCE)
            row[holm_key] = p if shown else None
    for endpoint, row in zip(family, rows, strict=True):
        row["verdict"] = primary_verdict(endpoint, row["mean"], row["p_holm"], row["runs"])
        row["verdict_signflip"] = (
            primary_verdict(endpoint, row["mean"], row["p_signflip_holm"], row["runs"])
            if endpoint.hypothesis == DIFFERENCE
            else None
        )
    return rows


def _p(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"


def _estimate(row: dict[str, Any]) -> str:
    if row["mean"] is None:
        return "—"
    spread = "" if row["std"] is None else f" ± {row['std']:.2f}"
    interval = row["t_interval"]
    within = "" if interval is None else f" [{interval[0]:+.2f}, {interval[1]:+.2f}]"
    return f"{row['mean']:+.2f}{spread}{within}"


def primary_table(rows: list[dict[str, Any]]) -> list[str]:
    """The family's table: per endpoint the estimate (mean ± SD of the per-model differences
    [95 % t interval]), the pre-registered test's p and its Holm p, the sign-flip p and its
    Holm p (sensitivity), the TOST p at the margin, the verdict and the models measured of
    those pre-registered.

    Args:
        rows: `evaluation.primary.decide`'s.
    """
    lines = [
        "| endpoint | test | estimate ± SD [95% t interval] | p | Holm p | sign-flip p (Holm) "
        "| TOST p | verdict | models |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        test = "t" if row["hypothesis"] == "difference" else f"TOST ±{row['margin']:g}"
        flip = f"{_p(row['p_signflip'])} ({_p(row['p_signflip_holm'])})"
        if row["p_signflip_holm"] is None:
            flip = _p(row["p_signflip"])
        lines.append(
            f"| `{row['dataset']}` {row['a']} − {row['b']}, {row['score']} | {test} | "
            f"{_estimate(row)} | {_p(row['p'])} | {_p(row['p_holm'])} | {flip} | "
            f"{_p(row['p_tost'])} (±{row['margin']:g}) | **{row['verdict']}** | "
            f"{row['runs']} of {row['models']} |"
        )
    return lines


def primary_section(rows: list[dict[str, Any]]) -> list[str]:
    """`primary_table` under a line that says what it is, for a run's ``results.md``."""
    caption = (
        'The pre-registered primary family over all of its runs (docs/results.md, "Primary '
        "family\"); this run's models are some of them:"
    )
    return [caption, "", *primary_table(rows)]
