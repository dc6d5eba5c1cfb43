"""docs/your-model.md runs as written, and the errors it quotes are the real ones.

Its ```python blocks run in one namespace and its ```sh blocks through bash (``repinterp`` is
``sys.executable -m repinterp``), in order, in a temporary folder holding what the guide's first
table names: ``data/train/<class>/*.png`` and ``data/val/<class>/*.png`` (shapes drawn by
:func:`repinterp.data.shape_drawing.draw_shapes`) and ``resnet18.safetensors`` (a torchvision
ResNet-18 with random convolutional weights and a least-squares last layer fitted to the training
images, so
that it predicts every class, as a fine-tuned model would). The two blocks that start with
``# not run`` are checked instead: the extras they install exist, and ``serve --help`` answers.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import subprocess
import sys
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest
import torch
import torchvision
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader

import repinterp
from repinterp.cli.parser import main
from repinterp.data.datasets import imagefolder
from repinterp.data.shape_drawing import draw_shapes
from repinterp.models.zoo import build_model, save_weights

pytestmark = pytest.mark.slow  # runs the whole guide

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "your-model.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
CLASSES = ("circle", "square", "triangle")
N_TRAIN, N_VAL, SIDE = 10, 2, 64
NOT_RUN = "# not run"


def fenced(text: str) -> list[tuple[str, str]]:
    """The guide's fenced blocks, in order: (language, code)."""
    return [(match[1], match[2]) for match in FENCE.finditer(text)]


def _draw_folders(root: Path) -> None:
    drawn = draw_shapes(len(CLASSES) * (N_TRAIN + N_VAL), seed=0, size=SIDE)
    for c, name in enumerate(CLASSES):
        rows = (drawn.labels == c).nonzero().flatten().tolist()
        for part, chosen in (("train", rows[:N_TRAIN]), ("val", rows[N_TRAIN:])):
            folder = root / "data" / part / name
            folder.mkdir(parents=True)
            for i, row in enumerate(chosen):
                pixels = (drawn.images[row] * 255).round().byte().permute(1, 2, 0).numpy()
                Image.fromarray(pixels).save(folder / f"{i}.png")


def _fitted_resnet(root: Path) -> nn.Module:
    """ResNet-18, random trunk; its last layer the least-squares fit of +-1 class targets."""
    model = build_model("resnet18", num_classes=len(CLASSES), seed=0)
    train = imagefolder(root / "data" / "train", size=SIDE)
    images = torch.stack([train[i][0] for i in range(len(train))])
    with torch.no_grad():
        pooled = nn.Sequential(*list(model.children())[:-1])(images).flatten(1).double()
        design = torch.cat([pooled, torch.ones(len(pooled), 1, dtype=torch.float64)], 1)
        targets = 2 * nn.functional.one_hot(train.labels, len(CLASSES)).double() - 1
        gram = design.T @ design + 1e-3 * torch.eye(design.shape[1], dtype=torch.float64)
        solution = torch.linalg.solve(gram, design.T @ targets)
        model.fc.weight.copy_(solution[:-1].T.float())
        model.fc.bias.copy_(solution[-1].float())
        assert torch.equal(model(images).argmax(1), train.labels)  # it predicts every class
    return model


def _environment() -> dict[str, str]:
    """This environment, with the checkout's sources first on the path and one thread per
    process (a tiny model on busy cores: one thread is faster and steadier, as in
    ``conftest.one_thread``)."""
    path = [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "OMP_NUM_THREADS": "1"}


