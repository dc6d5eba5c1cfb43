"""Decide the pre-registered primary family (issue 43; docs/results.md, "Primary family") from
its runs: the ``per_run`` of every ``docs/results/DATA-primary-S`` folder that
``docs/results/primary_runs.sh`` wrote (chunks of models of seeds S, S + 1, ...).

Each endpoint's per-model differences are pooled over its data set's chunks (each model once,
by seed), tested and Holm-corrected over the family (`repinterp.evaluation.primary.decide`).
Writes ``docs/results/primary/results.{json,md}`` and adds the family (``primary``) to each
chunk's ``results.json`` and the table to the top of its ``results.md``
(`report.results.rewrite_results`).

Run: ``python -m studies.primary``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from repinterp.evaluation.primary import FAMILY, decide, primary_table
from repinterp.report.results import rewrite_results
from repinterp.store.outputs import write_outputs

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def chunks(dataset: str) -> list[tuple[Path, dict[str, Any]]]:
    """A data set's primary chunks and their results, by first seed."""
    folders = [p for p in RESULTS.glob(f"{dataset}-primary-*") if (p / "results.json").is_file()]
    loaded = [(p, json.loads((p / "results.json").read_text())) for p in folders]
    return sorted(loaded, key=lambda c: c[1]["setup"]["model_seeds"][0])


def models(dataset: str) -> dict[int, dict[str, Any]]:
    """A data set's runs by model seed, over its chunks.

    Raises:
        ValueError: a model seed is in two chunks.
    """
    out: dict[int, dict[str, Any]] = {}
    for folder, results in chunks(dataset):
        for run in results["per_run"]:
            seed = run["model"]["seed"]
            if seed in out:
                raise ValueError(f"model seed {seed} of {dataset} is in two chunks ({folder})")
            out[seed] = run
    return out


def main() -> None:
    runs = {dataset: models(dataset) for dataset in {e.dataset for e in FAMILY}}
    differences = {
        e: [
            run["methods"][e.a][e.score] - run["methods"][e.b][e.score]
            for _, run in sorted(runs[e.dataset].items())
        ]
        for e in FAMILY
    }
    rows = decide(differences)
    seeds = {dataset: sorted(by_seed) for dataset, by_seed in sorted(runs.items())}
    family = {"primary": rows, "model_seeds": seeds}
    lines = [
        "# The primary family (pre-registered 2026-11-28, issue 43)",
        "",
        "Paired over trained models; Holm over these endpoints only; the rule is in "
        "[docs/results.md](../../results.md#primary-family-pre-registered-2026-11-28). "
        "`python -m studies.primary`.",
        "",
        *primary_table(rows),
        "",
        *[f"- `{d}`: model seeds {s or 'none yet'}" for d, s in seeds.items()],
    ]
    out = RESULTS / "primary"
    out.mkdir(exist_ok=True)
    data, text = json.dumps(family, indent=2) + "\n", "\n".join(lines) + "\n"
    write_outputs({out / "results.json": data.encode(), out / "results.md": text.encode()})
    for dataset in seeds:
        for folder, results in chunks(dataset):
            rewrite_results(results | {"primary": rows}, folder)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
