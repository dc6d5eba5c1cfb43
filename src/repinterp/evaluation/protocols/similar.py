"""The ``similar`` protocol (the case studies, made measurable) and its tables
(`similar_markdown`).

Purity@k of the similar-image rankings by class label and, on ``shapes`` and ``mnist-super``,
by sub-concept (with an RI variant at granularity logic among the methods, also its own
ranking, ``semantic (RI+logic)``); AD of the input's heat map reused on each ranking's top-k; on
``shapes``, the share of each method's heat-map energy inside the object's mask on the unseen
set.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import Tensor
from tqdm import tqdm

from ...core.nearest import nearest_rows
from ..metrics import energy_in_mask, purity_at_k
from ..names import method_label
from ..run import Run
from ..scoring import score
from .cells import (
    best_name,
    cell,
    columns_table,
    markdown_table,
    with_runs,
)
from .common import (
    explain_unseen,
    ri_variants,
)

__all__ = ["RANKINGS", "similar", "similar_markdown"]


RANKINGS = ("semantic (RI)", "euclidean (all reference)", "euclidean (covered)", "cosine (covered)")


def _rankings(run: Run, index: int) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Each ranking of the reference images similar to reference image ``index`` (itself
    excluded), most similar first, and the interpretation whose heat map each reuses:
    ``Interpretation.similar`` with each metric, the paper's baseline, Euclidean nearest
    neighbours among all reference images, and ``semantic (RI+logic)`` (each variant beyond
    the paper's granularity among the run's methods) on its own ``P(x)``."""
    explanation = run.interpreter.explain_reference([index])[0]
    k = min(max(run.options.purity_ks) + 1, len(run.features))
    nearest = nearest_rows(run.features[index : index + 1], run.features, k)[0][0]
    rankings = {
        RANKINGS[0]: explanation.similar(metric="semantic"),
        RANKINGS[1]: nearest,
        RANKINGS[2]: explanation.similar(metric="euclidean"),
        RANKINGS[3]: explanation.similar(metric="cosine"),
    }
    explanations = dict.fromkeys(RANKINGS, explanation)
    for name, method in ri_variants(run).items():
        if method.knobs["granularity"] != "class":
            own = method.reference_polytopes(run, [index])[0]
            rankings[f"semantic ({name})"] = own.similar(metric=method.knobs["similar"])
            explanations[f"semantic ({name})"] = own
    return explanations, {
        name: ranking.cpu()[ranking.cpu() != index] for name, ranking in rankings.items()
    }


def similar(run: Run) -> dict[str, Any]:
    """``similar``'s numbers of one run: purity@k and mAD@k of each ranking (``rankings``), and
    on data sets with masks each method's heat-map energy in the mask (``methods``)."""
    setup, options = run.setup, run.options
    labels = {"class": setup.labels("reference")}
    if getattr(setup.reference, "concepts", None) is not None:
        labels["sub-concept"] = setup.reference.concepts
    top = max(options.purity_ks)
    purity: dict[str, dict[str, list[float]]] = {}
    sizes = []
    for index in tqdm(run.inputs.tolist(), "rankings", leave=False, disable=not options.progress):
        explanations, rankings = _rankings(run, index)
        sizes.append(len(rankings[RANKINGS[0]]))
        for name, ranking in rankings.items():
            explanation = explanations[name]
            for kind, truth in labels.items():
                for k in options.purity_ks:
                    value = purity_at_k(truth[ranking], int(truth[index]), k)
                    purity.setdefault(name, {}).setdefault(f"{kind} purity@{k}", []).append(value)
            if explanation.has_heatmap and len(ranking):
                chosen = ranking[:top]
                maps = explanation.heatmap(setup.inputs("reference", chosen))
                drop = score(setup, setup.pixels("reference", chosen), maps, ()).drop
                for k in options.purity_ks:
                    purity[name].setdefault(f"mAD@{k}", []).append(100 * float(drop[:k].mean()))
    out = {
        "rankings": {
            name: {
                key: 100 * float(np.nanmean(v)) if "purity" in key else float(np.mean(v))
                for key, v in scores.items()
            }
            for name, scores in purity.items()
        },
        "covered_others": float(np.mean(sizes)),
    }
    masks = getattr(setup.unseen, "masks", None)
    if masks is not None:
        out["methods"] = {
            name: {"energy": 100 * float(energy_in_mask(maps, masks).nanmean()), "time_s": s}
            for name, _, maps, s in explain_unseen(run)
        }
        out["mask_area"] = 100 * float(masks.double().mean())
    return out


def similar_markdown(results: dict[str, Any]) -> list[str]:
    """Purity@k and the reused map's mAD@k of the rankings, then the pointing game."""
    rankings = with_runs(results, results["rankings"])
    keys = list(next(iter(results["rankings"].values())))
    keys = [k for k in keys if not k.endswith("_std")]
    columns = [(k, f"{k} (%)", not k.startswith("mAD")) for k in keys]
    lines = [
        "Share of the top-k similar reference images with the input's class / sub-concept, and "
        "mAD (%) of the input's heat map reused on them:",
        "",
        *columns_table(rankings, columns, "Ranking"),
        "",
        "Reference images covered by RI's P(x), besides the input, on average: "
        f"{results['covered_others']:.1f}.",
    ]
    if "methods" in results:
        methods = with_runs(results, results["methods"])
        best = best_name(methods, "energy", True)
        energy = [
            [method_label(name), cell(m, "energy", best=name == best), f"{m['time_s']:.1f}"]
            for name, m in methods.items()
        ]
        lines += [
            "",
            "Share of the heat-map energy inside the object's mask on the unseen set (%); the "
            f"mask covers {results['mask_area']:.1f}% of the pixels on average:",
            "",
            *markdown_table(["Method", "energy in mask (%)", "time (s)"], energy),
        ]
    return lines
