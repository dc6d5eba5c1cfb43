import warnings

import pytest
import torch
from torch import nn

from repinterp.models import zoo

OURS = {
    "mnist_cnn": (1, 28),
    "shapes_cnn": (3, 56),
    "digits_cnn": (1, 8),
    "mnist_super_cnn": (1, 28),
}
TORCHVISION = [arch for arch in zoo.ARCHS if arch not in OURS]


pytestmark = pytest.mark.usefixtures("one_thread")


def _features_at(model: nn.Module, layer: str, x: torch.Tensor) -> torch.Tensor:
    seen = []
    handle = model.get_submodule(layer).register_forward_hook(lambda m, i, o: seen.append(o))
    with torch.no_grad():
        model(x)
    handle.remove()
    return seen[0]


def _same_state(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("arch", OURS)
def test_our_archs_forward_and_expose_a_relu_target(arch):
    channels, side = OURS[arch]
    model = zoo.build_model(arch, num_classes=7)
    assert not model.training
    x = torch.randn(3, channels, side, side)
    with torch.no_grad():
        assert model(x).shape == (3, 7)
    layer = zoo.default_target_layer(arch)
    assert layer == model.target_layer
    modules = dict(model.named_modules())
    relus = [name for name, m in modules.items() if isinstance(m, nn.ReLU)]
    assert isinstance(modules[layer], nn.ReLU) and layer.startswith("features.")
    assert isinstance(model.features[int(layer.split(".")[1]) - 1], nn.Conv2d)
    assert all(not name.startswith("features.") for name in relus[relus.index(layer) + 1 :])
    feature_map = _features_at(model, layer, x)
    assert feature_map.dim() == 4 and feature_map.min() >= 0
    # The head is piecewise linear: pooling, flatten, Linear, ReLU, Dropout only.
    allowed = (nn.AdaptiveAvgPool2d, nn.Flatten, nn.Linear, nn.ReLU, nn.Dropout, nn.Sequential)
    assert all(isinstance(m, allowed) for m in model.classifier.modules())


def test_mnist_model_is_small(tmp_path):
    model = zoo.build_model("mnist_cnn", 10)
    assert 100_000 <= sum(p.numel() for p in model.parameters()) <= 300_000
    path = tmp_path / "mnist.safetensors"
    zoo.save_weights(model, path)
    assert path.stat().st_size < 2_000_000


@pytest.mark.parametrize("side", [48, 64])
def test_shapes_cnn_takes_48_to_64_pixels(side):
    model = zoo.build_model("shapes_cnn", 4)
    with torch.no_grad():
        assert model(torch.randn(2, 3, side, side)).shape == (2, 4)


def test_every_torchvision_arch_has_its_target_layer_and_new_head():
    for arch in TORCHVISION:
        with torch.device("meta"):
            model = zoo.build_model(arch, num_classes=5)
        modules = dict(model.named_modules())
        layer = zoo.default_target_layer(arch)
        assert layer in modules, arch
        linears = [m for m in modules.values() if isinstance(m, nn.Linear)]
        assert linears[-1].out_features == 5, arch
        if arch.startswith(("vgg", "alexnet")):
            relus = [n for n, m in modules.items() if isinstance(m, nn.ReLU)]
            assert layer == [n for n in relus if n.startswith("features.")][-1], arch
    assert zoo.default_target_layer("vgg16") == "features.29"
    assert zoo.default_target_layer("vgg19") == "features.35"
    assert zoo.default_target_layer("vgg11") == "features.19"
    assert zoo.default_target_layer("resnet50") == "layer4"
    assert zoo.default_target_layer("densenet121") == "features"


@pytest.mark.parametrize("arch", ["alexnet", "vgg11", "resnet18", "densenet121", "mobilenet_v2"])
def test_torchvision_archs_forward_small_inputs(arch):
    model = zoo.build_model(arch, num_classes=3)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert model(x).shape == (2, 3)
    assert _features_at(model, zoo.default_target_layer(arch), x).dim() == 4


def test_in_channels_replaces_the_first_convolution():
    model = zoo.build_model("resnet18", num_classes=2, in_channels=1)
    with torch.no_grad():
        assert model(torch.randn(1, 1, 32, 32)).shape == (1, 2)
    ours = zoo.build_model("mnist_cnn", 10, in_channels=3)
    assert ours.features[0].in_channels == 3


def test_build_is_seeded_and_leaves_the_global_rng_alone():
    state = torch.random.get_rng_state()
    a = zoo.build_model("mnist_cnn", 10, seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert _same_state(a, zoo.build_model("mnist_cnn", 10, seed=1))
    assert not _same_state(a, zoo.build_model("mnist_cnn", 10, seed=2))


def test_weights_round_trip_through_safetensors(tmp_path):
    model = zoo.build_model("shapes_cnn", 3, seed=1)
    path = tmp_path / "shapes.safetensors"
    zoo.save_weights(model, path)
    loaded = zoo.build_model("shapes_cnn", 3, weights=path, seed=2)
    assert _same_state(model, loaded)
    x = torch.randn(2, 3, 56, 56)
    with torch.no_grad():
        assert torch.equal(model(x), loaded(x))


def test_weights_round_trip_through_torch_save(tmp_path):
    model = zoo.build_model("resnet18", 4, seed=1)
    state = model.state_dict()
    wrapped = {
        "raw.pt": state,
        "checkpoint.pth": {"state_dict": state, "epoch": 3},
        "model.pt": {"model": state},
        "parallel.pt": {f"module.{k}": v for k, v in state.items()},
    }
    for name, content in wrapped.items():
        torch.save(content, tmp_path / name)
        loaded = zoo.build_model("resnet18", 4, weights=tmp_path / name, seed=2)
        assert _same_state(model, loaded), name


def test_weights_that_do_not_fit_give_one_line(tmp_path):
    path = tmp_path / "digits.safetensors"
    zoo.save_weights(zoo.build_model("digits_cnn", 10), path)
    with pytest.raises(ValueError, match="mis-shaped") as error:
        zoo.build_model("mnist_cnn", 10, weights=path)
    assert "\n" not in str(error.value) and "digits.safetensors" in str(error.value)

    state = zoo.build_model("digits_cnn", 10).state_dict()
    state["extra.weight"] = torch.zeros(1)
    del state["classifier.5.bias"]
    torch.save(state, tmp_path / "odd.pt")
    with pytest.raises(ValueError, match=r"missing classifier\.5\.bias") as error:
        zoo.build_model("digits_cnn", 10, weights=tmp_path / "odd.pt")
    assert "unexpected extra.weight" in str(error.value) and "\n" not in str(error.value)

    torch.save(zoo.build_model("digits_cnn", 10), tmp_path / "whole.pt")  # not a state dict
    with pytest.raises(ValueError) as error:
        zoo.build_model("digits_cnn", 10, weights=tmp_path / "whole.pt")
    assert str(error.value) == (
        f"cannot read weights from {tmp_path / 'whole.pt'}: it holds Python objects, not only "
        "tensors (a whole model saved with torch.save(model)?): if you trust it, load it with "
        "torch.load(path, weights_only=False) and save model.state_dict()"
    )

    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(ValueError, match="cannot read weights") as error:
        zoo.build_model("digits_cnn", 10, weights=tmp_path / "junk.pt")
    assert "\n" not in str(error.value)
    # text, an empty file: said to be no weights file, not "101" or "pop from empty list"
    for name, content in [("notes.txt", b"experiment 3\n"), ("n.md", b"# notes\n"), ("e.pt", b"")]:
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError) as error:
            zoo.build_model("digits_cnn", 10, weights=tmp_path / name)
        assert str(error.value) == (
            f"cannot read weights from {tmp_path / name}: it is not a weights file (a PyTorch "
            "checkpoint of torch.save, or safetensors)"
        )
    with pytest.raises(FileNotFoundError):
        zoo.build_model("digits_cnn", 10, weights=tmp_path / "absent.safetensors")


def test_reset_head_keeps_the_body_and_refits_the_classes(tmp_path):
    source = zoo.build_model("digits_cnn", 10, seed=1)
    path = tmp_path / "ten.safetensors"
    zoo.save_weights(source, path)
    with pytest.raises(ValueError, match=r"classifier\.5\.weight"):
        zoo.build_model("digits_cnn", 3, weights=path)
    model = zoo.build_model("digits_cnn", 3, weights=path, reset_head=True)
    assert model.classifier[5].out_features == 3
    assert torch.equal(model.features[0].weight, source.features[0].weight)
    assert torch.equal(model.classifier[2].weight, source.classifier[2].weight)


def test_unknown_arch_lists_the_choices():
    for call in (lambda: zoo.build_model("lenet", 10), lambda: zoo.default_target_layer("x")):
        with pytest.raises(
            ValueError, match="mnist_cnn, shapes_cnn, digits_cnn, mnist_super_cnn, alexnet"
        ):
            call()


def test_the_default_layer_has_maps_of_seven_pixels_a_side_at_the_input_size():
    # At 64 px a ResNet-18's layer4 is 2 x 2 (heat maps of four cells), layer2 8 x 8; at 32 px
    # layer1 is the last with 7 x 7 (8 x 8).
    model = zoo.build_model("resnet18", 3)
    sizes = {
        layer: _features_at(model, layer, torch.zeros(1, 3, 64, 64)).shape[2:]
        for layer in ("layer2", "layer3", "layer4")
    }
    assert sizes == {"layer2": (8, 8), "layer3": (4, 4), "layer4": (2, 2)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default is chosen without a word
        assert zoo.target_layer_for("resnet18", (3, 64, 64)) == "layer2"
        assert zoo.target_layer_for("resnet18", (3, 32, 32)) == "layer1"
        assert zoo.target_layer_for("resnet50", (3, 16, 16)) == "relu"  # the stem, 8 x 8
        # Where the arch's own layer is fine enough, it stays: 7 x 7 and up, or half of a small
        # image's side (the bundled digits_cnn: 4 x 4 of 8 x 8 digits).
        for arch, shape in (
            ("resnet18", (3, 224, 224)),
            ("vgg19", (3, 224, 224)),
            ("vgg11", (3, 112, 112)),
            ("mnist_cnn", (1, 28, 28)),
            ("digits_cnn", (1, 8, 8)),
            ("shapes_cnn", (3, 56, 56)),
            ("shapes_cnn", (3, 64, 64)),
        ):
            assert zoo.target_layer_for(arch, shape) == zoo.default_target_layer(arch), arch
        assert zoo.target_layer_for("resnet18", (1, 32, 32), "layer1.0") == "layer1.0"


def test_a_coarser_layer_asked_for_is_kept_with_a_one_line_warning():
    with pytest.warns(UserWarning) as caught:
        assert zoo.target_layer_for("resnet18", (3, 64, 64), "layer4") == "layer4"
    assert [str(w.message) for w in caught] == [
        "layer 'layer4' of resnet18 gives 2 x 2 feature maps for 64 x 64 px images: its heat "
        "maps are coarse ('layer2', the default there, gives 8 x 8)"
    ]


def test_a_target_layer_of_one_pixel_is_refused_naming_a_better_one():
    with pytest.raises(
        ValueError,
        match=r"^layer 'layer4' of resnet18 gives 1 x 1 feature maps for 32 x 32 px images, so "
        r"every heat map would be constant: use 'layer3', the last layer with more than one "
        r"pixel there \(or larger images\)$",
    ):
        zoo.target_layer_for("resnet18", (3, 32, 32), "layer4")
    with pytest.raises(ValueError, match="constant: no layer has more than one pixel there"):
        zoo.target_layer_for("resnet18", (3, 2, 2), "layer4")
    with pytest.raises(ValueError, match="'layer5' is not a module of the model; similar names"):
        zoo.target_layer_for("resnet18", (3, 32, 32), "layer5")


def test_check_model_refuses_a_bad_name_or_a_missing_weights_file(tmp_path):
    zoo.check_model("resnet18")
    with pytest.raises(ValueError, match="unknown arch 'resnet19'"):
        zoo.check_model("resnet19", tmp_path / "w.safetensors")
    with pytest.raises(FileNotFoundError, match=r"weights file not found: .*w\.safetensors"):
        zoo.check_model("resnet18", tmp_path / "w.safetensors")


def test_a_data_sets_model_has_its_classes_and_channels(tmp_path):
    from torch.utils.data import TensorDataset

    class Grey(TensorDataset):
        class_names = ("a", "b", "c")

    shape = zoo.DataShape.of(Grey(torch.zeros(4, 1, 32, 32), torch.zeros(4)))
    assert shape == zoo.DataShape(num_classes=3, in_channels=1)
    model = zoo.model_for("resnet18", shape)
    assert model.conv1.in_channels == 1 and model.fc.out_features == 3 and not model.training
    assert model(torch.zeros(2, 1, 32, 32)).shape == (2, 3)
    path = tmp_path / "w.safetensors"
    zoo.save_weights(zoo.build_model("digits_cnn", 10, seed=1), path)
    tuned = zoo.model_for("digits_cnn", shape, path, reset_head=True, seed=2)
    assert tuned.classifier[5].out_features == 3


def test_bundled_mnist_super_weights_are_the_documented_ones():
    """README records their SHA-256 and held-out accuracy (96.40% on the 1,000 unseen digits)."""
    import re
    from pathlib import Path

    from repinterp.data.datasets import mnist_super
    from repinterp.models.train import accuracy
    from repinterp.runtime.checksums import file_sha256
    from repinterp.workspace import bundled_weights

    path = bundled_weights("mnist_super_cnn")
    assert path is not None and path.stat().st_size < 2_000_000
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    documented = re.search(
        r"mnist_super_cnn\.safetensors`: .*?SHA-256\s+`([0-9a-f]{64})`", readme, re.S
    )
    assert documented and file_sha256(path) == documented.group(1)
    data = mnist_super()
    model = zoo.model_for("mnist_super_cnn", zoo.DataShape.of(data.reference), path)
    assert round(100 * accuracy(model, data.unseen), 2) == 96.40


def test_a_safetensors_file_whose_header_length_starts_with_0x80_is_one(tmp_path) -> None:
    """Issue 38 (found with newcomer item 5): a safetensors header of 0x..80 bytes begins as a
    pickle does (0x80) and was read as a PyTorch checkpoint; the header's ``{`` decides."""
    model = zoo.build_model("digits_cnn", 10, in_channels=1, seed=0)
    path = tmp_path / "w.safetensors"
    for pad in range(256):
        path.write_bytes(zoo.weights_bytes(model, {"pad": "x" * pad}))
        if path.read_bytes()[0] == 0x80:
            break
    other = zoo.build_model("digits_cnn", 10, in_channels=1, seed=1)
    zoo.load_weights(other, path)
    assert path.read_bytes()[0] == 0x80
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, other.state_dict()[name]), name
    assert zoo.recorded_training(path)["pad"].startswith("x")
