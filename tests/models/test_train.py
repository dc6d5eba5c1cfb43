import math

import numpy as np
import pytest
import torch
from PIL import Image

from repinterp.data import datasets as data
from repinterp.models import train, zoo

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits() -> data.Split:
    ref, unseen = data.digits(seed=0)
    return data.Split(ref.subset(range(400)), unseen.subset(range(200)))


def _train(split: data.Split, seed: int = 0, **kwargs) -> tuple[torch.nn.Module, train.TrainResult]:
    model = zoo.build_model("digits_cnn", 10, seed=0)
    recipe = train.Recipe("digits_cnn", **{"epochs": 3, "lr": 3e-3, "batch_size": 32} | kwargs)
    result = train.train(
        model,
        split.reference,
        recipe,
        seed,
        held_out_set=split.unseen,
        device="cpu",
        progress=False,
    )
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
    sgd = train.Recipe("digits_cnn", epochs=2, lr=0.05, optimizer="sgd")
    result = train.train(model, digits.reference, sgd, progress=False)
    assert result.losses[1] < result.losses[0] and math.isnan(result.held_out_accuracy)
    with pytest.raises(ValueError, match=r"^unknown optimizer 'lbfgs'; choose one of: adam, adamw"):
        train.Recipe("digits_cnn", epochs=1, optimizer="lbfgs")


def test_progress_bar_can_be_silenced(digits, capsys):
    small = digits.reference.subset(range(64))
    model = zoo.build_model("digits_cnn", 10)
    once = train.Recipe("digits_cnn", epochs=1)
    train.train(model, small, once, progress=False)
    assert capsys.readouterr().err == ""
    train.train(model, small, once, progress=True)
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
    recipe = train.Recipe("resnet18", epochs=2, batch_size=4)
    result = train.train(model, folder, recipe, held_out_set=folder, progress=False)
    assert len(result.losses) == 2 and all(math.isfinite(x) for x in result.losses)
    assert 0 <= result.held_out_accuracy <= 1


def test_defaults_train_as_before(digits):
    # The losses of the loop that made the bundled weights (before the schedule options).
    _, result = _train(digits)
    assert result.losses == pytest.approx([2.242160975933075, 1.539650763074557, 0.8065546552340])
    assert result.learning_rates == [3e-3] * 36


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("constant", [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
        ("cosine", [0.25, 0.5, 0.75, 1.0, 1.0, (2 + 2**0.5) / 4, 0.5, (2 - 2**0.5) / 4, 0.0]),
    ],
)
def test_learning_rate_warms_up_then_follows_the_schedule(schedule, expected):
    factors = [train.learning_rate_factor(s, 8, 4, schedule) for s in range(9)]
    assert factors[:5] == expected[:5]
    assert factors[5:] == pytest.approx(expected[5:], abs=1e-12)
    assert train.learning_rate_factor(0, 8, 0, "cosine") == 1.0
    with pytest.raises(ValueError, match=r"^unknown schedule 'step'; choose one of: constant, cos"):
        train.learning_rate_factor(0, 8, 0, "step")


def test_the_schedule_drives_every_step(digits):
    small = digits.reference.subset(range(64))
    model = zoo.build_model("digits_cnn", 10, seed=0)
    recipe = train.Recipe(
        "digits_cnn", epochs=3, lr=0.1, batch_size=16, optimizer="sgd", schedule="cosine",
        warmup_epochs=0.5,
    )  # fmt: skip
    result = train.train(model, small, recipe, progress=False)
    expected = [0.1 * train.learning_rate_factor(s, 12, 2, "cosine") for s in range(12)]
    assert result.learning_rates == pytest.approx(expected, rel=1e-12)
    assert result.learning_rates[:3] == pytest.approx([0.05, 0.1, 0.1])


