"""fit time / time of a plain forward pass of the same model over the same images and batches.

Ways to fit, each timed in turns with the forward pass (``--repeats`` rounds): in memory;
writing the index in shards to disk as it goes (what ``repinterp fit`` does, so that it can
resume); and, for the small CNN, from a Dataset read by a DataLoader with ``--workers``
processes. Two more peers take their turns too: the *floor*, the arithmetic that no fit can
skip (``psi``, the head and the |Q| projections per image), and the forward pass over the same
Dataset and DataLoader workers, the Dataset fit's peer. Models, random weights, |Q| = 50: a
small CNN (1 x 28 x 28, |R| = ``--n-small``) and a torchvision VGG (``--vgg``, default VGG-11;
3 x ``--vgg-size`` px, |R| = ``--n-vgg``), on
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
from torch.utils.data import DataLoader

from repinterp import FitConfig, RepresentativeInterpreter
from repinterp.core.boundaries import project
from repinterp.runtime.precision import exact_float32
from repinterp.store.shards import Shards

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

    Besides the forward pass, two more peers are timed in the same rounds: the *floor*, the
    arithmetic that fit cannot skip (``psi``, the head and the projections on ``Q`` of every
    batch; ratios against it prefixed ``floor_``), and, for the Dataset fit, the forward pass
    over the same Dataset through a DataLoader with the same workers (prefixed ``loader_``).

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
        config = FitConfig(
            n_boundaries=N_BOUNDARIES, batch_size=batch, progress=False, num_workers=num_workers
        )
        return RepresentativeInterpreter(model, layer, device=device, config=config)

    fitted = interpreter().fit(images)  # also the warm-up
    split, q = fitted.split, fitted.index.boundaries

    @torch.inference_mode()
    @exact_float32()  # the peers at the engine's precision: on a GPU, TF32 is off for all
    def forward() -> None:
        for i in range(0, images.shape[0], batch):
            model(images[i : i + batch])

    @torch.inference_mode()
    @exact_float32()
    def floor() -> None:
        for i in range(0, images.shape[0], batch):
            t = split.psi(images[i : i + batch])
            split.head(t).argmax(1)
            project(t, q)

    @torch.inference_mode()
    @exact_float32()
    def forward_dataset() -> None:
        for x in DataLoader(dataset, batch_size=batch, num_workers=workers or 0):
            model(x.to(device))

    fns: dict[str, Callable[[], object]] = {
        "forward": forward,
        "floor": floor,
        "fit": lambda: interpreter().fit(images),
        "fit_sharded": lambda: interpreter().fit(images, shards=Shards(folder / "partial")),
    }
    if workers is not None:
        fns["forward_dataset"] = forward_dataset
        fns["fit_dataset"] = lambda: interpreter(workers).fit(dataset)
    wall, cpu = interleaved(fns, repeats, device)
    shutil.rmtree(folder)
    out = ratios(wall, "forward") | ratios(cpu, "forward", "cpu_")
    for peer, prefix, names in [
        ("floor", "floor_", ["fit", "fit_sharded"]),
        ("forward_dataset", "loader_", ["fit_dataset"]),
    ]:
        if peer in wall:
            for times, kind in [(wall, ""), (cpu, "cpu_")]:
                subset = {name: times[name] for name in [peer, *names]}
                out |= ratios(subset, peer, f"{prefix}{kind}")
    return out


def cell(r: dict[str, float], way: str, prefix: str = "") -> str:
    """CPU-time and wall-time ratios of ``way``: paired median (ratio of the best times)."""
    return (
        f"{r[f'{prefix}cpu_{way}_paired_ratio']:.3f} [{r[f'{prefix}{way}_paired_ratio']:.3f}]"
        f" ({r[f'{prefix}cpu_{way}_ratio']:.3f} [{r[f'{prefix}{way}_ratio']:.3f}])"
    )


def cells(r: dict[str, float], dataset: bool) -> list[str]:
    """Table cells: fit, floor and sharded fit against the forward pass; fit against the floor;
    the Dataset fit against the forward pass over the same DataLoader."""
    out = [cell(r, "fit"), cell(r, "floor"), cell(r, "fit", "floor_"), cell(r, "fit_sharded")]
    return [*out, cell(r, "fit_dataset", "loader_") if dataset else "-"]


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
            "floor / forward",
            "fit / floor",
            "sharded fit / forward",
            f"Dataset fit / forward over the DataLoader ({args.workers} worker)",
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
