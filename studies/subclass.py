"""Which grouping below the class follows the sub-concepts, and are its heat maps faithful?

On the data sets with known sub-concepts (`mnist-super`; `shapes` = `shapes-mix:0` and the
`shapes-mix:P` family), over the model seeds (a model trained by the data set's recipe through
the model cache, its own stratified draw and Q per seed), the groupings of
`repinterp.evaluation.subclass` and RI's own are compared on the unseen images:

- ``RI``: the paper's RI at the default layer; ``RI@EARLIER``: at an earlier layer;
- ``k-means``: on the default layer's feature maps, k = the sub-concepts of each class
  (matched group count, `matched_k`);
- ``SpRAy``: spectral clustering of the Grad-CAM maps, k by the eigengap, and ``SpRAy k=m``
  at matched k;
- ``PCX``: a Gaussian mixture over the channel relevances
  (`repinterp.strategies.channel_relevance.channel_relevance`), k by BIC, and
  ``PCX k=m`` at matched k.

Per method and seed: the groups per class (effective groups / classes) and the sub-concepts
per class (the matched count), within-class ``ami`` against its null's 95th percentile
(`repinterp.evaluation.groupings.ami_null`) and the k-means reference point (`ami_ceiling`, k = the
sub-concepts, the default layer); for RI's, CVR (the unseen images covered by one of 10 x
classes k-means regions). Heat-map faithfulness on the first ``--faithful`` unseen images:
Grad-CAM with channel weights averaged over at most 16 reference images of the image's group
(RI: of its polytope's covered images, as ``RI+score`` averages Score-CAM's), against the same
average over images of its predicted class (the class control) and over its 16 nearest
reference images in feature space (the cluster control; unseen images never make weights, so
it is leak-free), scored by mAD, ROAD and deletion (`repinterp.evaluation.scoring.score`);
each difference with the project's paired bootstrap interval and win rule
(`repinterp.evaluation.comparison`).

The criterion the runs test is written in docs/results.md ("Decision logic below the class:
the criterion"); its ``RI+logic`` rows are gone with ``granularity="logic"`` (removed in 0.6),
their published figures stay in docs/results/subclass. Run (the full size; about 40 minutes
on one core once the models are cached: about 2 minutes a seed and data set, most of it
ROAD)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python -m studies.subclass --seeds 5

``--seeds 1 --reference 300 --unseen 100 --faithful 20 --datasets mnist-super`` is a smoke
test of a minute or two. Writes ``OUT/results.json`` and ``OUT/results.md`` (``--out``,
default ``docs/results/subclass``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from repinterp.core.nearest import nearest_rows
from repinterp.evaluation.baselines import ReusableCAM, reused_cam
from repinterp.evaluation.comparison import bootstrap_interval, is_win
from repinterp.evaluation.groupings import ami, ami_ceiling, ami_null
from repinterp.evaluation.scoring import score
from repinterp.evaluation.setup import Setup
from repinterp.evaluation.subclass import (
    groups_per_class,
    kmeans_groups,
    matched_k,
    pcx_groups,
    polytope_grouping,
    spray_groups,
)
from repinterp.interpreter import RepresentativeInterpreter
from repinterp.maps.polytope_weights import draw_indices
from repinterp.strategies.channel_relevance import channel_relevance

from . import runner
from .groups_sweep import cvr
from .runner import cell, summary

OUT = runner.RESULTS / "subclass"
DATASETS = ("mnist-super", "shapes", "shapes-mix:0.5", "shapes-mix:1")
EARLIER = {"mnist_super_cnn": "features.4", "shapes_cnn": "features.7"}
WEIGHT_IMAGES = 16
METRICS = {"mAD": False, "ROAD": True, "deletion": False}  # and whether higher is better
CONTROLS = ("class control", "cluster control")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's size and where it writes."""
    parser = runner.size_parser(__doc__.split("\n\n")[0], DATASETS, OUT)
    parser.add_argument("--faithful", type=int, default=30, help="unseen images scored")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.reference < 2 or args.unseen < 2 or args.faithful < 1:
        parser.error("--seeds, --faithful must be >= 1 and --reference, --unseen >= 2")
    return args


