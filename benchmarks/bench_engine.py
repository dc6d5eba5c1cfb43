"""fit time / time of a plain forward pass of the same model over the same images and batches.

Ways to fit, each timed in turns with the forward pass (``--repeats`` rounds): in memory;
writing the index in shards to disk as it goes (what ``repinterp fit`` does, so that it can
resume); and, for the small CNN, from a Dataset read by a DataLoader with ``--workers``
processes. Models, random weights, |Q| = 50: a small CNN (1 x 28 x 28, |R| = ``--n-small``)
and a torchvision VGG (``--vgg``, default VGG-11; 3 x ``--vgg-size`` px, |R| = ``--n-vgg``), on
``--device`` (the images already there; the Dataset fit is timed on the CPU only). Goals:
fit / forward <= 1.05 (the small CNN, on the CPU), <= 1.03 (VGG-19 at 224 px on a GPU).

Usage: python benchmarks/bench_engine.py [--n-small 5000] [--n-vgg 2000] [--threads 1]
       python benchmarks/bench_engine.py --device cuda --vgg vgg19 --vgg-size 224
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from common import (
    VGG_LAYERS,
    RandomImages,
    interleaved,
    parser,
    ratios,
    small_cnn,
    table,
    vgg,
    write,
)
from torch import nn

from repinterp import RepresentativeInterpreter
from repinterp.precision import exact_float32
from repinterp.shards import Shards

GOAL = 1.05
N_BOUNDARIES = 50


def fit_times(
    model: nn.Module,
    layer: str,
    shape: tuple[int, ...],
    batch: int,
    repeats: int,
    workers: int | None,
    device: torch.device,
) -> dict[str, float]:
    """Wall and CPU times of the forward pass and of each way to fit, and their ratios (see
    :func:`common.ratios`; CPU ones prefixed ``cpu_``).

    Args:
        shape: N x C x H x W of the reference set.
        workers: DataLoader workers for the Dataset fit; None skips it.
        device: where the model runs and the images lie.
    """
    dataset = RandomImages(shape[0], shape[1:])
    images = torch.stack([dataset[i] for i in range(len(dataset))]).to(device)
    model = model.to(device)
    folder = Path(tempfile.mkdtemp(prefix="bench-shards-"))

    def interpreter(num_workers: int = 0) -> RepresentativeInterpreter:
        return RepresentativeInterpreter(
            model,
            layer,
            N_BOUNDARIES,
            batch_size=batch,
            progress=False,
            num_workers=num_workers,
            device=device,
        )

    @torch.inference_mode()
    @exact_float32()  # the peer at the engine's precision: on a GPU, TF32 is off for both
    def forward() -> None:
        for i in range(0, images.shape[0], batch):
            model(images[i : i + batch])

    fns: dict[str, Callable[[], object]] = {
        "forward": forward,
        "fit": lambda: interpreter().fit(images),
        "fit_sharded": lambda: interpreter().fit(images, shards=Shards(folder / "partial")),
    }
    if workers is not None:
        fns["fit_dataset"] = lambda: interpreter(workers).fit(dataset)
    forward()  # warm-up
    wall, cpu = interleaved(fns, repeats, device)
    shutil.rmtree(folder)
    return ratios(wall, "forward") | ratios(cpu, "forward", "cpu_")


def cells(r: dict[str, float], dataset: bool) -> list[str]:
    """Table cells: per way to fit, the paired CPU-time and wall-time ratios."""
    ways = ["fit", "fit_sharded"] + (["fit_dataset"] if dataset else [])
    out = [
        f"{r[f'cpu_{w}_paired_ratio']:.3f} [{r[f'{w}_paired_ratio']:.3f}]"
        f" ({r[f'cpu_{w}_ratio']:.3f} [{r[f'{w}_ratio']:.3f}])"
        for w in ways
    ]
    return out + ["-"] * (3 - len(out))


def main() -> None:
    p = parser(__doc__, "engine")
    p.add_argument("--n-small", type=int, default=5000, help="|R| for the small CNN (5000)")
    p.add_argument("--vgg", default="vgg11", help=f"the VGG: {', '.join(VGG_LAYERS)} (vgg11)")
    p.add_argument("--n-vgg", type=int, default=2000, help="|R| for the VGG (2000)")
    p.add_argument("--vgg-size", type=int, default=64, help="the VGG's input side, px (64)")
    p.add_argument("--repeats", type=int, default=15, help="rounds for the small CNN (15)")
    p.add_argument("--vgg-repeats", type=int, default=3, help="rounds for the VGG (3)")
    p.add_argument("--workers", type=int, default=1, help="DataLoader workers (1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    side, device = args.vgg_size, torch.device(args.device)
    cases = [
        ("small CNN, 28 px", small_cnn(), "relu2", (args.n_small, 1, 28, 28), 256, args.repeats),
        (
            f"{args.vgg.upper()}, {side} px",
            vgg(args.vgg),
            VGG_LAYERS[args.vgg],
            (args.n_vgg, 3, side, side),
            64,
            args.vgg_repeats,
        ),
    ]
    results = {"goal": GOAL, "workers": args.workers, "threads": args.threads, "cases": {}}
    results["device"] = str(device)
    rows = []
    for name, model, layer, shape, batch, repeats in cases:
        workers = args.workers if name.startswith("small") and device.type == "cpu" else None
        r = fit_times(model, layer, shape, batch, repeats, workers, device)
        results["cases"][name] = {
            "n_reference": shape[0],
            "batch_size": batch,
            "repeats": repeats,
            **r,
        }
        rows.append([name, shape[0], r["forward_s"], r["fit_s"], *cells(r, workers is not None)])
    table(
        [
            "model",
            "|R|",
            "forward (s)",
            "fit (s)",
            "fit / forward",
            "sharded fit / forward",
            f"Dataset fit ({args.workers} worker) / forward",
        ],
        rows,
    )
    print(
        "cells: CPU-time ratio [wall-time ratio], the median of the ratios within a round (the "
        f"ratio of the best times); goal: fit / forward <= {GOAL}"
    )
    write(results, args)


if __name__ == "__main__":
    main()