def _run_sh(code: str) -> str:
    """Run an sh block with bash in the current folder, ``repinterp`` being ``python -m
    repinterp`` of this Python; returns what it printed."""
    prelude = f'repinterp() {{ {shlex.quote(sys.executable)} -m repinterp "$@"; }}\n'
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", prelude + code],
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{code}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _check_not_run(code: str) -> None:
    """The blocks the guide does not run: installs (their extras must exist) and ``serve``,
    whose ``--help`` answers from ``python -m repinterp``, the command's entry point."""
    if "repinterp serve" in code:
        assert "--weights" in _run_sh("repinterp serve --help")
        return
    project = (ROOT / "pyproject.toml").read_text()
    table = project[project.index("[project.optional-dependencies]") :].split("\n[")[0]
    extras = re.findall(r"^(\w+) = ", table, flags=re.M)
    named = re.findall(r"pip install -e '\.\[([\w,]+)\]'", code)
    assert named, code
    for extra in ",".join(named).split(","):
        assert extra in extras, extra


@pytest.fixture(scope="module")
def guide(one_thread, tmp_path_factory) -> tuple[Path, dict[str, Any], list[str]]:
    """The guide run in a prepared folder: the folder, the Python namespace, the sh outputs."""
    root = tmp_path_factory.mktemp("guide")
    _draw_folders(root)
    save_weights(_fitted_resnet(root), root / "resnet18.safetensors")
    namespace: dict[str, Any] = {"__name__": "guide"}
    outputs, skipped = [], []
    cwd = Path.cwd()
    os.chdir(root)
    try:
        for language, code in fenced(GUIDE.read_text()):
            if language not in ("python", "sh"):
                continue
            if code.startswith(NOT_RUN):
                _check_not_run(code)
                skipped.append(language)
            elif language == "python":
                exec(compile(code, str(GUIDE), "exec"), namespace)
            else:
                outputs.append(_run_sh(code))
        app = namespace.get("app")
        if app is not None:  # the viewer's regions are computed in a thread: let it finish
            app.state.viewer.wait_for_regions()
    finally:
        os.chdir(cwd)
    assert skipped == ["sh", "sh"], "only the install and the serve blocks may be left unrun"
    return root, namespace, outputs


def test_the_guide_runs_and_does_what_it_says(guide) -> None:
    root, ns, outputs = guide
    assert ns["ri"].target_layer == "layer4"  # what target_layer=None picks for a ResNet
    e = ns["e"]
    assert e.has_heatmap and ns["maps"].shape == (5, SIDE, SIDE)
    assert torch.equal(ns["e_device"].boundary_ids.cpu(), e.boundary_ids)  # "True" on any device
    with Image.open(root / "similar.png") as strip:
        assert strip.size == (5 * SIDE, SIDE) and strip.mode == "RGB"
    assert sorted(p.name for p in (root / "my-index").iterdir() if not p.name.startswith(".")) == [
        "features.npy",
        "index.safetensors",
        "manifest.json",
    ]
    assert outputs[0].splitlines()[-1] == "weights written to finetuned.safetensors"
    assert (root / "finetuned.safetensors").is_file()  # the train step
    listed = outputs[2].splitlines()[-5:]
    assert listed == sorted(
        ["inputs.csv"]
        + [f"{name}.{kind}" for name in ("circle-0", "square-0") for kind in ("json", "png")]
    )
    assert (root / "cli-report" / "index.html").is_file()
    assert (root / "explained" / "unseen-0.json").is_file()  # the moved index, with --weights
    assert ns["app"].state.viewer.regions()["status"] == "ready"


def _cli_error(argv: list[str]) -> str:
    """The one line ``repinterp ARGV`` ends with (exit status 2)."""
    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    lines = err.getvalue().strip().splitlines()
    return lines[-1]


def _error(call: Any) -> str:
    with pytest.raises(ValueError) as error:
        call()
    return str(error.value)


def _quoted_errors(text: str) -> list[str]:
    section = text[text.index("## 11. Common errors") : text.index("## Next")]
    return [code.strip() for language, code in fenced(section) if language == "text"]


