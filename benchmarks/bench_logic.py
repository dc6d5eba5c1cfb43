"""What ``granularity="logic"`` costs against the paper's RI (``"class"``): fit and explain time
on ``mnist5k`` with the bundled ``mnist_cnn`` (|R| = 4,000 reference images, 1,000 unseen
inputs explained in one batch, |Q| = 50; logic adds its 50 neuron hyperplanes and the logic
vectors). Each measurement is the best of ``--repeats``, the two granularities taking turns.

Usage: python benchmarks/bench_logic.py [--device cpu] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import torch

from repinterp import RepresentativeInterpreter
from repinterp.evaluation.setup import load_setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    setup = load_setup("mnist5k", device=args.device)
    reference = setup.inputs("reference")
    unseen = setup.inputs("unseen")
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.repeats):
        for granularity in ("class", "logic"):
            ri = RepresentativeInterpreter(
                setup.model, setup.target_layer, progress=False, granularity=granularity
            )
            start = time.perf_counter()
            ri.fit(reference)
            fit = time.perf_counter() - start
            start = time.perf_counter()
            explained = ri.explain_batch(unseen)
            explain = time.perf_counter() - start
            times = best.setdefault(granularity, {"fit": fit, "explain": explain})
            times["fit"], times["explain"] = min(times["fit"], fit), min(times["explain"], explain)
            times["covered"] = sum(e.representativeness for e in explained) / len(explained)
            times["Q"] = len(ri.index.boundaries)
    print(
        f"mnist5k, mnist_cnn at {setup.target_layer}, |R| = {len(reference)}, "
        f"{len(unseen)} inputs, device {args.device}, {torch.get_num_threads()} thread(s), "
        f"best of {args.repeats}"
    )
    print("| granularity | |Q| | fit (s) | explain 1,000 (s) | ms per input | mean covered |")
    print("|---|---|---|---|---|---|")
    for granularity, t in best.items():
        print(
            f"| {granularity} | {t['Q']} | {t['fit']:.2f} | {t['explain']:.2f} | "
            f"{1000 * t['explain'] / len(unseen):.2f} | {t['covered']:.0f} |"
        )


if __name__ == "__main__":
    main()
