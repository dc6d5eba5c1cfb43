"""Which audit rule flags the shortcut strategies and nothing else? Read on tuning model seeds
only, never on a criterion's before its runs (100-102 and 200-204 for 0.6.2, whose criterion
ran on 300-304; 100-102, 200-204 and 300-304 for 0.6.3, judged on 400-404; those and the
fourth criterion's saved runs for 0.6.4, judged on 500-504; those and the fifth's for 0.6.5,
judged on 600-604: the criteria's saved runs are read under a rule by ``python -m
studies.shortcut_criterion --rule``).

Per data set and model seed (a model trained by the data set's recipe through the model cache,
`repinterp.store.model_cache`), ``RI+strategy`` is fitted on a stratified draw of the reference
images (seeded by the model seed) and `RepresentativeInterpreter.strategies` audits its
strategies; every strategy's reasons (`repinterp.strategies.audit`: the descriptive reasons and the
causal check) are kept with its share of marked members (the truth, read here only). The
*shortcut strategy* of a model is the one holding most marked reference images of the class
they are predicted (none on a control, ``*-markrand:F`` or ``F = 0``). Each candidate rule of
`RULES` (strategies' reasons -> a score and a flag each, read over the whole model) is then
scored: where the shortcut strategy ranks among the model's strategies and whether it is
flagged, and how many strategies it flags besides.

A line of the criterion (the *Lines* table) holds on a model when the first strategy of the
whole model is flagged and cued and the shortcut strategy flagged, or on a control when nothing
is flagged; a strategy is cued here when most of its reference members are marked (the
criterion reads at least half of the unseen images assigned to it).

Run (a few minutes once the models are cached; they are trained one at a time), as the
published results were, one folder per family and seed group (``mnist``, ``shapes``: seeds
100-102; ``mnist-200``, ``shapes-200``: 200-204; ``mnist-300``, ``shapes-300``: 300-304;
``mnist-300-r4000``, ``shapes-300-r4000``: 300-304 with ``--reference 4000``, the criterion's
reference set; ``shapes-300-r4000`` holds its controls and moving mark only),
each copied under docs/results/audit-tuning/ and re-read with ``--rescore --out`` that
folder::

    OMP_NUM_THREADS=1 PYTHONPATH=src python -m studies.audit_tuning --seeds 100,101,102 \
        --datasets mnist-mark:0.3,mnist-move:0.5,mnist-texture:0.3,mnist-majority:0.9,\
mnist-markrand:0.3,mnist-mark:0 --out /tmp/tune/mnist
    ... --seeds 200,201,202,203,204 ... --out /tmp/tune/mnist-200
    ... (the same with shapes-* data sets)

Writes ``OUT/results.json`` (every strategy's reasons) and ``OUT/results.md`` (``--out``,
default ``docs/results/audit-tuning``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from repinterp import RepresentativeInterpreter
from repinterp.data.datasets import load_dataset
from repinterp.evaluation.baselines import ReusableCAM
from repinterp.evaluation.metrics import energy_in_mask
from repinterp.evaluation.setup import recipe_for, stratified
from repinterp.models.zoo import target_layer_for
from repinterp.store.model_cache import default_cache, trained_model
from repinterp.strategies.audit import (
    flags_of,
    model_ranking,
    reasons_of,
    standout_scores,
)

from . import runner

DATASETS = (
    "mnist-mark:0.3",
    "mnist-move:0.5",
    "mnist-texture:0.3",
    "mnist-majority:0.9",
    "mnist-markrand:0.3",
    "mnist-mark:0",
)
SEEDS = (100, 101, 102)
OUT = runner.RESULTS / "audit-tuning"
WHY_MEMBERS = 32
"""The marked members whose "why" maps are measured, per model."""


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The data sets, seeds, draw size and where it writes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="model seeds")
    parser.add_argument("--reference", type=int, default=1000, help="reference images a seed")
    parser.add_argument("--model-cache", type=Path, default=default_cache())
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--rescore", action="store_true", help="re-read OUT/results.json, rerun only the rules"
    )
    return parser.parse_args(argv)


def measure(dataset: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Every strategy of one model: its id, class, size, reasons and marked share."""
    split = load_dataset(dataset, seed=0)
    recipe = recipe_for(dataset)
    model = trained_model(recipe, split, dataset, 0, seed, args.model_cache, "cpu", False).model
    data = split.reference
    rows = stratified(data.labels, min(args.reference, len(data)), seed)
    part = data.subset(rows)
    layer = target_layer_for(recipe.arch, tuple(part.images.shape[1:]))
    ri = RepresentativeInterpreter(model, layer, seed=seed, progress=False, granularity="strategy")
    start = time.perf_counter()
    ri.fit(part.normalization(part.images), list(part.class_names))
    fitted = time.perf_counter()
    strategies = ri.strategies()
    audited = time.perf_counter()
    marked = part.marked if part.marked is not None else torch.zeros(len(part), dtype=torch.bool)
    cued = max(strategies, key=lambda s: (int(marked[s.members].sum()), -s.id))
    return {
        "why_maps": why_maps(ri, layer, cued, part, marked) if marked.any() else None,
        "fit_s": fitted - start,
        "strategies_s": audited - fitted,
        "marked": int(marked.sum()),
        "strategies": [
            {
                "id": s.id,
                "class": s.predicted_class,
                "size": len(s.members),
                "marked": int(marked[s.members].sum()),
                "runner_up": s.audit.runner_up,
                "reasons": s.audit.reasons,
                "checks": s.audit.checks,
            }
            for s in strategies
        ],
    }


