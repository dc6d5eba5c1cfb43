"""What RI finds on the VGG-11-BN of ``shapes:64`` (the 3 models of ``studies.vgg_seeds``):
every unseen image explained by its own P(x) and grouped by polytope, as ``studies.groups_sweep``
measures the bundled CNNs (its `measure`: 750 reference / 500 unseen images drawn with seed 0
from the 1,000 stratified reference and 1,000 unseen images the VGG's protocols used; |Q| =
50, uniform), at the last conv ReLU (``features.27``, 512 x 4 x 4) and two earlier ones
(``features.20``, 512 x 8 x 8; ``features.13``, 256 x 16 x 16).

The weights are not in the repository (515 MB each): ``--weights-dir`` names the folder of
``seed-K/vgg11_bn-shapes-64.safetensors`` (``benchmarks/gpu_vgg_shapes.py`` with ``SEED=K``
writes them; their SHA-256 are checked against ``shapes64-vgg11bn-seeds/seed-K/summary.json``).

Run: ``OMP_NUM_THREADS=1 PYTHONPATH=src python -m studies.vgg_groups --weights-dir /tmp/vggw``
(about 15 minutes on one core). Writes ``groups.json`` and ``groups.md`` into ``--out``
(default ``docs/results/shapes64-vgg11bn-seeds``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from repinterp.data.datasets import ImageSet, load_dataset
from repinterp.evaluation.protocols import mean_std
from repinterp.evaluation.setup import Setup, stratified
from repinterp.models.zoo import build_model, load_weights
from repinterp.runtime.checksums import file_sha256

from . import runner
from .groups_sweep import Point, measure

FOLDER = runner.RESULTS / "shapes64-vgg11bn-seeds"
LAYERS = ("features.27", "features.20", "features.13")
COLUMNS = (
    ("distinct_polytopes", "distinct P(x)", 0),
    ("effective_groups", "effective groups", 1),
    ("largest_group_share", "largest group's share of a class (%)", 1),
    ("singletons", "singletons", 0),
    ("subconcept_purity", "purity: groups", 1),
    ("subconcept_purity_class", "one group per class", 1),
    ("subconcept_purity_shuffled", "chance", 1),
    ("CVR", "CVR (%)", 1),
    ("accuracy", "accuracy (%)", 1),
)


def weights_of(seed: int, weights_dir: Path, runs: Path) -> Path:
    """The weights file of model seed ``seed``, its SHA-256 checked against the run's.

    Raises:
        SystemExit: the file is not the weights ``runs/seed-K/summary.json`` names.
    """
    summary = json.loads((runs / f"seed-{seed}" / "summary.json").read_text())
    path = weights_dir / f"seed-{seed}" / "vgg11_bn-shapes-64.safetensors"
    if file_sha256(path) != summary["training"]["weights_sha256"]:
        raise SystemExit(f"vgg_groups: error: {path} is not the weights of seed {seed}")
    return path


def row_of(
    model: torch.nn.Module, layer: str, reference: ImageSet, unseen: ImageSet
) -> dict[str, Any]:
    """`groups_sweep.measure`'s row of one model at one layer (seed 0, its default point)."""
    setup = Setup(
        dataset="shapes:64",
        model=model.eval(),
        target_layer=layer,
        reference=reference,
        unseen=unseen,
        device=torch.device("cpu"),
        arch="vgg11_bn",
    )
    row = measure(setup, Point(layer), seed=0, full_kmeans=False)
    del row["keys"], row["delta_each"]
    return row


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The weights, the runs and where the tables go."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights-dir", type=Path, required=True, help="seed-K/*.safetensors")
    parser.add_argument("--runs", type=Path, default=FOLDER, help="the seed-*/ folders' parent")
    parser.add_argument("--layers", default=",".join(LAYERS), help="comma-separated")
    parser.add_argument("--out", type=Path, default=FOLDER)
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every model at every layer: ``{"rows": [...]}`` (``model_seed``, ``layer``, the row)."""
    split = load_dataset("shapes:64", seed=0)
    reference = split.reference.subset(range(2400))
    reference = reference.subset(stratified(reference.labels, 1000, seed=0))
    seeds = sorted(int(p.parent.name.split("-")[1]) for p in args.runs.glob("seed-*/summary.json"))
    models: dict[int, torch.nn.Module] = {}

    def model_of(seed: int) -> torch.nn.Module:
        if seed not in models:
            models[seed] = build_model("vgg11_bn", num_classes=3, seed=0)
            load_weights(models[seed], weights_of(seed, args.weights_dir, args.runs))
        return models[seed]

    swept = runner.sweep(
        args.layers.split(","),
        seeds,
        lambda layer, seed: (
            {"model_seed": seed, "layer": layer}
            | row_of(model_of(seed), layer, reference, split.unseen)
        ),
    )
    return {"rows": [row for block in swept.values() for row in block["seeds"]]}


def markdown(rows: list[dict[str, Any]]) -> str:
    """groups.md: one row per layer, mean ± sample std over the models."""
    lines = [
        "# What RI finds on VGG-11-BN, `shapes:64`",
        "",
        "Made by `python -m studies.vgg_groups`. Each unseen image explained by its own P(x); "
        "purity: the sub-concept purity of the groups / of one group per class / of the same "
        "groups with the labels shuffled within each class (chance); CVR: of 30 k-means "
        f"regions (64 principal components). Mean ± sample std over the "
        f"{len({r['model_seed'] for r in rows})} models.",
        "",
        "| layer | feature map | " + " | ".join(label for _, label, _ in COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for layer in dict.fromkeys(r["layer"] for r in rows):
        at = [r for r in rows if r["layer"] == layer]
        shape = "x".join(map(str, at[0]["feature_shape"]))
        cells = []
        for key, _, digits in COLUMNS:
            values = [r[key] for r in at if r.get(key) is not None]
            cells.append(mean_std(float(np.mean(values)), np.std(values, ddof=1), digits))
        lines.append(f"| {layer} | {shape} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def files(results: dict[str, Any]) -> dict[str, str]:
    """groups.json (the rows) and groups.md."""
    rows = results["rows"]
    return {"groups.json": json.dumps(rows, indent=1) + "\n", "groups.md": markdown(rows)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure every model at every layer and publish groups.json and groups.md."""
    return runner.main("studies.vgg_groups", arguments, run, files, argv)


if __name__ == "__main__":
    main()
