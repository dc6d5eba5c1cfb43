"""The table cells and tables every protocol's Markdown shares (each protocol's own tables are
in its module; `results_markdown` puts them together).

A cell is ``mean ± std`` over the runs, or the mean alone for one run; the best of a column is
bold, unless several rows share it at the shown precision (a tie: none is bold). Paired
differences (`comparison_cell`) are ``mean ± std [bootstrap interval] t [t interval], k/n,
p``, bold only when the first method wins (italic: the other one wins).
"""

from __future__ import annotations

import math
from typing import Any

from ..names import POLYTOPE_SCORE_CAM, method_label

__all__ = [
    "AD_COLUMNS",
    "CURVE_COLUMNS",
    "best_name",
    "cell",
    "columns_table",
    "comparison_cell",
    "groups_table",
    "legend",
    "markdown_table",
    "mean_std",
    "paired_tables",
    "with_runs",
]


# Columns of the unseen tables: key, header, whether higher is better.
AD_COLUMNS = [
    ("mAD", "mAD (%)", False),
    ("mAI", "mAI (%)", True),
    ("mAD_interp", "mAD per interp. (%)", False),
    ("mAI_interp", "mAI per interp. (%)", True),
    ("CVR", "CVR (%)", True),
    ("ACU-MD", "ACU-MD (%)", True),
]


CURVE_COLUMNS = [
    ("ROAD", "ROAD (pp)", True),
    ("ROAD-MoRF", "MoRF (pp)", False),
    ("ROAD-LeRF", "LeRF (pp)", True),
    ("deletion", "deletion AUC (%)", False),
    ("insertion", "insertion AUC (%)", True),
]


# Columns of the polytope groups (`repinterp.evaluation.groupings`): key, header.
_GROUP_COLUMNS = [
    ("distinct_polytopes", "distinct polytopes"),
    ("merged_groups", "merged groups (Jaccard >= 0.9)"),
    ("effective_groups", "effective groups"),
    ("merged_effective_groups", "effective merged groups"),
    ("largest_group_share", "largest group of a class (%)"),
    ("singletons", "polytopes of one image"),
]


_SUBCONCEPT_COLUMNS = [
    ("subconcept_purity", "sub-concept purity (%)"),
    ("subconcept_purity_class", "sub-concept purity of one group per class (%)"),
    ("ami", "within-class AMI"),
    ("ami_null", "AMI, sub-concepts shuffled: mean"),
    ("ami_null_p95", "95th percentile"),
    ("ami_ceiling", "AMI of k-means (ceiling)"),
]


_OUTSIDE_COLUMNS = [
    ("outside_share", "outside the main polytope (%)"),
    ("margin_main", "logit margin: main"),
    ("margin_outside", "outside"),
    ("error_main", "errors (%): main"),
    ("error_outside", "outside"),
    ("jaccard_outside", "Jaccard with the main polytope's cover"),
]


def cell(
    block: dict[str, Any], key: str, index: int | None = None, best: bool = False, digits: int = 2
) -> str:
    """``mean ± std`` of ``block[key]`` (its ``index``-th value for a list) with ``digits``
    decimals, the mean alone when there is no spread to show (one run), ``n/a`` when missing;
    bold if ``best``."""
    mean, std = block.get(key), block.get(f"{key}_std")
    if index is not None and mean is not None:
        mean, std = mean[index], std[index]
    text = mean_std(mean, None if block.get("_runs", 2) == 1 else std, digits)
    return f"**{text}**" if best and text != "n/a" else text


def mean_std(mean: float | None, std: float | None, digits: int = 2) -> str:
    """The one ``mean ± std`` cell of every table: ``digits`` decimals, the mean alone when
    ``std`` is None (one run: no spread to show), ``n/a`` when the mean is missing or not
    finite."""
    if mean is None or not math.isfinite(mean):
        return "n/a"
    text = f"{mean:.{digits}f}"
    return text if std is None else f"{text} ± {std:.{digits}f}"