def cue_masks(part: Any, rows: Tensor) -> Tensor:
    """The cue's pixels on images ``rows`` of ``part`` (its per-image cue masks where the data
    set has them, else its mark's box)."""
    masks = getattr(part, "cue_masks", None)
    if masks is not None:
        return masks[rows].bool()
    x0, y0, x1, y1 = part.mark_box
    out = torch.zeros(len(rows), *part.images.shape[-2:], dtype=torch.bool)
    out[:, y0:y1, x0:x1] = True
    return out


def why_maps(
    ri: RepresentativeInterpreter, layer: str, strategy: Any, part: Any, marked: Tensor
) -> dict:
    """The share (%) of each candidate "why" map's positive mass on the cue, over the marked
    members (at most `WHY_MEMBERS`) of the strategy holding most marked images, and the cue's
    area (%)."""
    rows = strategy.members[marked[strategy.members]][:WHY_MEMBERS]
    images = part.normalization(part.images[rows])
    masks = cue_masks(part, rows)
    runner_up = torch.full((len(rows),), strategy.audit.runner_up)
    cam = ReusableCAM("Grad-CAM", ri.model, layer)
    cam.fit(images)
    maps = {
        "polytope (RI+strategy)": strategy.heatmap(images),
        "grad x input": ri.input_relevance(images)[1],
        "grad x input vs runner-up": ri.input_relevance(images, runner_up)[1],
        "contrastive vs runner-up": ri.contrastive_heatmap(images, runner_up),
        "Grad-CAM": cam.heatmaps(images, torch.arange(len(images))),
    }
    out = {
        name: 100 * float(energy_in_mask(m.float().cpu().clamp(min=0), masks).nanmean())
        for name, m in maps.items()
    }
    return out | {"cue_area": 100 * float(masks.float().mean())}


def shortcut_strategy(strategies: list[dict[str, Any]]) -> int | None:
    """The id of the strategy holding most marked images (None when none is marked)."""
    best = max(strategies, key=lambda s: (s["marked"], -s["id"]))
    return best["id"] if best["marked"] else None


def measures(checks: dict[str, float]) -> dict[str, float]:
    """What the candidate rules read of one strategy's `causal_checks` shares: its
    `reasons_of` and the other reading tried (``look_alike``, the relevant pixels pasted onto
    the runner-up's images)."""
    return reasons_of(checks) | {"look_alike": checks["look_alike_sufficiency"]}


def _fixed(names: tuple[str, ...], threshold: float) -> Rule:
    """The largest of the ``names`` readings, flagged from a fixed threshold."""

    def rule(strategies: list[dict[str, Any]]) -> list[tuple[float, bool]]:
        values = [max(measures(s["checks"])[n] for n in names) for s in strategies]
        return [(v, v >= threshold) for v in values]

    return rule


