"""What each granularity beyond the paper costs against the paper's RI (``"class"``): fit and
explain time of a data set's bundled model (|Q| = 50; ``strategy`` adds one more pass over the
reference set, the discovery of the strategies and a separator per pair of strategies of a
class). All the unseen inputs are
explained in one batch. Each time is the best of ``--repeats``, the granularities taking turns;
the ratios are against ``class`` in the same run.

Usage: python benchmarks/bench_granularity.py [--dataset mnist-super] [--granularities
class,strategy] [--device cpu] [--repeats 3] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from repinterp import RepresentativeInterpreter
from repinterp.evaluation.setup import load_setup
from repinterp.store.outputs import write_outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist-super")
    parser.add_argument("--granularities", default="class,strategy")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="also write the table to this Markdown file")
    args = parser.parse_args()
    granularities = args.granularities.split(",")
    if granularities[0] != "class":
        parser.error("--granularities must start with class, the baseline of the ratios")
    setup = load_setup(args.dataset, device=args.device)
    reference = setup.inputs("reference")
    unseen = setup.inputs("unseen")
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.repeats):
        for granularity in granularities:
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
    base = best["class"]
    lines = [
        f"{args.dataset}, bundled {type(setup.model).__name__} at {setup.target_layer}, "
        f"|R| = {len(reference)}, {len(unseen)} inputs, device {args.device}, "
        f"{torch.get_num_threads()} thread(s), best of {args.repeats}",
        "",
        "| granularity | |Q| | fit (s) | fit / class | explain (s) | explain / class | "
        "mean covered |",
        "|---|---|---|---|---|---|---|",
    ]
    for granularity, t in best.items():
        lines.append(
            f"| {granularity} | {t['Q']:.0f} | {t['fit']:.2f} | {t['fit'] / base['fit']:.1f}x | "
            f"{t['explain']:.2f} | {t['explain'] / base['explain']:.1f}x | {t['covered']:.0f} |"
        )
    print("\n".join(lines))
    if args.out:
        write_outputs({Path(args.out): ("\n".join(lines) + "\n").encode()})


if __name__ == "__main__":
    main()