class Seed:
    """What one seed's methods share: the draw, the default layer's features, Grad-CAM."""

    def __init__(self, drawn: Setup, seed: int) -> None:
        self.drawn, self.seed = drawn, seed
        self.reference, self.unseen = drawn.reference.inputs(), drawn.unseen.inputs()
        self.concepts = drawn.unseen.concepts
        self.classes = drawn.predictions["unseen"]
        self.reference_classes = drawn.predictions["reference"]
        self.k = matched_k(drawn.reference.concepts, drawn.labels("reference"))
        self.fits: dict[str, RepresentativeInterpreter] = {}
        ri = self.ri("RI", drawn.target_layer)
        self.reference_features = ri.features(self.reference).cpu()
        self.features = ri.features(self.unseen).cpu()
        head = ri.split.head
        self.reference_relevance = channel_relevance(head, self.reference_features).cpu()
        self.relevance = channel_relevance(head, self.features).cpu()
        self.cam = ReusableCAM("Grad-CAM", drawn.model, drawn.target_layer)
        self.cam.fit(self.reference)
        self.reference_maps = self.cam.heatmaps(self.reference, torch.arange(len(self.reference)))
        own = ReusableCAM("Grad-CAM", drawn.model, drawn.target_layer)
        own.fit(self.unseen)
        self.maps = own.heatmaps(self.unseen, torch.arange(len(self.unseen)))

    def ri(self, name: str, layer: str, **kwargs: Any) -> RepresentativeInterpreter:
        """An RI fitted on the seed's reference images (kept under ``name``)."""
        ri = RepresentativeInterpreter(
            self.drawn.model, layer, seed=self.seed, progress=False, **kwargs
        )
        ri.fit(self.reference, list(self.drawn.reference.class_names), keep_features=True)
        self.fits[name] = ri
        return ri

    def weighted_maps(self, weight_sets: list[Tensor], rows: Tensor) -> Tensor:
        """Grad-CAM maps of the unseen images ``rows``, image i's weights the mean over at most
        `WEIGHT_IMAGES` reference images of ``weight_sets[i]`` (drawn with the seed)."""
        rng = np.random.default_rng(self.seed)
        weights = torch.stack(
            [
                self.cam.weights[draw_indices(weight_sets[int(i)], WEIGHT_IMAGES, rng)].mean(0)
                for i in rows
            ]
        )
        return reused_cam(
            "Grad-CAM", self.drawn.model, self.drawn.target_layer, self.unseen[rows], weights
        )


def groupings(s: Seed) -> dict[str, Callable[[], tuple[np.ndarray, list[Tensor], float | None]]]:
    """Each method: unseen labels, each unseen image's weight images, and CVR (RI's only)."""

    by_class = {
        c: (s.reference_classes == c).nonzero().flatten()
        for c in s.reference_classes.unique().tolist()
    }

    def of_labels(grouping) -> tuple[np.ndarray, list[Tensor], None]:
        members = {
            g: torch.from_numpy(np.flatnonzero(grouping.reference == g))
            for g in np.unique(grouping.reference)
        }
        sets = [
            members.get(g, by_class.get(int(c), torch.arange(len(s.reference))))
            for g, c in zip(grouping.unseen.tolist(), s.classes.tolist(), strict=True)
        ]
        return grouping.unseen, sets, None

    def of_ri(name: str, layer: str, **kwargs: Any):
        def make() -> tuple[np.ndarray, list[Tensor], float]:
            ri = s.fits.get(name) or s.ri(name, layer, **kwargs)
            explanations = ri.explain_batch(s.unseen)
            sets = [  # a polytope covering no reference image: its class's
                e.covered.cpu() if len(e.covered) else by_class[e.predicted_class]
                for e in explanations
            ]
            return polytope_grouping(explanations), sets, cvr(ri.regions(seed=s.seed), s.unseen)

        return make

    layer, arch = s.drawn.target_layer, s.drawn.arch
    ref_c, c = s.reference_classes, s.classes
    methods = {
        "RI": of_ri("RI", layer),
        f"RI@{EARLIER[arch]}": of_ri(f"RI@{EARLIER[arch]}", EARLIER[arch]),
    }
    methods |= {
        "k-means k=m": lambda: of_labels(
            kmeans_groups(s.reference_features, ref_c, s.features, c, s.k, s.seed)
        ),
        "SpRAy": lambda: of_labels(spray_groups(s.reference_maps, ref_c, s.maps, c, None, s.seed)),
        "SpRAy k=m": lambda: of_labels(
            spray_groups(s.reference_maps, ref_c, s.maps, c, s.k, s.seed)
        ),
        "PCX": lambda: of_labels(
            pcx_groups(s.reference_relevance, ref_c, s.relevance, c, None, s.seed)
        ),
        "PCX k=m": lambda: of_labels(
            pcx_groups(s.reference_relevance, ref_c, s.relevance, c, s.k, s.seed)
        ),
    }
    return methods


