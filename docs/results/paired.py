"""Paired differences between methods over the runs of an ``unseen`` or ``reference`` result
(each run is the same images, Q and k-means for every method): mean ± sample std of ``a - b``
per metric (per K of ``reference``), and in how many of the runs ``a`` is better (lower mAD
and deletion AUC, higher mAI, ROAD and insertion AUC; an equal run counts for neither).

Run: ``python docs/results/paired.py RESULTS.json [RESULTS.json ...] A B [--common]``, e.g.
``docs/results/DATASET-unseen-controls/results.json RI Grad-CAM``. Several files pool their
runs (the VGG's seeds, one run each); ``--common`` reads ``reference``'s common reading (every
method on RI's S) instead of each method on its own S.
"""

import json
import sys

import numpy as np

args = [arg for arg in sys.argv[1:] if arg != "--common"]
block = "common" if "--common" in sys.argv[1:] else "methods"
*paths, a, b = args
results = [json.load(open(path)) for path in paths]
result = results[0]
runs = [{"methods": run[block]} for r in results for run in r["per_run"]]
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
