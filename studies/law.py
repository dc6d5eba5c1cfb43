"""When does RI find sub-class groups? The law, measured: the class regions' convexity against
the groups RI finds and how much they follow the known sub-concepts.

For each data set with sub-concepts (`mnist-super`; `shapes`, which is `shapes-mix:0` bit for
bit, and the `shapes-mix:P` dose-response), each model seed (a model trained by the data set's
recipe, `repinterp.evaluation.setup.RECIPES`, through the model cache; each seed also draws its
own stratified reference and unseen images and samples its own Q), each target layer and each
|Q|, the paper's RI (``granularity="class"``) is fitted on the reference images and explains the
unseen images; then:

- convexity with respect to Q (`repinterp.evaluation.convexity.q_convexity`): the share of a class's
  reference images on their class's side of every boundary of Q between it and another class
  (``same_side``), and in the largest cell of all of Q (``largest_cell``);
- Euclidean convexity in the layer's feature space (`segment_convexity`, Tětková et al. 2025):
  of segments between two reference images of a class, the share of points the head gives the
  class; and graph convexity (`graph_convexity`, ibid.): of shortest paths between two of them
  in the 10-nearest-neighbour graph of the reference images, the share of the images on the way
  predicted the class (neither depends on Q);
- the groups (`repinterp.evaluation.groupings.polytope_groups`): distinct polytopes, effective
  groups, merged groups, within-class ``ami`` with sub-concepts, its null (shuffled within each
  class: mean, 95th percentile) and the k-means reference point ``ami_ceiling``.

The plot (``law.png``): x = each convexity, y = ``ami`` minus its null's 95th percentile (above 0:
groups that follow the sub-concepts more than groups of the same sizes do by chance), one
marker per data set, one colour per layer, one point per |Q| (mean over the seeds, bars: the
seeds' std).

Run (the full size: about 25 minutes on one core once the models are cached, about a minute a
seed and data set; a missing model trains first, about 2 minutes each for `shapes_cnn`)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python -m studies.law --seeds 5

``--seeds 1 --reference 300 --unseen 100 --q 10 --datasets mnist-super`` is a smoke test of a
minute; ``--render`` recomputes the correlations, results.md and law.png from a saved
``OUT/results.json`` without a run. Writes ``OUT/results.json`` (every point and seed, each
model's weights SHA-256 and held-out accuracy, the command, the times), ``OUT/results.md`` and
``OUT/law.png`` (``--out``, default ``docs/results/law``).
"""

from __future__ import annotations

import argparse
import io
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from repinterp.evaluation.convexity import graph_convexity, q_convexity, segment_convexity
from repinterp.evaluation.groupings import polytope_groups
from repinterp.evaluation.setup import Setup
from repinterp.evaluation.subclass import groups_per_class, polytope_grouping
from repinterp.interpreter import RepresentativeInterpreter

from . import runner
from .runner import cell

