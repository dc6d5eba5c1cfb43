"""The VGG-11-BN on ``shapes:64`` trained with 3 seeds: one table of the models (seed, epochs,
losses, unseen accuracy, the weights' SHA-256) and one of ``unseen`` per method, mean ± sample
std over the 3 models (one run each, evaluation seed 0), groups included. Paired differences:
``python -m studies.paired docs/results/shapes64-vgg11bn-seeds/seed-*/unseen/results.json A B``.

Run: ``python -m studies.vgg_seeds`` (reads ``--runs``'s ``seed-*/summary.json`` and
``seed-*/unseen/results.json``, default ``docs/results/shapes64-vgg11bn-seeds``, and writes
``results.md`` into ``--out``, by default the same folder).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from repinterp.evaluation.names import method_label
from repinterp.evaluation.protocols import mean_std

from . import runner

FOLDER = runner.RESULTS / "shapes64-vgg11bn-seeds"
COLUMNS = (
    ("mAD", "mAD"),
    ("mAI", "mAI"),
    ("ROAD", "ROAD (pp)"),
    ("deletion", "deletion"),
    ("insertion", "insertion"),
    ("CVR", "CVR"),
    ("distinct_polytopes", "distinct P(x)"),
    ("effective_groups", "effective groups"),
    ("largest_group_share", "largest group's share of a class"),
    ("subconcept_purity", "sub-concept purity"),
    ("subconcept_purity_class", "purity, one group per class"),
)


def cell(values: list[float]) -> str:
    """Mean ± sample std of the models' values (the mean alone for one model; n/a for none)."""
    if not values:
        return "n/a"
    return mean_std(float(np.mean(values)), np.std(values, ddof=1) if len(values) > 1 else None)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """Where the runs are and where the table goes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=FOLDER, help="the seed-*/ folders' parent")
    parser.add_argument("--out", type=Path, default=None, help="(default: --runs)")
    args = parser.parse_args(argv)
    args.out = args.out or args.runs
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Each model's training summary and ``unseen`` results, in seed order."""
    finished = args.runs.glob("seed-*/unseen/results.json")
    seeds = sorted((p.parent.parent for p in finished), key=lambda p: int(p.name.split("-")[1]))
    return {
        "summaries": [json.loads((s / "summary.json").read_text()) for s in seeds],
        "results": [json.loads((s / "unseen" / "results.json").read_text()) for s in seeds],
    }


def markdown(found: dict[str, Any]) -> str:
    """results.md: the models, then ``unseen`` per method over them."""
    summaries, results = found["summaries"], found["results"]
    lines = [
        f"# VGG-11-BN on `shapes:64`, {len(summaries)} training seeds",
        "",
        "Made by `python -m studies.vgg_seeds` from `seed-*/summary.json` and "
        "`seed-*/unseen/results.json`.",
        "",
        "| seed | epochs | epoch losses | unseen accuracy (%) | training (s) | weights' SHA-256 |",
        "|---|---|---|---|---|---|",
    ]
    for summary in summaries:
        t = summary["training"]
        losses = ", ".join(f"{loss:.3f}" for loss in t["losses"])
        lines.append(
            f"| {t['recipe']['seed']} | {t['epochs']} | {losses} | {t['unseen_accuracy_percent']}"
            f" | {t['seconds']:.0f} | `{t['weights_sha256']}` |"
        )
    lines += [
        "",
        f"`unseen`, mean ± sample std over the {len(summaries)} models (one run each, seed 0; "
        f"command: `{results[0]['command']}`):",
        "",
        "| Method | " + " | ".join(label for _, label in COLUMNS) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    for method in results[0]["methods"]:
        row = []
        for key, _ in COLUMNS:
            values = [r["per_run"][0]["methods"][method].get(key) for r in results]
            row.append(cell([v for v in values if v is not None]))
        lines.append(f"| {method_label(method)} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Write ``results.md`` into ``--out`` (no results.json: the runs' own files are it)."""
    return runner.main(
        "studies.vgg_seeds", arguments, run, lambda found: {"results.md": markdown(found)}, argv
    )


if __name__ == "__main__":
    main()
