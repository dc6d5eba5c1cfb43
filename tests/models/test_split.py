import re
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


def _bn_model(track: bool = True, seed: int = 0) -> nn.Sequential:
    """conv-BatchNorm-ReLU-conv-ReLU trunk ("block" holds the second conv and its ReLU) and a
    head of a BatchNorm1d and a linear layer, for 1 x 8 x 8 inputs; in eval mode."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = nn.Sequential(
            OrderedDict(
                conv=nn.Conv2d(1, 4, 3, padding=1),
                bn=nn.BatchNorm2d(4, track_running_stats=track),
                relu=nn.ReLU(),
                block=nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.Dropout(0.5), nn.ReLU()),
                flat=nn.Flatten(),
                norm=nn.BatchNorm1d(256),
                fc=nn.Linear(256, 3),
            )
        )
    return model.eval()


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize(
    ("where", "name"),
    [("bn", "'bn' (BatchNorm2d)"), ("block.1", "'block.1' (Dropout)"), ("norm", "'norm'")],
)
def test_a_module_left_in_training_mode_anywhere_is_refused_by_name(where, name) -> None:
    model = _bn_model()
    model.get_submodule(where).train()
    before = _state(model)
    with pytest.raises(ValueError, match=f"{re.escape(name)}.* training mode"):
        split_model(model, "block")
    # the split is made in eval mode, and a module put in training mode afterwards is refused
    # at the next forward pass, before it runs
    model.get_submodule(where).eval()
    split = split_model(model, "block")
    model.get_submodule(where).train()
    x = randn(4, 1, 8, 8)
    with pytest.raises(ValueError, match=f"{re.escape(name)}.* training mode"):
        split.head(split.psi(x)) if where != "norm" else split.head(torch.zeros(4, 4, 8, 8))
    with pytest.raises(ValueError, match="training mode"):
        locate_split(model, (1, 8, 8))
    after = _state(model)
    assert all(torch.equal(before[k], after[k]) for k in before), "the model's state changed"


def test_batch_norm_without_running_statistics_is_refused_by_name() -> None:
    model = _bn_model(track=False)
    with pytest.raises(ValueError, match=r"'bn' \(BatchNorm2d\).* statistics of each batch"):
        split_model(model, "block")
    model = _bn_model()
    model.norm = nn.BatchNorm1d(256, track_running_stats=False).eval()
    with pytest.raises(ValueError, match=r"'norm' \(BatchNorm1d\).* statistics of each batch"):
        split_model(model, "block")


def test_a_module_called_functionally_in_training_mode_is_refused() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3)
            self.fc = nn.Linear(2 * 4 * 4, 3)

        def forward(self, x):
            t = torch.nn.functional.dropout(self.conv(x), 0.5, training=True)
            return self.fc(t.flatten(1))

    with pytest.raises(ValueError, match=r"dropout.*training"):
        split_model(Net().eval(), "conv")


class _Expression(nn.Module):
    """A conv trunk and a head ``fn(t)`` summed to 2 logits."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.fn = fn

    def forward(self, x):
        t = self.conv(x)
        return self.fn(t).flatten(1)[:, :2]