OUT = runner.RESULTS / "law"
DATASETS = ("mnist-super", "shapes", "shapes-mix:0.5", "shapes-mix:1")
LAYERS = {
    "mnist_super_cnn": ("features.1", "features.4", "features.7"),
    "shapes_cnn": ("features.4", "features.7", "features.10"),
}
MARKERS = "osD^v<>"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's size and where it writes."""
    parser = runner.size_parser(__doc__.split("\n\n")[0], DATASETS, OUT)
    parser.add_argument("--layers", default=None, help="comma-separated (default: per model)")
    parser.add_argument("--q", default="10,50,200", help="|Q| values, comma-separated")
    parser.add_argument("--pairs", type=int, default=100, help="segments per class")
    parser.add_argument(
        "--render",
        action="store_true",
        help="no run: recompute the correlations, results.md and law.png from OUT/results.json",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.reference < 2 or args.unseen < 2 or args.pairs < 1:
        parser.error("--seeds, --pairs must be >= 1 and --reference, --unseen >= 2")
    return args


def measurer(setup: Setup, args: argparse.Namespace) -> Callable[[tuple[str, int], int], dict]:
    """The row of one (layer, |Q|) and seed: each seed's draw is made once (`runner.draw`), the
    convexities in feature space once per seed and layer (they do not depend on Q)."""
    draws: dict[int, Setup] = {}
    convexities: dict[tuple[int, str], tuple[float, float]] = {}

    def measure(setting: tuple[str, int], seed: int) -> dict[str, Any]:
        layer, q = setting
        start = time.perf_counter()
        if seed not in draws:
            draws[seed] = runner.draw(setup, seed, args)
        drawn = draws[seed]
        reference, unseen = drawn.reference.inputs(), drawn.unseen.inputs()
        ri = RepresentativeInterpreter(
            drawn.model, layer, n_boundaries=q, seed=seed, progress=False
        )
        ri.fit(reference, list(drawn.reference.class_names))
        if (seed, layer) not in convexities:
            features, predicted = ri.features(reference), ri.index.predictions
            convexities[seed, layer] = (
                segment_convexity(ri.split.head, features, predicted, args.pairs, 5, seed),
                graph_convexity(features, predicted, 10, args.pairs, seed),
            )
        segment, graph = convexities[seed, layer]
        explanations = ri.explain_batch(unseen)
        features = ri.features(unseen).flatten(1).cpu()
        logits = ri.logits_and_projections(unseen)[0].cpu()
        labels = drawn.labels("unseen")
        index = ri.index
        row = {"seed": seed, "layer": layer, "n_boundaries": q, "segment_convexity": segment}
        row["graph_convexity"] = graph
        row |= q_convexity(index.boundaries.top_classes, index.sides, index.predictions)
        stats = polytope_groups(explanations, drawn.unseen.concepts, features, logits, labels, seed)
        row |= stats.to_dict()
        row["ami_excess"] = row["ami"] - row["ami_null_p95"]
        classes = [e.predicted_class for e in explanations]
        row["groups_per_class"] = groups_per_class(polytope_grouping(explanations), classes)
        row["seconds"] = time.perf_counter() - start
        return row

    return measure


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every data set, seed, layer and |Q| (the results.json object, less the provenance); with
    ``--render``, the saved ``OUT/results.json``."""
    if args.render:
        return json.loads((args.out / "results.json").read_text())
    started = time.perf_counter()
    qs = [int(q) for q in args.q.split(",")]
    out: dict[str, Any] = {
        "size": {
            "seeds": args.seeds,
            "reference": args.reference,
            "unseen": args.unseen,
            "q": qs,
            "pairs_per_class": args.pairs,
            "epochs_override": args.epochs,
        },
        "models": {},
        "points": {},
    }
    for dataset in args.datasets.split(","):
        load_start = time.perf_counter()
        setup = runner.setup_of(dataset, args)
        out["models"][dataset] = {
            "recipe": setup.recipe.settings(),
            "models": [
                {
                    "seed": m.seed,
                    "weights_sha256": m.sha256,
                    "held_out_accuracy": m.card["held_out_accuracy"],
                    "train_s": m.card["train_s"],
                    "cached": m.cached,
                }
                for m in setup.models
            ],
            "load_s": time.perf_counter() - load_start,
        }
        layers = args.layers.split(",") if args.layers else LAYERS[setup.arch]
        settings = [(layer, q) for layer in layers for q in qs]
        swept = runner.sweep(
            settings,
            range(args.seeds),
            measurer(setup, args),
            lambda s, dataset=dataset: f"{dataset} {s[0]} |Q|={s[1]}",
        )
        for (layer, q), (label, block) in zip(settings, swept.items(), strict=True):
            out["points"][label] = {"dataset": dataset, "layer": layer, "n_boundaries": q}
            out["points"][label] |= block | {
                "above_null_every_seed": all(r["ami_excess"] > 0 for r in block["seeds"])
            }
    out["seconds"] = time.perf_counter() - started
    return out


def correlations(results: dict[str, Any]) -> dict[str, float]:
    """Spearman's rank correlation, over every seed's row, of ``ami_excess`` with each
    candidate predictor."""
    from scipy.stats import spearmanr

    rows = [row for point in results["points"].values() for row in point["seeds"]]
    excess = [row["ami_excess"] for row in rows]
    out = {}
    for key in (
        "same_side",
        "largest_cell",
        "segment_convexity",
        "graph_convexity",
        "effective_groups",
        "ami_ceiling",
    ):
        values = [row[key] for row in rows]
        rho = spearmanr(values, excess).statistic if len(set(values)) > 1 else float("nan")
        out[key] = float(rho)
    return out


def plot(results: dict[str, Any]) -> bytes:
    """law.png's bytes: ``ami`` minus its null's 95th percentile against the convexities."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = list(results["points"].values())
    datasets = list(dict.fromkeys(p["dataset"] for p in points))
    layers = list(dict.fromkeys(p["layer"] for p in points))
    colours = plt.get_cmap("viridis")(np.linspace(0, 0.9, max(1, len(layers))))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), sharey=True)
    xs = (
        ("same_side", "convexity w.r.t. Q: class images on their side of all (%)"),
        ("segment_convexity", "Euclidean convexity: segment points kept in class (%)"),
        ("graph_convexity", "graph convexity: shortest-path images in class (%)"),
    )
    for ax, (key, label) in zip(axes, xs, strict=True):
        for p in points:
            s = p["mean_std"]
            ax.errorbar(
                s[key][0],
                s["ami_excess"][0],
                xerr=s[key][1],
                yerr=s["ami_excess"][1],
                marker=MARKERS[datasets.index(p["dataset"]) % len(MARKERS)],
                color=colours[layers.index(p["layer"])],
                markersize=4 + np.log2(p["n_boundaries"]),
                linestyle="none",
                alpha=0.85,
                elinewidth=0.8,
            )
        ax.axhline(0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("AMI minus its null's 95th percentile")
    handles = [
        plt.Line2D(
            [], [], marker=MARKERS[i % len(MARKERS)], color="black", linestyle="none", label=d
        )
        for i, d in enumerate(datasets)
    ] + [
        plt.Line2D([], [], marker="s", color=colours[i], linestyle="none", label=layer)
        for i, layer in enumerate(layers)
    ]
    axes[-1].legend(
        handles=handles,
        fontsize=8,
        loc="best",
        title="marker: data set; colour: layer",
        title_fontsize=8,
    )
    fig.suptitle(
        f"When RI's groups follow the sub-concepts (model seeds: {results['size']['seeds']}; "
        "marker size grows with |Q|; above the dashed line: above chance)",
        fontsize=10,
    )
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=120)
    plt.close(fig)
    return png.getvalue()