def faithfulness(s: Seed, maps: Tensor, rows: Tensor) -> dict[str, Tensor]:
    """Per-image mAD (as AD, %), ROAD and deletion of ``maps`` of the unseen images ``rows``."""
    scored = score(
        s.drawn, s.drawn.unseen_pixels[rows], maps, ("AD", "ROAD", "deletion"), seed=s.seed
    )
    return {
        "mAD": 100 * scored.drop,
        "ROAD": scored.curves["ROAD"],
        "deletion": scored.curves["deletion"],
    }


def measure(drawn: Setup, seed: int, n_faithful: int) -> dict[str, dict[str, Any]]:
    """Every method's row of one seed (with the per-image faithfulness, for the intervals)."""
    s = Seed(drawn, seed)
    rows = torch.arange(min(n_faithful, len(s.unseen)))
    classes = s.classes.numpy()
    ceiling = ami_ceiling(s.features, s.concepts, classes, seed)
    by_class = {
        c: (s.reference_classes == c).nonzero().flatten()
        for c in s.reference_classes.unique().tolist()
    }
    near = nearest_rows(s.features[rows], s.reference_features, WEIGHT_IMAGES)[0]
    out: dict[str, dict[str, Any]] = {}
    controls = {
        "class control": [by_class[int(c)] for c in s.classes[rows]],
        "cluster control": list(near),
    }
    for name, weight_sets in controls.items():
        start = time.perf_counter()
        maps = s.weighted_maps(weight_sets, torch.arange(len(rows)))
        out[name] = {"per_image": faithfulness(s, maps, rows)}
        out[name]["seconds"] = time.perf_counter() - start
    for name, make in groupings(s).items():
        start = time.perf_counter()
        labels, weight_sets, coverage = make()
        null_mean, null_p95 = ami_null(labels.tolist(), s.concepts, classes, seed=seed)
        row = {
            "groups": float(len(np.unique(labels))),
            "groups_per_class": groups_per_class(labels, classes),
            "subconcepts_per_class": float(np.mean(list(s.k.values()))),
            "ami": ami(labels.tolist(), s.concepts, classes),
            "ami_null": null_mean,
            "ami_null_p95": null_p95,
            "ami_ceiling": ceiling,
        }
        row["ami_excess"] = row["ami"] - row["ami_null_p95"]
        if coverage is not None:
            row["CVR"] = coverage
        maps = s.weighted_maps(weight_sets, rows)
        row["per_image"] = faithfulness(s, maps, rows)
        row["seconds"] = time.perf_counter() - start
        out[name] = row
    for row in out.values():
        row |= {key: float(np.nanmean(v.numpy())) for key, v in row["per_image"].items()}
    return out


