"""Markdown and JSON reports of the evaluation protocols' results (``evaluation.evaluate``).

`results_markdown` lays the numbers out in tables shaped like the paper's; `write_results`
writes ``results.json``, ``units.json`` (each run's per-image values, when it has them),
``results.md`` and the protocol's plots (`report.plots`). A cell is ``mean ± std`` over the
runs, or the mean alone for one run; the best of a column is bold, unless several rows share
it at the shown precision (a tie: none is bold). Paired differences (`comparison_cell`) are
``mean ± std [bootstrap interval] t [t interval], k/n, p``, bold only when the first method
wins (italic: the other one wins).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..store.outputs import write_outputs
from .names import POLYTOPE_SCORE_CAM, method_label
from .plots import save_plots
from .primary import primary_section

__all__ = [
    "cell",
    "comparison_cell",
    "mean_std",
    "overview_markdown",
    "results_markdown",
    "rewrite_results",
    "write_results",
]

# Columns of the unseen tables: key, header, whether higher is better.
_AD_COLUMNS = [
    ("mAD", "mAD (%)", False),
    ("mAI", "mAI (%)", True),
    ("mAD_interp", "mAD per interp. (%)", False),
    ("mAI_interp", "mAI per interp. (%)", True),
    ("CVR", "CVR (%)", True),
    ("ACU-MD", "ACU-MD (%)", True),
]
_CURVE_COLUMNS = [
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


def _best(blocks: dict[str, Any], key: str, higher: bool, index: int | None = None) -> str | None:
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


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _with_runs(results: dict[str, Any], blocks: dict[str, Any]) -> dict[str, Any]:
    """The blocks, each told the number of runs (for `cell`)."""
    return {name: {**block, "_runs": results["runs"]} for name, block in blocks.items()}


def _columns_table(
    blocks: dict[str, Any],
    columns: list[tuple[str, str, bool | None]],
    first: str,
    times: bool = False,
) -> list[str]:
    """One row per block, one column per key present in any block, the best of each bold
    (higher or lower, as the column says; None: no bold); then the block's ``time_s`` if
    ``times``."""
    columns = [c for c in columns if any(c[0] in b for b in blocks.values())]
    best = {key: None if up is None else _best(blocks, key, up) for key, _, up in columns}
    rows = [
        [method_label(name), *[cell(b, key, best=best[key] == name) for key, _, _ in columns]]
        + ([f"{b['time_s']:.1f}"] if times else [])
        for name, b in blocks.items()
    ]
    header = [first, *[header for _, header, _ in columns]] + (["time (s)"] if times else [])
    return _table(header, rows)


def _digits(key: str) -> int:
    """Decimals of a group column: 3 for the AMI (about 0.01 to 0.1 here), else 2."""
    return 3 if key.startswith("ami") else 2


def _groups_table(blocks: dict[str, Any], first: str, images: str) -> list[str]:
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
        return _table([first, *[header for _, header in columns]], rows) if columns else []

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


def _legend(results: dict[str, Any]) -> list[str]:
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


def _paired_tables(results: dict[str, Any], reading: str, which: str) -> list[str]:
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
    keys = [k for k in (*[c[0] for c in _AD_COLUMNS], *[c[0] for c in _CURVE_COLUMNS])]
    keys = [k for k in keys if any(k in scores for scores in rows.values())]
    labels = {key: label for key, label, _ in (*_AD_COLUMNS, *_CURVE_COLUMNS)}
    if results["protocol"] != "reference":
        table = [
            [
                f"{method_label(first)} − {method_label(b)}",
                *[comparison_cell(s.get(k)) for k in keys],
            ]
            for b, s in rows.items()
        ]
        return ["", intro, "", *_table(["Pair", *[labels[k] for k in keys]], table)]
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
            *_table(["Pair", *[f"K = {ks[i]}" for i in shown]], table),
            "",
        ]
    return lines[:-1]


def _md_methods(results: dict[str, Any]) -> list[str]:
    """Table 1: AD / AI pooled and per interpretation, the regions' coverage, the times; then
    the perturbation metrics."""
    methods = _with_runs(results, results["methods"])
    lines = _columns_table(methods, _AD_COLUMNS, "Method", times=True)
    if any(key in m for m in methods.values() for key, _, _ in _CURVE_COLUMNS):
        curve_n = results["options"].get("curve_images")
        lines += [
            "",
            f"Perturbation metrics on {curve_n} unseen images per run (the same for every "
            "method); pp = percentage points of the class probability:",
            "",
            *_columns_table(methods, _CURVE_COLUMNS, "Method"),
        ]
    lines += _paired_tables(results, "methods", "on the unseen images")
    return lines + _groups_table(methods, "Method", "the unseen images") + _legend(results)


# The paper's targets on unseen images (Table 1, Table 2; App. D), beside the overview.
PAPER_TARGETS = {"mAD": "lowest", "CVR": "≥ 97", "ACU-MD": "≥ 98"}
_OVERVIEW = [
    ("mAD", "mAD", False),
    ("mAD_interp", "mAD per interp.", False),
    ("ROAD", "ROAD (pp)", True),
    ("deletion", "deletion", False),
    ("insertion", "insertion", True),
    ("CVR", "CVR", True),
    ("ACU-MD", "ACU-MD", True),
]


def overview_markdown(unseen: dict[str, dict[str, Any]]) -> str:
    """One table of ``unseen`` results on several data sets: per data set and method, mAD
    pooled and per interpretation, ROAD, deletion and insertion AUC, CVR and ACU-MD (%, the
    best of a column within a data set bold), the model's accuracy on the runs' unseen images,
    and a row of the paper's targets.

    Args:
        unseen: `evaluate`'s ``unseen`` results (or their JSON), by data set name.
    """
    header = ["Data set", "Method", *[label for _, label, _ in _OVERVIEW], "model acc."]
    rows = []
    for dataset, results in unseen.items():
        methods = _with_runs(results, results["methods"])
        best = {key: _best(methods, key, higher) for key, _, higher in _OVERVIEW}
        accuracy = cell({**results["model_acc"], "_runs": results["runs"]}, "unseen")
        for name, block in methods.items():
            cells = [cell(block, key, best=best[key] == name) for key, _, _ in _OVERVIEW]
            rows.append([f"`{dataset}`", method_label(name), *cells, accuracy])
        targets = [PAPER_TARGETS.get(key, "") for key, _, _ in _OVERVIEW]
        rows.append([f"`{dataset}`", "*paper's target for RI*", *targets, ""])
    return "\n".join(_table(header, rows)) + "\n"


def _md_coverage(results: dict[str, Any]) -> list[str]:
    """Table 2: the regions' ACU-GT, ACU-MD and CVR beside the model's; then the same for each
    RI variant among the methods (e.g. RI+logic), under its name."""
    lines = _coverage_tables(results, results, "RI")
    for name, block in results.get("methods", {}).items():
        lines += ["", f"{method_label(name)}'s regions:", ""]
        lines += _coverage_tables(results, block, name)
    return lines


def _coverage_tables(results: dict[str, Any], numbers: dict[str, Any], name: str) -> list[str]:
    """`_md_coverage`'s tables of one method's regions: ``numbers`` (``reference`` and
    ``unseen``, as ``results``' runs hold them), its columns named after ``name``."""
    ri = method_label(name)
    header = ["Set", f"ACU-GT of {ri}", "ACU-GT of F", f"ACU-MD of {ri}", "ACU-MD of F"]
    header.append(f"CVR of {ri}")
    blocks = _with_runs(results, {part: numbers[part] for part in ("reference", "unseen")})
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
    return _table([*header, "CVR of F"], rows) + _groups_table(
        labels, "Set", "each set's images, by the region interpreting them,"
    )


# Which images each reading of ``reference`` scores (the S of each method).
_OWN_S = (
    "each method on its own S (RI: the images P(x) covers, ranked by its Dist; the others: "
    "the K nearest reference images of any class)"
)
_COMMON_S = (
    "every method on one common S (the images the paper's RI's P(x) covers, ranked by its Dist, "
    "cut to K), each reusing its own explanation of the input"
)


def _per_k_tables(results: dict[str, Any], blocks: dict[str, Any], which: str) -> list[str]:
    """One table per score the blocks have, a row per block and a column per K, titled with
    ``which`` images were scored."""
    ks, options = results["options"]["ks"], results["options"]
    lines = []
    named = [("mAD", "mAD (%)", False), ("mAI", "mAI (%)", True), *_CURVE_COLUMNS]
    for key, label, higher in named:
        if not any(key in m for m in blocks.values()):
            continue
        shown = [i for i, k in enumerate(ks) if key in ("mAD", "mAI") or k <= options["curve_k"]]
        best = {i: _best(blocks, key, higher, i) for i in shown}
        rows = [
            [method_label(name), *[cell(m, key, i, best[i] == name) for i in shown]]
            for name, m in blocks.items()
        ]
        where = "" if key in ("mAD", "mAI") else (f" (the first {options['curve_inputs']} inputs)")
        lines += [f"{label} over the top-K similar reference images{where}, {which}:", ""]
        lines += [*_table(["Method", *[f"K = {ks[i]}" for i in shown]], rows), ""]
    return lines


def _md_reference(results: dict[str, Any]) -> list[str]:
    """Appendix C: each score per K with each method on its own similar images, then run times
    and the mean size of the similar sets; then, if there, each score per K with every method
    on RI's similar images (``common``)."""
    methods = _with_runs(results, results["methods"])
    lines = _per_k_tables(results, methods, _OWN_S)
    rows = [
        [method_label(name), f"{m['time_s']:.1f}", ", ".join(f"{s:.1f}" for s in m["similar"])]
        for name, m in methods.items()
    ]
    lines += _table(["Method", "time (s)", "mean size of S per K"], rows)
    lines += _groups_table(methods, "Method", "the inputs")
    common = _with_runs(results, results.get("common", {}))
    if common:
        sizes = ", ".join(f"{s:.1f}" for s in next(iter(common.values()))["similar"])
        left_out = [method_label(name) for name in methods if name not in common]
        lines += ["", f"Common S, mean size per K: {sizes}.", ""]
        if left_out:
            lines += [
                f"Left out of the common S (cannot reuse its explanation on images it did not "
                f"choose): {', '.join(left_out)}.",
                "",
            ]
        lines += _per_k_tables(results, common, _COMMON_S)[:-1]
    lines += _paired_tables(results, "methods", _OWN_S)
    lines += _paired_tables(results, "common", _COMMON_S)
    return lines + _legend(results)


def _md_q_sweep(results: dict[str, Any]) -> list[str]:
    """Appendix E: the regions' metrics for each |Q|, one table per sampling of Q."""
    columns = [
        (part, key) for part in ("reference", "unseen") for key in ("ACU-GT", "ACU-MD", "CVR")
    ]
    lines = []
    for sampling, block in results["samplings"].items():
        parts = _with_runs(results, {part: block[part] for part in ("reference", "unseen")})
        times = _with_runs(results, {"t": block})["t"]
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
        lines += [f"Sampling of Q: `{sampling}`", "", *_table(header, rows), ""]
    return lines


def _md_similar(results: dict[str, Any]) -> list[str]:
    """Purity@k and the reused map's mAD@k of the rankings, then the pointing game."""
    rankings = _with_runs(results, results["rankings"])
    keys = list(next(iter(results["rankings"].values())))
    keys = [k for k in keys if not k.endswith("_std")]
    columns = [(k, f"{k} (%)", not k.startswith("mAD")) for k in keys]
    lines = [
        "Share of the top-k similar reference images with the input's class / sub-concept, and "
        "mAD (%) of the input's heat map reused on them:",
        "",
        *_columns_table(rankings, columns, "Ranking"),
        "",
        "Reference images covered by RI's P(x), besides the input, on average: "
        f"{results['covered_others']:.1f}.",
    ]
    if "methods" in results:
        methods = _with_runs(results, results["methods"])
        best = _best(methods, "energy", True)
        energy = [
            [method_label(name), cell(m, "energy", best=name == best), f"{m['time_s']:.1f}"]
            for name, m in methods.items()
        ]
        lines += [
            "",
            "Share of the heat-map energy inside the object's mask on the unseen set (%); the "
            f"mask covers {results['mask_area']:.1f}% of the pixels on average:",
            "",
            *_table(["Method", "energy in mask (%)", "time (s)"], energy),
        ]
    return lines


def _sanity_cell(results: dict[str, Any], name: str, key: str, step: str | None) -> str:
    """A sanity score of a method (``methods[name][key][step]``; ``[key]`` when ``step`` is
    None) as `cell` shows it, over the runs that have one; ``no map`` where no run has one
    because the model draws no map (``KEY_no_map``, or, when ``step`` is None and there is no
    ``KEY_no_map``, ``no_map``), never a score; the runs without a value named."""
    runs = results.get("per_run") or [results]
    blocks = [run["methods"][name] for run in runs]
    values = [block[key] if step is None else block[key][step] for block in blocks]
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        no_maps = [
            b.get(f"{key}_no_map", b.get("no_map")) if step is None else b[f"{key}_no_map"][step]
            for b in blocks
        ]
        return "no map" if any(no_maps) else "n/a"
    mean = sum(finite) / len(finite)
    spread = sum((v - mean) ** 2 for v in finite) / max(1, len(finite) - 1)
    text = cell({"v": mean, "v_std": math.sqrt(spread), "_runs": len(finite)}, "v")
    if len(finite) < len(values):
        text += f" in {len(finite)} runs, no map in {len(values) - len(finite)}"
    return text


def _inner(results: dict[str, Any], name: str, key: str) -> dict[str, Any]:
    """``results`` whose runs hold only method ``name``'s block ``key`` (e.g. ``reseeded``) as
    its block, for `_sanity_cell`."""
    runs = results.get("per_run") or [results]
    return {"per_run": [{"methods": {name: run["methods"][name][key]}} for run in runs]}


def _no_map_cell(results: dict[str, Any], name: str, key: str, step: str | None) -> str:
    """Images without a map (``methods[name][key][step]``, or ``[key]``), mean over the runs,
    as ``"k of n"``."""
    runs = results.get("per_run") or [results]
    blocks = [run["methods"][name] for run in runs]
    mean = sum(b[key] if step is None else b[key][step] for b in blocks) / len(blocks)
    return f"{mean:g} of {results['options']['sanity_images']}"


def _floor_row(results: dict[str, Any], name: str, key: str, steps: list[str]) -> list[str]:
    """A method's reseeded floor under ``original``: its mean over the runs and each run's
    (model's) own; under each randomised step, in how many runs the step's score falls below
    that run's floor (the runs with a score; ``no map`` without any)."""
    runs = results.get("per_run") or [results]
    floors = [run["methods"][name]["reseeded"]["Spearman"] for run in runs]
    floor = _sanity_cell(_inner(results, name, "reseeded"), name, "Spearman", None)
    if len(runs) > 1:
        floor += " (" + ", ".join("n/a" if f is None else f"{f:.3f}" for f in floors) + ")"
    below = []
    for step in steps[1:]:
        pairs = [(run["methods"][name][key][step], f) for run, f in zip(runs, floors, strict=True)]
        scored = [(v, f) for v, f in pairs if v is not None and f is not None and math.isfinite(v)]
        below.append(f"{sum(v < f for v, f in scored)}/{len(scored)} below" if scored else "no map")
    return [f"{name} (Q reseeded)", floor, *below, "—"]


def _sanity_cascade(results: dict[str, Any], key: str, order: str) -> list[str]:
    """The cascade of ``order`` (under ``key``: ``MPRT`` or ``MPRT_bottom_up``): the mean
    Spearman correlation per step with the reseeded floor under ``original``, then the images
    without a map per step."""
    names = list(results["methods"])
    steps = [s for s in results["methods"][names[0]][key] if not s.endswith("_std")]
    n = results["options"]["sanity_images"]
    header = ["Method", *[f"`{s}`" for s in steps]]
    rows = []
    for name in names:
        block = results["methods"][name]
        scores = [_sanity_cell(results, name, key, s) for s in steps]
        rows.append([name, *scores, f"{block['time_s']:.1f}"])
        if "reseeded" in block:
            rows.append(_floor_row(results, name, key, steps))
    no_maps = [
        [name, *[_no_map_cell(results, name, f"{key}_no_map", s) for s in steps]] for name in names
    ]
    direction = "output down" if order == "top-down" else "input up"
    return [
        f"Cascading model-parameter randomisation (Quantus `MPRT`, {order}): the mean Spearman "
        f"rank correlation of each method's maps of {n} unseen images per run with its maps of "
        f"the trained model, once every layer from the {direction} to the one named is "
        "re-initialised (lower: the maps depend on the weights, as a sanity check expects; "
        "`no map`: the model draws no map, so nothing is tested). `(Q reseeded)`: the method "
        "on the trained model with its random draw made anew (RI: another seed of Q), "
        "against its maps: the floor a randomisation must fall below to show more than the "
        "method's own noise; in brackets each run's (model's) floor, and under each step the "
        "runs whose score falls below their own floor. The time covers all the checks of a "
        "method, RI's indexes of the "
        "randomised models included:",
        "",
        *_table([*header, "time (s)"], rows),
        "",
        f"Images whose map is constant, i.e. no map (left out of the means above; mean over "
        f"the runs), {order}:",
        "",
        *_table(header, no_maps),
    ]


def _data_randomisation(results: dict[str, Any]) -> list[str]:
    """The data-randomisation table (each method, then its reseeded floor) under its
    sentence, or why it was not run."""
    if "shuffled_model" not in results:
        return [
            "Data randomisation not run: it trains the model's architecture anew on the "
            "reference images held in memory (a zoo model on a bundled data set)."
        ]
    rows = []
    for name in results["methods"]:
        data = _inner(results, name, "data_randomisation") | {"options": results["options"]}
        similarity = [_sanity_cell(data, name, key, None) for key in ("Spearman", "SSIM")]
        rows.append([name, *similarity, _no_map_cell(data, name, "no_map", None)])
        if "reseeded" in results["methods"][name]:
            reseeded = _inner(results, name, "reseeded")
            floor = [_sanity_cell(reseeded, name, key, None) for key in ("Spearman", "SSIM")]
            rows.append([f"{name} (Q reseeded)", *floor, "—"])
    shuffled = _with_runs(results, {"s": results["shuffled_model"]})["s"]
    epochs = results["options"]["shuffled_epochs"]
    return [
        f"Data randomisation (Adebayo et al. 2018): the same architecture trained for {epochs} "
        "epochs on the reference images with their labels "
        f"permuted (it fits {cell(shuffled, 'train_accuracy')}% of the permuted labels and "
        f"{cell(shuffled, 'unseen_accuracy')}% of the unseen images' true ones); each "
        "method's maps of that model's predictions against its maps of the trained model "
        "(Spearman, SSIM; lower: the maps depend on what the model learnt). `no map`: the "
        "model on permuted labels draws none (RI, when it predicts one class for every "
        "reference image: no boundary). `(Q reseeded)`: the floor, as above:",
        "",
        *_table(["Method", "Spearman", "SSIM", "images with no map"], rows),
    ]


def _md_sanity(results: dict[str, Any]) -> list[str]:
    """Both cascades with their floors and no-map counts, eMPRT, data randomisation and random
    logit."""
    emprt, logit = [], []
    for name, block in results["methods"].items():
        for key, rows in (("eMPRT", emprt), ("RandomLogit", logit)):
            counted = f"{key}_no_map" in block
            no_maps = _no_map_cell(results, name, f"{key}_no_map", None) if counted else "n/a"
            rows.append([name, _sanity_cell(results, name, key, None), no_maps])
    return [
        *_sanity_cascade(results, "MPRT", "top-down"),
        "",
        *_sanity_cascade(results, "MPRT_bottom_up", "bottom-up"),
        "",
        "eMPRT (Quantus `EfficientMPRT`, bottom-up): the mean relative rise in the maps' "
        "complexity (discrete entropy) from the trained model to the one with every layer "
        "re-initialised (higher: the maps lose their structure with the weights), over the "
        "images with a map on both models (a constant map's entropy is 0: no map, never a "
        "score), and the images without one (mean over the runs). sMPRT is not "
        "run: the installed Quantus's `SmoothMPRT` draws its noisy maps with "
        "`quantus.explain` (captum's methods), not with the methods' `explain_func`.",
        "",
        *_table(["Method", "eMPRT rise", "images with no map"], emprt),
        "",
        *_data_randomisation(results),
        "",
        "Random logit (Quantus `RandomLogit`): the mean SSIM of each image's map for its "
        "predicted class and for a random other class (lower: the map depends on the class "
        "explained). RI's map is that of the predicted class's polytope P(x) whatever the class "
        "asked for, so its SSIM is 1 by construction: this measures the dependence on the "
        "target, not on the model. Images whose map of the predicted class is constant are not "
        "scored.",
        "",
        *_table(["Method", "SSIM", "images with no map"], logit),
    ]


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
    return ["", *_table(["Pair", f"paired difference of {key}"], rows)]


def _md_shortcut(results: dict[str, Any]) -> list[str]:
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
        *_columns_table(_with_runs(results, results["groupings"]), _SHORTCUT_GROUPINGS, "Grouping"),
        *_shortcut_pairs(results, "groupings", "f1_marked"),
        "",
        "Share of each heat map's positive relevance on the mark's box (a uniform map puts "
        f"{results['box_area']:.1f}% there): mean over the marked images, of their mean map, "
        "and over the unmarked images:",
        "",
        *_columns_table(_with_runs(results, results["maps"]), _SHORTCUT_MAPS, "Map"),
        *_shortcut_pairs(results, "maps", "mass_in_box"),
    ]