@pytest.mark.parametrize(
    ("fn", "linear"),
    [
        (lambda t: 1.0 / (t + 10), False),
        (lambda t: (t + 10) / 4.0, True),
        (lambda t: 2.0**t, False),
        (lambda t: t**2, False),
        (lambda t: torch.div(1.0, t), False),
        (lambda t: torch.div(t, 2.0), True),
        (lambda t: torch.true_divide(1.0, t), False),
        (lambda t: 3.0 - t, True),
        (lambda t: 3.0 * t, True),
        (lambda t: t // 2, False),
        (lambda t: 2 % (t + 5), False),
        (lambda t: t.__rtruediv__(1.0), False),
        (lambda t: t.div(2.0), False),
    ],
)
def test_division_is_linear_only_by_a_constant(fn, linear: bool) -> None:
    model = _Expression(fn).eval()
    if linear:
        split_model(model, "conv")
    else:
        with pytest.raises(ValueError, match="not known to be piecewise linear"):
            split_model(model, "conv")


def test_the_graph_fingerprint_follows_module_types_and_operations() -> None:
    a, b = tiny_mlp_cnn(seed=0), tiny_mlp_cnn(seed=0)
    assert split_model(a, "relu2").fingerprint == split_model(b, "relu2").fingerprint
    b.relu1 = nn.LeakyReLU(0.01)  # same state_dict, another trunk
    assert model_fingerprint(a) == model_fingerprint(b)
    assert split_model(a, "relu2").fingerprint != split_model(b, "relu2").fingerprint
    c = tiny_mlp_cnn(seed=0)
    c.relu1 = nn.LeakyReLU(0.02)  # another setting of the same type
    assert split_model(b, "relu2").fingerprint != split_model(c, "relu2").fingerprint
    with torch.no_grad():  # the weights are the other fingerprint's
        c.fc3.bias[0] += 1
    c.relu1 = nn.LeakyReLU(0.01)
    assert split_model(b, "relu2").fingerprint == split_model(c, "relu2").fingerprint


def test_locate_split_with_a_least_side_takes_the_last_layer_that_reaches_it_else_the_finest():
    model = tiny_gap_cnn().eval()  # "1": 8 x 16 x 16, "3": 16 x 8 x 8, then a global pool
    assert locate_split(model, (3, 16, 16)).layer == "3"
    assert locate_split(model, (3, 16, 16), min_side=8).layer == "3"
    assert locate_split(model, (3, 16, 16), min_side=9).layer == "1"
    assert locate_split(model, (3, 16, 16), min_side=20).layer == "1"  # none reaches: the finest


class _Shifted(nn.Module):
    """``tiny_mlp_cnn`` after a shift kept as a non-persistent buffer and a scale kept as a
    plain tensor attribute: neither is in the state_dict."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("shift", torch.zeros(1), persistent=False)
        self.scale = torch.ones(1)
        self.net = tiny_mlp_cnn()

    def forward(self, x):
        return self.net((x - self.shift) * self.scale)


@pytest.mark.parametrize("attribute", ["shift", "scale"])
def test_model_fingerprint_covers_unsaved_buffers_and_tensor_attributes(attribute: str) -> None:
    a, b = _Shifted().eval(), _Shifted().eval()
    assert model_fingerprint(a) == model_fingerprint(b)
    getattr(b, attribute).fill_(0.5)  # another function of the image, the same state_dict
    x = randn(3, 1, 12, 12)
    assert not torch.equal(a(x), b(x))
    assert model_fingerprint(a) != model_fingerprint(b)


def _pooled(pool: nn.Module) -> nn.Sequential:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return nn.Sequential(
            OrderedDict(
                conv=nn.Conv2d(1, 4, 3, padding=1),
                relu=nn.ReLU(),
                pool=pool,
                fixed=nn.AdaptiveAvgPool2d(2),
                flat=nn.Flatten(),
                fc=nn.Linear(16, 3),
            )
        ).eval()


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (nn.AvgPool2d(3, 2, 1), nn.AvgPool2d(3, 2, 1, count_include_pad=False)),
        (nn.AvgPool2d(3, 2, 1), nn.AvgPool2d(3, 2, 1, divisor_override=2)),
        (nn.AvgPool2d(3, 2), nn.AvgPool2d(3, 2, ceil_mode=True)),
        (nn.MaxPool2d(3, 2), nn.MaxPool2d(3, 2, ceil_mode=True)),
        (
            nn.Upsample(scale_factor=2, mode="bilinear"),
            nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
        ),
    ],
)
def test_graph_fingerprint_covers_settings_that_repr_omits(one, other) -> None:
    a, b = _pooled(one), _pooled(other)  # the same weights
    assert model_fingerprint(a) == model_fingerprint(b)
    x = randn(4, 1, 8, 8)
    assert not torch.allclose(a(x), b(x))
    for layer in ("relu", "pool"):  # the module in the head, and the target layer itself
        split_a = split_model(a, layer, allow_nonlinear_head=True)
        split_b = split_model(b, layer, allow_nonlinear_head=True)
        assert split_a.fingerprint != split_b.fingerprint
    assert split_a.fingerprint == split_model(_pooled(one), "pool", True).fingerprint


class _NoisyInTraining(nn.Module):
    """The user's own module: the identity in eval mode, noise in training mode."""

    def forward(self, x):
        return x + torch.randn_like(x) if self.training else x


def test_a_users_module_that_is_the_identity_in_eval_mode_is_refused_in_training_mode() -> None:
    model = tiny_mlp_cnn()
    model.relu1 = nn.Sequential(nn.ReLU(), _NoisyInTraining())
    model.relu3 = nn.Sequential(nn.ReLU(), _NoisyInTraining())
    split = split_model(model.eval(), "relu2")
    x = randn(2, 1, 12, 12)
    split.head(split.psi(x))
    model.relu1[1].train()
    with pytest.raises(ValueError, match=r"'relu1.1' \(_NoisyInTraining\) is in training mode"):
        split.psi(x)
    model.relu1[1].eval()
    model.relu3[1].train()
    with pytest.raises(ValueError, match=r"'relu3.1' \(_NoisyInTraining\) is in training mode"):
        split.head(split.psi(x))
