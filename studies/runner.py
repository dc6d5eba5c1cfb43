"""What the studies share: seeds x settings -> rows -> mean ± std -> ``results.json`` and
``results.md``.

A study measures one row (a dict of numbers) per setting and seed (`sweep`), summarises each
setting's rows over the seeds (`summary`, shown by `cell`), and writes its files with
`publish`, through `repinterp.store.outputs.write_outputs` (each file replaced by a rename,
never half-written). `main` is a study's ``python -m studies.NAME`` entry point.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from repinterp.evaluation.protocols import mean_std
from repinterp.evaluation.setup import Setup, load_setup, recipe_for
from repinterp.store.model_cache import default_cache
from repinterp.store.outputs import write_outputs

__all__ = [
    "RESULTS",
    "cell",
    "draw",
    "main",
    "provenance",
    "publish",
    "results_files",
    "setup_of",
    "size_parser",
    "summary",
    "sweep",
    "tables",
]

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
"""Where the studies' results are published (docs/results/)."""

Setting = TypeVar("Setting")


def provenance(name: str, argv: Sequence[str] | None = None) -> dict[str, str]:
    """The command that made a run of the study ``name`` (``argv``: the process's arguments by
    default) and the machine it ran on."""
    args = sys.argv[1:] if argv is None else list(argv)
    return {
        "command": " ".join(["OMP_NUM_THREADS=1 PYTHONPATH=src python -m", name, *args]),
        "machine": f"{platform.platform()}, torch {torch.__version__}, 1 thread",
    }


def size_parser(description: str, datasets: Sequence[str], out: Path) -> argparse.ArgumentParser:
    """The options a run over model seeds shares: seeds, data sets, draw sizes, the model
    cache, the epochs and the output folder."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", type=int, default=5, help="model seeds 0..N-1 (5)")
    parser.add_argument("--datasets", default=",".join(datasets), help="comma-separated")
    parser.add_argument("--reference", type=int, default=1000, help="reference images a seed")
    parser.add_argument("--unseen", type=int, default=300, help="unseen images a seed")
    parser.add_argument(
        "--model-cache", type=Path, default=default_cache(), help="(~/.cache/repinterp/models)"
    )
    parser.add_argument("--epochs", type=int, default=None, help="override (smoke tests only)")
    parser.add_argument("--out", type=Path, default=out)
    return parser


def setup_of(dataset: str, args: argparse.Namespace) -> Setup:
    """The data set and its ``--seeds`` models, trained by its recipe (``--epochs`` epochs
    where given) through ``--model-cache`` when missing."""
    recipe = recipe_for(dataset)
    if args.epochs is not None:
        recipe = dataclasses.replace(recipe, epochs=args.epochs)
    return load_setup(
        dataset, n_unseen=None, model_seeds=args.seeds, model_cache=args.model_cache, recipe=recipe
    )


def draw(setup: Setup, seed: int, args: argparse.Namespace) -> Setup:
    """Seed ``seed``'s model and its own stratified draw of ``--reference`` / ``--unseen``."""
    run = setup.for_run(seed)
    shares = (args.reference / len(run.reference), args.unseen / len(run.unseen))
    return run.draw(seed, (min(1.0, shares[0]), min(1.0, shares[1])))


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    """Mean and sample std over the rows (the seeds) of every float of the first row (NaN
    values, e.g. the margin of no image outside the main polytope, left out; NaN when all are;
    std 0 for one value)."""
    out = {}
    for key in [k for k, v in rows[0].items() if isinstance(v, float)]:
        values = np.array([r[key] for r in rows], dtype=float)
        values = values[np.isfinite(values)]
        spread = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
        out[key] = [float(values.mean()) if len(values) else float("nan"), spread]
    return out


def cell(stats: dict[str, list[float]], key: str, digits: int = 1) -> str:
    """``mean ± std`` of a key of a `summary` (`repinterp.evaluation.protocols.mean_std`), or
    n/a."""
    return mean_std(*stats[key], digits) if key in stats else "n/a"


def sweep(
    settings: Iterable[Setting],
    seeds: Iterable[int],
    measure: Callable[[Setting, int], dict[str, Any]],
    label: Callable[[Setting], str] = str,
) -> dict[str, dict[str, Any]]:
    """Every setting over every seed: ``measure(setting, seed)`` gives one row; each setting's
    block is ``{"seeds": its rows, "mean_std": summary(rows)}``, keyed by ``label(setting)``,
    in the order of ``settings`` (seeds in their order within one)."""
    seeds = list(seeds)
    out = {}
    for setting in settings:
        rows = []
        for seed in seeds:
            start = time.perf_counter()
            rows.append(measure(setting, seed))
            print(f"{label(setting)} seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
        out[label(setting)] = {"seeds": rows, "mean_std": summary(rows)}
    return out


def publish(out: Path, files: dict[str, str | bytes]) -> None:
    """Write ``files`` (name: text or bytes) into the folder ``out`` (made if missing), each
    replaced by a rename (`repinterp.store.outputs.write_outputs`)."""
    out.mkdir(parents=True, exist_ok=True)
    write_outputs(
        {
            out / name: data if isinstance(data, bytes) else data.encode()
            for name, data in files.items()
        }
    )


def results_files(results: dict[str, Any], markdown: str) -> dict[str, str]:
    """``results.json`` (indented) and ``results.md``."""
    return {"results.json": json.dumps(results, indent=1) + "\n", "results.md": markdown}


def tables(markdown: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], dict]:
    """The files of a study that publishes ``results.json`` and its ``markdown`` tables."""
    return lambda results: results_files(results, markdown(results))


def main(
    name: str,
    arguments: Callable[[list[str] | None], argparse.Namespace],
    run: Callable[[argparse.Namespace], dict[str, Any]],
    files: Callable[[dict[str, Any]], dict[str, str | bytes]],
    argv: list[str] | None = None,
) -> dict[str, Any]:
    """The entry point of the study ``name`` (``studies.NAME``): parse ``argv``, ``run`` it on
    one torch thread (then the caller's count again; the results start with its `provenance`),
    `publish` ``files(results)`` into ``--out`` and print its ``results.md``; returns the
    results."""
    args = arguments(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    started = time.perf_counter()
    try:
        results = provenance(name, argv) | run(args)
    finally:
        torch.set_num_threads(threads)
    results.setdefault("seconds", time.perf_counter() - started)
    written = files(results)
    publish(args.out, written)
    print(written.get("results.md", f"written to {args.out}"))
    return results
