"""What RI finds on the VGG-11-BN of ``shapes:64`` (the 3 models of ``vgg_seeds.py``): every
unseen image explained by its own P(x) and grouped by polytope, as ``groups_sweep.py``
measures the bundled CNNs (its `measure`: 750 reference / 500 unseen images drawn with seed 0
from the 1,000 stratified reference and 1,000 unseen images the VGG's protocols used; |Q| =
50, uniform), at the last conv ReLU (``features.27``, 512 x 4 x 4) and two earlier ones
(``features.20``, 512 x 8 x 8; ``features.13``, 256 x 16 x 16).

The weights are not in the repository (515 MB each): ``WEIGHTS_DIR`` names the folder of
``seed-K/vgg11_bn-shapes-64.safetensors`` (``benchmarks/gpu_vgg_shapes.py`` with ``SEED=K``
writes them; their SHA-256 are checked against ``shapes64-vgg11bn-seeds/seed-K/summary.json``).

Run: ``WEIGHTS_DIR=/tmp/vggw OMP_NUM_THREADS=1 PYTHONPATH=src python
docs/results/vgg_groups.py`` (about 15 minutes on one core). Writes
``shapes64-vgg11bn-seeds/groups.json`` and ``groups.md``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from groups_sweep import Point, measure

from repinterp.data.datasets import load_dataset
from repinterp.evaluation.setup import Setup, stratified
from repinterp.models.zoo import build_model, load_weights

FOLDER = Path(__file__).resolve().parent / "shapes64-vgg11bn-seeds"
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


def main() -> None:
    torch.set_num_threads(1)
    weights_dir = Path(os.environ["WEIGHTS_DIR"])
    split = load_dataset("shapes:64", seed=0)
    reference = split.reference.subset(range(2400))
    reference = reference.subset(stratified(reference.labels, 1000, seed=0))
    rows = []
    for summary_path in sorted(FOLDER.glob("seed-*/summary.json")):
        seed = int(summary_path.parent.name.split("-")[1])
        expected = json.loads(summary_path.read_text())["training"]["weights_sha256"]
        path = weights_dir / f"seed-{seed}" / "vgg11_bn-shapes-64.safetensors"
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != expected:
            raise SystemExit(f"vgg_groups: error: {path} is not the weights of seed {seed}")
        model = build_model("vgg11_bn", num_classes=3, seed=0)
        load_weights(model, path)
        for layer in LAYERS:
            setup = Setup(
                dataset="shapes:64",
                model=model.eval(),
                target_layer=layer,
                reference=reference,
                unseen=split.unseen,
                device=torch.device("cpu"),
                arch="vgg11_bn",
            )
            start = time.perf_counter()
            row = measure(setup, Point(layer), seed=0, full_kmeans=False)
            del row["keys"], row["delta_each"]
            rows.append({"model_seed": seed, "layer": layer} | row)
            print(f"seed {seed} {layer}: {time.perf_counter() - start:.0f} s", flush=True)
    (FOLDER / "groups.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        "# What RI finds on VGG-11-BN, `shapes:64`",
        "",
        "Made by `docs/results/vgg_groups.py`. Each unseen image explained by its own P(x); "
        "purity: the sub-concept purity of the groups / of one group per class / of the same "
        "groups with the labels shuffled within each class (chance); CVR: of 30 k-means "
        "regions (64 principal components). Mean ± sample std over the 3 models.",
        "",
        "| layer | feature map | " + " | ".join(label for _, label, _ in COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for layer in LAYERS:
        at = [r for r in rows if r["layer"] == layer]
        shape = "x".join(map(str, at[0]["feature_shape"]))
        cells = []
        for key, _, digits in COLUMNS:
            values = [r[key] for r in at if r.get(key) is not None]
            cells.append(f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}")
        lines.append(f"| {layer} | {shape} | " + " | ".join(cells) + " |")
    (FOLDER / "groups.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
