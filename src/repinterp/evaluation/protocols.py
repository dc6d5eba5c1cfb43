"""The paper's evaluation protocols, run over seeds and reported as mean ± std.

Protocols (each a function of a `Setup` and `Options`, see `evaluate`):

- ``unseen`` (§6.4, Table 1): the scores on the unseen set of every method's ``|V|`` reused
  interpretations. RI: k-means regions (k-means seeded, ``Q`` sampled with the run's seed);
  an image is explained by the covering region of largest representativeness, else by the
  region of its nearest centre. RI's variants keep the k-means inputs and solve their own
  covers. CAM baselines: channel weights of the k-means inputs (the reference image nearest
  each centre), reused on every image whose nearest centre it is. ACE: one fit per k-means
  cluster (its reference images), reused on the images assigned to the cluster's centre.
  mAD / mAI are pooled over the images (the paper's text) and, as ``mAD_interp`` /
  ``mAI_interp``, averaged per interpretation (each over the images it explains, then over
  the interpretations: the paper's commented-out sentence). ROAD, deletion and insertion
  score ``curve_images`` unseen images drawn per run. Methods with regions (RI) also report
  their CVR and ACU-MD on the unseen set, and what RI finds: the unseen images grouped by the
  polytope of their region (`repinterp.evaluation.groupings`: ``distinct_polytopes``,
  ``effective_groups``, ``largest_group_share`` (%), ``singletons``, ``merged_groups`` and
  ``merged_effective_groups`` (polytopes covering nearly the same reference images merged),
  the images outside their class's main polytope: ``outside_share`` (%), median logit margin
  ``margin_main`` / ``margin_outside``, ``error_main`` / ``error_outside`` (%),
  ``jaccard_outside``; on ``shapes`` ``subconcept_purity`` (%) beside one group per class,
  ``subconcept_purity_class``, and within-class ``ami`` with ``ami_null`` (mean),
  ``ami_null_p95`` and ``ami_ceiling``; absent on data sets without sub-concepts). The
  controls ``CAM+cluster`` and ``CAM+class`` reuse weights averaged over a k-means cluster's
  images or a predicted class's (`methods.CAMMethod`).
- ``coverage`` (Appendix D, Table 2): ACU-GT, ACU-MD and CVR of the regions on the reference
  and the unseen set, beside the model's accuracy (ACU-GT of F), and the polytope groups of
  each set's images; the same under ``methods`` for each RI variant among the methods (e.g.
  ``RI+strategy``: its own covers of the same k-means inputs).
- ``reference`` (Appendix C): for random reference inputs, the scores over the top-K similar
  reference images for each K: RI's covered images ranked by its distance, the baselines'
  Euclidean nearest neighbours in feature space; the input always comes first, so K = 1
  evaluates the input alone. The perturbation metrics score the top-``curve_k`` images of the
  first ``curve_inputs`` inputs (reported for K <= ``curve_k``). RI's variants also report
  the polytope groups of the inputs' own ``P(x)``. Two readings: ``methods``, each method on
  its own similar images S (so methods are scored on different images: RI's S is one
  predicted class, at most the covered images); ``common``, every method's explanation of the
  input (``Method.reuse``) on one S, the paper's RI's (`COMMON_S_METHOD`), cut to K, so RI's
  numbers are the same in both; a method that cannot reuse its explanation on given images
  (``reuse`` gives None) is left out of ``common``.
- ``q-sweep`` (Appendix E): ACU-GT, ACU-MD and CVR of the regions for several ``|Q|``, for
  each way of drawing ``Q`` (``samplings``), with the time each fit took; with an RI variant
  at another granularity among the methods, each sampling at that granularity too
  (``uniform+strategy``, ...).
- ``similar`` (the case studies, made measurable): purity@k of the similar-image rankings by
  class label and, on ``shapes`` and ``mnist-super``, by sub-concept (with an RI variant at
  another granularity among the methods, also its own ranking, ``semantic (RI+strategy)``); AD of
  the input's heat map reused on each ranking's top-k; on ``shapes``, the share of each
  method's heat-map energy inside the object's mask on the unseen set.
- ``sanity`` (Adebayo et al., 2018; `sanity`): RI and each CAM through Quantus on
  ``sanity_images`` unseen images: cascading model-parameter randomisation from the top layer
  down (the mean Spearman correlation of the maps with the trained model's, per randomised
  layer) and random logit (SSIM of the maps for the predicted and a random other class; 1
  for RI by construction: its map does not depend on the target).
- ``shortcut`` (`shortcut`, on the ``*-mark:F`` data sets and their ``*-markrand:F``
  controls): on the unseen images predicted the class the mark leads to, how well each
  grouping isolates the marked images (F1, AMI with null and ceiling: fractions) and the
  share of each heat map on the mark's box against the box's area.

All numbers are percentages (ROAD: percentage points; ``sanity``: correlations and SSIM;
``shortcut``: F1 and AMI in [0, 1]).
Every run uses seed ``options.seed + r`` for ``Q``, k-means, the sampled inputs and, with
``split="per-run"``, its own stratified draw of reference and unseen images
(`setup.Setup.draw`) and, when the setup holds several trained models
(``load_setup(model_seeds=N)``), model ``r`` (`setup.Setup.for_run`). The same seed gives the
same numbers on CPU.

The pieces: the model and data (`setup.Setup`), one seeded run (`run.Run`), the compared
methods (`methods`), the scores (`scoring`). Reports of the results: `repinterp.report`.
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from ..core.granularities import PAPERS, granularity_class
from ..core.groups import polytope_key
from ..core.nearest import nearest_rows
from ..core.regions import RegionSet
from ..runtime.progress import progress_bar
from .comparison import paired_family
from .groupings import polytope_groups, region_groups
from .methods import Method, RIMethod
from .metrics import coverage_metrics, energy_in_mask, purity_at_k
from .options import Options, check_protocol
from .run import Run, fit_label
from .sanity import sanity
from .scoring import score
from .setup import Setup
from .shortcut import shortcut, target_class

__all__ = ["COMMON_S_METHOD", "RANKINGS", "evaluate"]

# Whose similar images are the common S of the ``reference`` protocol: the paper's RI.
COMMON_S_METHOD = RIMethod()


def _timed(function: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``function(*args)`` and the seconds it took."""
    start = time.perf_counter()
    value = function(*args)
    return value, time.perf_counter() - start


