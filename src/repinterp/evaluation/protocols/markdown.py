"""The Markdown report of a protocol's results (`results_markdown`): its header (model, images,
runs, machine, times), then the protocol's own tables (each from its module)."""

from __future__ import annotations

import json
from typing import Any

from ..primary import primary_section
from .cells import cell, with_runs
from .coverage import coverage_markdown
from .q_sweep import q_sweep_markdown
from .reference import reference_markdown
from .sanity import sanity_markdown
from .shortcut import shortcut_markdown
from .similar import similar_markdown
from .unseen import unseen_markdown

__all__ = ["results_markdown"]


_MARKDOWN = {
    "unseen": unseen_markdown,
    "coverage": coverage_markdown,
    "reference": reference_markdown,
    "q-sweep": q_sweep_markdown,
    "similar": similar_markdown,
    "sanity": sanity_markdown,
    "shortcut": shortcut_markdown,
}


def _machine(results: dict[str, Any]) -> str:
    machine = results["machine"]
    return (
        f"{machine['cpus']} CPU cores, {machine['torch_threads']} torch thread(s), "
        f"torch {machine['torch']}, {machine['platform']}"
    )


def _header(results: dict[str, Any]) -> str:
    setup, options = results["setup"], results["options"]
    sizes = setup.get("run_sizes") or [(setup["n_reference"], setup["n_unseen"])]
    images = " or ".join(f"{r} reference / {u} unseen" for r, u in sizes)
    split = (
        "each run draws its own stratified images"
        if options.get("split") == "per-run"
        else "the same images in every run"
    )
    accuracy = (
        with_runs(results, {"a": results["model_acc"]})["a"] if "model_acc" in results else None
    )
    model_acc = (
        f" The model's accuracy on the runs' images: {cell(accuracy, 'reference')}% (reference), "
        f"{cell(accuracy, 'unseen')}% (unseen)."
        if accuracy
        else ""
    )
    spread = "mean ± std" if results["runs"] > 1 else "one run, no spread"
    if setup.get("model_seeds"):
        held_out = ", ".join(f"{run['model']['held_out_acc']:.1f}" for run in results["per_run"])
        model_acc += (
            f" Each run on its own model, trained by the recipe "
            f"`{json.dumps(setup['recipe'])}` with seeds {setup['model_seeds']} (run r on "
            f"model r; held-out accuracy {held_out}%)."
        )
    return (
        f"Model `{setup['model']}` at layer `{setup['target_layer']}`; {images} images ({split}); "
        f"|Q| = {options['n_boundaries']}, |V| = {results['n_regions']}; "
        f"{results['runs']} run(s) with seeds {results['seeds']}; {spread}; "
        f"{results['time_s']:.0f} s in all on {setup['device']} ({_machine(results)}); per run, "
        f"RI's index took {results['ri_fit_s']:.1f} s"
        + (f" and k-means {results['kmeans_s']:.1f} s" if results["kmeans_s"] else "")
        + " (not in the methods' times, which cover making the explanations, not scoring them)."
        + model_acc
    )


def results_markdown(results: dict[str, Any], plots: list[str] | None = None) -> str:
    """A Markdown report of ``evaluate``'s results, with tables shaped like the paper's.

    Args:
        results: what `evaluate` returned.
        plots: file names of plots to link below the tables.
    """
    lines = [
        f"### `{results['protocol']}` on `{results['dataset']}`",
        "",
        *([*primary_section(results["primary"]), ""] if "primary" in results else []),
        _header(results),
        "",
        *([f"Command: `{results['command']}`", ""] if "command" in results else []),
        *_MARKDOWN[results["protocol"]](results),
        "",
        *[f"![{name}]({name})" for name in plots or []],
    ]
    return "\n".join(lines).rstrip() + "\n"
