"""Why pooled and per-interpretation AD disagree, and what RI's variants change: one run (seed
0, the full runs' first) per data set, the same images, Q, k-means and maps as `unseen`.

Run: ``PYTHONPATH=src python -m studies.why`` (a few minutes on one CPU thread). Writes
``why.txt`` into ``--out`` (default ``docs/results``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch

from repinterp.evaluation.methods import METHODS
from repinterp.evaluation.options import Options
from repinterp.evaluation.run import Run
from repinterp.evaluation.scoring import drop_increase
from repinterp.evaluation.setup import load_setup

from . import runner

METHOD_NAMES = ("RI", "RI+exact", "RI+pairs", "RI+score", "Grad-CAM", "Score-CAM")


def line(run: Run, name: str) -> str:
    """One method's line: mAD, its groups' sizes, and for regions |P| and mAD by coverage."""
    setup = run.setup
    method = METHODS[name]
    for config in method.fit_configs(run):
        run.interpreter_for(config)
    images01 = setup.unseen_pixels
    drop = 100 * drop_increase(setup, images01, method.unseen(run, images01)).drop
    groups = method.groups(run)
    sizes = torch.bincount(groups)[groups.unique()].sort(descending=True).values
    top = 100 * sizes[: max(1, len(sizes) // 10)].sum() / len(groups)
    text = (
        f"{name:10s} mAD {drop.mean():5.1f}; {len(sizes):3d} non-empty groups, sizes "
        f"median {sizes.median():3.0f}, max {sizes.max():3.0f}; images in the 10% largest "
        f"groups {top:4.1f}%"
    )
    regions = method.regions(run)
    if regions is not None:
        covered = torch.cat([regions.assign(x).covered.cpu() for x in setup.chunks("unseen")])
        p = np.mean([len(r.boundary_ids) for r in regions.regions])
        share = 100 * covered.double().mean()
        text += (
            f"; |P| {p:4.1f}; mAD covered {drop[covered].mean():5.1f} ({share:4.1f}%), "
            f"uncovered {drop[~covered].mean():5.1f}"
        )
    return text


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The data sets, the methods, the images and where the text goes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="mnist5k,shapes", help="comma-separated")
    parser.add_argument("--methods", default=",".join(METHOD_NAMES), help="comma-separated")
    parser.add_argument("--reference", type=int, default=None, help="reference images (all)")
    parser.add_argument("--unseen", type=int, default=1000, help="unseen images (1000)")
    parser.add_argument("--out", type=Path, default=runner.RESULTS)
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """``{"lines": [...]}``: per data set a heading, then one line per method."""
    lines = []
    for dataset in args.datasets.split(","):
        setup = load_setup(dataset, n_reference=args.reference, n_unseen=args.unseen)
        setup = setup.draw(0, Options().draw)
        run_ = Run(setup, 0, Options(progress=False))
        n_unseen = len(setup.unseen_pixels)
        lines.append(f"## {dataset}: {len(setup.reference)} reference / {n_unseen} unseen images")
        for name in args.methods.split(","):
            lines.append(line(run_, name))
            print(lines[-1], flush=True)
    return {"lines": lines}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Write ``why.txt`` into ``--out``."""
    return runner.main(
        "studies.why", arguments, run, lambda r: {"why.txt": "\n".join(r["lines"]) + "\n"}, argv
    )


if __name__ == "__main__":
    main()
