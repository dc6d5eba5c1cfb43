"""The ``unseen`` protocol (§6.4, Table 1): the scores on the unseen set of every method's ``|V|``
reused interpretations, and its tables (`unseen_markdown`; `overview_markdown` over data sets).

RI: k-means regions (k-means seeded, ``Q`` sampled with the run's seed); an image is explained
by the covering region of largest representativeness, else by the region of its nearest centre.
RI's variants keep the k-means inputs and solve their own covers. CAM baselines: channel
weights of the k-means inputs (the reference image nearest each centre), reused on every image
whose nearest centre it is. ACE: one fit per k-means cluster (its reference images), reused on
the images assigned to the cluster's centre. mAD / mAI are pooled over the images (the paper's
text) and, as ``mAD_interp`` / ``mAI_interp``, averaged per interpretation (each over the
images it explains, then over the interpretations: the paper's commented-out sentence). ROAD,
deletion and insertion score ``curve_images`` unseen images drawn per run. Methods with regions
(RI) also report their CVR and ACU-MD on the unseen set, and what RI finds: the unseen images
grouped by the polytope of their region (`repinterp.evaluation.groupings`:
``distinct_polytopes``, ``effective_groups``, ``largest_group_share`` (%), ``singletons``,
``merged_groups`` and ``merged_effective_groups`` (polytopes covering nearly the same reference
images merged), the images outside their class's main polytope: ``outside_share`` (%), median
logit margin ``margin_main`` / ``margin_outside``, ``error_main`` / ``error_outside`` (%),
``jaccard_outside``; on ``shapes`` ``subconcept_purity`` (%) beside one group per class,
``subconcept_purity_class``, and within-class ``ami`` with ``ami_null`` (mean),
``ami_null_p95`` and ``ami_ceiling``; absent on data sets without sub-concepts). The controls
``CAM+cluster`` and ``CAM+class`` reuse weights averaged over a k-means cluster's images or a
predicted class's (`methods.CAMMethod`).
"""

from __future__ import annotations

from typing import Any

from ..names import method_label
from ..run import Run
from ..scoring import score
from .cells import (
    AD_COLUMNS,
    CURVE_COLUMNS,
    best_name,
    cell,
    columns_table,
    groups_table,
    legend,
    markdown_table,
    paired_tables,
    with_runs,
)
from .common import (
    coverage_of,
    explain_unseen,
    group_stats,
    group_units,
    rounded,
)

__all__ = ["PAPER_TARGETS", "overview_markdown", "unseen", "unseen_markdown"]


def unseen(run: Run) -> dict[str, Any]:
    """``unseen``'s numbers of one run: per method, its scores, time and (with regions) its
    coverage and polytope groups (``methods``), and its per-image values (``units``)."""
    setup, options = run.setup, run.options
    methods, units = {}, {}
    for name, method, explanations, seconds in explain_unseen(run):
        scores = score(
            setup, setup.unseen_pixels, explanations, options.metrics, run.curve_rows, run.seed
        )
        units[name] = {"mAD": rounded(100 * scores.drop), "mAI": rounded(100 * scores.increase)}
        units[name] |= {key: rounded(v[run.curve_rows]) for key, v in scores.curves.items()}
        groups = method.groups(run)
        block = scores.pooled() | scores.per_interpretation(groups)
        regions = method.regions(run)
        if regions is not None:
            coverage = coverage_of(regions, setup, "unseen")
            block |= {"CVR": coverage["CVR"], "ACU-MD": coverage["ACU-MD"]}
            block |= group_stats(run, regions, groups, "unseen")
            units[name] |= group_units(run, regions, groups, "unseen")
        methods[name] = block | {"time_s": seconds}
    return {"methods": methods, "units": {"methods": units}}


def unseen_markdown(results: dict[str, Any]) -> list[str]:
    """Table 1: AD / AI pooled and per interpretation, the regions' coverage, the times; then
    the perturbation metrics."""
    methods = with_runs(results, results["methods"])
    lines = columns_table(methods, AD_COLUMNS, "Method", times=True)
    if any(key in m for m in methods.values() for key, _, _ in CURVE_COLUMNS):
        curve_n = results["options"].get("curve_images")
        lines += [
            "",
            f"Perturbation metrics on {curve_n} unseen images per run (the same for every "
            "method); pp = percentage points of the class probability:",
            "",
            *columns_table(methods, CURVE_COLUMNS, "Method"),
        ]
    lines += paired_tables(results, "methods", "on the unseen images")
    return lines + groups_table(methods, "Method", "the unseen images") + legend(results)


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
        methods = with_runs(results, results["methods"])
        best = {key: best_name(methods, key, higher) for key, _, higher in _OVERVIEW}
        accuracy = cell({**results["model_acc"], "_runs": results["runs"]}, "unseen")
        for name, block in methods.items():
            cells = [cell(block, key, best=best[key] == name) for key, _, _ in _OVERVIEW]
            rows.append([f"`{dataset}`", method_label(name), *cells, accuracy])
        targets = [PAPER_TARGETS.get(key, "") for key, _, _ in _OVERVIEW]
        rows.append([f"`{dataset}`", "*paper's target for RI*", *targets, ""])
    return "\n".join(markdown_table(header, rows)) + "\n"
