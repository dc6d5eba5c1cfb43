"""When does RI find sub-class groups? The law, measured: the class regions' convexity against
the groups RI finds and how much they follow the known sub-concepts.

For each data set with sub-concepts (`mnist-super`; `shapes`, which is `shapes-mix:0` bit for
bit, and the `shapes-mix:P` dose-response), each model seed (a model trained by the data set's
recipe, `repinterp.evaluation.setup.RECIPES`, through the model cache; each seed also draws its
own stratified reference and unseen images and samples its own Q), each target layer and each
|Q|, the paper's RI (``granularity="class"``) is fitted on the reference images and explains the
unseen images; then:

- convexity with respect to Q (`repinterp.core.convexity.q_convexity`): the share of a class's
  reference images on their class's side of every boundary of Q between it and another class
  (``same_side``), and in the largest cell of all of Q (``largest_cell``);
- Euclidean convexity in the layer's feature space (`segment_convexity`, Tětková et al. 2025):
  of segments between two reference images of a class, the share of points the head gives the
  class; and graph convexity (`graph_convexity`, ibid.): of shortest paths between two of them
  in the 10-nearest-neighbour graph of the reference images, the share of the images on the way
  predicted the class (neither depends on Q);
- the groups (`repinterp.core.groups.polytope_groups`): distinct polytopes, effective groups,
  merged groups, within-class ``ami`` with sub-concepts, its null (shuffled within each class:
  mean, 95th percentile) and the k-means reference point ``ami_ceiling``.

The plot (``law.png``): x = each convexity, y = ``ami`` minus its null's 95th percentile (above 0:
groups that follow the sub-concepts more than groups of the same sizes do by chance), one
marker per data set, one colour per layer, one point per |Q| (mean over the seeds, bars: the
seeds' std).

Run (the full size: about 25 minutes on one core once the models are cached, about a minute a
seed and data set; a missing model trains first, about 2 minutes each for `shapes_cnn`)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python docs/results/law.py --seeds 5

``--seeds 1 --reference 300 --unseen 100 --q 10 --datasets mnist-super`` is a smoke test of a
minute; ``--render`` recomputes the correlations, results.md and law.png from a saved
``OUT/results.json`` without a run. Writes ``OUT/results.json`` (every point and seed, each
model's weights SHA-256 and held-out accuracy, the command, the times), ``OUT/results.md`` and
``OUT/law.png`` (``--out``, default ``docs/results/law``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from groups_sweep import cell, summary
from repinterp.core.convexity import graph_convexity, q_convexity, segment_convexity

from repinterp.core.groups import polytope_groups
from repinterp.evaluation.setup import Setup, load_setup, recipe_for
from repinterp.evaluation.subclass import groups_per_class, polytope_grouping
from repinterp.interpreter import RepresentativeInterpreter
from repinterp.store.model_cache import default_cache

OUT = Path(__file__).resolve().parent / "law"
DATASETS = ("mnist-super", "shapes", "shapes-mix:0.5", "shapes-mix:1")
LAYERS = {
    "mnist_super_cnn": ("features.1", "features.4", "features.7"),
    "shapes_cnn": ("features.4", "features.7", "features.10"),
}
MARKERS = "osD^v<>"


def size_parser(description: str, datasets: list[str], out: Path) -> argparse.ArgumentParser:
    """The options a run over model seeds shares (here and in ``subclass.py``): seeds, data
    sets, draw sizes, the model cache, the epochs and the output folder."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", type=int, default=5, help="model seeds 0..N-1 (5)")
    parser.add_argument("--datasets", default=",".join(datasets), help="comma-separated")
    parser.add_argument("--reference", type=int, default=1000, help="reference images a seed")
    parser.add_argument("--unseen", type=int, default=300, help="unseen images a seed")
    parser.add_argument(
        "--model-cache", type=Path, default=default_cache(), help="(~/.cache/repinterp/models)"
    )
    parser.add_argument("--epochs", type=int, default=None, help="override (smoke tests only)")
    parser.add_argument("--out", type=Path, default=out)
    return parser


def provenance() -> dict[str, str]:
    """The command that made a run and the machine it ran on (here and in ``subclass.py``)."""
    return {
        "command": "OMP_NUM_THREADS=1 PYTHONPATH=src python " + " ".join(sys.argv),
        "machine": f"{platform.platform()}, torch {torch.__version__}, 1 thread",
    }


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's size and where it writes."""
    parser = size_parser(__doc__.split("\n\n")[0], list(DATASETS), OUT)
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