def best_name(
    blocks: dict[str, Any], key: str, higher: bool, index: int | None = None
) -> str | None:
    """The block whose ``key`` is best, or None when none has a value or the best is a tie at
    the precision `cell` shows (e.g. four methods at 12.30: no bold for any of them)."""

    def value(name: str) -> float:
        v = blocks[name].get(key)
        v = v[index] if index is not None and v is not None else v
        return v if v is not None and math.isfinite(v) else -math.inf if higher else math.inf

    best = (max if higher else min)(blocks, key=value)
    if not math.isfinite(value(best)):
        return None
    shown = [f"{value(name):.2f}" for name in blocks]
    return best if shown.count(f"{value(best):.2f}") == 1 else None


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def with_runs(results: dict[str, Any], blocks: dict[str, Any]) -> dict[str, Any]:
    """The blocks, each told the number of runs (for `cell`)."""
    return {name: {**block, "_runs": results["runs"]} for name, block in blocks.items()}


def columns_table(
    blocks: dict[str, Any],
    columns: list[tuple[str, str, bool | None]],
    first: str,
    times: bool = False,
) -> list[str]:
    """One row per block, one column per key present in any block, the best of each bold
    (higher or lower, as the column says; None: no bold); then the block's ``time_s`` if
    ``times``."""
    columns = [c for c in columns if any(c[0] in b for b in blocks.values())]
    best = {key: None if up is None else best_name(blocks, key, up) for key, _, up in columns}
    rows = [
        [method_label(name), *[cell(b, key, best=best[key] == name) for key, _, _ in columns]]
        + ([f"{b['time_s']:.1f}"] if times else [])
        for name, b in blocks.items()
    ]
    header = [first, *[header for _, header, _ in columns]] + (["time (s)"] if times else [])
    return markdown_table(header, rows)


def _digits(key: str) -> int:
    """Decimals of a group column: 3 for the AMI (about 0.01 to 0.1 here), else 2."""
    return 3 if key.startswith("ami") else 2


def groups_table(blocks: dict[str, Any], first: str, images: str) -> list[str]:
    """The polytope groups of the blocks that have them (none: no lines), under a sentence
    saying which ``images`` were grouped: the counts, the sub-concept measures (or why there
    are none) and the images outside their class's main polytope."""
    found = {name: b for name, b in blocks.items() if "distinct_polytopes" in b}
    if not found:
        return []

    def table(columns: list[tuple[str, str]]) -> list[str]:
        columns = [c for c in columns if any(c[0] in b for b in found.values())]
        rows = [
            [method_label(name), *[cell(b, key, digits=_digits(key)) for key, _ in columns]]
            for name, b in found.items()
        ]
        return markdown_table([first, *[header for _, header in columns]], rows) if columns else []

    lines = [
        "",
        f"What RI finds: {images} grouped by the polytope P explaining them (its class, "
        "boundaries and sides); effective groups = exp of the entropy of the group sizes; "
        "merged groups: polytopes whose covered reference sets have Jaccard >= 0.9 merged, "
        "transitively (`repinterp.evaluation.groupings`):",
        "",
        *table(_GROUP_COLUMNS),
        "",
    ]
    if any("subconcept_purity" in b for b in found.values()):
        lines += [
            "Sub-concepts: the groups' purity beside one group per class; the within-class "
            "adjusted mutual information between groups and sub-concepts (weighted by class "
            "size; 0: chance, 1: the groups are the sub-concepts), the same with the "
            "sub-concepts shuffled within each class (50 draws: mean, 95th percentile), and "
            "k-means with k = the class's sub-concepts on the same feature maps (the ceiling):",
            "",
            *table(_SUBCONCEPT_COLUMNS),
            "",
        ]
    else:
        lines += ["No sub-concept labels on this data set: no purity or AMI.", ""]
    outside = table(_OUTSIDE_COLUMNS)
    if outside:
        lines += [
            "The images outside their class's largest polytope against those in it: their "
            "share, the median logit margin (largest logit minus the second), the model's "
            "error rate, and the median Jaccard index of an outside image's covered reference "
            "set with the main polytope's:",
            "",
            *outside,
        ]
    return lines[:-1] if lines[-1] == "" else lines