def _explain_unseen(run: Run) -> Iterator[tuple[str, Any, Tensor, float]]:
    """``(name, method, explanations of the unseen images, seconds)`` of each method, after
    the shared work (indexes, k-means, nearest centres), which the seconds leave out."""
    methods = run.options.resolve_methods()
    _prepare(run, methods.values())
    _ = run.regions, run.unseen_centre
    bar = progress_bar(
        total=len(methods), desc="methods", unit="method", leave=False, enabled=run.options.progress
    )
    with bar:
        for name, method in methods.items():
            bar.set_postfix_str(f"{name} on {len(run.setup.unseen)} images")
            explanations, seconds = _timed(method.unseen, run, run.setup.unseen_pixels)
            yield name, method, explanations, seconds
            bar.update()


def _prepare(run: Run, methods: Iterable[Method]) -> None:
    """Fit the indexes the methods use, before their clocks start."""
    for method in methods:
        for config in method.fit_configs(run):
            run.interpreter_for(config)


def _coverage_of(regions: RegionSet, setup: Setup, part: str) -> dict[str, float]:
    """`coverage_metrics` of the regions on a part of the setup."""
    return coverage_metrics(
        regions, setup.chunks(part), setup.predictions[part], setup.labels(part)
    )


def _concepts(setup: Setup, part: str, rows: Tensor | list[int] | None = None) -> Tensor | None:
    """Sub-concept labels of a part's images (``rows`` of them; all when None), if it has
    them (``shapes``)."""
    concepts = getattr(setup.part(part), "concepts", None)
    return concepts if concepts is None or rows is None else concepts[torch.as_tensor(rows)]


def _outputs(run: Run, part: str, features: bool) -> tuple[Tensor | None, Tensor]:
    """A part's flattened feature maps at the run's layer (CPU; None unless ``features``) and
    logits (CPU), for the groups' `ami_ceiling` and `outside_main` (computed once per run:
    `_group_stats` caches them)."""
    ri, chunks = run.interpreter, run.setup.chunks
    logits = torch.cat([ri.logits_and_projections(x)[0].cpu() for x in chunks(part)])
    if not features:
        return None, logits
    if part == "reference":
        return run.features, logits
    return torch.cat([ri.features(x).flatten(1).cpu() for x in chunks(part)]), logits


