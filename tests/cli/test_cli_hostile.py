"""Issue 38, the fourth hostile pass, from the command line: output names that never collide
(nor pass 255 bytes), a report that never rewrites a file in place, a folder where an output
file goes, ``--contrast`` by a class's name or index, and options refused in one line naming
them."""

import csv
import errno
import json
import os
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from PIL import Image

from repinterp.cli.explain import contrast_class
from repinterp.cli.parser import main
from repinterp.workspace import load_image_file, open_index

from ..commandline import FIT, assert_one_line_error, listing, run

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    """A digits index (bundled weights)."""
    out = tmp_path_factory.mktemp("cli-hostile") / "index"
    main([*FIT, "--out", str(out)])
    return out


def picture(path: Path, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = torch.rand(8, 8, generator=torch.Generator().manual_seed(seed))
    Image.fromarray((pixels * 255).byte().numpy()).save(path)
    return path


def explain(index: Path, out: Path, *images: str | Path) -> list[str]:
    return ["explain", *map(str, images), "--index", str(index), "--out", str(out), "--quiet"]


def test_explains_output_names_never_collide(index, tmp_path, capsys) -> None:
    """Item 2: ``p/a.png``, ``q/p/a.png`` and ``r/p-a-1.png`` were ``p-a-1``, ``p-a-2`` and
    ``p-a-1``: three images, two outputs. Each image gets its own pair, named in its JSON."""
    images = [tmp_path / "p/a.png", tmp_path / "q/p/a.png", tmp_path / "r/p-a-1.png"]
    for seed, image in enumerate(images):
        picture(image, seed)
    out = tmp_path / "out"
    code, stdout, err = run(explain(index, out, *images), capsys)
    assert code == 0, err
    summaries = [json.loads(p.read_text()) for p in sorted(out.glob("[!.]*.json"))]
    assert len(summaries) == 3 and len({s["input"] for s in summaries}) == 3
    assert sorted(p.stem for p in out.glob("*.png")) == sorted(s["input"] for s in summaries)
    assert stdout.count(" -> ") == 3


def test_a_contrast_figure_never_shares_a_file_with_another_image(index, tmp_path, capsys):
    """Item 5: image ``a``'s contrast figure ``a-vs-C.png`` and the case study of an image
    named ``a-vs-C.png`` were one file; now each image's files are its own."""
    ws = open_index(index, progress=False)
    first, other = picture(tmp_path / "a.png", 0), picture(tmp_path / "b" / "b.png", 1)
    shape = ws.interpreter.index.input_shape
    predicted = {
        ws.interpreter.explain(ws.normalization(load_image_file(p, shape))).predicted_class
        for p in (first, other)
    }
    c = min(set(range(10)) - predicted)  # neither image is predicted c: both get a figure
    second = other.rename(tmp_path / f"a-vs-{c}.png")
    out = tmp_path / "out"
    code, _, err = run([*explain(index, out, first, second), "--contrast", str(c)], capsys)
    assert code == 0, err
    summaries = {p.stem: json.loads(p.read_text()) for p in out.glob("[!.]*.json")}
    assert len(summaries) == 2
    figures = [f"{name}.png" for name in summaries]
    figures += [s["contrast"]["figure"] for s in summaries.values() if "figure" in s["contrast"]]
    assert len(figures) == len(set(figures)) and all((out / f).is_file() for f in figures)
    assert {p.name for p in out.glob("*.png")} == set(figures)


def test_the_report_never_rewrites_a_file_in_place(index, tmp_path, capsys, monkeypatch):
    """Item 1: ``report`` wrote each polytope's JSON, then wrote it again in place: a full
    disk at that write left a 0-byte JSON. Each JSON is now written once, whole, by a rename:
    a disk that is full for any write in place leaves the report whole."""
    out = tmp_path / "report"
    report = ["report", "--index", str(index), "--out", str(out), "--regions", "10", "--quiet"]
    code, _, err = run(report, capsys)
    assert code == 0, err

    def full_disk(self, *args, **kwargs):
        open(self, "w").close()  # what a write in place does first
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", full_disk)
    code, _, err = run([*report, "--top-k", "3"], capsys)
    monkeypatch.undo()
    assert code == 0, err
    summaries = [json.loads(p.read_text()) for p in out.glob("polytope-*.json")]
    assert summaries and all("regions" in s and "interprets" in s for s in summaries)
    assert all(len(s["similar"]) == 3 for s in summaries)


@pytest.mark.parametrize("where", ["reference-0.json", "reference-0.png"])
def test_a_folder_where_an_output_file_goes_is_one_line_before_any_file(
    where, index, tmp_path, capsys
) -> None:
    """Item 18: a folder named ``NAME.json`` was an ``IsADirectoryError`` after the new PNG
    was renamed (half a pair). Now one line naming it, and nothing written."""
    out = tmp_path / "out"
    code, _, err = run(explain(index, out, "reference:1"), capsys)
    assert code == 0, err
    (out / where).mkdir()
    before = listing(out)
    code, _, err = run([*explain(index, out, "reference:0", "reference:1"), "--top-k", "2"], capsys)
    assert_one_line_error(code, err, f"a folder is where this file goes: {out / where}")
    assert listing(out) == before


def test_a_folder_where_the_report_page_or_results_go_is_one_line(index, tmp_path, capsys) -> None:
    """Item 18: ``index.html`` a folder in a report's folder, and ``results.md`` in an
    evaluation's: one line, before any figure or number is computed (none written)."""
    out = tmp_path / "report"
    (out / "index.html").mkdir(parents=True)
    report = ["report", "--index", str(index), "--out", str(out), "--regions", "10", "--quiet"]
    code, _, err = run([*report, "--overwrite"], capsys)
    assert_one_line_error(code, err, f"a folder is where this file goes: {out / 'index.html'}")
    assert [p.name for p in out.glob("[!.]*")] == ["index.html"]
    out = tmp_path / "evaluation"
    (out / "results.md").mkdir(parents=True)
    argv = ["evaluate", "--dataset", "digits", "--protocol", "coverage", "--quick", "--quiet"]
    code, _, err = run([*argv, "--out", str(out), "--overwrite"], capsys)
    assert_one_line_error(code, err, f"a folder is where this file goes: {out / 'results.md'}")
    assert [p.name for p in out.glob("[!.]*")] == ["results.md"]


def test_names_of_250_characters_are_explained(index, tmp_path, capsys) -> None:
    """Item 14: the temporary ``.NAME.tmp-XXXXXXXX`` of a name of 249 to 252 characters passed
    255 bytes: such an image could not be explained. Its pair is written, named as the image,
    and its contrast figure's name is cut to fit."""
    image = picture(tmp_path / ("é" * 5 + "a" * 240 + ".png"))
    assert len(image.stem.encode()) == 250
    code, _, err = run([*explain(index, tmp_path / "out", image), "--top-k", "2"], capsys)
    assert code == 0, err
    assert {p.name for p in (tmp_path / "out").glob("[!.]*")} == {
        f"{image.stem}.png",
        f"{image.stem}.json",
        "inputs.csv",
    }
    out = tmp_path / "contrast"
    code, _, err = run([*explain(index, out, image), "--contrast", "0", "--top-k", "2"], capsys)
    assert code == 0, err
    names = {p.name for p in out.iterdir() if not p.name.startswith(".")} - {"inputs.csv"}
    assert len(names) in (2, 3) and all(len(name.encode()) <= 255 for name in names)
    (summary,) = [json.loads((out / name).read_text()) for name in names if name.endswith("json")]
    assert summary["input"].startswith("é" * 5 + "a" * 200)
    assert summary["contrast"].get("figure", f"{summary['input']}.png") in names


def test_train_refuses_a_name_too_long_before_training(tmp_path, capsys, monkeypatch) -> None:
    """Item 14: ``train --out`` with a name the file system cannot hold failed after training,
    leaving the folder it made; one of 252 bytes is written."""
    from repinterp.models import train

    def untrained(*args, **kwargs):
        raise AssertionError("trained")

    monkeypatch.setattr(train, "train", untrained)
    out = tmp_path / "new" / ("w" * 245 + ".safetensors")
    argv = ["train", "--dataset", "digits", "--model", "digits_cnn", "--quiet", "--out", str(out)]
    code, _, err = run(argv, capsys)
    assert_one_line_error(code, err, "File name too long (at most 255 bytes)")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    fits = tmp_path / "new" / ("w" * 240 + ".safetensors")
    code, _, err = run([*argv[:-1], str(fits), "--epochs", "1"], capsys)
    assert code == 0, err
    assert [p.name for p in fits.parent.iterdir()] == [fits.name]


def test_contrast_by_a_numeric_class_name_says_which_class(capsys) -> None:
    """Item 4: class folders ``1, 2, 3``: ``--contrast 2`` was index 2 (class "3") and
    ``--contrast 3`` the name "3". A class's name is taken first, and where the same text is
    another class's index the choice is said."""
    ri = SimpleNamespace(class_names=["1", "2", "3"], index=SimpleNamespace(n_classes=3))
    ws = SimpleNamespace(interpreter=ri)
    c, note = contrast_class(ws, "2")
    assert c == 1
    assert note == "--contrast 2: the class named '2' (index 1), not class index 2 (named '3')"
    assert contrast_class(ws, "3") == (2, None)
    assert contrast_class(ws, "0") == (0, None)
    with pytest.raises(ValueError, match=r"^--contrast ²: no such class \(classes: 1, 2, 3\)$"):
        contrast_class(ws, "²")


def test_contrast_with_the_predicted_class_is_said_on_the_console(index, tmp_path, capsys):
    """Newcomer item 6: ``--contrast`` on an image already of that class said so in its JSON
    only; the console says it too."""
    ws = open_index(index, progress=False)
    predicted = ws.interpreter.explain(ws.normalization(ws.data.unseen.pixels(0))).predicted_class
    argv = [*explain(index, tmp_path / "out", "unseen:0"), "--contrast", str(predicted)]
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    assert (
        f"unseen-0: no contrast with class '{predicted}': the image is predicted this class"
        in stdout
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fit", "--data-seed", "-1"], "argument --data-seed: must be at least 0, got -1"),
        (["train", "--data-seed", "-1"], "argument --data-seed: must be at least 0, got -1"),
        (["fit", "--seed", str(10**23)], "argument --seed: must be at most 4294967295, got 1"),
        (["explain", "--seed", "1e23"], "argument --seed: '1e23' is not a whole number"),
    ],
)
def test_seeds_out_of_range_name_the_option(argv, message, capsys) -> None:
    """Item 19: ``--data-seed -1`` ("expected non-negative integer") and ``--seed 1e23``
    ("Overflow when unpacking long long") named neither the option nor the problem."""
    code, _, err = run(argv, capsys)
    assert_one_line_error(code, err, message)