def legend(results: dict[str, Any]) -> list[str]:
    """What polytope-averaged Score-CAM is, when a table shows it."""
    if not any(method_label(name) != name for name in results["methods"]):
        return []
    n = results["options"].get("score_images", 16)
    return [
        "",
        f"{POLYTOPE_SCORE_CAM} (`RI+score`, ours): RI's polytopes P(x), their heat maps with "
        f"Score-CAM's channel weights averaged over {n} images P(x) covers (the input among "
        "them), not the paper's weights (§5.1); `+class` and `+cluster` are its controls without "
        "polytopes (weights averaged over images of the predicted class or of a k-means cluster).",
    ]


def comparison_cell(comparison: dict[str, Any] | None) -> str:
    """A paired difference (`comparison.Comparison.to_dict`): ``mean ± std [low, high] t [low,
    high], k/n, p`` (the bootstrap interval, the t interval, k: the runs in which the first
    method is better, p: ``p_holm``; no std or t interval for one run); bold when the first
    method wins, italic when the other one does, ``†`` when undecided (`comparison.verdict`);
    ``n/a`` without one."""
    if comparison is None or not math.isfinite(comparison["mean"]):
        return "n/a"
    c = comparison
    spread = f" ± {c['std']:.2f}" if c["runs"] > 1 else ""
    t = c["t_interval"]
    t_text = f" t [{t[0]:+.2f}, {t[1]:+.2f}]" if t else ""
    text = (
        f"{c['mean']:+.2f}{spread} [{c['low']:+.2f}, {c['high']:+.2f}]{t_text}, "
        f"{c['better']}/{c['runs']}, p {c['p_holm']:.2f}"
    )
    return {"win": f"**{text}**", "loss": f"*{text}*", "undecided": f"{text} †"}.get(
        c["verdict"], text
    )


_WIN = (
    "{spread} [95% interval from a paired bootstrap over the runs and, within each, the "
    "{units}{alone}] t [95% t interval over the runs], k/n: the runs in which the first method "
    "is better, p: the exact sign-flip p over the runs, Holm-corrected over every comparison of "
    "this result. **Bold**: the first method wins; *italic*: the other method wins (a win: p < "
    "0.05 and both intervals exclude 0); †: undecided at n runs (the same sign in every run, "
    "not a win; with 5 runs p cannot go below 0.0625); neither: a tie"
)


def paired_tables(results: dict[str, Any], reading: str, which: str) -> list[str]:
    """The first method against each other one, ``mean ± std [95% interval], k/n`` of the
    paired differences (`comparison_cell`), one table per reading (and per score over K for
    ``reference``); ``results.json``'s ``paired`` holds every pair."""
    pairs = results.get("paired", {}).get(reading)
    if not pairs:
        return []
    first = next(iter(pairs))
    rows = pairs[first]
    units = "inputs" if results["protocol"] == "reference" else "images"
    intro = (
        f"Paired differences {method_label(first)} − each other method, {which}; "
        + _WIN.format(
            spread="mean ± std over the runs" if results["runs"] > 1 else "the difference",
            units=units,
            alone="; per interp.: the runs alone" if results["protocol"] == "unseen" else "",
        )
        + ":"
    )
    keys = [k for k in (*[c[0] for c in AD_COLUMNS], *[c[0] for c in CURVE_COLUMNS])]
    keys = [k for k in keys if any(k in scores for scores in rows.values())]
    labels = {key: label for key, label, _ in (*AD_COLUMNS, *CURVE_COLUMNS)}
    if results["protocol"] != "reference":
        table = [
            [
                f"{method_label(first)} − {method_label(b)}",
                *[comparison_cell(s.get(k)) for k in keys],
            ]
            for b, s in rows.items()
        ]
        return ["", intro, "", *markdown_table(["Pair", *[labels[k] for k in keys]], table)]
    ks = results["options"]["ks"]
    lines = ["", intro, ""]
    for key in keys:
        shown = [i for i in range(len(ks)) if any(s.get(key) and s[key][i] for s in rows.values())]
        table = [
            [
                f"{method_label(first)} − {method_label(b)}",
                *[comparison_cell(s[key][i] if s.get(key) else None) for i in shown],
            ]
            for b, s in rows.items()
        ]
        lines += [
            f"{labels[key]}:",
            "",
            *markdown_table(["Pair", *[f"K = {ks[i]}" for i in shown]], table),
            "",
        ]
    return lines[:-1]
