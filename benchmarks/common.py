"""What the benchmarks share: models, image sets, timers, the machine's description, output.

Every benchmark reports ratios against a peer measured in the same run (the machine may be
shared, so absolute times drift; interleaved best-of-n timings cancel most of the drift).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import Tensor, nn
from torch.utils.data import Dataset

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "bench"


def small_cnn(classes: int = 10, width: int = 32) -> nn.Sequential:
    """A ReLU CNN for 1 x 28 x 28 images; target layer ``relu2`` gives ``width`` x 14 x 14."""
    return nn.Sequential(
        OrderedDict(
            conv1=nn.Conv2d(1, 16, 3, padding=1),
            relu1=nn.ReLU(),
            pool1=nn.MaxPool2d(2),
            conv2=nn.Conv2d(16, width, 3, padding=1),
            relu2=nn.ReLU(),
            pool2=nn.MaxPool2d(2),
            flatten=nn.Flatten(),
            fc1=nn.Linear(width * 7 * 7, 128),
            relu3=nn.ReLU(),
            fc2=nn.Linear(128, classes),
        )
    ).eval()


# torchvision VGGs by name, with their last ReLU (the paper's target layer: VGG-19's features.35).
VGG_LAYERS = {"vgg11": "features.19", "vgg16": "features.29", "vgg19": "features.35"}


def vgg(arch: str = "vgg11", classes: int = 10) -> nn.Module:
    """A torchvision VGG (``VGG_LAYERS``) with random weights, in eval mode."""
    if arch not in VGG_LAYERS:
        raise ValueError(f"unknown VGG {arch!r}; choose one of {', '.join(VGG_LAYERS)}")
    return getattr(torchvision.models, arch)(weights=None, num_classes=classes).eval()


def vgg11(classes: int = 10) -> nn.Module:
    """torchvision's VGG-11 with random weights (target layer ``features.19``, its last ReLU)."""
    return vgg("vgg11", classes)


def balance(model: nn.Module, images: Tensor, batch_size: int = 64) -> nn.Module:
    """Shift the last Linear's bias so that random weights predict every class about as often
    on ``images`` (else ``D(x)`` is often empty and there is nothing to interpret)."""
    last = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    with torch.inference_mode():
        logits = torch.cat(
            [model(images[i : i + batch_size]) for i in range(0, len(images), batch_size)]
        )
    with torch.no_grad():
        last.bias -= logits.mean(0)
    return model


SHAPE_NAMES = ("circle", "square", "triangle")


def shapes_resnet18(root: Path, n: int = 1000, size: int = 64) -> tuple[Path, Path]:
    """A user's case without downloads: ``n`` images of the bundled ``shapes`` generator
    (3 classes, ``size`` px) written as an image folder ``root/data/<class>/<i>.png``, and a
    torchvision ResNet-18 (random trunk, seed 0; its last layer the least-squares fit of +-1
    class targets on the folder, so it predicts every class) saved to
    ``root/resnet18.safetensors``. Kept when both are there already.

    Returns:
        ``(folder, weights file)``.
    """
    from PIL import Image

    from repinterp.data.datasets import imagefolder
    from repinterp.data.shape_drawing import draw_shapes
    from repinterp.models.zoo import build_model, save_weights

    folder, weights = root / "data", root / "resnet18.safetensors"
    if folder.is_dir() and weights.is_file():
        return folder, weights
    drawn = draw_shapes(n, seed=0, size=size)
    for i in range(n):
        target = folder / SHAPE_NAMES[int(drawn.labels[i])] / f"{i}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        pixels = (drawn.images[i] * 255).round().byte().permute(1, 2, 0).numpy()
        Image.fromarray(pixels).save(target)
    model = build_model("resnet18", num_classes=len(SHAPE_NAMES), seed=0).eval()
    train = imagefolder(folder, size=size)
    images = torch.stack([train[i][0] for i in range(len(train))])
    with torch.no_grad():
        pooled = nn.Sequential(*list(model.children())[:-1])(images).flatten(1).double()
        design = torch.cat([pooled, torch.ones(len(pooled), 1, dtype=torch.float64)], 1)
        targets = 2 * nn.functional.one_hot(train.labels, len(SHAPE_NAMES)).double() - 1
        gram = design.T @ design + 1e-3 * torch.eye(design.shape[1], dtype=torch.float64)
        solution = torch.linalg.solve(gram, design.T @ targets)
        model.fc.weight.copy_(solution[:-1].T.float())
        model.fc.bias.copy_(solution[-1].float())
    save_weights(model, weights)
    return folder, weights