class _WithoutStarlette:
    """An import finder that finds no ``starlette``, as if the web extra were not installed."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] == "starlette":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


FINGERPRINT = re.compile(r"[0-9a-f]{12}…")


def test_the_quoted_errors_are_the_real_ones(guide, monkeypatch) -> None:
    root, ns, _ = guide
    monkeypatch.chdir(root)
    model, train = ns["model"].cpu(), ns["train"]
    ri_class = repinterp.RepresentativeInterpreter
    produced = [
        _error(lambda: ri_class(build_model("resnet18", 3).train())),
        _error(lambda: ri_class(build_model("resnet18", 3).half())),
    ]
    with torch.device("meta"):
        convnext = torchvision.models.convnext_tiny(num_classes=3).eval()
    produced += [
        _error(lambda: ri_class(convnext, config=repinterp.FitConfig(input_shape=(3, 224, 224)))),
        _error(lambda: ri_class(model, "fc")),
        _error(lambda: ri_class(model, "layer4.1.conv2")),
        _error(lambda: ri_class(model, "layer4").fit(DataLoader(train, shuffle=True))),
    ]
    ri = ri_class.load("my-index", model)
    produced += [
        _error(lambda: ri.explain(torch.zeros(3, 32, 32))),
        _error(lambda: ri.explain(train[0][0]).heatmap(train[0][0])),
    ]
    circles = ri_class(model, "layer4", n_boundaries=2, progress=False).fit(train.subset([0, 1, 2]))
    produced += [
        _error(lambda: circles.explain(train[0][0]).heatmap(train[0][0].unsqueeze(0))),
        _error(lambda: circles.regions()),
    ]
    other = build_model("resnet18", 3, seed=1)
    produced.append(
        FINGERPRINT.sub("0123456789ab…", _error(lambda: ri_class.load("my-index", other)))
    )
    (root / "two" / "a").mkdir(parents=True)
    (root / "two" / "b").mkdir()
    for c, name in enumerate("ab"):
        Image.open(root / "data/train/circle/0.png").save(root / "two" / name / f"{c}.png")
    (root / "notes").mkdir()
    (root / "notes" / "todo.txt").write_text("mine\n")
    fit = ["fit", "--model", "resnet18", "--reference", "imagefolder:data/train"]
    weights = ["--weights", "resnet18.safetensors"]
    moved = "archive/cli-index"
    torch.save(model, root / "resnet18.pt")  # the whole model, not its state dict
    produced += [
        _cli_error([*fit, "--out", "x"]),
        _cli_error([*fit, "--weights", "resnet18.pt", "--out", "x"]),
        _cli_error([*fit[:3], *weights, "--reference", "imagefolder:two", "--out", "y"]),
        _cli_error([*fit[:3], *weights, "--reference", "data/train", "--out", "z"]),
        _cli_error([*fit, *weights, "--out", "notes"]),
        _cli_error(["explain", "reference:0", "--index", "my-index", "--out", "w"]),
        _cli_error(["explain", "unseen:0", "--index", moved, "--out", "w"]),
    ]
    image = root / "data/train/circle/0.png"
    kept = image.read_bytes()
    Image.open(root / "data/train/circle/1.png").save(image)
    try:
        produced.append(
            _cli_error(["explain", "unseen:0", "--index", moved, *weights, "--out", "w"])
        )
    finally:
        image.write_bytes(kept)
    if torch.version.cuda is not None and not torch.cuda.is_available():
        produced.append(_cli_error([*fit, *weights, "--out", "v", "--device", "cuda"]))
    for name in [name for name in sys.modules if name.startswith(("repinterp.web", "starlette"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_WithoutStarlette, *sys.meta_path])
    with pytest.raises(ModuleNotFoundError):
        import starlette.applications  # noqa: F401
    produced.append(_cli_error(["serve", "--index", moved, *weights]))

    quoted = _quoted_errors(GUIDE.read_text())
    assert sorted(set(produced) - set(quoted)) == []
    missing = set(quoted) - set(produced)
    if torch.cuda.is_available() or torch.version.cuda is None:
        missing = {line for line in missing if "--device cuda" not in line}
    assert missing == set()
