"""Plots of the evaluation protocols' results (``repinterp.evaluation.evaluate``).

Every function takes the results dict and a PNG path; `save_plots` picks those of a protocol.
Error bars are one standard deviation over the runs.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ..evaluation.names import method_label
from ..store.outputs import write_outputs

__all__ = ["sanity_steps", "save_plots"]

DPI = 90


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _nan(values: Any) -> Any:
    """JSON's None back to NaN, for plotting."""
    if isinstance(values, list):
        return [_nan(v) for v in values]
    return float("nan") if values is None else values


def _bars(ax: Any, names: list[str], blocks: list[dict[str, Any]], key: str, title: str) -> None:
    """One bar per block: ``block[key]`` with ``block[key + "_std"]`` as error bar."""
    means = [_nan(b[key]) for b in blocks]
    stds = [_nan(b[f"{key}_std"]) for b in blocks]
    colours = [f"C{i}" for i in range(len(names))]
    ax.bar(range(len(names)), means, yerr=stds, capsize=3, color=colours)
    many = len(names) > 5
    ax.set_xticks(range(len(names)), names, rotation=50 if many else 20, ha="right")
    ax.tick_params(axis="x", labelsize=7 if many else 8)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def _save(fig: Any, path: Path) -> Path:
    """Write ``fig`` as the PNG ``path``, replacing any earlier file by a rename
    (`write_outputs`)."""
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=DPI)
    _pyplot().close(fig)
    write_outputs({Path(path): png.getvalue()})
    return path


def _title(results: dict[str, Any]) -> str:
    return f"{results['dataset']}, {results['runs']} run(s)"


def plot_unseen(results: dict[str, Any], path: Path) -> Path:
    """mAD pooled and per interpretation, and the perturbation metrics present, of every
    method on the unseen set (bars)."""
    plt = _pyplot()
    methods = results["methods"]
    panels = [
        (key, title)
        for key, title in (
            ("mAD", "mAD (%), lower is better"),
            ("mAD_interp", "mAD per interpretation (%)"),
            ("ROAD", "ROAD (pp), higher is better"),
            ("deletion", "deletion AUC (%), lower"),
            ("insertion", "insertion AUC (%), higher"),
        )
        if all(key in m for m in methods.values())
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(2.6 * len(panels), 3.4), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels, strict=True):
        _bars(ax, list(methods), list(methods.values()), key, title)
    fig.suptitle(f"Unseen images: {_title(results)}", fontsize=9)
    return _save(fig, path)


def plot_coverage(results: dict[str, Any], path: Path) -> Path:
    """ACU-GT, ACU-MD and CVR of the regions on the reference and unseen sets (bars), with the
    model's accuracy dashed."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.8), sharey=True)
    keys = ["ACU-GT", "ACU-MD", "CVR"]
    for ax, part in zip(axes, ("reference", "unseen"), strict=True):
        block = results[part]
        bars = [{"value": block[k], "value_std": block[f"{k}_std"]} for k in keys]
        _bars(ax, keys, bars, "value", f"{part} set (%)")
        ax.axhline(block["model_acc"], ls="--", color="k", lw=1, label="ACU-GT of F")
        finite = [v for v in _nan([block[k] for k in keys]) if v == v]
        ax.set_ylim(max(0.0, min([*finite, block["model_acc"]]) - 5), 100.5)
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle(f"Regions of RI: {_title(results)}", fontsize=9)
    return _save(fig, path)


def _curves(
    ax: Any, xs: list[int], series: dict[str, dict[str, Any]], key: str, title: str
) -> None:
    for i, (name, block) in enumerate(series.items()):
        ax.errorbar(
            xs,
            _nan(block[key]),
            yerr=_nan(block[f"{key}_std"]),
            label=name,
            color=f"C{i}",
            marker="o",
            ms=3,
            capsize=2,
            lw=1,
        )
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)


def plot_reference(results: dict[str, Any], path: Path) -> Path:
    """mAD and mAI against K, the number of similar reference images (Appendix C): a row for
    each method on its own S and, when ``results`` has it, a row for every method on RI's S
    (``common``); the legend right of the plots."""
    plt = _pyplot()
    ks = results["options"]["ks"]
    readings = {"own S": results["methods"]}
    if results.get("common"):
        readings["RI's S"] = results["common"]
    fig, rows = plt.subplots(len(readings), 2, figsize=(10, 2.8 * len(readings)), squeeze=False)
    for axes, (reading, series) in zip(rows, readings.items(), strict=True):
        labelled = {method_label(name): block for name, block in series.items()}
        for ax, key, better in zip(axes, ("mAD", "mAI"), ("lower", "higher"), strict=True):
            _curves(ax, ks, labelled, key, f"{key} (%) on {reading}, {better} is better")
            ax.set_xscale("log")
            ax.set_xticks(ks, [str(k) for k in ks])
            ax.set_xlabel("K (top-K similar images)", fontsize=8)
    rows[0][1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(f"Reference images: {_title(results)}", fontsize=9)
    return _save(fig, path)


def plot_q_sweep(results: dict[str, Any], path: Path) -> Path:
    """ACU-GT, ACU-MD and CVR of the regions against |Q|, one line per sampling of Q, with the
    model's dashed (Appendix E)."""
    plt = _pyplot()
    qs = results["options"]["q_values"]
    samplings = results["samplings"]
    fig, axes = plt.subplots(2, 3, figsize=(9, 4.6), sharex=True)
    for row, part in zip(axes, ("reference", "unseen"), strict=True):
        for ax, key in zip(row, ("ACU-GT", "ACU-MD", "CVR"), strict=True):
            series = {name: block[part] for name, block in samplings.items()}
            _curves(ax, qs, series, key, f"{key} (%), {part} set")
            first = next(iter(samplings.values()))[part]
            model = first["model_acc"] if key == "ACU-GT" else [100.0] * len(qs)
            ax.plot(qs, model, "k--", lw=1, label="F")
    for ax in axes[1]:
        ax.set_xlabel("|Q|", fontsize=8)
    axes[0][2].legend(fontsize=7)
    fig.suptitle(f"|Q| sweep: {_title(results)}", fontsize=9)
    return _save(fig, path)


