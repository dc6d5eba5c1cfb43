"""Sharded, resumable index building: a killed fit resumes to the index of one uninterrupted
pass, bit for bit; damaged shards are recomputed, never used."""

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch import Tensor
from torch.utils.data import Dataset

from repinterp import RepresentativeInterpreter
from repinterp.cli.parser import main
from repinterp.core.reference_index import FEATURE_FILE
from repinterp.models.split import CHECKED_IMAGES
from repinterp.models.zoo import build_model, save_weights
from repinterp.store import shards as shards_module
from repinterp.store.outputs import OutputError
from repinterp.store.shards import Shards

from ..commandline import listing
from ..networks import random_setup

pytestmark = pytest.mark.usefixtures("one_thread")

N, BATCH, SHARD, N_Q = 300, 32, 64, 20  # shards of 64 images: 5 shards, the last one of 44


class Reference(Dataset):
    """``(image, label)`` pairs that count their reads and can fail at a given read."""

    def __init__(self, images: Tensor, fail_at: int | None = None) -> None:
        self.images, self.fail_at, self.reads = images, fail_at, 0

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        self.reads += 1
        if self.reads == self.fail_at:
            raise KeyboardInterrupt  # what Ctrl-C raises in the middle of the pass
        return self.images[i], i % 3


@pytest.fixture(scope="module")
def setup():
    model, images = random_setup(n=N)
    uninterrupted = interpreter(model).fit(Reference(images), keep_features=True)
    return model, images, uninterrupted


def interpreter(model: torch.nn.Module) -> RepresentativeInterpreter:
    return RepresentativeInterpreter(
        model, "relu2", n_boundaries=N_Q, seed=0, batch_size=BATCH, progress=False
    )


def assert_same_index(a: RepresentativeInterpreter, b: RepresentativeInterpreter) -> None:
    tensors_a, tensors_b = a.index.tensors(), b.index.tensors()
    assert tensors_a.keys() == tensors_b.keys()
    for name, tensor in tensors_a.items():
        assert tensor.dtype == tensors_b[name].dtype and torch.equal(tensor, tensors_b[name]), name
    features_a = np.load(a.index.files[FEATURE_FILE])
    features_b = np.load(b.index.files[FEATURE_FILE])
    assert features_a.tobytes() == features_b.tobytes()


def interrupted_fit(model: torch.nn.Module, images: Tensor, shards: Shards, after: int) -> None:
    """A fit killed at the read of image ``after`` of the pass (after the |Q| source images)."""
    with pytest.raises(KeyboardInterrupt):
        interpreter(model).fit(
            Reference(images, CHECKED_IMAGES + N_Q + after), keep_features=True, shards=shards
        )


def test_sharded_fit_equals_plain_fit(setup, tmp_path) -> None:
    model, images, uninterrupted = setup
    shards = Shards(tmp_path / "partial", size=SHARD)
    sharded = interpreter(model).fit(Reference(images), keep_features=True, shards=shards)
    assert_same_index(sharded, uninterrupted)
    assert len(list(shards.directory.glob("shard-*.safetensors"))) == 5
    # the shard size is rounded down to whole batches: 100 -> 96
    odd = Shards(tmp_path / "odd", size=100)
    assert_same_index(
        interpreter(model).fit(Reference(images), shards=odd, keep_features=True), uninterrupted
    )
    assert len(list(odd.directory.glob("shard-*.safetensors"))) == 4