def _group_stats(
    run: Run, regions: RegionSet, region: Tensor | None, part: str
) -> dict[str, float]:
    """The polytope groups of a part's images (`region_groups`, ``region`` None for
    the reference set's own assignment), with their sub-concept measures where the part has
    sub-concepts and the images outside their class's main polytope."""
    concepts = _concepts(run.setup, part)
    wanted = concepts is not None
    features, logits = run.cached(("outputs", part, wanted), lambda: _outputs(run, part, wanted))
    labels = run.setup.labels(part)
    return region_groups(regions, region, concepts, features, logits, labels, run.seed).to_dict()


def _group_units(
    run: Run, regions: RegionSet, region: Tensor | None, part: str
) -> dict[str, list[int]]:
    """Per image of a part, what its within-class AMI (`_group_stats`) is computed from, so that
    it can be recomputed (`core.groups.ami`): ``group`` (the index of its polytope among the
    distinct ones, in order of first image), ``group_class`` (that polytope's class) and
    ``subconcept``; empty where the part has no sub-concepts."""
    concepts = _concepts(run.setup, part)
    if concepts is None:
        return {}
    if region is None:
        region = regions.reference_assignment().region
    keys: dict[int, Any] = {}
    for v in region.tolist():
        keys.setdefault(v, polytope_key(regions.regions[v]))
    ids = {key: i for i, key in enumerate(dict.fromkeys(keys[v] for v in region.tolist()))}
    return {
        "group": [ids[keys[v]] for v in region.tolist()],
        "group_class": [int(keys[v][0]) for v in region.tolist()],
        "subconcept": [int(c) for c in concepts.tolist()],
    }


def _unseen(run: Run) -> dict[str, Any]:
    setup, options = run.setup, run.options
    methods, units = {}, {}
    for name, method, explanations, seconds in _explain_unseen(run):
        scores = score(
            setup, setup.unseen_pixels, explanations, options.metrics, run.curve_rows, run.seed
        )
        units[name] = {"mAD": _rounded(100 * scores.drop), "mAI": _rounded(100 * scores.increase)}
        units[name] |= {key: _rounded(v[run.curve_rows]) for key, v in scores.curves.items()}
        groups = method.groups(run)
        block = scores.pooled() | scores.per_interpretation(groups)
        regions = method.regions(run)
        if regions is not None:
            coverage = _coverage_of(regions, setup, "unseen")
            block |= {"CVR": coverage["CVR"], "ACU-MD": coverage["ACU-MD"]}
            block |= _group_stats(run, regions, groups, "unseen")
            units[name] |= _group_units(run, regions, groups, "unseen")
        methods[name] = block | {"time_s": seconds}
    return {"methods": methods, "units": {"methods": units}}


def _rounded(values: Tensor | list[float]) -> list[float]:
    """Per-image values (a run's ``units``, `comparison`) as floats to 4 decimals (NaN kept)."""
    return [round(float(v), 4) for v in values]


def _ri_variants(run: Run) -> dict[str, RIMethod]:
    """The RI variants among the run's methods other than the paper's RI, by name."""
    methods = run.options.resolve_methods().items()
    return {name: m for name, m in methods if isinstance(m, RIMethod) and name != "RI"}


def _unseen_regions(run: Run, regions: RegionSet) -> Tensor:
    """The region of each unseen image (CPU)."""
    return torch.cat([regions.assign(x).region.cpu() for x in run.setup.chunks("unseen")])


def _coverage_blocks(run: Run, regions: RegionSet) -> dict[str, Any]:
    """``coverage``'s numbers of one set of regions: each part's coverage and groups."""
    setup, unseen = run.setup, _unseen_regions(run, regions)
    return {
        part: _coverage_of(regions, setup, part) | _group_stats(run, regions, region, part)
        for part, region in (("reference", None), ("unseen", unseen))
    }


