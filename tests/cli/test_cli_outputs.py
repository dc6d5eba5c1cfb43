"""Issue 11 from the command line: no command writes into a folder it must not (a user's
folder, an index, a file), two inputs of one name give two results, the reference images of an
index are fingerprinted, broken and oversized images are named and skipped, bad ports are one
line."""

import json
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from repinterp.cli.parser import main
from repinterp.store.index_folder import load_index

from ..commandline import FIT, assert_one_line_error, listing, run, user_folder

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    """A digits index (bundled weights)."""
    out = tmp_path_factory.mktemp("cli-outputs") / "index"
    main([*FIT, "--out", str(out)])
    return out


def test_fit_refuses_a_folder_of_user_files_and_overwrite_keeps_them(tmp_path, capsys) -> None:
    mydocs = tmp_path / "mydocs"
    before = user_folder(mydocs)
    code, _, err = run([*FIT, "--out", str(mydocs)], capsys)
    assert code == 2
    assert err == (
        f"repinterp: error: {mydocs} holds files that repinterp did not write: give a new or "
        "empty folder, or pass --overwrite to write an index into it anyway (nothing else in it "
        "is touched)\n"
    )
    assert listing(mydocs) == before
    code, _, _ = run([*FIT, "--out", str(mydocs), "--overwrite"], capsys)
    assert code == 0
    assert {k: v for k, v in listing(mydocs).items() if k in before} == before
    assert len(load_index(mydocs)) == 1400


def test_demo_refuses_a_site_folder(tmp_path, capsys) -> None:
    site = tmp_path / "site"
    (site / "index").mkdir(parents=True)
    (site / "index.html").write_text("<h1>my site</h1>")
    (site / "index" / "notes.txt").write_text("mine")
    before = listing(site)
    code, _, err = run(["demo", "--out", str(site), "--quiet"], capsys)
    assert_one_line_error(code, err, f"{site} holds files that repinterp did not write")
    assert listing(site) == before


def test_no_command_writes_into_an_index(index, tmp_path, capsys) -> None:
    before = listing(index)
    picture = tmp_path / "manifest.png"
    Image.new("L", (8, 8), 128).save(picture)
    explain = ["explain", str(picture), "--index", str(index), "--out", str(index)]
    for argv in (explain, [*explain, "--overwrite"]):
        code, _, err = run(argv, capsys)
        assert_one_line_error(
            code, err, f"{index} is a repinterp index: explanations need a folder of their own"
        )
    for command in ("report", "evaluate"):
        extra = ["--index", str(index)] if command == "report" else ["--dataset", "digits"]
        extra += ["--protocol", "unseen"] if command == "evaluate" else []
        code, _, err = run([command, *extra, "--out", str(index), "--overwrite"], capsys)
        assert_one_line_error(code, err, f"{index} is a repinterp index")
    new = tmp_path / "new"
    code, _, err = run([*FIT, "--out", str(new), "--shards", str(index)], capsys)
    assert_one_line_error(
        code, err, f"{index} is a repinterp index: the shards of a fit (--shards) need a folder"
    )
    assert not new.exists()
    assert listing(index) == before
    assert len(load_index(index)) == 1400


def test_fit_refuses_shards_in_its_own_folder_and_a_file_as_out(tmp_path, capsys) -> None:
    same = tmp_path / "X"
    code, _, err = run([*FIT, "--out", str(same), "--shards", str(same)], capsys)
    assert_one_line_error(code, err, f"--shards {same} is the --out folder")
    assert not same.exists()
    afile = tmp_path / "afile.txt"
    afile.write_text("my text")
    elsewhere = tmp_path / "elsewhere"
    code, _, err = run([*FIT, "--out", str(afile), "--shards", str(elsewhere)], capsys)
    assert_one_line_error(code, err, f"{afile} is a file, not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile.txt"]
    assert afile.read_text() == "my text"


def test_explain_gives_files_of_one_name_distinct_outputs(index, tmp_path, capsys) -> None:
    for folder, value in (("a", 30), ("b", 220)):
        (tmp_path / folder).mkdir()
        Image.new("L", (8, 8), value).save(tmp_path / folder / "x.png")
    out = tmp_path / "out"
    argv = ["explain", str(tmp_path / "a" / "x.png"), str(tmp_path / "b" / "x.png")]
    code, _, _ = run([*argv, "reference:0", "--index", str(index), "--out", str(out)], capsys)
    assert code == 0
    assert sorted(p.name for p in out.glob("[!.]*.json")) == [
        "a-x.json",
        "b-x.json",
        "reference-0.json",
    ]
    inputs = [json.loads((out / f"{n}.json").read_text())["input"] for n in ("a-x", "b-x")]
    assert inputs == ["a-x", "b-x"]
    # again into the same folder: its own output, accepted; one folder twice: numbered
    code, _, _ = run([*argv[:2], argv[1], "--index", str(index), "--out", str(out)], capsys)
    assert code == 0 and {"a-x-1.json", "a-x-2.json"} <= {p.name for p in out.glob("*.json")}


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_serve_refuses_a_port_out_of_range_on_one_line(port, capsys) -> None:
    code, _, err = run(["serve", "--index", "idx", "--port", port], capsys)
    why = "is not a port number" if port == "http" else "is not a port (0 to 65535)"
    shown = repr(port) if port == "http" else port
    assert code == 2
    assert err == (
        f"repinterp: error: argument --port: {shown} {why} (see repinterp serve --help)\n"
    )


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header says ``width`` x ``height`` (its pixel data is not there)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    data = zlib.compress(b"\0" * 16)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
    )