_MARKDOWN = {
    "unseen": _md_methods,
    "coverage": _md_coverage,
    "reference": _md_reference,
    "q-sweep": _md_q_sweep,
    "similar": _md_similar,
    "sanity": _md_sanity,
    "shortcut": _md_shortcut,
}


def _machine(results: dict[str, Any]) -> str:
    machine = results["machine"]
    return (
        f"{machine['cpus']} CPU cores, {machine['torch_threads']} torch thread(s), "
        f"torch {machine['torch']}, {machine['platform']}"
    )


def _header(results: dict[str, Any]) -> str:
    setup, options = results["setup"], results["options"]
    sizes = setup.get("run_sizes") or [(setup["n_reference"], setup["n_unseen"])]
    images = " or ".join(f"{r} reference / {u} unseen" for r, u in sizes)
    split = (
        "each run draws its own stratified images"
        if options.get("split") == "per-run"
        else "the same images in every run"
    )
    accuracy = (
        _with_runs(results, {"a": results["model_acc"]})["a"] if "model_acc" in results else None
    )
    model_acc = (
        f" The model's accuracy on the runs' images: {cell(accuracy, 'reference')}% (reference), "
        f"{cell(accuracy, 'unseen')}% (unseen)."
        if accuracy
        else ""
    )
    spread = "mean ± std" if results["runs"] > 1 else "one run, no spread"
    if setup.get("model_seeds"):
        held_out = ", ".join(f"{run['model']['held_out_acc']:.1f}" for run in results["per_run"])
        model_acc += (
            f" Each run on its own model, trained by the recipe "
            f"`{json.dumps(setup['recipe'])}` with seeds {setup['model_seeds']} (run r on "
            f"model r; held-out accuracy {held_out}%)."
        )
    return (
        f"Model `{setup['model']}` at layer `{setup['target_layer']}`; {images} images ({split}); "
        f"|Q| = {options['n_boundaries']}, |V| = {results['n_regions']}; "
        f"{results['runs']} run(s) with seeds {results['seeds']}; {spread}; "
        f"{results['time_s']:.0f} s in all on {setup['device']} ({_machine(results)}); per run, "
        f"RI's index took {results['ri_fit_s']:.1f} s"
        + (f" and k-means {results['kmeans_s']:.1f} s" if results["kmeans_s"] else "")
        + " (not in the methods' times, which cover making the explanations, not scoring them)."
        + model_acc
    )