def test_make_optimizer_passes_the_options_on():
    weights = [torch.nn.Parameter(torch.zeros(2))]
    sgd = train.make_optimizer(weights, "sgd", lr=0.02, weight_decay=5e-4, momentum=0.8)
    adamw = train.make_optimizer(weights, "adamw", lr=1e-3, weight_decay=0.05)
    assert type(sgd) is torch.optim.SGD and type(adamw) is torch.optim.AdamW
    assert {k: sgd.defaults[k] for k in ("lr", "momentum", "weight_decay")} == {
        "lr": 0.02, "momentum": 0.8, "weight_decay": 5e-4,
    }  # fmt: skip
    assert (adamw.defaults["lr"], adamw.defaults["weight_decay"]) == (1e-3, 0.05)
    with pytest.raises(ValueError, match=r"adam, adamw, sgd$"):
        train.make_optimizer(weights, "lbfgs")


class _Recorder(torch.nn.Module):
    """Logits = bias (a fixed Linear of zero weight, lr 0 keeps it), recording every input."""

    def __init__(self, features: int, bias: list[float]) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(features, len(bias))
        torch.nn.init.zeros_(self.linear.weight)
        self.linear.bias.data = torch.tensor(bias)
        self.seen: list[torch.Tensor] = []
        self.dtypes: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.clone())
        logits = self.linear(x.flatten(1))
        self.dtypes.append(logits.dtype)
        return logits


def _tiny_set(n: int = 32) -> data.ImageSet:
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(n, 1, 3, 4, generator=generator)
    labels = torch.arange(n) % 3
    return data.ImageSet(images, labels, ["a", "b", "c"], data.Normalization((0.0,), (1.0,)))


def _frozen(**settings) -> train.Recipe:
    """A recipe of learning rate 0 (the weights stay as they are)."""
    return train.Recipe("recorder", **{"epochs": 1, "lr": 0.0, "batch_size": 8} | settings)


def test_hflip_mirrors_a_random_half_of_each_epoch():
    tiny = _tiny_set()
    model = _Recorder(12, [0.0, 0.0, 0.0])
    train.train(model, tiny, _frozen(epochs=2, hflip=True), progress=False)
    seen = torch.cat(model.seen)
    assert seen.shape == (64, 1, 3, 4)
    originals, mirrors = tiny.images, tiny.images.flip(-1)
    for epoch in seen.split(32):
        plain = (epoch[:, None] == originals[None]).flatten(2).all(2)
        flipped = (epoch[:, None] == mirrors[None]).flatten(2).all(2)
        # Every image once per epoch, as itself or as its mirror image; some of each.
        assert ((plain | flipped).sum(0) == 1).all() and ((plain | flipped).sum(1) == 1).all()
        assert 8 <= int(flipped.any(1).sum()) <= 24
    model.seen.clear()
    train.train(model, tiny, _frozen(), progress=False)
    assert all((x[:, None] == originals[None]).flatten(2).all(2).any(1).all() for x in model.seen)


def test_label_smoothing_and_autocast_reach_the_loss():
    tiny = _tiny_set(8)
    bias = [2.0, -1.0, 0.5]
    model = _Recorder(12, bias)
    smoothed = _frozen(label_smoothing=0.2)
    result = train.train(
        model, tiny, smoothed, device="cpu", progress=False, autocast=torch.bfloat16
    )
    logits = torch.tensor(bias).expand(8, 3)
    expected = torch.nn.functional.cross_entropy(logits, tiny.labels, label_smoothing=0.2)
    assert result.losses == pytest.approx([float(expected)], rel=1e-2)  # bf16 logits
    assert model.dtypes == [torch.bfloat16] and model.linear.weight.dtype == torch.float32
    train.train(model, tiny, _frozen(), device="cpu", progress=False)
    assert model.dtypes[-1] == torch.float32
    with pytest.raises(ValueError, match=r"^--label-smoothing 1.0: must be a finite number in"):
        _frozen(label_smoothing=1.0)