def test_a_reference_number_that_is_not_one_is_one_line(index, tmp_path, capsys) -> None:
    """Item 19: ``reference:²`` was "invalid literal for int()"."""
    code, _, err = run(explain(index, tmp_path / "out", "reference:²"), capsys)
    assert_one_line_error(code, err, "reference:²: reference:I takes a whole number I")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["train", "fit", "evaluate"])
def test_an_image_size_too_small_for_the_model_is_one_line(command, tmp_path, capsys) -> None:
    """Item 17: ``--image-size`` 1 to 7 for ``shapes_cnn`` was torch's "Output size is too
    small" traceback in ``fit``, ``train`` and ``evaluate``; now one line naming the option,
    before any model is trained or fitted, and nothing written."""
    from repinterp.models.zoo import build_model, save_weights

    for c, name in enumerate(("circle", "square")):
        for i in range(4):
            colour = (40 + 150 * c + 10 * i,) * 3
            folder = tmp_path / "data" / name
            folder.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (16, 16), colour).save(folder / f"{i}.png")
    weights = tmp_path / "w.safetensors"
    save_weights(build_model("shapes_cnn", 2), weights)
    data, out = f"imagefolder:{tmp_path / 'data'}", tmp_path / "out"
    argv = {
        "train": ["train", "--dataset", data, "--out", str(out / "w.safetensors")],
        "fit": ["fit", "--weights", str(weights), "--reference", data, "--out", str(out)],
        "evaluate": ["evaluate", "--dataset", data, "--weights", str(weights), "--out", str(out)],
    }[command]
    argv += ["--protocol", "coverage"] if command == "evaluate" else []
    code, _, err = run([*argv, "--model", "shapes_cnn", "--image-size", "7", "--quiet"], capsys)
    assert_one_line_error(code, err, "images of 7 x 7 pixels are too small for shapes_cnn (")
    assert "give a larger --image-size" in err
    assert not out.exists()


