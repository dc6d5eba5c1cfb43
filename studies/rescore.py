"""Rescore the committed paired comparisons under the corrected win rule
(`repinterp.evaluation.comparison`: t interval, exact sign-flip p, Holm over each result's
family, `verdict`), from each result's ``per_run`` and ``units.json``.

Every ``docs/results/*/results.json`` with ``paired`` and a ``units.json`` beside it gets its
``paired`` recomputed and its ``results.md`` rewritten (`report.tables.rewrite_results`). It
prints each verdict that changed (before: the old rule, a win of either method or a tie; after:
`verdict`), and how many verdicts move when the bootstrap is drawn with another seed.

Run: ``python studies/rescore.py [--dry-run] [--check-seed SEED]``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from repinterp.evaluation.comparison import paired_family
from repinterp.report.tables import rewrite_results

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def _old_verdict(c: dict[str, Any]) -> str:
    """The verdict of the rule before (`win`: the same sign in every run and a bootstrap
    interval excluding 0), from the first method's side."""
    if "verdict" in c:
        return c["verdict"]
    if not c["win"]:
        return "tie"
    return "win" if c["better"] == c["runs"] else "loss"


def _flat(paired: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``paired``'s comparisons by label: ``reading a − b score [K index]``."""
    out = {}
    for reading, pairs in paired.items():
        for a, others in pairs.items():
            for b, scores in others.items():
                for key, c in scores.items():
                    for i, one in enumerate(c if isinstance(c, list) else [c]):
                        if one is not None:
                            k = f" K#{i}" if isinstance(c, list) else ""
                            out[f"{reading} {a} − {b} {key}{k}"] = one
    return out


def _runs(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """A result's JSON and its runs with their units, or None without paired comparisons."""
    results = json.loads((folder / "results.json").read_text())
    units_file = folder / "units.json"
    if "paired" not in results or not units_file.is_file():
        return None
    units = json.loads(units_file.read_text())
    runs = [run | {"units": u} for run, u in zip(results["per_run"], units, strict=True)]
    return results, runs


def _labelled(label: str, ks: list[int] | None) -> str:
    """``K#i`` as ``K = k``."""
    if " K#" not in label or not ks:
        return label
    head, index = label.rsplit(" K#", 1)
    return f"{head} K = {ks[int(index)]}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print, write nothing")
    parser.add_argument("--check-seed", type=int, default=1, help="bootstrap seed compared (1)")
    args = parser.parse_args(argv)
    for folder in sorted(p for p in RESULTS.iterdir() if (p / "results.json").is_file()):
        loaded = _runs(folder)
        if loaded is None:
            continue
        results, runs = loaded
        ks = results["options"].get("ks")
        new = paired_family(runs)
        other = _flat(paired_family(runs, seed=args.check_seed))
        before, after = _flat(results["paired"]), _flat(new)
        moved = [label for label, c in after.items() if c["verdict"] != other[label]["verdict"]]
        counts: dict[str, int] = {}
        for c in after.values():
            counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
        mc = max(c["mc_error"] for c in after.values())
        print(
            f"## {folder.name}: {len(after)} comparisons, {counts}; verdicts that move with "
            f"seed {args.check_seed}: {len(moved)}; largest Monte Carlo error {mc:.4f}"
        )
        for label, c in after.items():
            old = _old_verdict(before[label])
            if old != c["verdict"]:
                print(
                    f"{_labelled(label, ks)}: {old} → {c['verdict']} (mean {c['mean']:+.2f}, "
                    f"{c['better']}/{c['runs']}, p_holm {c['p_holm']:.3f})"
                )
        if not args.dry_run:
            rewrite_results(results | {"paired": new}, folder)


if __name__ == "__main__":
    main()
