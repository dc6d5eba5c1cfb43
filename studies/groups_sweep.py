"""Where does RI find sub-class groups? A sweep over the target layer, |Q|, Q's sampling and
the logits' temperature, on ``shapes`` (sub-concepts known) and ``mnist5k``, over five trained
models.

Each point changes one setting of the default (the data set's CNN at its last conv ReLU,
|Q| = 50, uniform sampling). Seed r uses the model of seed r of the data set's recipe
(`repinterp.evaluation.setup.RECIPES`, through the model cache, as ``evaluate --model-seeds``
trains them), draws its own stratified 3,000 reference and 500 unseen images from the
data-seed-0 split (as ``repinterp evaluate`` does, so the unseen images stay unseen by the
model) and samples Q; the interpreter explains each unseen image by its own P(x), and
`repinterp.evaluation.groupings.polytope_groups` groups those (with the merged groups, the
within-class AMI, its shuffled null and k-means ceiling, and the images outside their class's main
polytope). Beside the sub-concept purity of the groups and of one group per class (the
baseline), the purity of a chance split: the same groups with the sub-concept labels shuffled
within each predicted class (small groups are pure by chance; 10 draws of
`repinterp.evaluation.groupings.within_class_null`, the draws of the AMI's null; the published
tables drew them with torch's generator, the same law). CVR: the share of the unseen
images that one of |V| = 10 x classes k-means regions covers (`RegionSet.assign`); the k-means
runs on the reference feature maps' first 64 principal components (a full-dimensional k-means
takes minutes at the early layers), and at the default point also in full, as the protocols
run it. Why: for each class c, the share of Q's boundaries whose two classes include c, the
share of c's reference images on c's side of every one of them, and the share in the largest
cell of the whole arrangement Q (the images no boundary of Q separates), averaged over the
classes. Saturation: the logits divided by a temperature T = 4 (a wrapper module). (The
3-seed sweep on the bundled weights, with models retrained with and without label smoothing,
is kept in ``docs/results/groups-sweep``.)

Run: ``OMP_NUM_THREADS=1 PYTHONPATH=src python -m studies.groups_sweep --seeds 5`` (about
25 minutes on one core once the models are cached). Writes ``OUT/results.json`` (every point,
every seed, each model's weights SHA-256 and held-out accuracy, the command) and
``results.md`` (``--out``, default ``docs/results/groups-sweep-seeds``).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.cluster import KMeans
from torch import Tensor, nn

from repinterp.core.config import FitConfig
from repinterp.core.groups import polytope_key
from repinterp.core.nearest import nearest_rows
from repinterp.core.regions import RegionSet
from repinterp.evaluation.convexity import q_convexity
from repinterp.evaluation.groupings import (
    majority_share,
    polytope_groups,
    region_groups,
    within_class_null,
)
from repinterp.evaluation.setup import Setup, load_setup
from repinterp.interpreter import RepresentativeInterpreter
from repinterp.store.model_cache import default_cache

from . import runner
from .runner import cell

OUT = runner.RESULTS / "groups-sweep-seeds"
DRAW = (0.75, 0.5)  # of the 4,000 reference and 1,000 unseen images: 3,000 and 500
PCA_DIMS = 64
LAYERS = {
    "mnist5k": ("features.1", "features.4", "features.7"),
    "shapes": ("features.1", "features.4", "features.7", "features.10"),
}
TEMPERATURE = 4.0


@dataclasses.dataclass(frozen=True)
class Point:
    """One setting: the target layer, |Q|, Q's sampling and the model (``"trained"``, or its
    logits over a temperature)."""

    layer: str
    n_boundaries: int = 50
    sampling: str = "uniform"
    model: str = "trained"

    def name(self, default: Point) -> str:
        """What differs from ``default`` (``"default"`` when nothing does)."""
        changed = [
            f"{field.name} {getattr(self, field.name)}"
            for field in dataclasses.fields(self)
            if getattr(self, field.name) != getattr(default, field.name)
        ]
        return ", ".join(changed) or "default"


class Tempered(nn.Module):
    """``model``'s logits divided by ``temperature`` (same argmax, same polytopes)."""

    def __init__(self, model: nn.Module, temperature: float) -> None:
        super().__init__()
        self.model = model
        self.temperature = temperature

    def forward(self, images: Tensor) -> Tensor:
        return self.model(images) / self.temperature