class RandomImages(Dataset):
    """``n`` images of ``shape`` drawn from N(0, 1), made when asked (never all in memory);
    image ``i`` is the same every time."""

    def __init__(self, n: int, shape: Sequence[int], seed: int = 0) -> None:
        self.n, self.shape, self.seed = n, tuple(shape), seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        return torch.randn(self.shape, generator=generator)


def cpu_seconds() -> float:
    """User + system CPU time of this process and of its finished children (e.g. DataLoader
    workers), in seconds: other processes on a shared machine stretch wall time, not this."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for the device's queued work (a no-op on the CPU), so that timings include it."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def interleaved(
    fns: dict[str, Callable[[], object]], repeats: int, device: torch.device | str | None = None
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU times in seconds of each function over ``repeats`` rounds, the functions
    taking turns within a round so that a change of load on a shared machine hits them alike.
    On a CUDA ``device`` each time ends when the device's queued work has finished.

    Returns:
        ``(wall, cpu)``, each a list of times per function.
    """
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            synchronize(device)
            start, start_cpu = time.perf_counter(), cpu_seconds()
            fn()
            synchronize(device)
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(cpu_seconds() - start_cpu)
    return wall, cpu


def ratios(times: dict[str, list[float]], peer: str, prefix: str = "") -> dict[str, float]:
    """For each timed function: its best time (``NAME_s``), and against ``peer`` the ratio of
    the best times (``NAME_ratio``) and the median of the ratios within a round
    (``NAME_paired_ratio``, the steadier one on a noisy machine); keys start with ``prefix``."""
    out = {f"{prefix}{name}_s": min(t) for name, t in times.items()}
    for name, t in times.items():
        if name != peer:
            out[f"{prefix}{name}_ratio"] = min(t) / min(times[peer])
            paired = [a / b for a, b in zip(t, times[peer], strict=True)]
            out[f"{prefix}{name}_paired_ratio"] = statistics.median(paired)
    return out


def machine(device: torch.device | str = "cpu") -> dict[str, Any]:
    """The CPU (``lscpu`` model name), its cores, torch's threads and version, the load, and
    the device the benchmark ran on (with the GPU's name on CUDA)."""
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next(
            line.split(":", 1)[1].strip() for line in lscpu.splitlines() if "Model name" in line
        )
    except (OSError, subprocess.CalledProcessError, StopIteration):
        model = platform.processor() or platform.machine()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "load_average_1min": os.getloadavg()[0],
        "device": str(device),
        **(
            {"gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda}
            if torch.device(device).type == "cuda"
            else {}
        ),
    }


def parser(doc: str, name: str) -> argparse.ArgumentParser:
    """An argument parser with the shared ``--out`` (JSON results; default
    ``docs/bench/NAME.json``, ``NAME_cuda.json`` on CUDA) and ``--device`` options."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--out", type=Path, help=f"JSON results file ({RESULTS}/{name}[_cuda].json)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (cpu)")
    p.set_defaults(bench=name)
    return p


def output_path(args: argparse.Namespace) -> Path:
    """``--out``, or the default results file of the benchmark on its device."""
    if args.out is not None:
        return args.out
    kind = torch.device(args.device).type
    suffix = "" if kind == "cpu" else f"_{kind}"
    return RESULTS / f"{args.bench}{suffix}.json"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a Markdown table (floats with 3 significant digits)."""

    def cell(value: Any) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    print("| " + " | ".join(headers) + " |")
    print("|" + "---|" * len(headers))
    for row in rows:
        print("| " + " | ".join(cell(v) for v in row) + " |")


def write(results: dict[str, Any], args: argparse.Namespace) -> None:
    """Write ``results`` with the machine's and device's description as JSON, to
    :func:`output_path` of ``args``."""
    path = output_path(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    description = machine(args.device)
    path.write_text(json.dumps({"machine": description, **results}, indent=2) + "\n")
    print(f"\nresults written to {path}")
