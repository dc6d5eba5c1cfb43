"""``repinterp evaluate --quick`` on a user's case: a ResNet-18 at 64 px on a 3-class image folder.

The folder (1,000 images of the bundled ``shapes`` generator) and the model (random trunk, its
last layer fitted by least squares; no download) come from `common.shapes_resnet18`. The
command runs in a fresh process, as a user runs it; the benchmark reports its wall time, the
seconds of each method from its results, the layer it chose, and the machine's load.

In the same run, against the old path: Score-CAM's weights for ``--images`` images as
pytorch-grad-cam computes them (its ``ScoreCAM``, one image per call, as evaluate did before
issue 31) and as repinterp now does (the masked copies batched, no hooks), at ``layer4`` (the
old default layer, 512 x 2 x 2) and the new default ``layer2`` (128 x 8 x 8); the weights must
agree to float tolerance. ``--old-layer`` also runs the whole command with ``--layer layer4``.
Goal (issue 31): under 5 min on 2 cores.

Usage: python benchmarks/bench_evaluate.py [--root DIR] [--protocol unseen] [--old-layer]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import interleaved, parser, ratios, shapes_resnet18, table, write
from pytorch_grad_cam import ScoreCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

from repinterp.data.datasets import imagefolder
from repinterp.evaluation.baselines import cam_weights
from repinterp.models.zoo import build_model


class _LibraryScoreCAM(ScoreCAM):
    def get_cam_weights(self, *args):
        self.recorded = super().get_cam_weights(*args)
        return self.recorded


def library_score_cam(model, layer, images, classes) -> torch.Tensor:
    """The old path: pytorch-grad-cam's Score-CAM, one image per call (its tqdm bars off)."""
    out = []
    for image, c in zip(images, classes, strict=True):
        cam = _LibraryScoreCAM(model, target_layers=[model.get_submodule(layer)])
        try:
            with open(os.devnull, "w") as null:
                stderr, sys.stderr = sys.stderr, null
                try:
                    cam(image[None], targets=[ClassifierOutputTarget(int(c))])
                finally:
                    sys.stderr = stderr
            out.append(torch.from_numpy(cam.recorded))
        finally:
            cam.activations_and_grads.release()
    return torch.cat(out)


def score_cam_paths(folder: Path, weights: Path, n: int, repeats: int) -> dict:
    """Seconds of the old and new Score-CAM weights at layer4 and layer2 (best of ``repeats``
    interleaved rounds, and the median ratio per round), and their largest difference."""
    model = build_model("resnet18", 3, weights=weights).eval()
    data = imagefolder(folder, size=64)
    images = torch.stack([data[i][0] for i in range(0, len(data), len(data) // n)][:n])
    classes = model(images).argmax(1)
    out = {}
    for layer in ("layer4", "layer2"):
        got: dict[str, torch.Tensor] = {}

        def library(layer: str = layer, got: dict = got) -> None:
            got["library"] = library_score_cam(model, layer, images, classes)

        def batched(layer: str = layer, got: dict = got) -> None:
            got["batched"] = cam_weights("Score-CAM", model, layer, images, classes)

        wall, _ = interleaved({"library": library, "batched": batched}, repeats)
        out[layer] = ratios(wall, "library") | {
            "max_abs_difference": float((got["library"] - got["batched"]).abs().max()),
            "channels": got["library"].shape[1],
        }
    return out


def evaluate_quick(folder: Path, weights: Path, out: Path, protocol: str, extra: list[str]) -> dict:
    """Wall seconds of ``repinterp evaluate --quick`` in a fresh process, and its results."""
    command = [
        sys.executable,
        "-m",
        "repinterp",
        "evaluate",
        "--quick",
        "--protocol",
        protocol,
        "--dataset",
        f"imagefolder:{folder}",
        "--image-size",
        "64",
        "--model",
        "resnet18",
        "--weights",
        str(weights),
        "--out",
        str(out),
        "--quiet",
        "--overwrite",
        *extra,
    ]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    wall = time.perf_counter() - start
    results = json.loads((out / "results.json").read_text())
    methods = {name: block.get("time_s") for name, block in results.get("methods", {}).items()}
    return {
        "wall_s": wall,
        "load_average_1min_before": load,
        "load_average_1min_after": os.getloadavg()[0],
        "layer": results["setup"]["target_layer"],
        "runs": results["runs"],
        "method_s_per_run": methods,
        "ri_fit_s": results["ri_fit_s"],
        "command": " ".join(command[2:]),
    }


def main() -> None:
    p = parser(__doc__, "evaluate_quick")
    p.add_argument("--root", type=Path, help="folder for the images, weights and outputs (temp)")
    p.add_argument("--protocol", default="unseen", help="protocol (unseen)")
    p.add_argument("--images", type=int, default=4, help="images of the Score-CAM comparison (4)")
    p.add_argument("--repeats", type=int, default=3, help="rounds of the Score-CAM comparison (3)")
    p.add_argument("--old-layer", action="store_true", help="also run it with --layer layer4")
    p.add_argument("--skip-evaluate", action="store_true", help="the Score-CAM comparison only")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = args.root or Path(scratch)
        folder, weights = shapes_resnet18(root)
        results = {"score_cam": score_cam_paths(folder, weights, args.images, args.repeats)}
        if not args.skip_evaluate:
            results["quick"] = evaluate_quick(folder, weights, root / "quick", args.protocol, [])
        if args.old_layer:
            results["quick_layer4"] = evaluate_quick(
                folder, weights, root / "quick4", args.protocol, ["--layer", "layer4"]
            )
    rows = [
        [
            layer,
            r["channels"],
            r["library_s"],
            r["batched_s"],
            1 / r["batched_paired_ratio"],
            r["max_abs_difference"],
        ]
        for layer, r in results["score_cam"].items()
    ]
    table(
        ["layer", "channels", "library (s)", "batched (s)", "speed-up (paired)", "max |diff|"], rows
    )
    print()
    runs = [results[key] for key in ("quick", "quick_layer4") if key in results]
    if not runs:
        write(results, args)
        return
    table(
        ["layer", "runs", "wall (s)", "load before/after", *runs[0]["method_s_per_run"]],
        [
            [
                r["layer"],
                r["runs"],
                r["wall_s"],
                f"{r['load_average_1min_before']:.1f}/{r['load_average_1min_after']:.1f}",
                *r["method_s_per_run"].values(),
            ]
            for r in runs
        ],
    )
    write(results, args)


if __name__ == "__main__":
    main()
