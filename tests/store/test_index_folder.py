"""A damaged or edited manifest is refused (issue 22, item 8): the manifest carries the SHA-256
of its own content, so that a flipped bit or an edit cannot open as another index (another
class name, normalisation, target layer or data split), and every number that sizes an
allocation is bounded, with one-line errors."""

import json
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from repinterp import RepresentativeInterpreter, __version__
from repinterp.store.index_folder import (
    FORMAT_VERSION,
    IndexLoadError,
    load_index,
    manifest_sha256,
    read_manifest,
    save_index,
)
from repinterp.workspace import open_index

from ..commandline import FIT, assert_one_line_error, edit_manifest, run
from ..networks import random_setup

pytestmark = pytest.mark.usefixtures("one_thread")

# what workspace.fit_workspace records for an image folder (the model is built by the tests)
RECIPE = {
    "arch": "tiny_mlp_cnn",
    "weights": "../weights.safetensors",
    "num_classes": 4,
    "in_channels": 1,
    "dataset": "imagefolder:/data/animals",
    "data_seed": 0,
    "image_size": 12,
    "mean": [0.485],
    "std": [0.229],
    "data": {"dataset": "imagefolder:/data/animals", "seed": 0, "n_reference": 20},
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[RepresentativeInterpreter, torch.Tensor, Path]:
    """A tiny model fitted on 20 images, saved with its feature maps and a recipe."""
    model, images = random_setup(n=24)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=8, seed=0, progress=False)
    ri.fit(images[:20], class_names=["cat", "dog", "café", "zèbre"], keep_features=True)
    ri.index.meta["recipe"] = RECIPE
    path = tmp_path_factory.mktemp("index") / "index"
    ri.save(path)
    return ri, images[20:], path


def answers(ri: RepresentativeInterpreter, images: torch.Tensor) -> list[Any]:
    """Everything a loaded index says: its layer, names and manifest fields, and the
    interpretation of each of ``images``."""
    out: list[Any] = [ri.target_layer, ri.class_names, ri.index.meta]
    for e in ri.explain_batch(images):
        out.append((e.predicted_class, e.boundary_ids.tolist(), e.covered.tolist()))
        out.append(e.projections.tolist())
    return out


def copy_of(path: Path, to: Path) -> Path:
    shutil.copytree(path, to)
    return to


def test_the_manifest_holds_the_checksum_of_its_content(saved, tmp_path) -> None:
    _, _, path = saved
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format_version"] == FORMAT_VERSION == 2
    assert manifest["manifest_sha256"] == manifest_sha256(manifest)
    assert "manifest_sha256" not in load_index(path).meta  # not carried into the next save
    copy = copy_of(path, tmp_path / "copy")
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=7, sort_keys=True))
    assert read_manifest(copy) == manifest  # the layout does not count, only the content
    save_index(load_index(copy), copy)  # saved again: sealed again
    assert read_manifest(copy) == manifest