def grid(dataset: str, layers: str | None = None) -> list[Point]:
    """The points of a data set: every conv ReLU (``layers``, comma-separated: those), then |Q|,
    sampling and model at the last."""
    *early, last = layers.split(",") if layers else LAYERS[dataset]
    default = Point(last)
    return [
        default,
        *(Point(layer) for layer in early),
        *(Point(last, n_boundaries=q) for q in (10, 200, 500)),
        *(Point(last, sampling=s) for s in ("balanced", "pairs")),
        Point(last, model=f"T={TEMPERATURE:g}"),
    ]


def pca_regions(ri: RepresentativeInterpreter, seed: int) -> RegionSet:
    """|V| = 10 x classes regions as `RegionSet.build` makes them, with k-means (3 starts) on
    the reference feature maps' first ``PCA_DIMS`` principal components; the centres are the
    clusters' means in the full space."""
    features = torch.from_numpy(np.asarray(ri.reference_features)).float()
    k = 10 * ri.index.n_classes
    torch.manual_seed(seed)
    _, _, v = torch.pca_lowrank(features, q=min(PCA_DIMS, *features.shape), center=True)
    coords = (features - features.mean(0)) @ v
    labels = KMeans(n_clusters=k, random_state=seed, n_init=3).fit(coords.numpy()).labels_
    labels = torch.from_numpy(labels).long()
    sums = torch.zeros(k, features.shape[1]).index_add_(0, labels, features)
    centres = sums / torch.bincount(labels, minlength=k).clamp(min=1)[:, None]
    inputs = nearest_rows(centres, features)[0][:, 0]
    return RegionSet(ri, inputs, ri.explain_reference(inputs), centres)


def cvr(regions: RegionSet, inputs: Tensor) -> float:
    """The share (%) of ``inputs`` that some region covers."""
    return 100 * float(regions.assign(inputs).covered.double().mean())


def shuffled_purity(explanations: list, concepts: Tensor, seed: int) -> float:
    """Sub-concept purity (%) of the same groups with the labels shuffled within each
    predicted class (`within_class_null`), averaged over 10 shuffles: what groups of these
    sizes reach by chance."""
    keys = [polytope_key(e) for e in explanations]
    predicted = [e.predicted_class for e in explanations]
    values = within_class_null(
        lambda shuffled: majority_share(keys, shuffled.tolist()), concepts, predicted, 10, seed
    )
    return 100 * float(values.mean())


