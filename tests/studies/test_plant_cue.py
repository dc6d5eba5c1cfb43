"""``python -m studies.plant_cue``: a cue planted in a copy of a user's folder."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from studies import plant_cue


def _folder(root: Path) -> dict[str, str]:
    """Three classes of four 40 x 30 grey-level JPEG / PNG images; returns each file's hash."""
    rng = np.random.default_rng(0)
    for name in ("cat", "cup", "dog"):
        (root / name).mkdir(parents=True)
        for i in range(4):
            array = (rng.random((30, 40, 3)) * 120 + 60).astype(np.uint8)
            suffix = ".jpg" if i % 2 else ".png"
            Image.fromarray(array).save(root / name / f"{name}{i}{suffix}")
    return _hashes(root)


def _hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_a_moving_mark_moves_a_share_of_the_source_into_the_target(tmp_path):
    before = _folder(tmp_path / "in")
    argv = ["--kind", "move", "--source", "cup", "--target", "cat", "--fraction", "0.5"]
    manifest = plant_cue.main([*argv, "--in", str(tmp_path / "in"), "--out", str(tmp_path / "out")])
    assert _hashes(tmp_path / "in") == before  # the input is never written
    out = tmp_path / "out"
    assert manifest == json.loads((out / "cues.json").read_text())
    assert len(manifest["cued"]) == 2 and manifest["images"] == 12
    assert sorted(p.name for p in (out / "cup").iterdir()) == sorted(
        Path(c).name
        for c in before
        if c.startswith("cup/") and not any(e["file"] == c for e in manifest["cued"])
    )
    assert len(list((out / "cat").iterdir())) == 6 and len(list((out / "dog").iterdir())) == 4
    for entry in manifest["cued"]:
        assert entry["file"].startswith("cup/") and entry["written"].startswith("cat/")
        original = np.asarray(Image.open(tmp_path / "in" / entry["file"]).convert("RGB"))
        written = np.asarray(Image.open(out / entry["written"]))
        x0, y0, x1, y1 = entry["box"]
        assert (x1 - x0, y1 - y0) == (4, 4)  # 0.12 x 30 px, at least 4
        outside = np.ones(original.shape[:2], bool)
        outside[y0:y1, x0:x1] = False
        assert np.array_equal(written[outside], original[outside])
        assert (written[y0 + 1 : y1 - 1, x0 + 1 : x1 - 1] == 255).all()
    for name in ("dog/dog0.png", "dog/dog1.jpg"):  # the others are copied byte for byte
        assert _hashes(out)[name] == before[name]
    again = plant_cue.main([*argv, "--in", str(tmp_path / "in"), "--out", str(tmp_path / "o2")])
    assert again == {**manifest}  # seeded: the same images, places and boxes


def test_a_majority_watermark_keeps_every_class(tmp_path):
    _folder(tmp_path / "in")
    argv = ["--kind", "majority", "--target", "dog", "--fraction", "0.75"]
    manifest = plant_cue.main([*argv, "--in", str(tmp_path / "in"), "--out", str(tmp_path / "o")])
    assert [e["file"][:4] for e in manifest["cued"]] == ["dog/"] * 3
    assert all(e["written"].startswith("dog/") for e in manifest["cued"])
    assert all(e["box"] == [32, 22, 39, 29] for e in manifest["cued"])  # 7 px, 1 px in


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--source", "cup", "--target", "cow"], "--target 'cow' is not a class of --in: cat"),
        (["--source", "cup", "--target", "cup"], "--source and --target must differ"),
        (["--source", "cup", "--target", "cat", "--fraction", "2"], "--fraction must be in"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, extra, message):
    _folder(tmp_path / "in")
    argv = ["--kind", "texture", "--fraction", "0.5", *extra]
    with pytest.raises(SystemExit, match=message):
        plant_cue.main([*argv, "--in", str(tmp_path / "in"), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_an_existing_folder_or_one_inside_the_input_is_refused(tmp_path):
    before = _folder(tmp_path / "in")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    argv = ["--kind", "mark", "--source", "cup", "--target", "cat", "--fraction", "0.5"]
    argv += ["--in", str(tmp_path / "in")]
    with pytest.raises(SystemExit, match="exists and is not an empty folder"):
        plant_cue.main([*argv, "--out", str(tmp_path / "full")])
    with pytest.raises(SystemExit, match="must not hold one another"):
        plant_cue.main([*argv, "--out", str(tmp_path / "in" / "cued")])
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    assert _hashes(tmp_path / "in") == before
