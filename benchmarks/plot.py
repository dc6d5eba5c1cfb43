"""One figure of the four speed and memory benchmarks, from their JSON results.

Usage: python benchmarks/plot.py [--results docs/bench] [--out docs/performance.png]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib.pyplot as plt
from common import RESULTS


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=RESULTS, help="folder of the JSON results")
    p.add_argument("--out", type=Path, default=RESULTS.parent / "performance.png")
    args = p.parse_args()
    load = {
        name: json.loads((args.results / f"{name}.json").read_text())
        for name in ("engine", "heatmap", "explain", "memory")
    }
    fig, ((a, b), (c, d)) = plt.subplots(2, 2, figsize=(12, 9))

    engine = load["engine"]
    # (key in the JSON, its peer's prefix, label): the Dataset fit against the forward pass over
    # the same DataLoader, the rest against the forward pass over the tensor
    kinds = [
        ("floor", "", "floor: psi + head + projections"),
        ("fit", "", "fit, in memory"),
        ("fit_sharded", "", "fit, shards on disk"),
        ("fit_dataset", "loader_", "fit from a Dataset / forward over its DataLoader"),
    ]
    for i, case in enumerate(engine["cases"].values()):
        for j, (key, peer, label) in enumerate(kinds):
            if f"{peer}{key}_paired_ratio" in case:
                x = i + 0.2 * (j - 1.5)
                a.bar(
                    x,
                    case[f"{peer}cpu_{key}_paired_ratio"],
                    0.18,
                    color="0.7" if key == "floor" else f"C{j - 1}",
                    label=label if i == 0 else None,
                )
                wall = case[f"{peer}{key}_paired_ratio"]
                a.plot(x, wall, "k.", label="wall time" if i == 0 and j == 0 else None)
    a.axhline(engine["goal"], color="k", ls="--", lw=1, label=f"goal {engine['goal']}")
    a.set_xticks(
        range(len(engine["cases"])),
        [f"{n}\n|R| = {c['n_reference']}" for n, c in engine["cases"].items()],
    )
    a.set_ylabel("fit / forward, CPU time (median of rounds)")
    a.set_ylim(0, max(1.75, a.get_ylim()[1] + 0.45))  # room above the bars for the legend
    a.set_title("fit against a plain forward pass")
    a.legend(fontsize=7.5, ncol=2, loc="upper center")

    heat = load["heatmap"]
    names = {
        "forward": "forward\n(no map)",
        "psi": "psi\n(RI's floor)",
        "ri": "RI",
        "gradcam": "Grad-CAM",
        "gradcampp": "Grad-CAM++",
        "scorecam": "Score-CAM",
    }
    ms = heat["ms_per_image"]
    b.bar(
        range(len(names)), [ms[k] for k in names], color=["grey", "silver", "C0", "C1", "C2", "C3"]
    )
    b.set_xticks(range(len(names)), list(names.values()), fontsize=8)
    b.set_yscale("log")
    b.axhline(
        heat["goal"] * ms["gradcam"],
        color="k",
        ls="--",
        lw=1,
        label=f"goal: {heat['goal']} x Grad-CAM",
    )
    b.set_ylabel("ms per image")
    b.set_title(f"heat maps, {heat['model']}", fontsize=9)
    b.legend(fontsize=8)

    for name, device, style in (("cover", "CPU", "o-"), ("cover_cuda", "H100", "s-")):
        path = args.results / f"{name}.json"
        if not path.is_file():
            continue
        cases = json.loads(path.read_text())["cases"]
        mine = [case for key, case in cases.items() if key.startswith("synthetic")]
        # CPU results keep the best round (a shared machine); CUDA ones the median.
        best = "_best" if "single_incremental_best_ms" in mine[0] else ""
        sizes = [case["n_reference"] for case in mine]
        times = [case[f"single_{case['single_auto']}{best}_ms"] for case in mine]
        c.loglog(sizes, times, style, label=f"{device}, one input")
        old = [
            (n, case[f"single_previous{best}_ms"])
            for n, case in zip(sizes, mine, strict=True)
            if "single_previous_ms" in case
        ]
        old_sizes, old_times = zip(*old, strict=True)
        c.loglog(old_sizes, old_times, style[0] + ":", color="grey", label=f"{device}, 0.1's cover")
    c.plot([100_000, 1_000_000], [2, 25], "r*", ms=12, label="CPU goals (2 ms, 25 ms)")
    c.plot([1_000_000], [2], "m*", ms=12, label="GPU goal at 1M (2 ms)")
    c.set_xlabel("|R|")
    c.set_ylabel("greedy cover, ms")
    c.set_title("cover latency of one input, random sides, |Q| = 50")
    c.legend(fontsize=8)

    runs = load["memory"]["runs"]
    for i, features in enumerate(sorted({r["features"] for r in runs})):
        for on_disk, style in ((False, "o-"), (True, "s--")):
            mine = [r for r in runs if (r["features"], r["on_disk"]) == (features, on_disk)]
            d.plot(
                [r["n_reference"] for r in mine],
                [r["growth_mib"] for r in mine],
                style,
                color=f"C{i}",
                label=f"{features} features" + (", shards + features on disk" if on_disk else ""),
            )
    index = [r for r in runs if r["features"] == runs[0]["features"] and not r["on_disk"]]
    d.plot(
        [r["n_reference"] for r in index],
        [r["index_mib"] for r in index],
        "k:",
        label="the index itself",
    )
    d.set_xlabel("|R|")
    d.set_ylabel("peak RSS growth during fit, MiB")
    d.set_title("memory of fit")
    d.legend(fontsize=8)

    cpu = engine["machine"]
    fig.suptitle(
        f"repinterp speed and memory: {cpu['cpu']}, {cpu['cores']} cores (shared), "
        f"{engine['threads']} torch thread(s), torch {cpu['torch']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"figure written to {args.out}")


if __name__ == "__main__":
    main()
