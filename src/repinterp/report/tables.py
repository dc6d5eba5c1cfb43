"""Markdown and JSON reports of the evaluation protocols' results (``evaluation.evaluate``).

`results_markdown` lays the numbers out in tables shaped like the paper's; `write_results`
writes ``results.json``, ``results.md`` and the protocol's plots (`report.plots`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .plots import save_plots

__all__ = ["results_markdown", "write_results"]


def _cell(block: dict[str, Any], key: str, index: int | None = None, best: bool = False) -> str:
    mean, std = block.get(key), block.get(f"{key}_std")
    if index is not None:
        mean, std = mean[index], std[index]
    if mean is None or not math.isfinite(mean):
        return "n/a"
    text = f"{mean:.2f} ± {std:.2f}"
    return f"**{text}**" if best else text


def _best(methods: dict[str, Any], key: str, lower: bool, index: int | None = None) -> str:
    def value(name: str) -> float:
        v = methods[name][key] if index is None else methods[name][key][index]
        return v if v is not None and math.isfinite(v) else math.inf * (1 if lower else -1)

    return (min if lower else max)(methods, key=value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _md_methods(results: dict[str, Any]) -> list[str]:
    """Table 1: mAD and mAI of each method, the best in bold."""
    methods = results["methods"]
    best_ad, best_ai = _best(methods, "mAD", True), _best(methods, "mAI", False)
    rows = [
        [
            name,
            _cell(m, "mAD", best=name == best_ad),
            _cell(m, "mAI", best=name == best_ai),
            f"{m['time_s']:.1f}",
        ]
        for name, m in methods.items()
    ]
    return _table(["Method", "mAD (%)", "mAI (%)", "time (s)"], rows)


def _md_coverage(results: dict[str, Any]) -> list[str]:
    """Table 2: the regions' ACU-GT, ACU-MD and CVR beside the model's."""
    header = ["Set", "ACU-GT of RI", "ACU-GT of F", "ACU-MD of RI", "ACU-MD of F", "CVR of RI"]
    rows = [
        [
            label,
            _cell(results[part], "ACU-GT"),
            f"{results[part]['model_acc']:.2f}",
            _cell(results[part], "ACU-MD"),
            "100.00",
            _cell(results[part], "CVR"),
            "100.00",
        ]
        for part, label in (("reference", "Ref."), ("unseen", "Unseen"))
    ]
    return _table([*header, "CVR of F"], rows)


def _md_reference(results: dict[str, Any]) -> list[str]:
    """Appendix C: mAD and mAI per K, then run times and the mean size of the similar sets."""
    methods, ks = results["methods"], results["options"]["ks"]
    lines = []
    for key, lower in (("mAD", True), ("mAI", False)):
        best = [_best(methods, key, lower, i) for i in range(len(ks))]
        rows = [
            [name, *[_cell(m, key, i, best[i] == name) for i in range(len(ks))]]
            for name, m in methods.items()
        ]
        lines += [f"{key} (%) over the top-K similar reference images:", ""]
        lines += [*_table(["Method", *[f"K = {k}" for k in ks]], rows), ""]
    rows = [
        [name, f"{m['time_s']:.1f}", ", ".join(f"{s:.1f}" for s in m["similar"])]
        for name, m in methods.items()
    ]
    return lines + _table(["Method", "time (s)", "mean size of S per K"], rows)


def _md_q_sweep(results: dict[str, Any]) -> list[str]:
    """Appendix E: the regions' metrics for each |Q|."""
    columns = [
        (part, key) for part in ("reference", "unseen") for key in ("ACU-GT", "ACU-MD", "CVR")
    ]
    rows = [
        [str(q), *[_cell(results[part], key, i) for part, key in columns]]
        for i, q in enumerate(results["options"]["q_values"])
    ]
    header = ["|Q|", *[f"{key} {part}" for part, key in columns]]
    model = f"ACU-GT of F: {results['reference']['model_acc'][0]:.2f} (reference), "
    model += f"{results['unseen']['model_acc'][0]:.2f} (unseen)."
    return [*_table(header, rows), "", model]


def _md_similar(results: dict[str, Any]) -> list[str]:
    """Purity@k of the rankings, then the pointing game of the methods."""
    ks, rankings, methods = results["options"]["purity_ks"], results["rankings"], results["methods"]
    best = {k: _best(rankings, f"purity@{k}", False) for k in ks}
    rows = [
        [name, *[_cell(r, f"purity@{k}", best=best[k] == name) for k in ks]]
        for name, r in rankings.items()
    ]
    best_energy = _best(methods, "energy", False)
    energy = [
        [name, _cell(m, "energy", best=name == best_energy), f"{m['time_s']:.1f}"]
        for name, m in methods.items()
    ]
    return [
        "Share of the top-k similar reference images with the input's sub-concept (%):",
        "",
        *_table(["Ranking", *[f"purity@{k}" for k in ks]], rows),
        "",
        "Reference images covered by RI's P(x), besides the input, on average: "
        f"{results['covered_others']:.1f}.",
        "",
        "Share of the heat-map energy inside the object's mask on the unseen set (%); the mask "
        f"covers {results['mask_area']:.1f}% of the pixels on average:",
        "",
        *_table(["Method", "energy in mask (%)", "time (s)"], energy),
    ]


_MARKDOWN = {
    "unseen": _md_methods,
    "coverage": _md_coverage,
    "reference": _md_reference,
    "q-sweep": _md_q_sweep,
    "similar": _md_similar,
}


def _machine(results: dict[str, Any]) -> str:
    machine = results["machine"]
    return (
        f"{machine['cpus']} CPU cores, {machine['torch_threads']} torch thread(s), "
        f"torch {machine['torch']}, {machine['platform']}"
    )


def results_markdown(results: dict[str, Any], plots: list[str] | None = None) -> str:
    """A Markdown report of ``evaluate``'s results, with tables shaped like the paper's.

    Args:
        results: what `evaluate` returned.
        plots: file names of plots to link below the tables.
    """
    setup, options = results["setup"], results["options"]
    lines = [
        f"### `{results['protocol']}` on `{results['dataset']}`",
        "",
        f"Model `{setup['model']}` at layer `{setup['target_layer']}`; "
        f"{setup['n_reference']} reference / {setup['n_unseen']} unseen images; "
        f"|Q| = {options['n_boundaries']}, |V| = {results['n_regions']}; "
        f"{results['runs']} run(s) with seeds {results['seeds']}; mean ± std; "
        f"{results['time_s']:.0f} s in all on {setup['device']} ({_machine(results)}); per run, "
        f"RI's index took {results['ri_fit_s']:.1f} s"
        + (f" and k-means {results['kmeans_s']:.1f} s" if results["kmeans_s"] else "")
        + " (not in the methods' times, which cover making the explanations, not scoring them).",
        "",
        *([f"Command: `{results['command']}`", ""] if "command" in results else []),
        *_MARKDOWN[results["protocol"]](results),
        "",
        *[f"![{name}]({name})" for name in plots or []],
    ]
    return "\n".join(lines).rstrip() + "\n"


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _json_ready(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_results(results: dict[str, Any], out: str | Path) -> list[Path]:
    """Write ``results.json``, ``results.md`` and the protocol's PNG plots into ``out``.

    Returns:
        The files written.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plots = save_plots(results, out)
    (out / "results.json").write_text(json.dumps(_json_ready(results), indent=2) + "\n")
    (out / "results.md").write_text(results_markdown(results, [p.name for p in plots]))
    return [out / "results.json", out / "results.md", *plots]
