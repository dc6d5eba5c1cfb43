"""The VGG-11-BN on ``shapes:64`` trained with 3 seeds: one table of the models (seed, epochs,
losses, unseen accuracy, the weights' SHA-256) and one of ``unseen`` per method, mean ± sample
std over the 3 models (one run each, evaluation seed 0), groups included. Paired differences:
``python docs/results/paired.py docs/results/shapes64-vgg11bn-seeds/seed-*/unseen/results.json
A B``.

Run: ``python docs/results/vgg_seeds.py`` (writes ``shapes64-vgg11bn-seeds/results.md``).
"""

import json
from pathlib import Path

import numpy as np

from repinterp.report.names import method_label

FOLDER = Path(__file__).parent / "shapes64-vgg11bn-seeds"
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
    if not values:
        return "n/a"
    return (
        f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}"
        if len(values) > 1
        else f"{values[0]:.2f}"
    )


def main() -> None:
    finished = FOLDER.glob("seed-*/unseen/results.json")
    seeds = sorted((p.parent.parent for p in finished), key=lambda p: int(p.name.split("-")[1]))
    summaries = [json.loads((s / "summary.json").read_text()) for s in seeds]
    results = [json.loads((s / "unseen" / "results.json").read_text()) for s in seeds]
    lines = [
        f"# VGG-11-BN on `shapes:64`, {len(seeds)} training seeds",
        "",
        "Made by `python docs/results/vgg_seeds.py` from `seed-*/summary.json` and "
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
        f"`unseen`, mean ± sample std over the {len(seeds)} models (one run each, seed 0; "
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
    text = "\n".join(lines) + "\n"
    (FOLDER / "results.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