def test_fit_warns_when_the_accuracy_is_near_chance_or_far_below_the_recorded(tmp_path, capsys):
    """Newcomer item 5: a fit at the wrong image size printed "accuracy 47.2 %" without a
    word. One line on stderr when the reference accuracy is near chance (below 1.5 x chance),
    or far below (15 points) the held-out accuracy ``train`` recorded in the weights file."""
    from repinterp.models.zoo import build_model, recorded_training, weights_bytes

    untrained = build_model("digits_cnn", 10, in_channels=1, seed=0)
    fit = ["fit", "--model", "digits_cnn", "--reference", "digits", "--boundaries", "3", "--quiet"]
    for name, recorded, warning in [
        ("plain", None, "is near chance (10.0% for 10 classes)"),
        ("recorded", {"held_out_accuracy": "97.50", "dataset": "digits", "image_size": "8"}, (
            "is far below the 97.5% recorded when it was trained (on digits at 8 px)"
        )),
    ]:  # fmt: skip
        weights = tmp_path / f"{name}.safetensors"
        weights.write_bytes(weights_bytes(untrained, recorded))
        assert recorded_training(weights) == (recorded or {})
        argv = [*fit, "--weights", str(weights), "--out", str(tmp_path / name)]
        with pytest.warns(UserWarning, match="the model's accuracy on the reference") as caught:
            code, stdout, err = run(argv, capsys)
        assert code == 0, err
        accuracy = float(stdout.split("the model's accuracy on them: ")[1].split("%")[0])
        assert accuracy < 15
        (said,) = [str(w.message) for w in caught]
        assert f"images, {accuracy:.1f}%, {warning}" in said and "\n" not in said
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the bundled weights: 99% and nothing to say
        code, _, err = run([*fit, "--out", str(tmp_path / "bundled")], capsys)
    assert code == 0, err


