"""Rescore the committed paired comparisons under the corrected win rule
(`repinterp.evaluation.comparison`: t interval, exact sign-flip p, Holm over each result's
family, `verdict`), from each result's ``per_run`` and ``units.json``.

Every ``docs/results/*/results.json`` with ``paired`` and a ``units.json`` beside it gets its
``paired`` recomputed and its ``results.md`` rewritten (`report.results.rewrite_results`). It
prints each verdict that changed (before: the old rule, a win of either method or a tie; after:
`verdict`), also written to ``verdicts-changed.md`` beside the result when any changed, and how
many verdicts move when the bootstrap is drawn with another seed: a verdict depends on the
bootstrap only where ``p_holm`` < 0.05 and the t interval excludes 0, so the result is drawn
again with that seed only where some comparison is so. A second run finds the verdicts it
wrote: nothing changes, and ``verdicts-changed.md`` is left as it is.

Run: ``python -m studies.rescore [--dry-run] [--check-seed SEED] [FOLDER ...]`` (folders
under ``docs/results``; all by default).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from repinterp.evaluation.comparison import ALPHA, paired_family
from repinterp.report.results import rewrite_results
from repinterp.store.outputs import write_outputs

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


def _on_the_bootstrap(c: dict[str, Any]) -> bool:
    """Whether a comparison's verdict depends on its bootstrap interval: its Holm p is below
    0.05 and its t interval excludes 0."""
    t = c["t_interval"]
    p = c["p_holm"]  # None where no run had a difference to compare (all values NaN)
    return p is not None and p < ALPHA and t is not None and (t[0] > 0 or t[1] < 0)


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
    parser.add_argument("folders", nargs="*", help="result folders (all by default)")
    args = parser.parse_args(argv)
    folders = [RESULTS / name for name in args.folders] or sorted(RESULTS.iterdir())
    for folder in [p for p in folders if (p / "results.json").is_file()]:
        loaded = _runs(folder)
        if loaded is None:
            continue
        results, runs = loaded
        ks = results["options"].get("ks")
        new = paired_family(runs)
        before, after = _flat(results["paired"]), _flat(new)
        moved = []
        if any(_on_the_bootstrap(c) for c in after.values()):
            other = _flat(paired_family(runs, seed=args.check_seed))
            moved = [label for label, c in after.items() if c["verdict"] != other[label]["verdict"]]
        counts: dict[str, int] = {}
        for c in after.values():
            counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
        mc = max(c["mc_error"] for c in after.values())
        print(
            f"## {folder.name}: {len(after)} comparisons, {counts}; verdicts that move with "
            f"seed {args.check_seed}: {len(moved)}; largest Monte Carlo error {mc:.4f}"
        )
        changed = [
            f"{_labelled(label, ks)}: {_old_verdict(before[label])} → {c['verdict']} (mean "
            f"{c['mean']:+.2f}, {c['better']}/{c['runs']}, p_holm {c['p_holm']:.3f})"
            for label, c in after.items()
            if _old_verdict(before[label]) != c["verdict"]
        ]
        if changed:
            print("\n".join(changed))
        if args.dry_run:
            continue
        rewrite_results(results | {"paired": new}, folder)
        if changed:
            text = "\n".join([f"# {folder.name}: verdicts that changed (before → after)", ""])
            lines = "\n".join(f"- {line}" for line in changed)
            write_outputs({folder / "verdicts-changed.md": f"{text}\n{lines}\n".encode()})


if __name__ == "__main__":
    main()
