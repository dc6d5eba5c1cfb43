"""Peak memory of fit against |R| and the feature size.

Each fit runs in its own process, on a Dataset of random 1 x 28 x 28 images made when asked
(never all in RAM), |Q| = 50, batch 256: after a warm-up fit the peak resident set size is
reset (``/proc/self/clear_refs``), and the growth of the peak over the resident set before the
fit is what the fit needed (glibc is told to return every freed block over 128 KiB to the
system, ``MALLOC_MMAP_THRESHOLD_``, so that the peak counts live memory, not the allocator's
cache). Two models: a narrow CNN (8 x 14 x 14 = 1,568 features at the target layer) and the
small CNN (32 x 14 x 14 = 6,272); two ways to fit: in memory, and as ``repinterp fit`` does
(shards and the feature maps written to disk). Goal: flat in the feature size, growing only
with |R| x |Q|.

Usage: python benchmarks/bench_memory.py [--sizes 1000,10000,50000]
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

N_BOUNDARIES = 50
CLASSES = 10
BATCH = 256


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def child(n: int, width: int, on_disk: bool) -> dict[str, float]:
    """Fit once in this process; MiB of resident memory before and at the peak of the fit."""
    import torch
    from common import RandomImages, small_cnn

    from repinterp import RepresentativeInterpreter
    from repinterp.store.shards import Shards

    torch.set_num_threads(1)
    model = small_cnn(CLASSES, width)
    ri = RepresentativeInterpreter(model, "relu2", N_BOUNDARIES, batch_size=BATCH, progress=False)
    ri.fit(RandomImages(2 * BATCH, (1, 28, 28), seed=1))  # warm-up: allocator, kernels
    folder = tempfile.TemporaryDirectory(prefix="bench-memory-")
    shards = Shards(Path(folder.name) / "partial") if on_disk else None
    reference = RandomImages(n, (1, 28, 28))
    try:
        Path("/proc/self/clear_refs").write_text("5")  # peak := current
        reset = True
    except OSError:
        reset = False  # the peak then also counts the warm-up
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    ri.fit(reference, keep_features=on_disk, shards=shards)
    seconds = time.perf_counter() - start
    peak = _status_kib("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    index = ri.index
    kept = sum(t.numel() * t.element_size() for t in index.tensors().values())
    features = Path(index.files["features.npy"]).stat().st_size if on_disk else 0
    folder.cleanup()
    return {
        "before_mib": before / 1024,
        "peak_mib": peak / 1024,
        "growth_mib": (peak - before) / 1024,
        "index_mib": kept / 2**20,
        "features_on_disk_mib": features / 2**20,
        "fit_s": seconds,
        "peak_reset": reset,
    }


def main() -> None:
    from common import parser, table, write

    p = parser(__doc__, "memory")
    p.add_argument("--sizes", default="1000,10000,50000", help="|R| values (1000,10000,50000)")
    args = p.parse_args()
    runs = []
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    for width in (8, 32):
        for on_disk in (False, True):
            for n in map(int, args.sizes.split(",")):
                out = subprocess.run(
                    [sys.executable, __file__, "--child", str(n), str(width), str(int(on_disk))],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=env,
                ).stdout
                runs.append(
                    {
                        "n_reference": n,
                        "features": width * 196,
                        "on_disk": on_disk,
                        **json.loads(out),
                    }
                )
    table(
        [
            "|R|",
            "features",
            "shards + features on disk",
            "RSS before (MiB)",
            "peak growth (MiB)",
            "index (MiB)",
            "features written (MiB)",
        ],
        [
            [
                r["n_reference"],
                r["features"],
                "yes" if r["on_disk"] else "no",
                r["before_mib"],
                r["growth_mib"],
                r["index_mib"],
                r["features_on_disk_mib"],
            ]
            for r in runs
        ],
    )
    slopes = []
    for features in sorted({r["features"] for r in runs}):
        for on_disk in (False, True):
            first, *_, last = [
                r for r in runs if (r["features"], r["on_disk"]) == (features, on_disk)
            ]
            per = 10_000 / (last["n_reference"] - first["n_reference"])
            slopes.append(
                {
                    "features": features,
                    "on_disk": on_disk,
                    "peak_mib_per_10k": per * (last["growth_mib"] - first["growth_mib"]),
                    "index_mib_per_10k": per * (last["index_mib"] - first["index_mib"]),
                }
            )
    print("\ngrowth of the peak with |R| against that of the index, |R| x (|Q| + classes + 2):")
    table(
        ["features", "on disk", "peak MiB per 10k images", "index MiB per 10k images"],
        [
            [s["features"], s["on_disk"], s["peak_mib_per_10k"], s["index_mib_per_10k"]]
            for s in slopes
        ],
    )
    results = {"n_boundaries": N_BOUNDARIES, "classes": CLASSES, "batch_size": BATCH, "threads": 1}
    write({**results, "runs": runs, "slopes": slopes}, args)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        n, width, on_disk = map(int, sys.argv[2:])
        print(json.dumps(child(n, width, bool(on_disk))))
    else:
        main()