def results_markdown(results: dict[str, Any], plots: list[str] | None = None) -> str:
    """A Markdown report of ``evaluate``'s results, with tables shaped like the paper's.

    Args:
        results: what `evaluate` returned.
        plots: file names of plots to link below the tables.
    """
    lines = [
        f"### `{results['protocol']}` on `{results['dataset']}`",
        "",
        *([*primary_section(results["primary"]), ""] if "primary" in results else []),
        _header(results),
        "",
        *([f"Command: `{results['command']}`", ""] if "command" in results else []),
        *_MARKDOWN[results["protocol"]](results),
        "",
        *[f"![{name}]({name})" for name in plots or []],
    ]
    return "\n".join(lines).rstrip() + "\n"


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _json_ready(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_results(results: dict[str, Any], out: str | Path) -> list[Path]:
    """Write ``results.json``, ``units.json`` (when every run has per-image values),
    ``results.md`` and the protocol's PNG plots into ``out``, each replacing its earlier file
    by a rename (`write_outputs`).

    Returns:
        The files written.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    units = [run.get("units") for run in results.get("per_run", [])]
    contents = {}
    if units and all(u is not None for u in units):
        results = results | {
            "per_run": [
                {k: v for k, v in run.items() if k != "units"} for run in results["per_run"]
            ]
        }
        text = json.dumps(_json_ready(units), separators=(",", ":"))
        contents[out / "units.json"] = text.encode()
    plots = save_plots(results, out)
    text = json.dumps(_json_ready(results), indent=2) + "\n"
    markdown = results_markdown(results, [p.name for p in plots])
    contents = {out / "results.json": text.encode(), **contents}
    contents[out / "results.md"] = markdown.encode()
    write_outputs(contents)
    return [*contents, *plots]


def rewrite_results(results: dict[str, Any], out: str | Path) -> list[Path]:
    """Replace ``results.json`` and ``results.md`` of results already written into ``out`` (by
    a rename, `write_outputs`), its ``units.json`` and plots left as they are (the plots still
    linked).

    Returns:
        The files written.
    """
    out = Path(out)
    plots = sorted(path.name for path in out.glob("*.png"))
    contents = {
        out / "results.json": (json.dumps(_json_ready(results), indent=2) + "\n").encode(),
        out / "results.md": results_markdown(results, plots).encode(),
    }
    write_outputs(contents)
    return list(contents)
