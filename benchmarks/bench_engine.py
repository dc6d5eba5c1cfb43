"""Engine speed, as ratios against the plain forward pass measured in the same run.

Prints, for a small CNN and a VGG-11 (random weights):
- ``fit`` time / time of a plain forward pass of the same model over the same images and
  batches (goal <= 1.10);
- ``explain`` latency for one input and per input in a batch, at |R| = 10,000, |Q| = 50
  (goal < 20 ms on CPU), with the share spent in the cover.

Usage: python benchmarks/bench_engine.py [--vgg-size 64] [--n-fit 512] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections import OrderedDict
from collections.abc import Callable

import torch
import torchvision
from torch import nn

from repinterp import RepresentativeInterpreter
from repinterp.cover import greedy_cover


def small_cnn(classes: int = 10) -> nn.Module:
    return nn.Sequential(
        OrderedDict(
            conv1=nn.Conv2d(1, 16, 3, padding=1),
            relu1=nn.ReLU(),
            pool1=nn.MaxPool2d(2),
            conv2=nn.Conv2d(16, 32, 3, padding=1),
            relu2=nn.ReLU(),
            pool2=nn.MaxPool2d(2),
            flatten=nn.Flatten(),
            fc1=nn.Linear(32 * 7 * 7, 128),
            relu3=nn.ReLU(),
            fc2=nn.Linear(128, classes),
        )
    ).eval()


def best_of(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def fit_ratio(model: nn.Module, layer: str, images: torch.Tensor, batch: int, repeats: int):
    ri = RepresentativeInterpreter(model, layer, n_boundaries=50, batch_size=batch, progress=False)

    @torch.inference_mode()
    def forward() -> None:
        for i in range(0, images.shape[0], batch):
            model(images[i : i + batch])

    forward()  # warm-up
    t_forward = best_of(forward, repeats)
    t_fit = best_of(lambda: ri.fit(images), repeats)
    return t_fit, t_forward


def explain_latency(n_ref: int, repeats: int = 100) -> dict[str, float]:
    torch.manual_seed(0)
    model = small_cnn()
    images = torch.randn(n_ref, 1, 28, 28)
    with torch.no_grad():
        model.fc2.bias -= model(images[:1000]).mean(0)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=50, progress=False).fit(images)
    queries = torch.randn(repeats, 1, 28, 28)
    for i in range(5):
        ri.explain(queries[i])
    single = []
    for q in queries:
        start = time.perf_counter()
        ri.explain(q)
        single.append(time.perf_counter() - start)
    t_batch = best_of(lambda: ri.explain_batch(queries), 3) / repeats
    _, proj = ri._forward(queries)
    other = ri.index.predictions.unsqueeze(0) != proj.new_zeros(repeats).long().unsqueeze(1)
    sides = torch.sign(proj).to(torch.int8)
    cover = []
    for i in range(repeats):
        start = time.perf_counter()
        greedy_cover(ri.index.sides, sides[i : i + 1], other[i : i + 1])
        cover.append(time.perf_counter() - start)
    return {
        "explain_single_ms": 1000 * statistics.median(single),
        "explain_batch_per_input_ms": 1000 * t_batch,
        "cover_single_ms": 1000 * statistics.median(cover),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-fit", type=int, default=512, help="images fitted per model")
    parser.add_argument("--vgg-size", type=int, default=64, help="VGG-11 input side, pixels")
    parser.add_argument("--n-ref", type=int, default=10_000, help="|R| for explain latency")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    torch.manual_seed(0)

    results: dict[str, object] = {
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} "
        f"threads, torch {torch.__version__}",
    }
    cases = [
        ("small CNN, 28 px", small_cnn(), "relu2", torch.randn(args.n_fit, 1, 28, 28), 256),
        (
            f"VGG-11, {args.vgg_size} px",
            torchvision.models.vgg11(weights=None, num_classes=10).eval(),
            "features.19",
            torch.randn(args.n_fit, 3, args.vgg_size, args.vgg_size),
            64,
        ),
    ]
    print("| model | fit (s) | forward (s) | fit / forward | goal |")
    print("|---|---|---|---|---|")
    for name, model, layer, images, batch in cases:
        t_fit, t_fwd = fit_ratio(model, layer, images, batch, args.repeats)
        results[name] = {"fit_s": t_fit, "forward_s": t_fwd, "ratio": t_fit / t_fwd}
        print(f"| {name} | {t_fit:.3f} | {t_fwd:.3f} | {t_fit / t_fwd:.3f} | <= 1.10 |")

    latency = explain_latency(args.n_ref)
    results["explain"] = {"n_reference": args.n_ref, "n_boundaries": 50, **latency}
    print(f"\nexplain at |R| = {args.n_ref}, |Q| = 50 (goal < 20 ms):")
    for key, value in latency.items():
        print(f"  {key}: {value:.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
