"""Paired differences between methods over the runs of an ``unseen`` or ``reference`` result
(each run is the same model, images, Q and k-means for every method): mean ± sample std of
``a - b`` per metric (per K of ``reference``), in how many of the runs ``a`` is better (lower
mAD and deletion AUC, higher mAI, ROAD and insertion AUC; an equal run counts for neither), and
the 95% interval of a paired bootstrap over the runs and, within each, the images (``unseen``)
or inputs (``reference``), from the ``units.json`` beside each ``results.json``; without it
(results written before intervals), over the runs alone. ``WIN`` marks a win: the same sign in
every run and an interval that excludes 0 (`repinterp.evaluation.comparison`).

Run: ``python docs/results/paired.py RESULTS.json [RESULTS.json ...] A B [--common]``, e.g.
``docs/results/DATASET-unseen-controls/results.json RI Grad-CAM``. Several files pool their
runs (one run each on several models); ``--common`` reads ``reference``'s common reading (every
method on RI's S) instead of each method on its own S.
"""

import json
import sys
from pathlib import Path

from repinterp.evaluation.comparison import paired_comparisons

args = [arg for arg in sys.argv[1:] if arg != "--common"]
reading = "common" if "--common" in sys.argv[1:] else "methods"
*paths, a, b = args
runs, ks = [], None
for path in map(Path, paths):
    result = json.loads(path.read_text())
    ks = ks or result["options"].get("ks")
    units_file = path.with_name("units.json")
    units = json.loads(units_file.read_text()) if units_file.is_file() else None
    for r, run in enumerate(result["per_run"]):
        runs.append(run | ({"units": units[r]} if units else {}))
for key, comparison in paired_comparisons(runs, a, b, reading).items():
    per_k = comparison if isinstance(comparison, list) else [comparison]
    for k, c in zip(ks if isinstance(comparison, list) else [None], per_k, strict=True):
        if c is None:
            continue
        label = key if k is None else f"{key} K={k}"
        print(
            f"{label:11s} {a} - {b}: {c['mean']:+6.2f} ± {c['std']:.2f} "
            f"[{c['low']:+.2f}, {c['high']:+.2f}] ({c['levels']}), {a} better in "
            f"{c['better']} / {c['runs']} runs{'  WIN' if c['win'] else ''}  "
            f"{[round(d, 2) for d in c['differences']]}"
        )