def markdown(results: dict[str, Any]) -> str:
    """results.md: the models, one table per data set, and the paragraph of what predicts."""
    size = results["size"]
    rho = results["correlations"]
    points = results["points"].values()
    above = [p for p in points if p["above_null_every_seed"]]
    lines = [
        "# When RI finds sub-class groups: the law",
        "",
        f"Made by `{results['command']}` in {results['seconds'] / 60:.1f} min "
        f"({results['machine']}). Every cell is mean ± sample std over {size['seeds']} model "
        f"seeds; each seed is its own trained model, draws its own {size['reference']} "
        f"reference and {size['unseen']} unseen images and samples its own Q. The paper's RI "
        '(`granularity="class"`). See the docstring of `studies/law.py` for each measure.',
        "",
        "![law](law.png)",
        "",
        "## What predicts sub-class groups",
        "",
        f"{len(above)} of {len(results['points'])} points (data set, layer, |Q|) have `ami` "
        "above its null's 95th percentile on every seed"
        + (
            f": {', '.join(f'`{name}`' for name, p in results['points'].items() if p in above)}."
            if above
            else "."
        )
        + " Spearman's rank correlation over every seed's row of `ami` minus that percentile "
        f"with: convexity w.r.t. Q {rho['same_side']:+.2f}, the largest cell of Q "
        f"{rho['largest_cell']:+.2f}, Euclidean convexity {rho['segment_convexity']:+.2f}, "
        f"graph convexity {rho['graph_convexity']:+.2f}, "
        f"effective groups {rho['effective_groups']:+.2f}, and how well the layer's features "
        f"separate the sub-concepts (the k-means AMI, `ami_ceiling`) "
        f"{rho['ami_ceiling']:+.2f}.",
        "",
        "## Models",
        "",
    ]
    for dataset, models in results["models"].items():
        accuracy = np.array([m["held_out_accuracy"] for m in models["models"]])
        spread = float(accuracy.std(ddof=1)) if len(accuracy) > 1 else 0.0
        lines.append(
            f"- `{dataset}` ({models['recipe']['arch']}, {models['recipe']['epochs']} epochs): "
            f"held-out accuracy {accuracy.mean():.1f} ± {spread:.1f} %; "
            "weights SHA-256 "
            + ", ".join(f"`{m['weights_sha256'][:12]}`" for m in models["models"])
        )
    for dataset in results["models"]:
        lines += [
            "",
            f"## `{dataset}`",
            "",
            "| layer | \\|Q\\| | on class side of all (%) | largest cell (%) | segment convexity "
            "(%) | graph convexity (%) | distinct polytopes | effective groups | merged groups | "
            "AMI | null: mean | null: p95 | k-means | above p95 on every seed |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in points:
            if p["dataset"] != dataset:
                continue
            s = p["mean_std"]
            amis = " | ".join(
                cell(s, key, 3) for key in ("ami", "ami_null", "ami_null_p95", "ami_ceiling")
            )
            lines.append(
                f"| {p['layer']} | {p['n_boundaries']} | {cell(s, 'same_side')} | "
                f"{cell(s, 'largest_cell')} | {cell(s, 'segment_convexity')} | "
                f"{cell(s, 'graph_convexity')} | {cell(s, 'distinct_polytopes')} | "
                f"{cell(s, 'effective_groups')} | "
                f"{cell(s, 'merged_groups')} | {amis} | "
                f"{'yes' if p['above_null_every_seed'] else 'no'} |"
            )
    return "\n".join(lines) + "\n"


def files(results: dict[str, Any]) -> dict[str, str | bytes]:
    """results.json (with the correlations), results.md and law.png."""
    results["correlations"] = correlations(results)
    return runner.results_files(results, markdown(results)) | {"law.png": plot(results)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the study (or ``--render`` the saved one) and publish its files in ``--out``."""
    return runner.main("studies.law", arguments, run, files, argv)


if __name__ == "__main__":
    main()
