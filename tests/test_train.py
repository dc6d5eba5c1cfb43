import math

import numpy as np
import pytest
import torch
from PIL import Image

from repinterp import data, train, zoo

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits() -> data.Split:
    ref, unseen = data.digits(seed=0)
    return data.Split(ref.subset(range(400)), unseen.subset(range(200)))


def _train(split: data.Split, seed: int = 0, **kwargs) -> tuple[torch.nn.Module, train.TrainResult]:
    model = zoo.build_model("digits_cnn", 10, seed=0)
    settings = {"epochs": 3, "lr": 3e-3, "batch_size": 32, "progress": False, "device": "cpu"}
    result = train.train(model, split.reference, split.unseen, seed=seed, **settings | kwargs)
    return model, result


def test_loss_falls_and_the_model_learns(digits):
    model, result = _train(digits)
    assert len(result.losses) == 3
    assert result.losses[-1] < 0.7 * result.losses[0]
    assert result.held_out_accuracy > 0.5
    assert not model.training
    assert train.accuracy(model, digits.unseen) == result.held_out_accuracy


def test_same_seed_gives_identical_weights(digits):
    state = torch.random.get_rng_state()
    first, result = _train(digits, seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    second, again = _train(digits, seed=1)
    other, _ = _train(digits, seed=2)
    a, b, c = first.state_dict(), second.state_dict(), other.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
    assert result == again


def test_sgd_and_no_held_out_set(digits):
    model = zoo.build_model("digits_cnn", 10)
    result = train.train(
        model, digits.reference, None, epochs=2, lr=0.05, optimizer="sgd", progress=False
    )
    assert result.losses[1] < result.losses[0] and math.isnan(result.held_out_accuracy)
    with pytest.raises(ValueError, match="adam, sgd"):
        train.train(model, digits.reference, None, epochs=1, optimizer="lbfgs")


def test_progress_bar_can_be_silenced(digits, capsys):
    small = digits.reference.subset(range(64))
    model = zoo.build_model("digits_cnn", 10)
    train.train(model, small, None, epochs=1, progress=False)
    assert capsys.readouterr().err == ""
    train.train(model, small, None, epochs=1, progress=True)
    assert "train" in capsys.readouterr().err


def test_fine_tunes_a_torchvision_model_on_an_image_folder(tmp_path):
    rng = np.random.default_rng(0)
    for c, name in enumerate(["dark", "light"]):
        (tmp_path / name).mkdir()
        for i in range(4):
            pixels = rng.integers(0, 80, (24, 24, 3), dtype=np.uint8) + 170 * c
            Image.fromarray(pixels.astype(np.uint8)).save(tmp_path / name / f"{i}.png")
    folder = data.imagefolder(tmp_path, size=16)
    model = zoo.build_model("resnet18", num_classes=2)
    result = train.train(model, folder, folder, epochs=2, batch_size=4, progress=False)
    assert len(result.losses) == 2 and all(math.isfinite(x) for x in result.losses)
    assert 0 <= result.held_out_accuracy <= 1