def compared(seeds: list[dict[str, dict[str, Any]]], method: str) -> dict[str, Any]:
    """``method`` minus each control, per metric: the per-seed means, the paired bootstrap
    interval over images and seeds, and whether it is a win (in the better direction)."""
    out = {}
    for control in CONTROLS:
        for metric, higher in METRICS.items():
            units = [
                (run[method]["per_image"][metric] - run[control]["per_image"][metric]).numpy()
                for run in seeds
            ]
            means = [float(np.nanmean(u)) for u in units]
            interval = bootstrap_interval(units)
            better = is_win(means, interval) and bool(np.mean(means) > 0) == higher
            out[f"{metric} vs {control}"] = {
                "per_seed": means,
                "interval": list(interval),
                "win": better,
                "at_least_as_faithful": bool((interval[1] >= 0) if higher else (interval[0] <= 0)),
            }
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every data set and seed (the results.json object, less the provenance)."""
    started = time.perf_counter()
    out: dict[str, Any] = {
        "size": {
            "seeds": args.seeds,
            "reference": args.reference,
            "unseen": args.unseen,
            "faithful": args.faithful,
            "epochs_override": args.epochs,
        },
        "datasets": {},
    }
    for dataset in args.datasets.split(","):
        setup = runner.setup_of(dataset, args)
        swept = runner.sweep(
            [dataset],
            range(args.seeds),
            lambda _, seed, setup=setup: measure(
                runner.draw(setup, seed, args), seed, args.faithful
            ),
        )
        seeds = swept[dataset]["seeds"]
        methods = {}
        for method in seeds[0]:
            rows = [{k: v for k, v in run[method].items() if k != "per_image"} for run in seeds]
            methods[method] = {"seeds": rows, "mean_std": summary(rows)}
            if method not in CONTROLS:
                methods[method]["above_null_every_seed"] = all(r["ami_excess"] > 0 for r in rows)
                methods[method]["against_controls"] = compared(seeds, method)
        out["datasets"][dataset] = {
            "target_layer": setup.target_layer,
            "models": [
                {
                    "seed": m.seed,
                    "weights_sha256": m.sha256,
                    "held_out_accuracy": m.card["held_out_accuracy"],
                }
                for m in setup.models
            ],
            "methods": methods,
        }
    out["seconds"] = time.perf_counter() - started
    return out


def markdown(results: dict[str, Any]) -> str:
    """results.md: per data set, the groups table and the faithfulness table."""
    size = results["size"]
    lines = [
        "# Groupings below the class: RI and the alternatives",
        "",
        f"Made by `{results['command']}` in {results['seconds'] / 60:.1f} min "
        f"({results['machine']}). Mean ± sample std over {size['seeds']} model seeds (each its "
        f"own model, draw of {size['reference']} reference and {size['unseen']} unseen images, "
        f"and Q); faithfulness on the first {size['faithful']} unseen images of each draw. "
        "k=m: matched group count (the sub-concepts of each class). See the docstring of "
        "`studies/subclass.py`.",
    ]
    for dataset, data in results["datasets"].items():
        lines += [
            "",
            f"## `{dataset}` (layer {data['target_layer']})",
            "",
            "Weights SHA-256: "
            + ", ".join(f"`{m['weights_sha256'][:12]}`" for m in data["models"])
            + "; held-out accuracy "
            + ", ".join(f"{m['held_out_accuracy']:.1f}" for m in data["models"])
            + " %.",
            "",
            "| method | groups per class (sub-concepts) | AMI | null p95 | above p95 every seed | "
            "k-means | CVR (%) | mAD | ROAD | deletion |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for method, m in data["methods"].items():
            s = m["mean_std"]
            above = "" if method in CONTROLS else ("yes" if m["above_null_every_seed"] else "no")
            lines.append(
                f"| {method} | {cell(s, 'groups_per_class')} ({s['subconcepts_per_class'][0]:g}) | "
                f"{cell(s, 'ami', 3)} | {cell(s, 'ami_null_p95', 3)} | {above} | "
                f"{cell(s, 'ami_ceiling', 3)} | {cell(s, 'CVR')} | {cell(s, 'mAD')} | "
                f"{cell(s, 'ROAD')} | {cell(s, 'deletion')} |"
                if "ami" in s
                else f"| {method} | | | | | | | {cell(s, 'mAD')} | {cell(s, 'ROAD')} | "
                f"{cell(s, 'deletion')} |"
            )
        lines += [
            "",
            "Against the controls (method minus control: per-seed means, 95 % paired bootstrap "
            "interval; win: same sign on every seed, interval excluding 0, in the better "
            "direction; at least as faithful: the interval reaches the better side or 0):",
            "",
            "| method | " + " | ".join(f"{k} vs {c}" for c in CONTROLS for k in METRICS) + " |",
            "|---|" + "---|" * (len(CONTROLS) * len(METRICS)),
        ]
        for method, m in data["methods"].items():
            if method in CONTROLS:
                continue
            cells = []
            for c in m["against_controls"].values():
                low, high = c["interval"]
                mark = "win" if c["win"] else ("≥" if c["at_least_as_faithful"] else "worse")
                cells.append(f"{np.mean(c['per_seed']):+.2f} [{low:+.2f}, {high:+.2f}] {mark}")
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the study and publish ``results.json`` and ``results.md`` in ``--out``."""
    return runner.main(
        "studies.subclass",
        arguments,
        run,
        runner.tables(markdown),
        argv,
    )


if __name__ == "__main__":
    main()
