"""The ``coverage`` protocol (Appendix D, Table 2): ACU-GT, ACU-MD and CVR of the regions on the
reference and the unseen set, beside the model's accuracy (ACU-GT of F), and the polytope
groups of each set's images; the same under ``methods`` for each RI variant among the methods
(e.g. ``RI+logic``: its own covers of the same k-means inputs). Its tables:
`coverage_markdown`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ...core.regions import RegionSet
from ..names import method_label
from ..run import Run
from .cells import (
    cell,
    groups_table,
    markdown_table,
    with_runs,
)
from .common import (
    coverage_of,
    group_stats,
    group_units,
    ri_variants,
)

__all__ = ["coverage", "coverage_markdown"]


def _unseen_regions(run: Run, regions: RegionSet) -> Tensor:
    """The region of each unseen image (CPU)."""
    return torch.cat([regions.assign(x).region.cpu() for x in run.setup.chunks("unseen")])


def _coverage_blocks(run: Run, regions: RegionSet) -> dict[str, Any]:
    """``coverage``'s numbers of one set of regions: each part's coverage and groups."""
    setup, unseen = run.setup, _unseen_regions(run, regions)
    return {
        part: coverage_of(regions, setup, part) | group_stats(run, regions, region, part)
        for part, region in (("reference", None), ("unseen", unseen))
    }


def coverage(run: Run) -> dict[str, Any]:
    """``coverage``'s numbers of RI's regions and of its variants' (``methods``), with RI's
    per-image groups of each part as ``units`` (``groups``: `group_units`)."""
    out = _coverage_blocks(run, run.regions)
    unseen = _unseen_regions(run, run.regions)
    groups = {
        part: group_units(run, run.regions, region, part)
        for part, region in (("reference", None), ("unseen", unseen))
    }
    if any(groups.values()):
        out["units"] = {"groups": groups}
    variants = ri_variants(run)
    if variants:
        out["methods"] = {
            name: _coverage_blocks(run, m.regions(run)) for name, m in variants.items()
        }
    return out


def coverage_markdown(results: dict[str, Any]) -> list[str]:
    """Table 2: the regions' ACU-GT, ACU-MD and CVR beside the model's; then the same for each
    RI variant among the methods (e.g. RI+logic), under its name."""
    lines = _coverage_tables(results, results, "RI")
    for name, block in results.get("methods", {}).items():
        lines += ["", f"{method_label(name)}'s regions:", ""]
        lines += _coverage_tables(results, block, name)
    return lines


def _coverage_tables(results: dict[str, Any], numbers: dict[str, Any], name: str) -> list[str]:
    """`coverage_markdown`'s tables of one method's regions: ``numbers`` (``reference`` and
    ``unseen``, as ``results``' runs hold them), its columns named after ``name``."""
    ri = method_label(name)
    header = ["Set", f"ACU-GT of {ri}", "ACU-GT of F", f"ACU-MD of {ri}", "ACU-MD of F"]
    header.append(f"CVR of {ri}")
    blocks = with_runs(results, {part: numbers[part] for part in ("reference", "unseen")})
    rows = [
        [
            label,
            cell(blocks[part], "ACU-GT"),
            cell(blocks[part], "model_acc"),
            cell(blocks[part], "ACU-MD"),
            "100.00",
            cell(blocks[part], "CVR"),
            "100.00",
        ]
        for part, label in (("reference", "Ref."), ("unseen", "Unseen"))
    ]
    labels = {"Ref.": blocks["reference"], "Unseen": blocks["unseen"]}
    return markdown_table([*header, "CVR of F"], rows) + groups_table(
        labels, "Set", "each set's images, by the region interpreting them,"
    )