def _coverage(run: Run) -> dict[str, Any]:
    """``coverage``'s numbers of RI's regions and of its variants' (``methods``), with RI's
    per-image groups of each part as ``units`` (``groups``: `_group_units`)."""
    out = _coverage_blocks(run, run.regions)
    unseen = _unseen_regions(run, run.regions)
    groups = {
        part: _group_units(run, run.regions, region, part)
        for part, region in (("reference", None), ("unseen", unseen))
    }
    if any(groups.values()):
        out["units"] = {"groups": groups}
    variants = _ri_variants(run)
    if variants:
        out["methods"] = {
            name: _coverage_blocks(run, m.regions(run)) for name, m in variants.items()
        }
    return out


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
            (similar, explanations), spent = _timed(method.reference, run, index, max(ks))
        else:
            similar = common_s[index]
            explanations, spent = _timed(method.reuse, run, index, similar)
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
    units = {key: [_rounded(means) for means in per_k] for key, per_k in units.items()}
    return block | {"time_s": seconds, "units": units}


def _reference(run: Run) -> dict[str, Any]:
    setup, options = run.setup, run.options
    k, inputs = max(options.ks), run.inputs.tolist()
    run.neighbours(k)  # shared by the baselines, left out of their seconds
    methods, resolved = {}, options.resolve_methods()
    for name, method in resolved.items():
        _prepare(run, [method])
        block = _scores_over_k(run, method)
        found = method.reference_polytopes(run, inputs)
        if found is not None:
            block |= polytope_groups(found, _concepts(setup, "reference", inputs)).to_dict()
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


def _q_sweep(run: Run) -> dict[str, Any]:
    regions = run.regions
    named = {m.knobs["granularity"] for m in _ri_variants(run).values()}
    granularities = [PAPERS, *sorted(n for n in named if granularity_class(n).beyond_paper)]
    out: dict[str, Any] = {}
    for granularity in granularities:
        for sampling in run.options.samplings:
            block = _q_sweep_block(run, regions, sampling, granularity)
            out[fit_label(run.fit_config(sampling, granularity))] = block
    return {"samplings": out}


def _q_sweep_block(run: Run, regions: RegionSet, sampling: str, granularity: str) -> dict[str, Any]:
    """`_q_sweep` for one way of drawing ``Q`` at one granularity, over ``q_values``."""
    block: dict[str, Any] = {"reference": {}, "unseen": {}, "fit_s": [], "cover_s": []}
    for q in run.options.q_values:
        ri, fit_s = _timed(run.fit, run.fit_config(sampling, granularity, q))
        covers, cover_s = _timed(ri.explain_reference, regions.inputs)
        swept = RegionSet(ri, regions.inputs, covers, regions.centres)
        block["fit_s"].append(fit_s)
        block["cover_s"].append(cover_s)
        for part in ("reference", "unseen"):
            for key, value in _coverage_of(swept, run.setup, part).items():
                block[part].setdefault(key, []).append(value)
    return block


RANKINGS = ("semantic (RI)", "euclidean (all reference)", "euclidean (covered)", "cosine (covered)")


def _rankings(run: Run, index: int) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Each ranking of the reference images similar to reference image ``index`` (itself
    excluded), most similar first, and the interpretation whose heat map each reuses:
    ``Interpretation.similar`` with each metric, the paper's baseline, Euclidean nearest
    neighbours among all reference images, and ``semantic (RI+strategy)`` (each variant beyond
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
    for name, method in _ri_variants(run).items():
        if granularity_class(method.knobs["granularity"]).beyond_paper:
            own = method.reference_polytopes(run, [index])[0]
            rankings[f"semantic ({name})"] = own.similar(metric=method.knobs["similar"])
            explanations[f"semantic ({name})"] = own
    return explanations, {
        name: ranking.cpu()[ranking.cpu() != index] for name, ranking in rankings.items()
    }


def _similar(run: Run) -> dict[str, Any]:
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
            for name, _, maps, s in _explain_unseen(run)
        }
        out["mask_area"] = 100 * float(masks.double().mean())
    return out


_RUNNERS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "unseen": _unseen,
    "coverage": _coverage,
    "reference": _reference,
    "q-sweep": _q_sweep,
    "similar": _similar,
    "sanity": sanity,
    "shortcut": shortcut,
}