def setup_of(dataset: str, args: argparse.Namespace) -> Setup:
    """The data set and its ``--seeds`` models (trained through the cache when missing)."""
    recipe = recipe_for(dataset)
    if args.epochs is not None:
        recipe = dataclasses.replace(recipe, epochs=args.epochs)
    return load_setup(
        dataset, n_unseen=None, model_seeds=args.seeds, model_cache=args.model_cache, recipe=recipe
    )


def draw(setup: Setup, seed: int, args: argparse.Namespace) -> Setup:
    """Seed ``seed``'s model and its own stratified draw of ``--reference`` / ``--unseen``."""
    run = setup.for_run(seed)
    shares = (args.reference / len(run.reference), args.unseen / len(run.unseen))
    return run.draw(seed, (min(1.0, shares[0]), min(1.0, shares[1])))


def measure(drawn: Setup, layer: str, qs: list[int], seed: int, pairs: int) -> list[dict]:
    """One seed at one layer: the segment convexity once, then each |Q|'s row."""
    reference, unseen = drawn.reference.inputs(), drawn.unseen.inputs()
    rows = []
    for q in qs:
        start = time.perf_counter()
        ri = RepresentativeInterpreter(
            drawn.model, layer, n_boundaries=q, seed=seed, progress=False
        )
        ri.fit(reference, list(drawn.reference.class_names))
        if not rows:
            features, predicted = ri.features(reference), ri.fitted_index.predictions
            segment = segment_convexity(ri.split.head, features, predicted, pairs, 5, seed)
            graph = graph_convexity(features, predicted, 10, pairs, seed)
        explanations = ri.explain_batch(unseen)
        features = ri.features(unseen).flatten(1).cpu()
        logits = ri.forward(unseen)[0].cpu()
        labels = drawn.labels("unseen")
        index = ri.fitted_index
        row = {"seed": seed, "layer": layer, "n_boundaries": q, "segment_convexity": segment}
        row["graph_convexity"] = graph
        row |= q_convexity(index.boundaries.top_classes, index.sides, index.predictions)
        stats = polytope_groups(explanations, drawn.unseen.concepts, features, logits, labels, seed)
        row |= stats.to_dict()
        row["ami_excess"] = row["ami"] - row["ami_null_p95"]
        classes = [e.predicted_class for e in explanations]
        row["groups_per_class"] = groups_per_class(polytope_grouping(explanations), classes)
        row["seconds"] = time.perf_counter() - start
        rows.append(row)
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every data set, seed, layer and |Q| (the results.json object)."""
    torch.set_num_threads(1)
    started = time.perf_counter()
    qs = [int(q) for q in args.q.split(",")]
    out: dict[str, Any] = {
        **provenance(),
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
        setup = setup_of(dataset, args)
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
        rows: dict[tuple[str, int], list[dict]] = {}
        for seed in range(args.seeds):
            drawn = draw(setup, seed, args)
            for layer in layers:
                for row in measure(drawn, layer, qs, seed, args.pairs):
                    rows.setdefault((layer, row["n_boundaries"]), []).append(row)
                print(f"{dataset} seed {seed} {layer}: done", flush=True)
        for (layer, q), seeds in rows.items():
            out["points"][f"{dataset} {layer} |Q|={q}"] = {
                "dataset": dataset,
                "layer": layer,
                "n_boundaries": q,
                "seeds": seeds,
                "mean_std": summary(seeds),
                "above_null_every_seed": all(r["ami_excess"] > 0 for r in seeds),
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


def plot(results: dict[str, Any], path: Path) -> None:
    """law.png: ``ami`` minus its null's 95th percentile against the two convexities."""
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
    fig.savefig(path, dpi=120)
    plt.close(fig)


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
        '(`granularity="class"`). See the docstring of `docs/results/law.py` for each measure.',
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


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    if args.render:
        results = json.loads((args.out / "results.json").read_text())
    else:
        results = run(args)
    results["correlations"] = correlations(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "results.md").write_text(markdown(results))
    plot(results, args.out / "law.png")
    print(markdown(results))


if __name__ == "__main__":
    main()