def test_every_bit_flip_of_the_manifest_is_refused_or_changes_nothing(saved, tmp_path) -> None:
    ri, images, path = saved
    original = (path / "manifest.json").read_bytes()
    content = read_manifest(path)
    expected = answers(RepresentativeInterpreter.load(path, ri.model, progress=False), images)
    copy = copy_of(path, tmp_path / "copy")
    refused, same = 0, 0
    for bit in range(8 * len(original)):
        flipped = bytearray(original)
        flipped[bit // 8] ^= 1 << (bit % 8)
        (copy / "manifest.json").write_bytes(bytes(flipped))
        try:
            loaded = RepresentativeInterpreter.load(copy, ri.model, progress=False)
        except IndexLoadError as exc:
            assert "\n" not in str(exc), bit
            refused += 1
            continue
        assert read_manifest(copy) == content, bit
        assert answers(loaded, images) == expected, bit
        same += 1
    # only flips that JSON reads the same open (an escape's hex digit e -> E, in 'café')
    assert refused + same == 8 * len(original) and 0 < same < refused / 100, (refused, same)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m["recipe"].update(data_seed=1),
        lambda m: m["recipe"].pop("data"),
        lambda m: m["class_names"].__setitem__(2, "cafe"),
        lambda m: m.update(target_layer="relu1"),
        lambda m: m["recipe"].update(mean=[1.485]),
        lambda m: m["recipe"].update(num_classes=1e12),
    ],
    ids=["data_seed", "no data", "class_names", "target_layer", "mean", "num_classes"],
)
def test_an_edited_manifest_is_refused(saved, tmp_path, capsys, edit) -> None:
    ri, _, path = saved
    copy = copy_of(path, tmp_path / "copy")
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2))
    message = "manifest.json is damaged or was edited: its checksum (manifest_sha256) differs"
    with pytest.raises(IndexLoadError, match=r"damaged or was edited"):
        RepresentativeInterpreter.load(copy, ri.model)
    out = tmp_path / "out"
    code, _, err = run(["explain", "reference:0", "--index", str(copy), "--out", str(out)], capsys)
    assert_one_line_error(code, err, message)
    assert not out.exists()


def test_a_manifest_without_its_checksum_or_of_version_1_is_refused(saved, tmp_path) -> None:
    _, _, path = saved
    copy = copy_of(path, tmp_path / "copy")
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["manifest_sha256"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexLoadError, match=r"checksum \(manifest_sha256\) is missing"):
        load_index(copy)
    manifest["format_version"] = 1  # what repinterp wrote before the checksum
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexLoadError, match="has index format 1, this repinterp reads 2: fit"):
        load_index(copy)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda m: m["recipe"].update(num_classes=1e12),
            "its recipe's num_classes is 1000000000000.0",
        ),
        (
            lambda m: m["recipe"].update(num_classes=10**12),
            "its recipe's num_classes is 1000000000000, not from 1 to 100000",
        ),
        (
            lambda m: m["recipe"].update(in_channels=10**9),
            "its recipe's in_channels is 1000000000, not from 1 to 1024",
        ),
        (
            lambda m: m["recipe"].update(image_size=10**6),
            "its recipe's image_size is 1000000, not from 1 to 16384",
        ),
        (lambda m: m["recipe"].update(std=[0.2] * 10**4), "std is [0.2, 0.2, 0.2, 0.2, 0.2, 0.2"),
        (lambda m: m["recipe"].update(mean=["0.5"]), "mean is ['0.5'], not 1 finite numbers"),
        (lambda m: m["recipe"].pop("data"), "its recipe's data is None"),
        (
            lambda m: m.update(n_classes=10**12),
            "n_classes is 1000000000000, not a count from 1 to 100000",
        ),
        (
            lambda m: m.update(n_reference=2**40),
            "n_reference is 1099511627776, not a count from 1 to 2147483647",
        ),
        (lambda m: m.update(input_shape=[1, 12, 10**6]), "input_shape [1, 12, 1000000] is not"),
        (lambda m: m.update(input_shape=[1024, 16384, 16384]), "C x H x W <= 268435456"),
        (lambda m: m.update(feature_shape=[8, 6, 2**40]), "feature_shape [8, 6, 1099511627776]"),
    ],
    ids=[
        "num_classes float",
        "num_classes",
        "in_channels",
        "image_size",
        "std long",
        "mean text",
        "no data",
        "n_classes",
        "n_reference",
        "input side",
        "input values",
        "feature_shape",
    ],
)
def test_sizes_out_of_range_are_one_line_errors(saved, tmp_path, capsys, edit, message) -> None:
    """Sealed again after the edit (as a deliberate edit would be): the fields' own checks
    refuse it, before anything is allocated."""
    _, _, path = saved
    copy = copy_of(path, tmp_path / "copy")
    edit_manifest(copy, edit)
    with pytest.raises(IndexLoadError, match=r"manifest\.json is damaged: ") as caught:
        open_index(copy, progress=False)
    assert message in str(caught.value) and len(str(caught.value)) < 300
    out = tmp_path / "out"
    code, _, err = run(["explain", "reference:0", "--index", str(copy), "--out", str(out)], capsys)
    assert_one_line_error(code, err, message)
    assert not out.exists()


