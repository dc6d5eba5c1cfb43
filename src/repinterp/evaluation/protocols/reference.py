"""The ``reference`` protocol (Appendix C) and its tables (`reference_markdown`).

For random reference inputs, the scores over the top-K similar reference images for each K:
RI's covered images ranked by its distance, the baselines' Euclidean nearest neighbours in
feature space; the input always comes first, so K = 1 evaluates the input alone. The
perturbation metrics score the top-``curve_k`` images of the first ``curve_inputs`` inputs
(reported for K <= ``curve_k``). RI's variants also report the polytope groups of the inputs'
own ``P(x)``. Two readings: ``methods``, each method on its own similar images S (so methods
are scored on different images: RI's S is one predicted class, at most the covered images);
``common``, every method's explanation of the input (``Method.reuse``) on one S, the paper's
RI's (`COMMON_S_METHOD`), cut to K, so RI's numbers are the same in both; a method that cannot
reuse its explanation on given images (``reuse`` gives None) is left out of ``common``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from ..groupings import polytope_groups
from ..methods import Method, RIMethod
from ..names import method_label
from ..run import Run
from ..scoring import score
from .cells import (
    CURVE_COLUMNS,
    best_name,
    cell,
    groups_table,
    legend,
    markdown_table,
    paired_tables,
    with_runs,
)
from .common import (
    prepare,
    rounded,
    sub_concepts,
    timed,
)

__all__ = ["COMMON_S_METHOD", "reference", "reference_markdown"]


# Whose similar images are the common S of the ``reference`` protocol: the paper's RI.
COMMON_S_METHOD = RIMethod()


def _input_means(
    per_input: list[Tensor], ks: tuple[int, ...], limit: int | None = None
) -> list[list[float]]:
    """For each K, each input's mean of its first K values (NaN values left out; NaN for an
    input without any); no input for K > ``limit``."""
    return [
        [
            float(np.nanmean(v[:k].numpy())) if (~v[:k].isnan()).any() else math.nan
            for v in per_input
        ]
        if limit is None or k <= limit
        else []
        for k in ks
    ]


def _over_k(per_k: list[list[float]]) -> list[float]:
    """For each K, the mean over the inputs of `_input_means` (NaN ones left out; NaN for
    none)."""
    return [
        float(np.mean([v for v in means if not math.isnan(v)]))
        if any(not math.isnan(v) for v in means)
        else math.nan
        for means in per_k
    ]


def _scores_over_k(
    run: Run, method: Method, common_s: dict[int, Tensor] | None = None
) -> dict[str, Any] | None:
    """The ``reference`` scores per K (``options.ks``) of a method's explanations of each input
    reused on its own similar images (``Method.reference``) or, given ``common_s``, on
    ``common_s[index]`` (``Method.reuse``).

    Returns:
        ``mAD``, ``mAI`` (%), the perturbation metrics (for K <= ``curve_k``), ``similar`` (the
        mean size of the images scored per K), ``time_s`` (the seconds the method took) and
        ``units`` (per score and K, each input's mean: `comparison`); None when the method
        cannot reuse its explanations on ``common_s``.
    """
    setup, options = run.setup, run.options
    ks, inputs = options.ks, run.inputs.tolist()
    label = method.name if common_s is None else f"{method.name} on RI's S"
    per_image: dict[str, list[Tensor]] = {"drop": [], "increase": []}
    sizes, seconds = [], 0.0
    for i, index in enumerate(tqdm(inputs, label, leave=False, disable=not options.progress)):
        if common_s is None:
            (similar, explanations), spent = timed(method.reference, run, index, max(ks))
        else:
            similar = common_s[index]
            explanations, spent = timed(method.reuse, run, index, similar)
            if explanations is None:
                return None
        seconds += spent
        rows = torch.arange(min(options.curve_k, len(similar)) if i < options.curve_inputs else 0)
        scores = score(
            setup,
            setup.pixels("reference", similar),
            explanations,
            options.metrics,
            rows,
            run.seed,
        )
        for key, values in {
            "drop": scores.drop,
            "increase": scores.increase,
            **scores.curves,
        }.items():
            per_image.setdefault(key, []).append(values)
        sizes.append(len(similar))
    units = {
        "mAD": _input_means(per_image.pop("drop"), ks),
        "mAI": _input_means(per_image.pop("increase"), ks),
    }
    block = {key: [100 * v for v in _over_k(per_k)] for key, per_k in units.items()}
    units = {key: [[100 * v for v in means] for means in per_k] for key, per_k in units.items()}
    for key, values in per_image.items():
        units[key] = _input_means(values[: options.curve_inputs], ks, options.curve_k)
        block[key] = _over_k(units[key])
    block["similar"] = [float(np.mean([min(k, s) for s in sizes])) for k in ks]
    units = {key: [rounded(means) for means in per_k] for key, per_k in units.items()}
    return block | {"time_s": seconds, "units": units}


def reference(run: Run) -> dict[str, Any]:
    """``reference``'s numbers of one run: per method, its scores per K on its own similar
    images (``methods``) and on RI's (``common``), with their per-input values (``units``)."""
    setup, options = run.setup, run.options
    k, inputs = max(options.ks), run.inputs.tolist()
    run.neighbours(k)  # shared by the baselines, left out of their seconds
    methods, resolved = {}, options.resolve_methods()
    for name, method in resolved.items():
        prepare(run, [method])
        block = _scores_over_k(run, method)
        found = method.reference_polytopes(run, inputs)
        if found is not None:
            block |= polytope_groups(found, sub_concepts(setup, "reference", inputs)).to_dict()
        methods[name] = block
    # The common reading, after the methods' own (whose seconds it leaves as they were).
    common_s = {index: COMMON_S_METHOD.similar_to(run, index, k) for index in inputs}
    common = {name: _scores_over_k(run, method, common_s) for name, method in resolved.items()}
    common = {name: block for name, block in common.items() if block is not None}
    units = {
        reading: {name: block.pop("units") for name, block in blocks.items()}
        for reading, blocks in (("methods", methods), ("common", common))
    }
    return {"methods": methods, "common": common, "units": units}


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
    named = [("mAD", "mAD (%)", False), ("mAI", "mAI (%)", True), *CURVE_COLUMNS]
    for key, label, higher in named:
        if not any(key in m for m in blocks.values()):
            continue
        shown = [i for i, k in enumerate(ks) if key in ("mAD", "mAI") or k <= options["curve_k"]]
        best = {i: best_name(blocks, key, higher, i) for i in shown}
        rows = [
            [method_label(name), *[cell(m, key, i, best[i] == name) for i in shown]]
            for name, m in blocks.items()
        ]
        where = "" if key in ("mAD", "mAI") else (f" (the first {options['curve_inputs']} inputs)")
        lines += [f"{label} over the top-K similar reference images{where}, {which}:", ""]
        lines += [*markdown_table(["Method", *[f"K = {ks[i]}" for i in shown]], rows), ""]
    return lines


def reference_markdown(results: dict[str, Any]) -> list[str]:
    """Appendix C: each score per K with each method on its own similar images, then run times
    and the mean size of the similar sets; then, if there, each score per K with every method
    on RI's similar images (``common``)."""
    methods = with_runs(results, results["methods"])
    lines = _per_k_tables(results, methods, _OWN_S)
    rows = [
        [method_label(name), f"{m['time_s']:.1f}", ", ".join(f"{s:.1f}" for s in m["similar"])]
        for name, m in methods.items()
    ]
    lines += markdown_table(["Method", "time (s)", "mean size of S per K"], rows)
    lines += groups_table(methods, "Method", "the inputs")
    common = with_runs(results, results.get("common", {}))
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
    lines += paired_tables(results, "methods", _OWN_S)
    lines += paired_tables(results, "common", _COMMON_S)
    return lines + legend(results)
