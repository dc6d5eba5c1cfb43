"""The k-means regions kept in an index folder (issue 24, §4): saved with their checksum in the
manifest and listed by the marker, read back without k-means, and never used when damaged,
changed, made with other settings or from other feature maps."""

from __future__ import annotations

import shutil
import warnings
from hashlib import sha256
from pathlib import Path

import pytest
import torch

from repinterp import RepresentativeInterpreter
from repinterp.core.reference_index import FEATURE_FILE
from repinterp.core.regions import RegionSet
from repinterp.store.index_folder import (
    IndexLoadError,
    add_file,
    load_index,
    read_manifest,
    save_index,
)
from repinterp.store.outputs import OutputError, listed
from repinterp.store.regions_file import (
    REGIONS_FILE,
    load_regions,
    regions_bytes,
    save_regions,
)

from ..networks import random_setup

pytestmark = pytest.mark.usefixtures("one_thread")

K, SEED = 6, 3


def fitted() -> RepresentativeInterpreter:
    model, images = random_setup(n=200)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=10, progress=False)
    return ri.fit(images, keep_features=True)


def loaded(path: Path) -> RepresentativeInterpreter:
    """The interpreter of the index at ``path``, warnings as errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return RepresentativeInterpreter.load(path, random_setup(n=200)[0], progress=False)


def no_k_means(monkeypatch) -> None:
    def refused(*args, **kwargs):
        raise AssertionError("k-means ran")

    monkeypatch.setattr(RegionSet, "build", refused)


@pytest.fixture
def kept(tmp_path) -> tuple[RegionSet, Path]:
    """``K`` regions (seed ``SEED``) kept in a saved index folder."""
    ri = fitted()
    path = tmp_path / "index"
    ri.save(path)
    regions = ri.regions(n_regions=K, seed=SEED)
    save_regions(regions, path, SEED)
    return regions, path


def same(a: RegionSet, b: RegionSet) -> bool:
    return (
        torch.equal(a.inputs, b.inputs)
        and torch.equal(a.centres, b.centres)
        and [r.boundary_ids.tolist() for r in a.regions]
        == [r.boundary_ids.tolist() for r in b.regions]
        and torch.equal(a.classes.cpu(), b.classes.cpu())
    )


def test_regions_are_kept_with_their_checksum_and_read_back_without_k_means(
    tmp_path, monkeypatch
) -> None:
    ri = fitted()
    path = tmp_path / "index"
    ri.save(path)
    before = {name: (path / name).read_bytes() for name in ("index.safetensors", FEATURE_FILE)}
    regions = ri.regions(n_regions=K, seed=SEED)
    save_regions(regions, path, SEED)
    data = (path / REGIONS_FILE).read_bytes()
    assert {regions_bytes(regions, SEED) for _ in range(8)} == {data}  # the same bytes each time
    assert read_manifest(path)["sha256"][REGIONS_FILE] == sha256(data).hexdigest()
    assert REGIONS_FILE in listed(path)  # the marker lists it: the project's file
    assert {name: (path / name).read_bytes() for name in before} == before  # not rewritten
    assert ri.index.files[REGIONS_FILE] == path / REGIONS_FILE
    no_k_means(monkeypatch)
    again = load_regions(loaded(path), K, SEED)
    assert again is not None and same(again, regions)
    assert load_regions(loaded(path), K - 1, SEED) is None  # other settings: not these
    assert load_regions(loaded(path), K, SEED + 1) is None
    assert load_regions(ri, K, SEED) is not None  # the saving interpreter lists it too


def test_regions_are_replaced_and_travel_with_a_save(kept, tmp_path) -> None:
    regions, path = kept
    ri = regions.interpreter
    save_regions(ri.regions(n_regions=K - 2, seed=SEED), path, SEED)
    names = {p.name for p in path.iterdir()}
    assert names == {"manifest.json", "index.safetensors", FEATURE_FILE, REGIONS_FILE} | {
        ".repinterp-output.json",
        ".repinterp.lock",
    }
    assert load_regions(loaded(path), K - 2, SEED) is not None
    assert load_regions(loaded(path), K, SEED) is None
    moved = tmp_path / "moved"
    ri.save(moved)  # the index's files, regions among them
    assert load_regions(loaded(moved), K - 2, SEED) is not None


@pytest.mark.parametrize("damage", ["flip", "missing"])
def test_a_damaged_regions_file_is_left_out_with_a_warning(kept, damage) -> None:
    _, path = kept
    file = path / REGIONS_FILE
    if damage == "flip":
        data = bytearray(file.read_bytes())
        data[-1] ^= 1
        file.write_bytes(bytes(data))
    else:
        file.unlink()
    what = "is damaged" if damage == "flip" else "is missing"
    with pytest.warns(UserWarning, match=rf"regions\.safetensors {what}.*computed again"):
        index = load_index(path)
    assert REGIONS_FILE not in index.files and REGIONS_FILE not in index.checksums
    with pytest.warns(UserWarning):
        ri = RepresentativeInterpreter.load(path, random_setup(n=200)[0], progress=False)
    assert load_regions(ri, K, SEED) is None  # never used: computed again
    save_regions(ri.regions(n_regions=K, seed=SEED), path, SEED)  # which replaces it
    assert load_regions(loaded(path), K, SEED) is not None
    (path / FEATURE_FILE).write_bytes(b"")  # a damaged feature file still refuses the index
    with pytest.raises(IndexLoadError, match=r"features\.npy is damaged"):
        load_index(path)


def test_a_regions_file_changed_after_loading_is_refused(kept) -> None:
    _, path = kept
    ri = loaded(path)
    (path / REGIONS_FILE).write_bytes(b"\0" * 16)
    with pytest.raises(
        ValueError, match=r"regions\.safetensors changed since the index was loaded"
    ):
        load_regions(ri, K, SEED)


def test_regions_of_other_feature_maps_or_damaged_inside_are_refused(kept) -> None:
    regions, path = kept
    index = regions.interpreter.index
    real = index.checksums[FEATURE_FILE]
    index.checksums[FEATURE_FILE] = "0" * 64
    other = regions_bytes(regions, SEED)
    index.checksums[FEATURE_FILE] = real
    add_file(path, REGIONS_FILE, other)  # its checksum in the manifest holds
    with pytest.raises(ValueError, match="computed from other feature maps"):
        load_regions(loaded(path), K, SEED)
    bad = RegionSet(regions.interpreter, regions.inputs, regions.regions, regions.centres[:, :3])
    add_file(path, REGIONS_FILE, regions_bytes(bad, SEED))
    with pytest.raises(ValueError, match=r"is damaged: centres must be k x \d+ finite floats"):
        load_regions(loaded(path), K, SEED)


def test_from_centres_checks_what_it_is_given(kept) -> None:
    regions, _ = kept
    ri, centres, inputs = regions.interpreter, regions.centres, regions.inputs
    assert same(RegionSet.from_centres(ri, centres, inputs.int()), regions)
    nan = centres.clone()
    nan[0, 0] = float("nan")
    for bad in (centres[:, 1:], centres[:0], nan, centres.long()):
        with pytest.raises(ValueError, match="centres must be k x"):
            RegionSet.from_centres(ri, bad, inputs)
    for bad in (inputs[1:], inputs.float(), inputs + 200, inputs - 200):
        with pytest.raises(ValueError, match=r"inputs must be 6 reference indices in \[0, 200\)"):
            RegionSet.from_centres(ri, centres, bad)


def test_add_file_refuses_another_index_a_users_file_and_reserved_names(kept) -> None:
    regions, path = kept
    features = regions.interpreter.index.checksums[FEATURE_FILE]
    manifest = read_manifest(path)
    with pytest.raises(IndexLoadError, match="another index was saved there since"):
        add_file(path, REGIONS_FILE, b"new", {FEATURE_FILE: "0" * 64})
    (path / "notes.bin").write_bytes(b"mine")
    with pytest.raises(OutputError, match=r"notes\.bin was not written by repinterp"):
        add_file(path, "notes.bin", b"new", {FEATURE_FILE: features})
    for name in ("manifest.json", "index.safetensors", "../up", ".hidden"):
        with pytest.raises(ValueError, match="cannot add a file named"):
            add_file(path, name, b"new")
    assert (path / "notes.bin").read_bytes() == b"mine"
    assert read_manifest(path) == manifest  # nothing refused was committed
    with pytest.raises(IndexLoadError, match=r"manifest\.json is missing"):
        add_file(path.parent / "elsewhere", REGIONS_FILE, b"new")
    assert not (path.parent / "elsewhere").exists()


def test_a_save_of_an_index_without_regions_drops_them(kept, tmp_path) -> None:
    _, path = kept
    index = load_index(path)
    del index.files[REGIONS_FILE]
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    save_index(index, copy, extra_files=index.files)
    assert not (copy / REGIONS_FILE).exists()  # swept: the project wrote it, the manifest drops it
    assert REGIONS_FILE not in read_manifest(copy)["sha256"]
