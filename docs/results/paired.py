"""Paired differences between methods over the runs of an ``unseen`` result (each run is the
same images, Q and k-means for every method): mean ± sample std of ``a - b`` per metric.

Run: ``python docs/results/paired.py docs/results/DATASET-unseen-controls/results.json A B``.
"""

import json
import sys

import numpy as np

path, a, b = sys.argv[1:4]
runs = json.load(open(path))["per_run"]
for key in ("mAD", "mAI", "mAD_interp", "ROAD", "deletion", "insertion"):
    diff = np.array([run["methods"][a][key] - run["methods"][b][key] for run in runs], float)
    spread = diff.std(ddof=1)
    print(f"{key:11s} {a} - {b}: {diff.mean():+6.2f} ± {spread:.2f}  runs {np.round(diff, 2)}")