def measure(setup: Setup, point: Point, seed: int, full_kmeans: bool) -> dict[str, Any]:
    """One seed of one point: fit, explain the unseen images, group, cover, carve."""
    start = time.perf_counter()
    drawn = setup.draw(seed, DRAW)
    config = FitConfig(
        n_boundaries=point.n_boundaries, seed=seed, sampling=point.sampling, progress=False
    )
    ri = RepresentativeInterpreter(drawn.model, drawn.target_layer, config=config)
    ri.fit(drawn.reference.inputs(), list(drawn.reference.class_names), keep_features=True)
    unseen = drawn.unseen.inputs()
    explanations = ri.explain_batch(unseen)
    concepts = drawn.unseen.concepts
    row: dict[str, Any] = {"seed": seed, "feature_shape": list(ri.index.feature_shape)}
    features = None if concepts is None else ri.features(unseen).flatten(1).cpu()
    logits = ri.logits_and_projections(unseen)[0].cpu()
    labels = drawn.labels("unseen")
    row |= polytope_groups(explanations, concepts, features, logits, labels, seed).to_dict()
    if concepts is not None:
        row["subconcept_purity_shuffled"] = shuffled_purity(explanations, concepts, seed)
    row["boundaries_in_P"] = float(np.mean([e.boundary_ids.numel() for e in explanations]))
    row["delta"] = float(np.mean([e.delta for e in explanations]))
    row["representativeness"] = float(np.mean([e.representativeness for e in explanations]))
    correct = drawn.predictions["unseen"] == drawn.labels("unseen")
    row["accuracy"] = 100 * float(correct.double().mean())
    regions = pca_regions(ri, seed)
    row["CVR"] = cvr(regions, unseen)
    grouped = region_groups(regions, regions.assign(unseen).region, concepts).to_dict()
    row |= {f"regions_{key}": value for key, value in grouped.items()}
    if full_kmeans:
        row["CVR_full_kmeans"] = cvr(ri.regions(seed=seed), unseen)
    index = ri.index
    row |= q_convexity(index.boundaries.top_classes, index.sides, index.predictions)
    row["keys"] = [repr(polytope_key(e)) for e in explanations]
    row["delta_each"] = [e.delta for e in explanations]
    row["seconds"] = time.perf_counter() - start
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole sweep (the results.json object, less the provenance) over model seeds 0 ..
    ``--seeds`` - 1 and ``--datasets``."""
    out: dict[str, Any] = {
        "seeds": list(range(args.seeds)),
        "draw": {"reference": 3000, "unseen": 500},
        "pca_dims": PCA_DIMS,
        "models": {},
        "points": {},
    }
    for dataset in args.datasets.split(","):
        setup = load_setup(dataset, model_seeds=args.seeds, model_cache=args.model_cache)
        out["models"][dataset] = [
            {
                "seed": trained.seed,
                "sha256": trained.sha256,
                "held_out_accuracy": trained.card["held_out_accuracy"],
                "recipe": trained.card["recipe"],
            }
            for trained in setup.models
        ]
        points = grid(dataset, args.layers)
        swept = runner.sweep(
            points,
            range(args.seeds),
            measurer(setup, points[0]),
            lambda point, points=points, dataset=dataset: f"{dataset}: {point.name(points[0])}",
        )
        for point, (label, block) in zip(points, swept.items(), strict=True):
            out["points"][label] = {"dataset": dataset, **dataclasses.asdict(point)} | block
    return out


def measurer(setup: Setup, default: Point) -> Callable[[Point, int], dict[str, Any]]:
    """`measure` of a point and seed, each seed with its own model; the tempered model's rows
    compared with the default point's of the same seed (measured first)."""
    base: dict[int, tuple[list[str], list[float]]] = {}

    def measure_point(point: Point, seed: int) -> dict[str, Any]:
        at = setup.for_run(seed)
        if point.model.startswith("T="):
            tempered = Tempered(at.model, TEMPERATURE).eval()
            at = dataclasses.replace(at, model=tempered, target_layer="model." + point.layer)
        else:
            at = dataclasses.replace(at, target_layer=point.layer)
        row = measure(at, point, seed, full_kmeans=point == default)
        keys, deltas = row.pop("keys"), row.pop("delta_each")
        if point == default:
            base[seed] = keys, deltas
        elif point.model.startswith("T="):
            same = [a == b for a, b in zip(keys, base[seed][0], strict=True)]
            row["same_polytope_as_T1"] = 100 * float(np.mean(same))
            row["same_delta_as_T1"] = 100 * float(np.mean(np.equal(deltas, base[seed][1])))
        return row

    return measure_point