def image_folder(root: Path) -> Path:
    """15 readable RGB images in 3 classes, and five files that are skipped: a truncated JPEG,
    a 100,000 x 1 PNG, a 2,000 x 1 PNG, a PNG header of 16,777,216 x 1 pixels (its pixels are
    never decoded) and a text file."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(("circle", "square", "star")):
        (root / name).mkdir(parents=True)
        for i in range(5):
            pixels = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
            pixels[..., c] = 255
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    whole = root / "star" / "whole.jpg"
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(whole, quality=95)
    (root / "star" / "cut.jpg").write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    whole.unlink()
    Image.new("L", (100_000, 1)).save(root / "circle" / "line.png")
    Image.new("L", (2_000, 1)).save(root / "circle" / "thin.png")
    (root / "square" / "huge.png").write_bytes(png_header(16_777_216, 1))
    (root / "square" / "notes.txt").write_text("not an image")
    return root


def test_image_folder_fit_names_what_it_skips_and_refuses_changed_images(tmp_path, capsys) -> None:
    root = image_folder(tmp_path / "pets")
    index = tmp_path / "index"
    fit = ["fit", "--model", "shapes_cnn", "--reference", f"imagefolder:{root}", "--image-size"]
    fit += ["56", "--mean", "0.5", "0.5", "0.5", "--std", "0.25", "0.25", "0.25"]
    with pytest.warns(UserWarning) as caught:
        code, out, err = run([*fit, "--boundaries", "5", "--out", str(index)], capsys)
    assert code == 0, err
    warning = [str(w.message) for w in caught]
    assert len(warning) == 1 and warning[0].startswith(
        f"skipped 5 unreadable or non-image file(s) in {root}: "
    )
    for name, why in (
        ("star/cut.jpg", "image file is truncated"),
        ("circle/line.png", "100000 x 1 pixels; at most 16384 per side"),
        ("circle/thin.png", "2000 x 1 pixels, longer than 32 times the other"),
        ("square/huge.png", "16777216 x 1 pixels; at most 16384 per side"),
        ("square/notes.txt", "not an image file"),
    ):
        assert f"cannot read {name}" in warning[0] or f"{name} is" in warning[0], name
        assert why in warning[0], why
    assert (
        f"imagefolder:{root}: 15 images in 3 classes: 12 reference and 3 unseen (80% of the "
        "readable images, drawn with data seed 0); reference/unseen per class: "
    ) in out
    recipe = json.loads((index / "manifest.json").read_text())["recipe"]
    assert (recipe["image_size"], recipe["mean"], recipe["std"]) == (56, [0.5] * 3, [0.25] * 3)
    assert len(recipe["data"]["files"]) == 15

    explain = ["explain", "unseen:0", "--index", str(index), "--quiet"]
    with pytest.warns(UserWarning, match="skipped 5"):  # opening the index reads the folder
        code, _, err = run([*explain, "--out", str(tmp_path / "ok")], capsys)
    assert code == 0, err
    changed = root / "square" / "2.png"
    original = changed.read_bytes()
    Image.new("RGB", (40, 48), "white").save(changed)  # same count, other pixels
    with pytest.warns(UserWarning, match="skipped 5"):
        code, _, err = run([*explain, "--out", str(tmp_path / "stale")], capsys)
    assert_one_line_error(
        code,
        err,
        f"the reference data of {index} changed since it was fitted (1 file(s) changed "
        "(square/2.png)): fit the index again",
    )
    changed.write_bytes(original)
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["recipe"]["data_seed"] = 1
    (index / "manifest.json").write_text(json.dumps(manifest))
    with pytest.warns(UserWarning, match="skipped 5"):
        code, _, err = run([*explain, "--out", str(tmp_path / "stale")], capsys)
    assert_one_line_error(code, err, "changed since it was fitted (seed 0 then, 1 now)")
    assert not (tmp_path / "stale").exists()


def test_a_bundled_set_with_another_split_is_refused(index, tmp_path, capsys) -> None:
    edited = tmp_path / "index"
    shutil.copytree(index, edited)
    manifest = json.loads((edited / "manifest.json").read_text())
    manifest["recipe"]["data_seed"] = 3
    (edited / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = run(
        ["explain", "unseen:0", "--index", str(edited), "--out", str(tmp_path / "o")], capsys
    )
    assert_one_line_error(code, err, "changed since it was fitted (seed 0 then, 3 now)")


def test_an_image_folder_given_relative_is_found_from_any_directory(
    tmp_path, capsys, monkeypatch
) -> None:
    root = image_folder(tmp_path / "work" / "pets")
    for broken in ("star/cut.jpg", "circle/line.png", "circle/thin.png", "square/huge.png"):
        (root / broken).unlink()
    monkeypatch.chdir(tmp_path / "work")
    index = tmp_path / "index"
    fit = ["fit", "--model", "shapes_cnn", "--reference", "imagefolder:pets", "--image-size", "56"]
    code, _, err = run([*fit, "--boundaries", "5", "--out", str(index), "--quiet"], capsys)
    assert code == 0, err
    recipe = json.loads((index / "manifest.json").read_text())["recipe"]
    assert recipe["dataset"] == f"imagefolder:{root.resolve()}"
    monkeypatch.chdir(tmp_path)  # elsewhere: the folder is still found
    explain = ["explain", "unseen:0", "--index", str(index), "--quiet"]
    code, _, err = run([*explain, "--out", str(tmp_path / "out")], capsys)
    assert code == 0, err
