"""The ``q-sweep`` protocol (Appendix E): ACU-GT, ACU-MD and CVR of the regions for several
``|Q|``, for each way of drawing ``Q`` (``samplings``), with the time each fit took; with an RI
variant at granularity logic among the methods, each sampling at that granularity too
(``uniform+logic``, ...). Its tables: `q_sweep_markdown`.
"""

from __future__ import annotations

from typing import Any

from ...core.regions import RegionSet
from ..run import Run, fit_label
from .cells import (
    cell,
    markdown_table,
    with_runs,
)
from .common import (
    coverage_of,
    ri_variants,
    timed,
)

__all__ = ["q_sweep", "q_sweep_markdown"]


def q_sweep(run: Run) -> dict[str, Any]:
    """``q-sweep``'s numbers of one run: per sampling of ``Q`` (and granularity), the regions'
    metrics and the times for each ``|Q|`` (``samplings``)."""
    regions = run.regions
    granularities = ["class"]
    granularities += sorted({m.knobs["granularity"] for m in ri_variants(run).values()} - {"class"})
    out: dict[str, Any] = {}
    for granularity in granularities:
        for sampling in run.options.samplings:
            block = _q_sweep_block(run, regions, sampling, granularity)
            out[fit_label(run.fit_config(sampling, granularity))] = block
    return {"samplings": out}


def _q_sweep_block(run: Run, regions: RegionSet, sampling: str, granularity: str) -> dict[str, Any]:
    """`q_sweep` for one way of drawing ``Q`` at one granularity, over ``q_values``."""
    block: dict[str, Any] = {"reference": {}, "unseen": {}, "fit_s": [], "cover_s": []}
    for q in run.options.q_values:
        ri, fit_s = timed(run.fit, run.fit_config(sampling, granularity, q))
        covers, cover_s = timed(ri.explain_reference, regions.inputs)
        swept = RegionSet(ri, regions.inputs, covers, regions.centres)
        block["fit_s"].append(fit_s)
        block["cover_s"].append(cover_s)
        for part in ("reference", "unseen"):
            for key, value in coverage_of(swept, run.setup, part).items():
                block[part].setdefault(key, []).append(value)
    return block


def q_sweep_markdown(results: dict[str, Any]) -> list[str]:
    """Appendix E: the regions' metrics for each |Q|, one table per sampling of Q."""
    columns = [
        (part, key) for part in ("reference", "unseen") for key in ("ACU-GT", "ACU-MD", "CVR")
    ]
    lines = []
    for sampling, block in results["samplings"].items():
        parts = with_runs(results, {part: block[part] for part in ("reference", "unseen")})
        times = with_runs(results, {"t": block})["t"]
        rows = [
            [
                str(q),
                *[cell(parts[part], key, i) for part, key in columns],
                cell(times, "fit_s", i),
                cell(times, "cover_s", i),
            ]
            for i, q in enumerate(results["options"]["q_values"])
        ]
        header = ["|Q|", *[f"{key} {part}" for part, key in columns], "fit (s)", "covers (s)"]
        lines += [f"Sampling of Q: `{sampling}`", "", *markdown_table(header, rows), ""]
    return lines
