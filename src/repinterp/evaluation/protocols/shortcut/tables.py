"""The ``shortcut`` protocol's tables: the groupings and maps (`shortcut_markdown`) and the audit
over the whole model (`strategy_markdown`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..cells import cell, columns_table, comparison_cell, markdown_table, with_runs

__all__ = ["SHOWN_STRATEGIES", "TOLD_KEYS", "shortcut_markdown", "strategy_markdown"]


SHOWN_STRATEGIES = 5
"""How many strategies of each model's ranking `strategy_markdown` lists (and the shortcut
strategy's row when it ranks below them)."""
TOLD_KEYS = ("told", "told_flagged", "told_decided", "told_any", "clean_told")
"""The audit's shares of what the unseen images are told (`strategy_markdown`'s columns)."""


def _number(value: Any, digits: int = 1) -> str:
    """A table cell: ``n/a`` for None or NaN."""
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "n/a"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _yes_no(value: Any) -> str:
    """A flag's cell: ``yes``, ``no`` or ``n/a`` (NaN)."""
    return "n/a" if not np.isfinite(value) else "yes" if value else "no"


def strategy_markdown(results: dict[str, Any]) -> list[str]:
    """The audit over the whole model, for a report: one summary row per model (per run),
    then each model's `SHOWN_STRATEGIES` first strategies of the model-wide ranking.

    Args:
        results: `repinterp.evaluation.protocols.evaluate`'s ``shortcut`` results.
    """
    runs = [r for r in results.get("per_run", []) if "strategies" in r]
    if not runs:
        return []
    header = ["Model", "strategies", "flagged", "flagged not cued", "first: flagged, cued"]
    header += ["shortcut: model rank", "flagged", "score", "told (%)", "told flagged (%)"]
    header += ["told flagged, decided (%)", "told any flagged (%)", "clean told (%)"]
    header += ["why map on cue (%)", "Grad-CAM on cue (%)", "cue area (%)"]
    rows = []
    for run in runs:
        audit = run["strategy_audit"]
        rows.append(
            [
                _number(run["model"].get("seed")),
                _number(audit["strategies"]),
                _number(audit["flagged"]),
                _number(audit["flagged_uncued"]),
                _yes_no(audit["first_cued"]),
                _number(audit["shortcut_model_rank"], 0),
                _yes_no(audit["shortcut_flagged"]),
                _number(audit["shortcut_score"], 3),
                *(_number(audit.get(key)) for key in TOLD_KEYS),  # older runs: fewer
                *(_number(audit[key]) for key in ("why_on_cue", "gradcam_on_cue")),
                _number(audit["cue_area"]),
            ]
        )
    lines = [
        "",
        "The audit over the whole model (RI+strategy's strategies, found on the reference "
        "images without labels; one ranking across all classes by the audit's score). The "
        "shortcut strategy holds most of the unseen cued images; a strategy is *cued* when at "
        "least half the unseen images assigned to it are; *told*: the share of all unseen "
        "cued images assigned to the shortcut strategy (*told flagged*: to a flagged cued "
        "strategy; *decided*: the same over the cued images the model predicts the cue's "
        "class; *any flagged*: of those, assigned a flagged strategy, cued or not; *clean "
        "told*: of the uncued images the model predicts the cue's class, assigned a flagged "
        "strategy); the maps' share on each image's own cue, over the cued images it holds:",
        "",
        *markdown_table(header, rows),
    ]
    for run in runs:
        table = run["strategies"]
        shown = [row for row in table if row["model_rank"] <= SHOWN_STRATEGIES or row["shortcut"]]
        lines += [
            "",
            f"Model {_number(run['model'].get('seed'))}: the first {SHOWN_STRATEGIES} of "
            f"{len(table)} strategies (and the shortcut strategy):",
            "",
            *markdown_table(
                ["Rank", "class", "id", "size", "score", "flagged", "cued", "reasons"],
                [
                    [
                        str(row["model_rank"]) + (" (shortcut)" if row["shortcut"] else ""),
                        row["class"],
                        str(row["id"]),
                        str(row["size"]),
                        f"{row['score']:.3f}",
                        "yes" if row["flagged"] else "no",
                        str(row["cued"]),
                        ", ".join(f"{k} {v:.2f}" for k, v in row["reasons"].items()),
                    ]
                    for row in shown
                ],
            ),
        ]
    return lines


_SHORTCUT_GROUPINGS: list[tuple[str, str, bool | None]] = [
    ("f1_marked", "F1 marked", True),
    ("ami", "AMI", True),
    ("ami_null_p95", "AMI null p95", None),
    ("ami_ceiling", "AMI k-means ceiling", None),
    ("groups", "groups", None),
    ("audit_rank", "audit rank", False),
]


_SHORTCUT_MAPS: list[tuple[str, str, bool | None]] = [
    ("mass_in_box", "on the box, marked (%)", True),
    ("mass_in_box_group", "mean map on the box (%)", True),
    ("mass_in_box_unmarked", "on the box, unmarked (%)", None),
]


def _shortcut_pairs(results: dict[str, Any], reading: str, key: str) -> list[str]:
    """The first grouping or map against each other one on ``key`` (`comparison_cell`)."""
    pairs = results.get("paired", {}).get(reading)
    if not pairs:
        return []
    first = next(iter(pairs))
    rows = [
        [f"{first} − {b}", comparison_cell(scores.get(key))] for b, scores in pairs[first].items()
    ]
    return ["", *markdown_table(["Pair", f"paired difference of {key}"], rows)]


def shortcut_markdown(results: dict[str, Any]) -> list[str]:
    """Isolation of the marked images by each grouping, mass of each map on the mark's box."""
    to_target = results.get("marked_to_target")
    looked_at = (
        f"{results['images']:.0f} predicted the class the mark leads to, "
        f"{results['marked']:.0f} of them marked; the model calls "
        f"{cell(results, 'marked_to_target')}% of the unseen marked images by the mark"
        if to_target is not None and math.isfinite(to_target)
        else f"{results['images']:.0f}, {results['marked']:.0f} of them marked (a control: "
        "every class on `*-markrand:F`, where the mark leads to no class; the class it would "
        "lead to on `*-mark:0`, where no image is marked)"
    )
    return [
        f"Unseen images looked at: {looked_at}. Groupings (fitted on the reference images of "
        "the same predicted classes, without labels) against the marked flag: F1 of the group "
        "holding most marked images, within-class AMI with its shuffle null (95th percentile) "
        "and k-means ceiling (k = 2):",
        "",
        *columns_table(with_runs(results, results["groupings"]), _SHORTCUT_GROUPINGS, "Grouping"),
        *_shortcut_pairs(results, "groupings", "f1_marked"),
        "",
        "Share of each heat map's positive relevance on the mark's box (a uniform map puts "
        f"{results['box_area']:.1f}% there): mean over the marked images, of their mean map, "
        "and over the unmarked images:",
        "",
        *columns_table(with_runs(results, results["maps"]), _SHORTCUT_MAPS, "Map"),
        *_shortcut_pairs(results, "maps", "mass_in_box"),
        *strategy_markdown(results),
    ]