def _standout(
    weights: dict[str, float],
    threshold: float,
    within: dict[str, float] | None = None,
    over_images: bool = False,
    over_classes: bool = False,
) -> Rule:
    """`standout_scores` of the ``weights`` readings over the model (and of the ``within``
    readings over the strategy's class), flagged from ``threshold``; ``over_images``: the
    medians over images (each strategy weighted by its size); ``over_classes``: the
    model-wide medians over the classes' medians."""

    def rule(strategies: list[dict[str, Any]]) -> list[tuple[float, bool]]:
        scores = standout_scores(
            [measures(s["checks"]) for s in strategies],
            weights,
            [s["class"] for s in strategies] if within else None,
            within or {},
            [s["size"] for s in strategies] if over_images else None,
            over_classes,
        )
        return [(x, x >= threshold) for x in scores]

    return rule


Rule = Callable[[list[dict[str, Any]]], list[tuple[float, bool]]]


def _blur_within_class(weights: dict[str, float]) -> Rule:
    """``weights`` read over the model, flagged from 0.4, but ``blur_sensitive`` (its weight
    kept) read against the class's other strategies, beside `WITHIN`."""
    model_wide = {r: w for r, w in weights.items() if r != "blur_sensitive"}
    return _standout(model_wide, 0.4, WITHIN | {"blur_sensitive": weights["blur_sensitive"]})


def _with_kin(rule: Rule, low: float) -> Rule:
    """``rule``'s scores, flagged by `flags_of` from 0.4, and in a class with a strategy
    flagged so its other strategies from ``low`` (a cue the discovery splits over several
    strategies of a class)."""

    def kin(strategies: list[dict[str, Any]]) -> list[tuple[float, bool]]:
        scores = [score for score, _ in rule(strategies)]
        flags = flags_of(scores, [s["class"] for s in strategies], 0.4, low)
        return list(zip(scores, flags, strict=True))

    return kin


CUES = ("portable_cue", "fine_detail", "blur_sensitive", "tint")
BEFORE = {"portable_cue": 1.0, "fine_detail": 1.0, "tint": 1.0, "blur_sensitive": 0.5}
"""0.6.0's rule: the model-wide standout of these, flagged from 0.4."""
SECOND = BEFORE | {"shared_pattern": 1.0, "moved_pattern": 1.0}
"""0.6.1's model-wide reasons."""
WITHIN = {"wide_portable_cue": 1.0}
"""0.6.1's reasons read against the other strategies of the class."""
THIRD = SECOND | {"tint": 0.5, "look_alike_pattern": 1.0}
"""0.6.2's model-wide reasons (the audit's `SCORED`)."""
NEAREST = {r: w for r, w in THIRD.items() if r != "look_alike_pattern"} | {"nearest_pattern": 1.0}
"""0.6.2's, the look-alike pattern read on the class whose mean image is nearest the members'
(``nearest_pattern``: its share minus its tint's) instead of their runner-up class."""
FOURTH = {r: w for r, w in NEAREST.items() if r != "blur_sensitive"}
"""0.6.3's model-wide reasons (the audit's `SCORED`): `NEAREST` without the blur, which it
reads within the class (`FOURTH_WITHIN`)."""
FOURTH_WITHIN = WITHIN | {"blur_sensitive": NEAREST["blur_sensitive"]}
"""0.6.3's reasons read against the other strategies of the class (the audit's
`CLASS_SCORED`)."""
KIN = 0.2
"""0.6.4's score from which a flagged strategy's class's other strategies are flagged (the
audit's `KIN_SCORE`)."""


