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
its class's other strategies (``others``). Row 5 of the criterion in docs/results.md
("Strategies and shortcuts: the criterion") reads ``mnist-super``'s.

Run (about a minute a seed once the models are cached)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python -m studies.strategies --seeds 5

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
from repinterp.strategies.model import polytope_fidelity

from . import runner

DATASETS = ("mnist-super", "shapes")
OUT = runner.RESULTS / "strategies"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's size and where it writes."""
    parser = runner.size_parser(__doc__.split("\n\n")[0], DATASETS, OUT)
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.reference < 2 or args.unseen < 2:
        parser.error("--seeds must be >= 1 and --reference, --unseen >= 2")
    return args


def measure(dataset: str, seed: int, args: argparse.Namespace, setups: dict) -> dict[str, Any]:
    """One seed's row (see the module's docstring)."""
    drawn = runner.draw(setups[dataset], seed, args)
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
    concepts = drawn.unseen.concepts
    groups = [(int(c), int(s)) for c, s in zip(classes, assigned, strict=True)]
    null, p95 = ami_null(groups, concepts, classes, seed=seed)
    inside, others = polytope_fidelity(ri.strategies(), unseen, assigned, classes)
    k = ri.index.granularity.strategies.k
    return {
        "strategies_per_class": float(np.mean(list(k.values()))),
        "ami": ami(groups, concepts, classes),
        "ami_null": null,
        "ami_null_p95": p95,
        "ami_ceiling": ami_ceiling(features.flatten(1).cpu(), concepts, classes, seed),
        "inside": 100 * inside,
        "others": 100 * others,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    datasets = args.datasets.split(",")
    setups = {dataset: runner.setup_of(dataset, args) for dataset in datasets}
    blocks = runner.sweep(
        datasets, range(args.seeds), lambda d, seed: measure(d, seed, args, setups)
    )
    return {"seeds": args.seeds, "reference": args.reference, "unseen": args.unseen} | {
        "datasets": blocks
    }


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Strategies against the known sub-classes",
        "",
        f"`{results['command']}` ({results['machine']}); {results['seeds']} model seeds, "
        f"{results['reference']} reference / {results['unseen']} unseen images a seed; mean ± "
        "std over the seeds. AMI: within-class, of the unseen images' strategies with the "
        "sub-concepts; null p95: with the sub-concepts shuffled within each class; k-means: "
        "k = the sub-concepts, same feature maps. inside / others: % of the unseen images of a "
        "strategy / of its class's other strategies inside its polytope.",
        "",
        "| data set | strategies per class | AMI | AMI null p95 | k-means AMI | AMI per seed | "
        "inside (%) | others (%) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for dataset, block in results["datasets"].items():
        stats = block["mean_std"]
        per_seed = ", ".join(f"{row['ami']:.3f}" for row in block["seeds"])
        lines.append(
            f"| `{dataset}` | {runner.cell(stats, 'strategies_per_class')} | "
            f"{runner.cell(stats, 'ami', 3)} | {runner.cell(stats, 'ami_null_p95', 3)} | "
            f"{runner.cell(stats, 'ami_ceiling', 3)} | {per_seed} | "
            f"{runner.cell(stats, 'inside')} | {runner.cell(stats, 'others')} |"
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