def test_the_train_command_passes_the_recipe_on(monkeypatch, tmp_path, capsys):
    from repinterp.cli import parser as cli

    seen = {}

    def record(model, train_set, recipe, *args, **kwargs):
        seen.update(recipe.settings())
        return train.TrainResult([1.5], 0.5, [0.01])

    monkeypatch.setattr(train, "train", record)
    out = tmp_path / "w.safetensors"
    recipe = "--optimizer sgd --momentum 0.8 --weight-decay 5e-4 --schedule cosine"
    recipe += " --warmup-epochs 1.5 --label-smoothing 0.1 --hflip --dropout 0 --lr 0.02 --quiet"
    command = f"train --dataset digits --model digits_cnn --out {out} {recipe}"
    cli.main(command.split())
    assert {k: seen[k] for k in ("optimizer", "momentum", "weight_decay", "schedule")} == {
        "optimizer": "sgd", "momentum": 0.8, "weight_decay": 5e-4, "schedule": "cosine",
    }  # fmt: skip
    assert (seen["warmup_epochs"], seen["label_smoothing"], seen["hflip"]) == (1.5, 0.1, True)
    assert (seen["lr"], seen["dropout"]) == (0.02, 0.0) and out.is_file()
    assert "held-out accuracy: 50.00%" in capsys.readouterr().out
    plain = tmp_path / "plain.safetensors"
    cli.main(f"train --dataset digits --model digits_cnn --out {plain} --quiet".split())
    assert (seen["optimizer"], seen["schedule"], seen["warmup_epochs"]) == ("adam", "constant", 0)
    assert (seen["label_smoothing"], seen["hflip"], seen["weight_decay"]) == (0, False, 0)
    assert seen["dropout"] is None


def test_dropout_is_overridden_while_training_only():
    tiny = _tiny_set(16)
    recorder = _Recorder(12, [0.0, 0.0, 0.0])
    model = torch.nn.Sequential(torch.nn.Dropout(0.5), recorder)
    train.train(model, tiny, _frozen(batch_size=16, dropout=0.0), progress=False)
    assert model[0].p == 0.5
    plain = (recorder.seen[0][:, None] == tiny.images[None]).flatten(2).all(2)
    assert (plain.sum(1) == 1).all()  # every image seen as it is
    train.train(model, tiny, _frozen(batch_size=16), progress=False)
    assert (recorder.seen[1] == 0).float().mean() > 0.3  # the model's own dropout, p = 0.5


@pytest.mark.parametrize(
    "option, message",
    [
        ("--lr inf", "--lr inf: must be a finite number at least 0"),
        ("--lr nan", "--lr nan: must be a finite number at least 0"),
        ("--optimizer sgd --momentum nan", "--momentum nan: must be a finite number at least 0"),
        ("--weight-decay=-inf", "--weight-decay -inf: must be a finite number at least 0"),
        ("--warmup-epochs nan", "--warmup-epochs nan: must be a finite number at least 0"),
        ("--dropout 1.5", "--dropout 1.5: must be a finite number in [0, 1]"),
    ],
)
def test_train_refuses_settings_that_cannot_train_before_any_work(
    option, message, monkeypatch, tmp_path, capsys
):
    """Issue 38, item 13: ``--lr inf`` or ``--momentum nan`` wrote all-NaN weights with exit 0;
    now one line naming the option, before the data set is read, and nothing written."""
    from ..commandline import assert_one_line_error, run

    def unread(*args, **kwargs):
        raise AssertionError("the data set was read")

    monkeypatch.setattr(data, "load_dataset", unread)
    out = tmp_path / "w.safetensors"
    argv = ["train", "--dataset", "digits", "--model", "digits_cnn", "--out", str(out)]
    code, _, err = run([*argv, *option.split(), "--quiet"], capsys)
    assert_one_line_error(code, err, message)
    assert list(tmp_path.iterdir()) == []