def plot_similar(results: dict[str, Any], path: Path) -> Path:
    """Purity@k (sub-concept where known, else class) and the reused map's mAD@k of each
    ranking (lines), and the heat-map energy in the mask where known (bars)."""
    plt = _pyplot()
    ks = results["options"]["purity_ks"]
    kind = (
        "sub-concept"
        if any("sub-concept" in k for k in next(iter(results["rankings"].values())))
        else "class"
    )
    panels = [(f"{kind} purity@", f"{kind} purity@k (%)"), ("mAD@", "mAD@k of the reused map (%)")]
    fig, axes = plt.subplots(1, 3 if "methods" in results else 2, figsize=(11, 2.8))
    for ax, (prefix, title) in zip(axes, panels, strict=False):
        series = {
            name: {
                "v": [block[f"{prefix}{k}"] for k in ks],
                "v_std": [block[f"{prefix}{k}_std"] for k in ks],
            }
            for name, block in results["rankings"].items()
        }
        _curves(ax, ks, series, "v", title)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("k", fontsize=8)
    axes[0].legend(fontsize=6)
    if "methods" in results:
        methods = results["methods"]
        _bars(axes[2], list(methods), list(methods.values()), "energy", "heat energy in mask (%)")
        axes[2].axhline(results["mask_area"], ls="--", color="k", lw=1, label="mask area")
        axes[2].legend(fontsize=7)
    fig.suptitle(f"Similar images: {_title(results)}", fontsize=9)
    return _save(fig, path)


def sanity_steps(results: dict[str, Any]) -> list[str]:
    """The steps of ``sanity``'s cascade: ``original``, then each randomised layer, the top
    one first."""
    first = next(iter(results["methods"].values()))["MPRT"]
    return [key for key in first if not key.endswith("_std")]


def plot_sanity(results: dict[str, Any], path: Path) -> Path:
    """The mean Spearman correlation with the trained model's maps per step of the cascading
    randomisation, one line per method, and random logit's SSIM (bars)."""
    plt = _pyplot()
    steps = sanity_steps(results)
    methods = results["methods"]
    fig, axes = plt.subplots(
        1, 2, figsize=(9, 3.2), gridspec_kw={"width_ratios": [max(3, len(steps)), 2]}
    )
    series = {
        name: {
            "v": [block["MPRT"][s] for s in steps],
            "v_std": [block["MPRT"][f"{s}_std"] for s in steps],
        }
        for name, block in methods.items()
    }
    _curves(axes[0], list(range(len(steps))), series, "v", "Spearman ρ with the trained maps")
    for i, (name, block) in enumerate(methods.items()):
        if "reseeded" in block:  # the method's own noise floor: its draw made anew
            floor = block["reseeded"]["Spearman"]
            label = f"{name}'s floor ({floor:.2f})"
            axes[0].axhline(floor, color=f"C{i}", ls="--", lw=0.8, label=label)
    axes[0].set_xticks(range(len(steps)), steps, rotation=30, ha="right", fontsize=7)
    axes[0].set_xlabel("randomised down to (cascading, from the top)", fontsize=8)
    axes[0].axhline(0, color="k", lw=0.5)
    axes[0].legend(fontsize=7)
    _bars(axes[1], list(methods), list(methods.values()), "RandomLogit", "random logit: SSIM")
    fig.suptitle(f"Sanity checks: {_title(results)}", fontsize=9)
    return _save(fig, path)


def plot_shortcut(results: dict[str, Any], path: Path) -> Path:
    """The F1 of each grouping's best group against the marked images, and each map's share
    on the mark's box beside the box's area (bars)."""
    fig, axes = _pyplot().subplots(1, 2, figsize=(9, 2.8))
    groupings, maps = results["groupings"], results["maps"]
    _bars(axes[0], list(groupings), list(groupings.values()), "f1_marked", "F1 of marked images")
    _bars(axes[1], list(maps), list(maps.values()), "mass_in_box", "map on the mark's box (%)")
    axes[1].axhline(results["box_area"], ls="--", color="k", lw=1, label="box area")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"Shortcut: {_title(results)}", fontsize=9)
    return _save(fig, path)


_PLOTS = {
    "unseen": plot_unseen,
    "coverage": plot_coverage,
    "reference": plot_reference,
    "q-sweep": plot_q_sweep,
    "similar": plot_similar,
    "sanity": plot_sanity,
    "shortcut": plot_shortcut,
}


def save_plots(results: dict[str, Any], out: str | Path) -> list[Path]:
    """Write the PNG plots of ``results``' protocol into the folder ``out``.

    Returns:
        The files written (``<dataset>-<protocol>.png``).
    """
    name = f"{results['dataset'].replace(':', '-').replace('/', '_')}-{results['protocol']}.png"
    return [_PLOTS[results["protocol"]](results, Path(out) / name)]