def test_what_loading_would_refuse_is_not_saved(saved, tmp_path) -> None:
    _, _, path = saved
    index = load_index(path)
    index.meta["target_layer"] = 3
    with pytest.raises(ValueError, match=r"cannot save the index to .*target_layer is not a"):
        save_index(index, tmp_path / "index")
    assert not (tmp_path / "index").exists()


# The graph fingerprint that repinterp 0.4.0 (commit 4441eee) recorded for digits_cnn at its
# default layer: 0.4's manifest of `FIT --no-features` is that of this version without
# ``repinterp_version`` and with this fingerprint, key for key (checked with 0.4.0's own fit).
GRAPH_OF_0_4 = "5a647f288896d2237f4bb3f96c4f991ab1be3473795c1bd2d4491045749cbdfe"


def test_an_index_of_an_older_version_is_named_for_it(tmp_path, capsys) -> None:
    """Issue 44, item 4: an index of 0.4 was refused as "made with another graph of the
    model", blaming the user's unchanged model."""
    index = tmp_path / "index"
    assert run([*FIT, "--no-features", "--out", str(index)], capsys)[0] == 0
    assert json.loads((index / "manifest.json").read_text())["repinterp_version"] == __version__
    explain = ["explain", "reference:0", "--index", str(index), "--out", str(tmp_path / "e")]

    def made_by_0_4(manifest: dict[str, Any]) -> None:
        del manifest["repinterp_version"]
        manifest["graph_fingerprint"] = GRAPH_OF_0_4

    edit_manifest(index, made_by_0_4)
    code, _, err = run(explain, capsys)
    assert_one_line_error(code, err, f"{index} was made by repinterp 0.4: fit it again")
    with pytest.raises(IndexLoadError, match=r"made by repinterp 0\.4: fit it again"):
        open_index(index, progress=False)
    edit_manifest(index, lambda manifest: manifest.update(repinterp_version="0.9.1"))
    code, _, err = run(explain, capsys)
    assert_one_line_error(code, err, f"made by repinterp 0.9.1, this is {__version__}, and its")
    edit_manifest(index, lambda manifest: manifest.update(repinterp_version=__version__))
    code, _, err = run(explain, capsys)  # this version's own fingerprint: another graph
    assert_one_line_error(code, err, "was made with another graph of the model")


def test_an_index_of_the_removed_logic_granularity_is_refused_in_one_line(saved, tmp_path):
    """``granularity="logic"`` was removed in 0.6 (issue 41): its index says what to do, without
    the retirement warning it used to raise."""
    _, _, path = saved
    copy = copy_of(path, tmp_path / "logic")
    edit_manifest(copy, lambda m: m.update(granularity="logic", gamma=0.1))
    said = (
        f"{copy} was fitted with granularity 'logic', removed in 0.6: fit it again with "
        "'class' or 'strategy'"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(IndexLoadError) as caught:
            load_index(copy)
    assert str(caught.value) == said
    ri, _, _ = saved
    with pytest.raises(IndexLoadError, match=re.escape(said)):
        RepresentativeInterpreter.load(copy, ri.model)


def test_an_index_of_another_granularity_than_asked_is_refused(saved) -> None:
    ri, _, path = saved
    said = f"{path} was fitted with granularity='class', not 'strategy': fit it again with"
    with pytest.raises(IndexLoadError, match=re.escape(said)):
        RepresentativeInterpreter.load(path, ri.model, granularity="strategy")
    assert (
        RepresentativeInterpreter.load(path, ri.model, granularity="class").granularity == "class"
    )