def markdown(results: dict[str, Any]) -> str:
    """results.md: a groups table and a carving table per data set."""
    lines = [
        "# Where RI finds sub-class groups: the sweep",
        "",
        f"Made by `{results['command']}` in {results['seconds'] / 60:.1f} min "
        f"({results['machine']}). Every cell is mean ± sample std over seeds "
        f"{results['seeds']}; seed r explains with the model of seed r of the data set's recipe "
        "and draws its own 3,000 reference and 500 unseen images and samples its own Q. The "
        "default point: the last conv ReLU, |Q| = 50, uniform; every other row changes one "
        "setting. Groups: the unseen images grouped by their own P(x) "
        "(`repinterp.evaluation.groupings`). Purity: sub-concept purity of the groups / of "
        "one group per class / of the same groups with the labels shuffled within each class "
        "(chance). CVR: unseen images covered by one of 10 x classes "
        f"k-means regions (k-means on {results['pca_dims']} principal components).",
        "",
        "Models (seed: weights' SHA-256, held-out accuracy on the split's unseen part):",
        "",
    ]
    for dataset, models in results["models"].items():
        named = ", ".join(
            f"{m['seed']}: `{m['sha256'][:12]}` {m['held_out_accuracy']:.1f}%" for m in models
        )
        lines.append(f"- `{dataset}`: {named}")
    for dataset in results["models"]:
        points = {k: v for k, v in results["points"].items() if v["dataset"] == dataset}
        lines += [
            "",
            f"## `{dataset}`",
            "",
            "| point | feature map | distinct polytopes | effective groups | largest-group "
            "share (%) | singletons | purity: groups / class / chance (%) | CVR (%) | "
            "accuracy (%) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, point in points.items():
            s = point["mean_std"]
            shape = "x".join(map(str, point["seeds"][0]["feature_shape"]))
            purity = " / ".join(
                cell(s, k)
                for k in (
                    "subconcept_purity",
                    "subconcept_purity_class",
                    "subconcept_purity_shuffled",
                )
            )
            lines.append(
                f"| {name.split(': ', 1)[1]} | {shape} | {cell(s, 'distinct_polytopes')} | "
                f"{cell(s, 'effective_groups')} | {cell(s, 'largest_group_share')} | "
                f"{cell(s, 'singletons')} | {purity if 'subconcept_purity' in s else 'n/a'} | "
                f"{cell(s, 'CVR')} | {cell(s, 'accuracy')} |"
            )
        lines += [
            "",
            "Beyond the raw counts (`repinterp.evaluation.groupings`): the groups once "
            "polytopes whose covered reference sets have Jaccard >= 0.9 are merged "
            "(transitively), and the images outside their class's largest polytope against "
            "those in it (share, median logit margin, the model's errors).",
            "",
            "| point | merged groups | effective merged groups | outside main (%) | margin: "
            "main / outside | errors (%): main / outside |",
            "|---|---|---|---|---|---|",
        ]
        for name, point in points.items():
            s = point["mean_std"]
            lines.append(
                f"| {name.split(': ', 1)[1]} | {cell(s, 'merged_groups')} | "
                f"{cell(s, 'merged_effective_groups')} | {cell(s, 'outside_share')} | "
                f"{cell(s, 'margin_main')} / {cell(s, 'margin_outside')} | "
                f"{cell(s, 'error_main')} / {cell(s, 'error_outside')} |"
            )
        if any("ami" in point["mean_std"] for point in points.values()):
            lines += [
                "",
                "Within-class AMI between the groups and the sub-concepts (weighted by class "
                "size), with the sub-concepts shuffled within each class (50 draws: mean, 95th "
                "percentile), and k-means with k = sub-concepts per class on the same feature "
                "maps (the ceiling):",
                "",
                "| point | AMI | shuffled: mean | shuffled: 95th percentile | k-means ceiling |",
                "|---|---|---|---|---|",
            ]
            for name, point in points.items():
                s = point["mean_std"]
                amis = " | ".join(
                    cell(s, key, 3) for key in ("ami", "ami_null", "ami_null_p95", "ami_ceiling")
                )
                lines.append(f"| {name.split(': ', 1)[1]} | {amis} |")
        else:
            lines += ["", "No sub-concept labels on this data set: no AMI."]
        lines += [
            "",
            "Why (per predicted class c, %): Q's boundaries between c and another class (the "
            "least and the most over the classes; their mean is 2 / classes); averaged over "
            "the classes, c's reference images on c's side of every one of them, and c's "
            "reference images in the largest cell of all of Q (no boundary of Q separates "
            "them). Mean |P(x)|, tau(x) and representativeness of the unseen images' P(x).",
            "",
            "| point | boundaries with c, least (%) | most (%) | on c's side of all (%) | "
            "largest cell (%) | \\|P\\| | tau | representativeness |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, point in points.items():
            s = point["mean_std"]
            lines.append(
                f"| {name.split(': ', 1)[1]} | {cell(s, 'boundaries_with_class_min')} | "
                f"{cell(s, 'boundaries_with_class_max')} | "
                f"{cell(s, 'same_side')} | {cell(s, 'largest_cell')} | "
                f"{cell(s, 'boundaries_in_P')} | {cell(s, 'delta')} | "
                f"{cell(s, 'representativeness', 0)} |"
            )
        tempered = next(p["mean_std"] for p in points.values() if p["model"].startswith("T="))
        lines += [
            "",
            f"Logits / T = {TEMPERATURE:g}: the same P(x) as at T = 1 for "
            f"{cell(tempered, 'same_polytope_as_T1')} % of the unseen images, the same tau(x) "
            f"for {cell(tempered, 'same_delta_as_T1')} %.",
        ]
    return "\n".join(lines) + "\n"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's size and where it writes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="model seeds 0..N-1 (5)")
    parser.add_argument("--datasets", default=",".join(LAYERS), help="comma-separated")
    parser.add_argument("--layers", default=None, help="comma-separated (default: every ReLU)")
    parser.add_argument("--model-cache", type=Path, default=default_cache())
    parser.add_argument("--out", type=Path, default=OUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the sweep and publish ``results.json`` and ``results.md`` in ``--out``."""
    return runner.main(
        "studies.groups_sweep",
        arguments,
        run,
        runner.tables(markdown),
        argv,
    )


if __name__ == "__main__":
    main()
