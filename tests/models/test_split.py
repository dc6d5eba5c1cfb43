from collections import OrderedDict

import pytest
import torch
import torchvision
from torch import nn

from repinterp.models.split import locate_split, model_fingerprint, resolve_layer, split_model

from ..networks import randn, tiny_gap_cnn, tiny_mlp_cnn, triangle_model


@pytest.mark.parametrize(
    ("arch", "layer", "size"),
    [
        ("vgg11", "features.19", 32),
        ("resnet18", "layer4", 64),
        ("densenet121", "features", 64),
    ],
)
@pytest.mark.parametrize("batch", [1, 3])
def test_split_torchvision_models(arch: str, layer: str, size: int, batch: int) -> None:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = getattr(torchvision.models, arch)(weights=None, num_classes=5).eval()
    split = split_model(model, layer)
    x = randn(batch, 3, size, size)
    with torch.no_grad():
        t = split.psi(x)
        assert torch.equal(split.head(t), model(x))
        t_copy = t.clone()
        split.head(t)
        assert torch.equal(t, t_copy), "the head modified its input in place"


class _InPlaceHead(nn.Module):
    """A trunk conv and a head that writes into its input in the way named by ``how``."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.conv = nn.Conv2d(1, 2, 3)
        self.act = nn.ReLU(inplace=how == "module")
        self.fc = nn.Linear(2 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.conv(x)
        if self.how == "module":
            t = self.act(t)
        elif self.how == "method":
            t = t.clamp_(min=0.1)
        elif self.how == "function":
            t = torch.nn.functional.relu(t, inplace=True)
        elif self.how == "operator":
            t += 0.5
        elif self.how == "torch_":
            t = torch.relu_(t)
        return self.fc(t.flatten(1))


@pytest.mark.parametrize("how", ["module", "method", "function", "operator", "torch_", "none"])
def test_head_never_modifies_its_input(how: str) -> None:
    model = _InPlaceHead(how).eval()
    split = split_model(model, "conv", allow_nonlinear_head=True)
    x = randn(2, 1, 6, 6)
    with torch.no_grad():
        t = split.psi(x)
        t_copy = t.clone()
        assert torch.equal(split.head(t), model(x))
    assert torch.equal(t, t_copy)
    # the copy is made only where the head may write in place (torch.fx records `t += c` as
    # `t + c`, a new tensor)
    assert split.head.copies_input == (how not in ("none", "operator"))


def test_split_sequential_accepts_module_and_name() -> None:
    model = tiny_mlp_cnn()
    x = randn(4, 1, 12, 12)
    by_name = split_model(model, "relu2")
    by_module = split_model(model, model.relu2)
    assert by_module.layer == "relu2"
    with torch.no_grad():
        assert torch.equal(by_name.head(by_name.psi(x)), model(x))
        assert by_name.psi(x).shape == (4, 8, 6, 6)


def test_head_does_not_run_trunk() -> None:
    model = tiny_mlp_cnn()
    split = split_model(model, "relu2")
    calls = []
    handle = model.conv1.register_forward_hook(lambda *_: calls.append(1))
    try:
        split.head(randn(2, 8, 6, 6))
    finally:
        handle.remove()
    assert calls == []


@pytest.mark.parametrize(
    "layer", [nn.GELU(), nn.SiLU(), nn.Hardswish(), nn.Sigmoid(), nn.Softmax(dim=1), nn.Tanh()]
)
def test_nonlinear_head_is_refused_by_name(layer: nn.Module) -> None:
    model = nn.Sequential(
        OrderedDict(
            conv=nn.Conv2d(1, 2, 3), relu=nn.ReLU(), flat=nn.Flatten(), fc=nn.Linear(2 * 4 * 4, 8)
        )
    )
    model.add_module("act", layer)
    model.add_module("out", nn.Linear(8, 3))
    model.eval()
    with pytest.raises(ValueError, match=f"'act' \\({type(layer).__name__}\\)"):
        split_model(model, "relu")
    split = split_model(model, "relu", allow_nonlinear_head=True)
    x = torch.randn(2, 1, 6, 6)
    with torch.no_grad():
        assert torch.equal(split.head(split.psi(x)), model(x))


@pytest.mark.parametrize("layer", [nn.BatchNorm1d(8), nn.Dropout(0.5)])
def test_train_mode_layers_in_head_are_refused(layer: nn.Module) -> None:
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(32, 8), layer)
    model.add_module("out", nn.Linear(8, 3))
    model.eval()
    split_model(model, "1")
    layer.train()
    with pytest.raises(ValueError, match="training mode"):
        split_model(model, "1")


def test_functional_nonlinearity_is_refused() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3)
            self.fc = nn.Linear(2 * 4 * 4, 3)

        def forward(self, x):
            return torch.sigmoid(self.fc(self.conv(x).flatten(1)))

    with pytest.raises(ValueError, match="sigmoid"):
        split_model(Net().eval(), "conv")


def test_errors_for_bad_layers() -> None:
    model = torchvision.models.resnet18(weights=None).eval()
    with pytest.raises(ValueError, match="'layer9' is not a module"):
        split_model(model, "layer9")
    with pytest.raises(ValueError, match="called 2 times"):
        split_model(model, "layer4.0.relu")
    with pytest.raises(ValueError, match="skip connection"):
        split_model(model, "layer4.0.conv1")
    with pytest.raises(ValueError, match="not part of the model"):
        resolve_layer(model, nn.ReLU())


def test_custom_functional_head_is_accepted() -> None:
    split = split_model(triangle_model(), "features")
    t = torch.tensor([[0.2, 0.3], [2.0, -1.0]]).view(2, 2, 1, 1)
    logits = split.head(split.psi(t))
    assert torch.allclose(logits[:, 0], torch.tensor([0.2, -1.0]))


def test_fingerprint_follows_weights() -> None:
    a, b = tiny_mlp_cnn(seed=0), tiny_mlp_cnn(seed=0)
    assert model_fingerprint(a) == model_fingerprint(b)
    with torch.no_grad():
        b.fc3.bias[0] += 1e-6
    assert model_fingerprint(a) != model_fingerprint(b)


def test_locate_split_with_a_least_side_takes_the_last_layer_that_reaches_it_else_the_finest():
    model = tiny_gap_cnn().eval()  # "1": 8 x 16 x 16, "3": 16 x 8 x 8, then a global pool
    assert locate_split(model, (3, 16, 16)).layer == "3"
    assert locate_split(model, (3, 16, 16), min_side=8).layer == "3"
    assert locate_split(model, (3, 16, 16), min_side=9).layer == "1"
    assert locate_split(model, (3, 16, 16), min_side=20).layer == "1"  # none reaches: the finest