def _aggregate(runs: list[Any]) -> Any:
    """Mean over runs of nested dicts of numbers (or lists of numbers), with ``KEY_std``
    beside each ``KEY`` (sample standard deviation; 0 for one run); NaN where a run has NaN."""
    first = runs[0]
    if isinstance(first, dict):
        out = {}
        for key in first:
            value = _aggregate([run[key] for run in runs])
            if isinstance(first[key], dict):
                out[key] = value
            else:
                out[key], out[f"{key}_std"] = value
        return out
    values = np.asarray(runs, dtype=float)
    std = values.std(0, ddof=1) if len(runs) > 1 else np.zeros_like(values[0])
    return values.mean(0).tolist(), np.asarray(std).tolist()


def _accuracy(setup: Setup) -> dict[str, float]:
    """The model's accuracy (%) on the run's reference and unseen images."""
    return {
        part: 100.0 * float((setup.predictions[part] == setup.labels(part)).double().mean())
        for part in ("reference", "unseen")
    }


def evaluate(setup: Setup, protocol: str, options: Options | None = None) -> dict[str, Any]:
    """Run a protocol ``options.runs`` times and aggregate the runs.

    Args:
        setup: model and data (see `load_setup`).
        protocol: one of `PROTOCOLS`.
        options: how to run it; None for the defaults.

    Returns:
        A JSON-ready dict: ``dataset``, ``protocol``, ``runs``, ``seeds``, ``setup``,
        ``options``, ``time_s``, ``model_acc`` (the model's accuracy on each part of the runs'
        images), ``fit_s`` (seconds per fit of each sampling used), ``per_run`` (each run's
        numbers, for paired comparisons, its ``model``: `Setup.model_record`, and for
        ``unseen`` and ``reference`` its ``units``, the per-image values its means are made of,
        `comparison`), ``paired`` (``unseen``, ``reference``: every pair of methods compared,
        `comparison.paired_family`), and the protocol's numbers (mean, and ``KEY_std``):
        ``methods`` (``unseen``, ``reference``, ``similar``, ``sanity``), ``common``
        (``reference``: the methods on RI's similar images), ``reference`` /
        ``unseen`` (``coverage``), ``samplings`` (``q-sweep``), ``rankings`` (``similar``).
    """
    options = options or Options()
    check_protocol(protocol)
    if protocol == "shortcut":
        target_class(setup.dataset)
    if setup.models and options.runs != len(setup.models):
        raise ValueError(
            f"{options.runs} runs on {len(setup.models)} models: run r uses model r, so --runs "
            "must equal --model-seeds"
        )
    start = time.perf_counter()
    seeds = [options.seed + r for r in range(options.runs)]
    per_run, units, models, fit_s, kmeans_s, sizes = [], [], [], [], [], []
    for r, seed in enumerate(tqdm(seeds, desc=protocol, unit="run", disable=not options.progress)):
        on_model = setup.for_run(r)
        drawn = on_model.draw(seed, options.draw) if options.split == "per-run" else on_model
        run = Run(drawn, seed, options)
        numbers = _RUNNERS[protocol](run)
        units.append(numbers.pop("units", None))
        per_run.append(numbers | {"model_acc": _accuracy(drawn)})
        models.append(on_model.model_record())
        fit_s.append(run.fit_seconds)
        kmeans_s.append(run.kmeans_s)
        sizes.append((len(drawn.reference), len(drawn.unseen)))
    summary = {
        "dataset": setup.dataset,
        "protocol": protocol,
        "runs": options.runs,
        "seeds": seeds,
        "setup": setup.describe() | {"run_sizes": sorted(set(sizes))},
        "options": options.describe(),
        **_aggregate(per_run),
        "per_run": [
            run | {"model": model} | ({"units": u} if u is not None else {})
            for run, model, u in zip(per_run, models, units, strict=True)
        ],
        "ri_fit_s": float(np.mean([f["uniform"] for f in fit_s])),
        "fit_s": {key: float(np.mean([f[key] for f in fit_s])) for key in fit_s[0]},
        "kmeans_s": float(np.mean(kmeans_s)),
        "n_regions": options.n_regions or 10 * setup.n_classes,
        "machine": {
            "platform": platform.platform(terse=True),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
    }
    if all(u is not None for u in units):
        paired = paired_family([run | {"units": u} for run, u in zip(per_run, units, strict=True)])
        summary |= {"paired": paired} if paired else {}
    summary["time_s"] = time.perf_counter() - start
    return summary