def test_killed_fit_resumes_bit_for_bit(setup, tmp_path) -> None:
    model, images, uninterrupted = setup
    shards = Shards(tmp_path / "partial", size=SHARD)
    interrupted_fit(model, images, shards, after=150)  # in shard 2: shards 0 and 1 are complete
    assert len((shards.directory / "shards.jsonl").read_text().splitlines()) == 2

    resumed_set = Reference(images)
    resume = Shards(shards.directory, size=SHARD, resume=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing damaged: no warning
        resumed = interpreter(model).fit(resumed_set, keep_features=True, shards=resume)
    # the images that check the model, the |Q| images behind Q (they check that the data is
    # the same), shards 0 and 1 to check that their images are those they were made from, and
    # shards 2 to 4
    assert resumed_set.reads == CHECKED_IMAGES + N_Q + N
    assert_same_index(resumed, uninterrupted)

    resume.remove()
    assert not shards.directory.exists()


def test_a_shard_made_from_an_image_changed_since_is_recomputed(setup, tmp_path) -> None:
    """Issue 38, item 11: a reference image changed (not one behind Q) before ``--resume``: the
    stale shard was reused, the index holding the old image's rows. Each shard records the
    SHA-256 of its images; a resumed fit recomputes a shard whose images changed, with a
    warning, and gives the index of a fresh fit of the new images."""
    model, images, uninterrupted = setup
    shards = Shards(tmp_path / "partial", size=SHARD)
    interrupted_fit(model, images, shards, after=150)  # shards 0 and 1 are complete
    behind_q = set(uninterrupted.index.sources.tolist())
    changed = next(i for i in range(SHARD, 2 * SHARD) if i not in behind_q)  # in shard 1
    new = images.clone()
    new[changed] = new[changed].flip(-1) + 0.5
    fresh = interpreter(model).fit(Reference(new), keep_features=True)
    resume = Shards(shards.directory, size=SHARD, resume=True)
    with pytest.warns(UserWarning, match="shard 1 in .* was made from other reference images"):
        resumed = interpreter(model).fit(Reference(new), keep_features=True, shards=resume)
    assert_same_index(resumed, fresh)
    assert not torch.equal(resumed.index.projections, uninterrupted.index.projections)


def test_damaged_shards_are_recomputed(setup, tmp_path) -> None:
    model, images, uninterrupted = setup
    shards = Shards(tmp_path / "partial", size=SHARD)
    interpreter(model).fit(Reference(images), keep_features=True, shards=shards)
    shard_1 = shards.directory / "shard-000001.safetensors"
    data = bytearray(shard_1.read_bytes())
    data[-5] ^= 1  # one flipped bit in a projection
    shard_1.write_bytes(bytes(data))
    features = np.load(shards.directory / FEATURE_FILE, mmap_mode="r+")
    features[3 * SHARD + 7, 11] += 1.0  # one changed feature value in shard 3
    features.flush()
    del features
    with open(shards.directory / "shards.jsonl", "a") as f:
        f.write('{"shard": 4, "sha2')  # a record torn by a kill: ignored

    reread = Reference(images)
    resume = Shards(shards.directory, size=SHARD, resume=True)
    with pytest.warns(UserWarning, match="damaged") as caught:
        resumed = interpreter(model).fit(reread, keep_features=True, shards=resume)
    assert sorted(str(w.message).split()[1] for w in caught) == ["1", "3"]
    # the images that check the model, and shards 1 and 3 recomputed, the others' images checked
    assert reread.reads == CHECKED_IMAGES + N_Q + N
    assert_same_index(resumed, uninterrupted)


def test_damaged_boundaries_start_over(setup, tmp_path) -> None:
    model, images, uninterrupted = setup
    shards = Shards(tmp_path / "partial", size=SHARD)
    interrupted_fit(model, images, shards, after=100)
    (shards.directory / "boundaries.safetensors").write_bytes(b"garbage")
    reread = Reference(images)
    with pytest.warns(UserWarning, match="boundaries.safetensors is damaged: starting"):
        resumed = interpreter(model).fit(
            reread, keep_features=True, shards=Shards(shards.directory, SHARD, resume=True)
        )
    assert reread.reads == CHECKED_IMAGES + N_Q + N
    assert_same_index(resumed, uninterrupted)


def test_resume_refuses_other_settings_and_starts_when_empty(setup, tmp_path) -> None:
    model, images, uninterrupted = setup
    shards = Shards(tmp_path / "partial", size=SHARD)
    interrupted_fit(model, images, shards, after=100)
    other_seed = RepresentativeInterpreter(
        model, "relu2", n_boundaries=N_Q, seed=1, batch_size=BATCH, progress=False
    )
    resume = Shards(shards.directory, size=SHARD, resume=True)
    with pytest.raises(ValueError, match=r"cannot resume from .*partial.*seed 0 there, 1 here"):
        other_seed.fit(Reference(images), keep_features=True, shards=resume)
    with pytest.raises(ValueError, match="shard_size 64 there, 128 here"):
        interpreter(model).fit(
            images, keep_features=True, shards=Shards(resume.directory, 128, True)
        )
    strategy = RepresentativeInterpreter(
        model, "relu2", n_boundaries=N_Q, batch_size=BATCH, progress=False, granularity="strategy"
    )
    with pytest.raises(ValueError, match="granularity 'class' there, 'strategy' here"):
        strategy.fit(Reference(images), keep_features=True, shards=resume)
    nothing_yet = Shards(tmp_path / "nothing-yet", size=SHARD, resume=True)  # so a full fit
    fresh = interpreter(model).fit(Reference(images), keep_features=True, shards=nothing_yet)
    assert_same_index(fresh, uninterrupted)


def fit_argv(weights: Path, out: Path, *extra: str) -> list[str]:
    return [
        "fit",
        "--model",
        "digits_cnn",
        "--weights",
        str(weights),
        "--reference",
        "digits",
        "--boundaries",
        "10",
        "--shard-size",
        "256",
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]


def interrupt_after_shards(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Make the next sharded fit raise KeyboardInterrupt (what Ctrl-C raises) once ``n`` shards
    are saved; ``monkeypatch.undo()`` ends it."""
    save_shard = shards_module.PartialBuild.save_shard
    saved = []

    def save_then_interrupt(self, k, *args):
        if len(saved) == n:
            raise KeyboardInterrupt
        saved.append(k)
        save_shard(self, k, *args)

    monkeypatch.setattr(shards_module.PartialBuild, "save_shard", save_then_interrupt)


def test_cli_fit_interrupted_then_resumed(tmp_path, capsys, monkeypatch) -> None:
    weights = tmp_path / "digits.safetensors"
    save_weights(build_model("digits_cnn", num_classes=10, in_channels=1, seed=0), weights)
    main(fit_argv(weights, tmp_path / "plain"))

    out = tmp_path / "index"
    interrupt_after_shards(monkeypatch, 2)
    with pytest.raises(SystemExit) as exit_info:
        main(fit_argv(weights, out))
    monkeypatch.undo()
    assert exit_info.value.code == 130
    assert "run the same command with --resume" in capsys.readouterr().err
    assert len(list((out / ".partial").glob("shard-*"))) == 2

    main(fit_argv(weights, out, "--resume"))
    assert not (out / ".partial").exists()
    for name in ("index.safetensors", FEATURE_FILE):
        assert (out / name).read_bytes() == (tmp_path / "plain" / name).read_bytes(), name

    main(fit_argv(weights, tmp_path / "lean", "--no-features"))
    assert not (tmp_path / "lean" / FEATURE_FILE).exists()
    lean, plain = (load_file(str(p / "index.safetensors")) for p in (tmp_path / "lean", out))
    assert all(torch.equal(lean[name], plain[name]) for name in plain)


def test_shards_follow_the_folder_rule_of_fit_shards(setup, tmp_path) -> None:
    """Issue 30, item 2: ``Shards`` of an index folder, or of a user's folder of other files
    (its own features.npy and partial.json), is refused before anything is written there."""
    model, images, _ = setup
    index = tmp_path / "index"
    interpreter(model).fit(Reference(images), keep_features=True).save(index)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / FEATURE_FILE).write_bytes(b"my features")
    (mine / "partial.json").write_text('{"mine": true}')
    for folder, message in (
        (index, "is a repinterp index"),
        (mine, "holds files that repinterp did not write"),
    ):
        before = listing(folder)
        with pytest.raises(OutputError, match=message):
            interpreter(model).fit(
                Reference(images), keep_features=True, shards=Shards(folder, SHARD)
            )
        assert listing(folder) == before
    assert len(RepresentativeInterpreter.load(index, model).index) == N