RULES: dict[str, Rule] = {
    "max(portable, detail, blur, tint) >= 0.5": _fixed(CUES, 0.5),
    "standout(portable, detail, blur, tint) >= 0.4": _standout(dict.fromkeys(CUES, 1.0), 0.4),
    "0.6.0: standout(portable, detail, tint, blur / 2) >= 0.4": _standout(BEFORE, 0.4),
    "0.6.0 + look-alike paste >= 0.4": _standout(BEFORE | {"look_alike": 1.0}, 0.4),
    "0.6.0 + moved pattern >= 0.4": _standout(BEFORE | {"moved_pattern": 1.0}, 0.4),
    "0.6.0 + shared pattern, moved pattern >= 0.4": _standout(
        BEFORE | {"shared_pattern": 1.0, "moved_pattern": 1.0}, 0.4
    ),
    "0.6.0 + shared pattern, moved pattern, wide paste >= 0.4": _standout(
        SECOND | {"wide_portable_cue": 1.0}, 0.4
    ),
    "0.6.0 + shared pattern, moved pattern | class: wide paste >= 0.3": _standout(
        SECOND, 0.3, WITHIN
    ),
    "0.6.1: 0.6.0 + shared pattern, moved pattern | class: wide paste >= 0.4": _standout(
        SECOND, 0.4, WITHIN
    ),
    "0.6.0 + shared pattern, moved pattern | class: wide paste >= 0.5": _standout(
        SECOND, 0.5, WITHIN
    ),
    "0.6.1 with tint / 2 >= 0.4": _standout(SECOND | {"tint": 0.5}, 0.4, WITHIN),
    "0.6.1 + look-alike pattern >= 0.4": _standout(
        SECOND | {"look_alike_pattern": 1.0}, 0.4, WITHIN
    ),
    "0.6.1, medians over images >= 0.4": _standout(SECOND, 0.4, WITHIN, True),
    "0.6.1, tint / 2, medians over images >= 0.4": _standout(
        SECOND | {"tint": 0.5}, 0.4, WITHIN, True
    ),
    "0.6.1 + look-alike pattern, tint / 2 >= 0.4 (chosen for 0.6.2)": _standout(THIRD, 0.4, WITHIN),
    "0.6.2 with the blur read within the class (after the third criterion's runs; not used) "
    ">= 0.4": _blur_within_class(THIRD),
    "0.6.2 with the nearest class's images as look-alikes (after the third criterion's runs; "
    "not used) >= 0.4": _standout(NEAREST, 0.4, WITHIN),
    "0.6.2 with the nearest class's images as look-alikes, the blur read within the class "
    "(after the third criterion's runs; chosen for 0.6.3) >= 0.4": _standout(
        FOURTH, 0.4, FOURTH_WITHIN
    ),
    "0.6.3, and a flagged strategy's class's other strategies from 0.2 (after the fourth "
    "criterion's runs; chosen for 0.6.4) >= 0.4": _with_kin(
        _standout(FOURTH, 0.4, FOURTH_WITHIN), KIN
    ),
    "0.6.3, and a flagged strategy's class's other strategies from 0.25 (after the fourth "
    "criterion's runs; not used) >= 0.4": _with_kin(_standout(FOURTH, 0.4, FOURTH_WITHIN), 0.25),
    "0.6.4 with the model-wide medians over the classes' medians (after the fifth criterion's "
    "runs; chosen for 0.6.5) >= 0.4": _with_kin(
        _standout(FOURTH, 0.4, FOURTH_WITHIN, over_classes=True), KIN
    ),
    "0.6.1 + look-alike pattern, tint / 2, medians over images >= 0.4": _standout(
        SECOND | {"tint": 0.5, "look_alike_pattern": 1.0}, 0.4, WITHIN, True
    ),
}
"""Each candidate rule: the strategies' causal-check shares -> (score, flag) each."""


def control(dataset: str) -> bool:
    """Whether a data set is a control (``*-markrand:F``, ``*:0``): no cue says its class."""
    return "-markrand:" in dataset or dataset.endswith(":0")


def read(model: dict[str, Any], quiet: bool = False) -> dict[str, Any]:
    """Each rule's reading of one model: the shortcut strategy's model-wide rank and flag, the
    other strategies flagged that hold cued images (``cued_flagged``) and those that hold none
    (``others_flagged``: false alarms), and whether the criterion's line ``holds``: the first
    strategy of the whole model flagged and cued (most of its members cued) and the shortcut
    strategy flagged, or with ``quiet`` (a control) no strategy flagged."""
    strategies = model["strategies"]
    target = shortcut_strategy(strategies)
    out = {}
    for name, rule in RULES.items():
        scored = rule(strategies)
        ranks = model_ranking([score for score, _ in scored], [s["size"] for s in strategies])
        row = {"others_flagged": 0, "cued_flagged": 0, "rank": None, "flagged": None}
        first_cued = False
        for s, (score, flag), rank in zip(strategies, scored, ranks, strict=True):
            if rank == 1:
                first_cued = flag and 2 * s["marked"] > s["size"]
            if s["id"] == target:
                row |= {"rank": rank, "flagged": flag, "score": score}
            else:
                row["cued_flagged" if s["marked"] else "others_flagged"] += flag
        flags = row["others_flagged"] + row["cued_flagged"] + bool(row["flagged"])
        row["holds"] = flags == 0 if quiet else bool(first_cued and row["flagged"])
        out[name] = row
    return out


