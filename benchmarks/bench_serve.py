"""Time to the viewer's first answer: ``repinterp serve`` started in a fresh process until
``/api/info`` answers, on a user's index (ResNet-18 at 64 px on an image folder of the bundled
``shapes``, `common.shapes_resnet18`, fitted by ``repinterp fit`` with its regions kept).

Also, in the same run, the seconds ``python -X importtime`` gives to importing what ``serve``
imports, and the heavy modules it must not import before its first answer (scikit-learn,
matplotlib, scipy, Quantus, pytorch-grad-cam). Goal (issue 31): first answer in under 5 s on 2
cores.

Usage: python benchmarks/bench_serve.py [--root DIR] [--repeats 3]
"""

from __future__ import annotations

import os
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import parser, shapes_resnet18, table, write

HEAVY = ("sklearn", "matplotlib", "scipy", "quantus", "pytorch_grad_cam", "cv2")
ENV = os.environ | {"PYTHONUNBUFFERED": "1"}


def _repinterp(*args: str) -> list[str]:
    return [sys.executable, "-m", "repinterp", *args]


def first_answer(index: Path, timeout: float = 300) -> float:
    """Seconds from starting ``repinterp serve`` to its first answer of ``/api/info``."""
    start = time.perf_counter()
    process = subprocess.Popen(
        _repinterp("serve", "--index", str(index), "--port", "0", "--quiet"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], timeout)
        line = process.stdout.readline() if ready else ""
        address = re.search(r"(http://\S+/)", line)
        if address is None:
            raise RuntimeError(f"serve printed no address: {line!r} {process.stderr.read()}")
        while True:
            try:
                if httpx.get(address[1] + "api/info", timeout=timeout).status_code == 200:
                    return time.perf_counter() - start
            except httpx.TransportError:
                time.sleep(0.01)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()


def imports() -> tuple[float, list[str]]:
    """Seconds of importing the modules ``serve`` needs (``-X importtime``'s cumulative), and
    the heavy modules among them."""
    code = "import repinterp.cli.parser, repinterp.web.server, repinterp.workspace"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        env=ENV,
        check=True,
    )
    rows = [line.split("|") for line in done.stderr.splitlines() if line.count("|") == 2]
    top = sum(
        int(row[1]) for row in rows if not row[2].startswith("  ") and row[1].strip().isdigit()
    )
    heavy = sorted({row[2].strip() for row in rows if row[2].strip() in HEAVY})
    return top / 1e6, heavy


def main() -> None:
    p = parser(__doc__, "serve")
    p.add_argument("--root", type=Path, help="folder for the images, weights and index (temp)")
    p.add_argument("--repeats", type=int, default=3, help="serve starts timed (3)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = args.root or Path(scratch)
        folder, weights = shapes_resnet18(root)
        index = root / "index"
        if not (index / "manifest.json").is_file():
            subprocess.run(
                _repinterp(
                    "fit",
                    "--model",
                    "resnet18",
                    "--weights",
                    str(weights),
                    "--reference",
                    f"imagefolder:{folder}",
                    "--image-size",
                    "64",
                    "--boundaries",
                    "20",
                    "--out",
                    str(index),
                    "--quiet",
                ),
                check=True,
                env=ENV,
            )
        import_s, heavy = imports()
        times = [first_answer(index) for _ in range(args.repeats)]
    results = {
        "first_answer_s": min(times),
        "first_answer_median_s": statistics.median(times),
        "first_answer_all_s": times,
        "import_s": import_s,
        "heavy_modules_imported": heavy,
    }
    table(
        ["first answer (best, s)", "median (s)", "imports (s)", "heavy modules imported"],
        [[min(times), statistics.median(times), import_s, ", ".join(heavy) or "none"]],
    )
    write(results, args)


if __name__ == "__main__":
    main()
