"""Paired differences between methods over the runs of an ``unseen`` or ``reference`` result
(each run is the same model, images, Q and k-means for every method): mean ± sample std of
``a - b`` per metric (per K of ``reference``), in how many of the runs ``a`` is better (lower
mAD and deletion AUC, higher mAI, ROAD and insertion AUC; an equal run counts for neither), and
the 95% interval of a paired bootstrap over the runs and, within each, the images (``unseen``)
or inputs (``reference``), from the ``units.json`` beside each ``results.json``; without it
(results written before intervals), over the runs alone. ``WIN`` marks a win: the same sign in
every run and an interval that excludes 0 (`repinterp.evaluation.comparison`).

Run: ``python -m studies.paired RESULTS.json [RESULTS.json ...] A B [--common] [--out DIR]``,
e.g. ``docs/results/DATASET-unseen-controls/results.json RI Grad-CAM``. Several files pool
their runs (one run each on several models); ``--common`` reads ``reference``'s common reading
(every method on RI's S) instead of each method on its own S. Prints one line per metric, and
with ``--out`` also writes them to ``DIR/paired.txt``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from repinterp.evaluation.comparison import paired_comparisons

from . import runner


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The results files, the two methods, the reading and where the lines go."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="+", help="results.json files")
    parser.add_argument("a", help="the first method")
    parser.add_argument("b", help="the second method")
    parser.add_argument("--common", action="store_true", help="reference's common reading")
    parser.add_argument("--out", type=Path, default=None, help="also write DIR/paired.txt")
    return parser.parse_args(argv)


def lines(paths: list[Path], a: str, b: str, reading: str = "methods") -> list[str]:
    """One line per metric (per K of ``reference``) of ``a - b`` over the files' pooled runs."""
    runs, ks = [], None
    for path in paths:
        result = json.loads(path.read_text())
        ks = ks or result["options"].get("ks")
        units_file = path.with_name("units.json")
        units = json.loads(units_file.read_text()) if units_file.is_file() else None
        for r, run in enumerate(result["per_run"]):
            runs.append(run | ({"units": units[r]} if units else {}))
    out = []
    for key, comparison in paired_comparisons(runs, a, b, reading).items():
        per_k = comparison if isinstance(comparison, list) else [comparison]
        for k, c in zip(ks if isinstance(comparison, list) else [None], per_k, strict=True):
            if c is None:
                continue
            label = key if k is None else f"{key} K={k}"
            out.append(
                f"{label:11s} {a} - {b}: {c['mean']:+6.2f} ± {c['std']:.2f} "
                f"[{c['low']:+.2f}, {c['high']:+.2f}] ({c['levels']}), {a} better in "
                f"{c['better']} / {c['runs']} runs{'  WIN' if c['win'] else ''}  "
                f"{[round(d, 2) for d in c['differences']]}"
            )
    return out


def main(argv: list[str] | None = None) -> list[str]:
    """Print the lines (and write them to ``--out``); returns them."""
    args = arguments(argv)
    found = lines(args.results, args.a, args.b, "common" if args.common else "methods")
    print("\n".join(found))
    if args.out is not None:
        runner.publish(args.out, {"paired.txt": "\n".join(found) + "\n"})
    return found


if __name__ == "__main__":
    main()
