"""How many trained models the primary family needs (issue 43): a power estimate from the
committed per-model data of ``docs/results/{mnist5k,shapes}-unseen-seeds`` (five models each).

For each candidate endpoint (RI − a method, pooled mAD, over the models) it writes the per-model
mean difference and its sample SD, then:

- ``n_t``: the models a two-sided paired t test needs for 80 % power at level ``0.05 / m``
  (Bonferroni over a family of ``m`` endpoints: Holm rejects whatever Bonferroni does, so this
  is an upper bound of Holm's need), taking the mean and SD as true (noncentral t);
- ``n_tost``: the models TOST (two one-sided t tests at ``0.05 / m``) needs for 80 % power to
  call the difference equivalent within ``±MARGIN`` mAD points, by the bound
  ``P(both reject) >= P(lower rejects) + P(upper rejects) - 1``; None where the observed
  mean lies outside the margin (equivalence cannot be shown there).

Both take the observed effect as the truth; effects that were picked for being large shrink on
replication, so these counts are optimistic for the smallest effects.

Run: ``python -m studies.power`` (writes ``docs/results/power/power.{json,md}``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import stats

from repinterp.store.outputs import write_outputs

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
DATASETS = ("mnist5k", "shapes")
OTHERS = ("Grad-CAM", "Grad-CAM++", "Score-CAM", "Grad-CAM+class")
# The family size the sample sizes are computed for, the power and the equivalence margin.
FAMILY = 6
POWER = 0.8
MARGIN = 3.0
ALPHA = 0.05
MAX_N = 200


def t_power(effect: float, sd: float, n: int, alpha: float) -> float:
    """Power of a two-sided one-sample t test of ``n`` paired differences at level ``alpha``
    when their mean is ``effect`` and their SD ``sd`` (noncentral t; the far tail counted)."""
    df = n - 1
    critical = stats.t.ppf(1 - alpha / 2, df)
    shift = effect / sd * math.sqrt(n)
    return float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))


def tost_power(effect: float, sd: float, n: int, alpha: float, margin: float) -> float:
    """A lower bound of TOST's power at level ``alpha`` with margin ``±margin``: the sum of the
    two one-sided tests' powers less 1 (at least 0)."""
    df = n - 1
    critical = stats.t.ppf(1 - alpha, df)
    scale = math.sqrt(n) / sd
    lower = stats.nct.sf(critical, df, (effect + margin) * scale)
    upper = stats.nct.cdf(-critical, df, (effect - margin) * scale)
    return max(0.0, float(lower + upper - 1))


def needed(power: Callable[[int], float], floor: int = 3) -> int | None:
    """The smallest ``n`` from ``floor`` to `MAX_N` with ``power(n) >= POWER``, or None."""
    return next((n for n in range(floor, MAX_N + 1) if power(n) >= POWER), None)


def endpoints() -> list[dict[str, object]]:
    """Every candidate endpoint's observed differences and the models it needs."""
    alpha = ALPHA / FAMILY
    rows = []
    for dataset in DATASETS:
        results = json.loads((RESULTS / f"{dataset}-unseen-seeds" / "results.json").read_text())
        runs = [run["methods"] for run in results["per_run"]]
        for other in OTHERS:
            d = np.array([run["RI"]["mAD"] - run[other]["mAD"] for run in runs])
            mean, sd = float(d.mean()), float(d.std(ddof=1))
            n_tost = None
            if abs(mean) < MARGIN:
                n_tost = needed(lambda n, m=mean, s=sd: tost_power(m, s, n, alpha, MARGIN))
            rows.append(
                {
                    "dataset": dataset,
                    "endpoint": f"RI − {other}, mAD",
                    "seeds": results["setup"]["model_seeds"],
                    "differences": d.round(4).tolist(),
                    "mean": mean,
                    "sd": sd,
                    "p_t": float(stats.ttest_1samp(d, 0).pvalue),
                    "n_t": needed(lambda n, m=mean, s=sd: t_power(m, s, n, alpha)),
                    "n_tost": n_tost,
                }
            )
    return rows


def _markdown(rows: list[dict[str, object]]) -> str:
    def count(n: object) -> str:
        return "—" if n is None else str(n)

    lines = [
        "# Power of the candidate primary endpoints (issue 43)",
        "",
        f"From the five committed models of each data set (seeds 0-4, `*-unseen-seeds`); "
        f"80 % power at level 0.05 / {FAMILY} (Bonferroni over a family of {FAMILY}: an upper "
        f"bound of Holm's need); TOST margin ±{MARGIN:g} mAD points. Observed effects taken as "
        "true (optimistic where they were picked for being large). `python -m studies.power`.",
        "",
        "| data set | endpoint | mean ± SD (5 models) | t p (5) | models, t test | models, TOST |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['dataset']}` | {r['endpoint']} | {r['mean']:+.2f} ± {r['sd']:.2f} | "
            f"{r['p_t']:.4f} | {count(r['n_t'])} | {count(r['n_tost'])} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    rows = endpoints()
    out = RESULTS / "power"
    out.mkdir(exist_ok=True)
    settings = {"family": FAMILY, "power": POWER, "margin": MARGIN, "alpha": ALPHA}
    data = json.dumps(settings | {"endpoints": rows}, indent=2) + "\n"
    write_outputs({out / "power.json": data.encode(), out / "power.md": _markdown(rows).encode()})
    print(_markdown(rows))


if __name__ == "__main__":
    main()