def markdown(results: dict[str, Any]) -> str:
    """One table per rule: per data set, the shortcut strategy's rank / flag and the others
    flagged, per seed."""
    lines = [
        "# Audit tuning (model seeds " + ", ".join(results["seeds"]) + ")",
        "",
        f"Command: `{results['provenance']['command']}`",
        "",
        "Per model: the shortcut strategy's (the one holding most cued reference images) rank "
        "among all the model's strategies (of S), `F` when flagged, `+n` other strategies "
        "flagged that hold no cued image (false alarms), and `(c)` other flagged ones that "
        "hold cued images. On the `markrand` control the cue says nothing of the class: every "
        "flag there is a false alarm.",
    ]
    datasets = list(results["models"])
    lines += [
        "",
        "## Lines",
        "",
        "Per rule and data set, the models on which the criterion's line holds: the first "
        "strategy of the whole model flagged and cued (most of its members cued) and the "
        "shortcut strategy flagged; on a control, no strategy flagged.",
        "",
        "| rule | " + " | ".join(f"`{d}`" for d in datasets) + " |",
        "|---" * (len(datasets) + 1) + "|",
    ]
    for name in RULES:
        cells = []
        for models in results["models"].values():
            held = sum(m["rules"][name]["holds"] for m in models.values())
            cells.append(f"{held}/{len(models)}")
        escaped = name.replace("|", "\\|")
        lines.append(f"| {escaped} | " + " | ".join(cells) + " |")
    for name in RULES:
        lines += ["", f"## {name}", "", "| data set | " + " | ".join(results["seeds"]) + " |"]
        lines.append("|---" * (len(results["seeds"]) + 1) + "|")
        for dataset, models in results["models"].items():
            cells = []
            for seed in results["seeds"]:
                model = models[seed]
                row = model["rules"][name]
                rank = "-" if row["rank"] is None else f"{row['rank']}/{len(model['strategies'])}"
                flag = " F" if row["flagged"] else ""
                cued = f" ({row['cued_flagged']})" if row["cued_flagged"] else ""
                cells.append(f"{rank}{flag} +{row['others_flagged']}{cued}")
            lines.append(f"| {dataset} | " + " | ".join(cells) + " |")
    lines += ["", "## Strategies (marked members, causal-check shares)", ""]
    for dataset, models in results["models"].items():
        for seed, model in models.items():
            lines.append(f"- {dataset} seed {seed} ({model['strategies_s']:.1f} s):")
            for s in model["strategies"]:
                runner_up = f" runner-up {s['runner_up']}" if "runner_up" in s else ""
                lines.append(
                    f"  - {s['id']} class {s['class']}{runner_up} n={s['size']} "
                    f"marked={s['marked']}: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in s["checks"].items())
                )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Run the study and publish it."""
    import json

    args = arguments(argv)
    if args.rescore:
        results = json.loads((args.out / "results.json").read_text())
    else:
        seeds = [int(s) for s in args.seeds.split(",")]
        results = {"seeds": [str(s) for s in seeds], "models": {}}
        for dataset in args.datasets.split(","):
            results["models"][dataset] = {}
            for seed in seeds:
                start = time.perf_counter()
                results["models"][dataset][str(seed)] = measure(dataset, seed, args)
                print(f"{dataset} seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
        results["provenance"] = runner.provenance("studies.audit_tuning", argv)
    for dataset, models in results["models"].items():
        for model in models.values():
            model["rules"] = read(model, control(dataset))
    summary = {
        name: statistics.mean(
            m["rules"][name]["others_flagged"]
            for models in results["models"].values()
            for m in models.values()
        )
        for name in RULES
    }
    results["mean_others_flagged"] = summary
    runner.publish(args.out, runner.results_files(results, markdown(results)))


if __name__ == "__main__":
    main()
