"""Do the strategies of ``granularity="strategy"`` follow the known sub-classes, and do their
polytopes follow the strategies?

On the data sets with known sub-concepts (`mnist-super`: two digits per superclass; `shapes`:
shapes per class), over the model seeds (a model trained by the data set's recipe through the
model cache, its own stratified draw per seed), ``RI+strategy`` is fitted on the reference
images (its strategies found without labels) and each unseen image is put in a strategy (the
nearest centre of its predicted class). Per seed: the strategies per class, the within-class
AMI of the unseen images' strategies with the sub-concepts against its shuffle null's 95th
percentile and the k-means reference point (`repinterp.evaluation.groupings`: k-means with k =
the sub-concepts on the same feature maps), and how the polytopes follow the strategies: the
share of the unseen images of a strategy inside its polytope (``inside``) and of the images of
its class's other strategies (``others``); and, since the strategies are k-means with a
label-free rule for k, the AMI of label-free groupings on the same feature maps beside them:
k-means at the rule's k, k-means with k by the gap statistic, a Domino-like mixture
(`repinterp.evaluation.subclass`). Row 5 of the criterion in docs/results.md
("Strategies and shortcuts: the criterion") reads ``mnist-super``'s.

Run (about a minute a seed once the models are cached)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python -m studies.strategies --seeds 5

``--first-seed 100`` takes the model seeds 100, 101, ... instead (off the evaluation's 0 .. 4).

Writes ``OUT/results.json`` and ``OUT/results.md`` (``--out``, default
``docs/results/strategies``).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import torch

from repinterp import RepresentativeInterpreter
from repinterp.evaluation.groupings import ami, ami_ceiling, ami_null
from repinterp.evaluation.subclass import domino_groups, gap_groups, kmeans_groups
from repinterp.strategies.model import polytope_fidelity

from . import runner

DATASETS = ("mnist-super", "shapes")
OUT = runner.RESULTS / "strategies"
AMI_FIELDS = (
    "ami",
    "ami_null",
    "ami_null_p95",
    "ami_ceiling",
    "ami_kmeans_rule_k",
    "ami_gap",
    "ami_domino",
)
"""The row's fields that need the sub-concepts (NaN on a data set without them)."""


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's size and where it writes."""
    parser = runner.size_parser(__doc__.split("\n\n")[0], DATASETS, OUT)
    parser.add_argument("--first-seed", type=int, default=0, help="the first model seed (0)")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.reference < 2 or args.unseen < 2:
        parser.error("--seeds must be >= 1 and --reference, --unseen >= 2")
    return args


def measure(dataset: str, seed: int, args: argparse.Namespace, setups: dict) -> dict[str, Any]:
    """One seed's row (see the module's docstring)."""
    drawn = runner.draw(setups[dataset], seed, args, args.first_seed)
    reference, unseen = drawn.reference.inputs(), drawn.unseen.inputs()
    ri = RepresentativeInterpreter(
        drawn.model, drawn.target_layer, seed=seed, progress=False, granularity="strategy"
    )
    ri.fit(reference, list(drawn.reference.class_names))
    features = ri.features(unseen)
    with torch.inference_mode():
        logits = ri.split.head(features)
    assigned = ri.index.granularity.columns(ri.split.head, features, logits)["strategy"].cpu()
    classes = drawn.predictions["unseen"]
    inside, others = polytope_fidelity(ri.strategies(), unseen, assigned, classes)
    k = ri.index.granularity.strategies.k
    row = {
        "strategies_per_class": float(np.mean(list(k.values()))),
        "inside": 100 * inside,
        "others": 100 * others,
    }
    concepts = drawn.unseen.concepts
    if concepts is None:  # a data set without sub-concepts (a clean model): the polytopes only
        return row | dict.fromkeys(AMI_FIELDS, float("nan"))
    groups = [(int(c), int(s)) for c, s in zip(classes, assigned, strict=True)]
    null, p95 = ami_null(groups, concepts, classes, seed=seed)
    row |= {
        "ami": ami(groups, concepts, classes),
        "ami_null": null,
        "ami_null_p95": p95,
        "ami_ceiling": ami_ceiling(features.flatten(1).cpu(), concepts, classes, seed),
    }
    reference_features = ri.features(reference).flatten(1).cpu()
    grouped = (reference_features, ri.index.predictions.cpu(), features.flatten(1).cpu())
    baselines = {
        "ami_kmeans_rule_k": kmeans_groups(*grouped, classes, k, seed),
        "ami_gap": gap_groups(*grouped, classes, seed=seed),
        "ami_domino": domino_groups(*grouped, classes, seed=seed),
    }
    for name, grouping in baselines.items():
        row[name] = ami(grouping.unseen.tolist(), concepts, classes)
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    datasets = args.datasets.split(",")
    setups = {dataset: runner.setup_of(dataset, args, args.first_seed) for dataset in datasets}
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    blocks = runner.sweep(datasets, seeds, lambda d, seed: measure(d, seed, args, setups))
    return {
        "seeds": args.seeds,
        "first_seed": args.first_seed,
        "reference": args.reference,
        "unseen": args.unseen,
    } | {"datasets": blocks}


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Strategies against the known sub-classes",
        "",
        f"`{results['command']}` ({results['machine']}); {results['seeds']} model seeds from "
        f"{results.get('first_seed', 0)}, "
        f"{results['reference']} reference / {results['unseen']} unseen images a seed; mean ± "
        "std over the seeds. AMI: within-class, of the unseen images' strategies with the "
        "sub-concepts; null p95: with the sub-concepts shuffled within each class; k-means: "
        "k = the sub-concepts, same feature maps. inside / others: % of the unseen images of a "
        "strategy / of its class's other strategies inside its polytope. The strategies are "
        "k-means with a label-free rule for k; beside them, on the same feature maps and "
        "without labels: k-means at the rule's k, k-means with k by the gap statistic, and a "
        "Domino-like mixture (k by BIC), each at most 8 groups a class.",
        "",
        "| data set | strategies per class | AMI | AMI null p95 | k-means AMI | AMI per seed | "
        "inside (%) | others (%) | k-means at the rule's k | gap statistic | Domino-like |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset, block in results["datasets"].items():
        stats = block["mean_std"]
        amis = [row["ami"] for row in block["seeds"]]
        per_seed = "n/a" if np.isnan(amis).all() else ", ".join(f"{a:.3f}" for a in amis)
        lines.append(
            f"| `{dataset}` | {runner.cell(stats, 'strategies_per_class')} | "
            f"{runner.cell(stats, 'ami', 3)} | {runner.cell(stats, 'ami_null_p95', 3)} | "
            f"{runner.cell(stats, 'ami_ceiling', 3)} | {per_seed} | "
            f"{runner.cell(stats, 'inside')} | {runner.cell(stats, 'others')} | "
            f"{runner.cell(stats, 'ami_kmeans_rule_k', 3)} | {runner.cell(stats, 'ami_gap', 3)} | "
            f"{runner.cell(stats, 'ami_domino', 3)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return runner.main(
        "studies.strategies",
        arguments,
        run,
        runner.tables(markdown),
        argv,
    )


if __name__ == "__main__":
    main()