def test_explain_writes_which_input_each_name_stands_for(index, tmp_path, capsys) -> None:
    """Issue 44, item 10: two ``coffee-0000.png`` of folders named alike were
    ``imgs-coffee-0000-1`` and ``-2``, and which was which was said only on the console."""
    first = picture(tmp_path / "x" / "imgs" / "coffee-0000.png", 0)
    second = picture(tmp_path / "y" / "imgs" / "coffee-0000.png", 1)
    out = tmp_path / "out"
    code, stdout, err = run(explain(index, out, first, second, "reference:3"), capsys)
    assert code == 0, err
    assert f"which input each name stands for: {out / 'inputs.csv'}" in stdout
    with open(out / "inputs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["name"], r["input"], r["path"]) for r in rows] == [
        ("imgs-coffee-0000-1", str(first), str(first.resolve())),
        ("imgs-coffee-0000-2", str(second), str(second.resolve())),
        ("reference-3", "reference:3", ""),
    ]
    for r in rows:  # each row names its own files, and the figure is of its input
        assert (r["figure"], r["json"]) == (f"{r['name']}.png", f"{r['name']}.json")
        assert json.loads((out / r["json"]).read_text())["input"] == r["name"]
    assert (
        ".repinterp-output.json" in listing(out)
        and "inputs.csv" in json.loads((out / ".repinterp-output.json").read_text())["files"]
    )
    code, _, err = run(explain(index, out, "reference:5"), capsys)  # a second run adds its row
    assert code == 0, err
    with open(out / "inputs.csv", newline="") as f:
        names = [r["name"] for r in csv.DictReader(f)]
    assert names == ["imgs-coffee-0000-1", "imgs-coffee-0000-2", "reference-3", "reference-5"]


def test_explain_keeps_a_users_own_inputs_csv(index, tmp_path, capsys) -> None:
    """``explain --overwrite`` into a folder whose ``inputs.csv`` is the user's replaced it:
    refused in one line before any work, the file kept."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "inputs.csv").write_text("user data\n")
    code, _, err = run([*explain(index, theirs, "reference:0"), "--overwrite"], capsys)
    assert_one_line_error(code, err, "inputs.csv was not written by repinterp and is kept")
    assert (theirs / "inputs.csv").read_text() == "user data\n"
    assert sorted(p.name for p in theirs.iterdir() if not p.name.startswith(".")) == ["inputs.csv"]
