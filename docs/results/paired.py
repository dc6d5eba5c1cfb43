"""Paired differences between methods over the runs of an ``unseen`` or ``reference`` result
(each run is the same images, Q and k-means for every method): mean ± sample std of ``a - b``
per metric (per K of ``reference``), and in how many of the runs ``a`` is better (lower mAD
and deletion AUC, higher mAI, ROAD and insertion AUC; an equal run counts for neither).

Run: ``python docs/results/paired.py docs/results/DATASET-unseen-controls/results.json A B``.
"""

import json
import sys

import numpy as np

path, a, b = sys.argv[1:4]
result = json.load(open(path))
runs = result["per_run"]
LOWER_IS_BETTER = {"mAD": True, "mAI": False, "mAD_interp": True}
LOWER_IS_BETTER |= {"ROAD": False, "deletion": True, "insertion": False}
for key, lower in LOWER_IS_BETTER.items():
    if any(key not in run["methods"][a] for run in runs):
        continue  # a metric the run did not compute
    # runs x K (one column for unseen); None where a K was not scored
    values = {m: np.array([run["methods"][m][key] for run in runs], float) for m in (a, b)}
    diffs = (values[a] - values[b]).reshape(len(runs), -1)
    ks = result["options"]["ks"] if diffs.shape[1] > 1 else [None]
    for k, diff in zip(ks, diffs.T, strict=True):
        if np.isnan(diff).any():
            continue
        better = int(((diff < 0) if lower else (diff > 0)).sum())
        label = key if k is None else f"{key} K={k}"
        print(
            f"{label:11s} {a} - {b}: {diff.mean():+6.2f} ± {diff.std(ddof=1):.2f}, {a} better "
            f"in {better} / {len(diff)} runs  {np.round(diff, 2)}"
        )
