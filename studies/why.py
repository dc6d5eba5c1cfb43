"""Why pooled and per-interpretation AD disagree, and what RI's variants change: one run (seed
0, the full runs' first) per data set, the same images, Q, k-means and maps as `unseen`.

Run: ``PYTHONPATH=src python docs/results/why.py`` (a few minutes on one CPU thread).
"""

import numpy as np
import torch

from repinterp.evaluation.methods import METHODS
from repinterp.evaluation.options import Options
from repinterp.evaluation.run import Run
from repinterp.evaluation.scoring import drop_increase
from repinterp.evaluation.setup import load_setup

torch.set_num_threads(1)
for dataset in ("mnist5k", "shapes"):
    setup = load_setup(dataset).draw(0, Options().draw)
    run = Run(setup, 0, Options(progress=False))
    images01 = setup.unseen_pixels
    print(f"## {dataset}: {len(setup.reference)} reference / {len(images01)} unseen images")
    for name in ("RI", "RI+exact", "RI+pairs", "RI+score", "Grad-CAM", "Score-CAM"):
        method = METHODS[name]
        for sampling in method.samplings():
            run.interpreter_for(sampling)
        drop = 100 * drop_increase(setup, images01, method.unseen(run, images01)).drop
        groups = method.groups(run)
        sizes = torch.bincount(groups)[groups.unique()].sort(descending=True).values
        top = 100 * sizes[: max(1, len(sizes) // 10)].sum() / len(groups)
        line = (
            f"{name:10s} mAD {drop.mean():5.1f}; {len(sizes):3d} non-empty groups, sizes "
            f"median {sizes.median():3.0f}, max {sizes.max():3.0f}; images in the 10% largest "
            f"groups {top:4.1f}%"
        )
        regions = method.regions(run)
        if regions is not None:
            covered = torch.cat([regions.assign(x).covered.cpu() for x in setup.chunks("unseen")])
            p = np.mean([len(r.boundaries) for r in regions.regions])
            share = 100 * covered.double().mean()
            line += (
                f"; |P| {p:4.1f}; mAD covered {drop[covered].mean():5.1f} ({share:4.1f}%), "
                f"uncovered {drop[~covered].mean():5.1f}"
            )
        print(line, flush=True)
