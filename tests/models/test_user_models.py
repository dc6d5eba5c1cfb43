"""The model a user already has: its outputs (tensor, dict, ``.logits``, anything through
``output=``), its target layer (name, module, ``[module]``, None), its dtype and device."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
import torchvision
from torch import Tensor, nn

from repinterp import FitConfig, RepresentativeInterpreter
from repinterp.models.split import NonlinearHeadError, locate_split
from repinterp.models.zoo import default_target_layer

from ..networks import random_setup, tiny_mlp_cnn

pytestmark = pytest.mark.usefixtures("one_thread")


@dataclass
class Output:
    """A Hugging Face style output: fields, one of them the logits."""

    logits: Tensor
    hidden: Tensor


class Wrapped(nn.Module):
    """:func:`tiny_mlp_cnn` (same weights) whose forward returns ``kind`` of output; the other
    entries include a value computed before the target layer."""

    def __init__(self, kind: str, field: str = "logits") -> None:
        super().__init__()
        self.net = tiny_mlp_cnn()
        self.kind, self.field = kind, field

    def forward(self, x: Tensor):
        early = self.net.conv1(x)
        logits = self.net(x)
        if self.kind == "dict":
            return {self.field: logits, "early": early}
        if self.kind == "dataclass":
            return Output(logits, early) if self.field == "logits" else Output(early, logits)
        if self.kind == "namespace":
            return SimpleNamespace(**{self.field: logits, "early": early})
        return (logits, early)


@pytest.fixture(scope="module")
def reference():
    model, images = random_setup(n=80)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=10, progress=False).fit(images)
    return model, images, ri


def _same_as(ri: RepresentativeInterpreter, expected: RepresentativeInterpreter, images) -> None:
    for name, tensor in expected.index.tensors().items():
        assert torch.equal(ri.index.tensors()[name], tensor), name
    for a, b in zip(ri.explain_batch(images[:5]), expected.explain_batch(images[:5]), strict=True):
        assert torch.equal(a.boundary_ids, b.boundary_ids) and torch.equal(a.covered, b.covered)


@pytest.mark.parametrize(
    ("kind", "output"),
    [
        ("dict", None),
        ("dataclass", None),
        ("dataclass", lambda out: out.logits),
        ("namespace", None),
        ("namespace", lambda out: out.logits),
        ("tuple", lambda out: out[0]),
        ("dict", lambda out: out["logits"]),
    ],
)
def test_outputs_other_than_a_tensor(reference, kind, output) -> None:
    model, images, expected = reference
    wrapped = Wrapped(kind).eval()
    wrapped.net.load_state_dict(model.state_dict())
    config = FitConfig(n_boundaries=10, progress=False, output=output)
    ri = RepresentativeInterpreter(wrapped, "net.relu2", config=config)
    _same_as(ri.fit(images), expected, images)


@dataclass
class Scores:
    scores: Tensor


class NoLogits(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = tiny_mlp_cnn()

    def forward(self, x: Tensor) -> Scores:
        return Scores(self.net(x))


class Scores2:
    """An output that is neither a dataclass nor a SimpleNamespace."""

    def __init__(self, logits: Tensor) -> None:
        self.logits = logits


class Plain(NoLogits):
    def forward(self, x: Tensor) -> Scores2:
        return Scores2(self.net(x))


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            Wrapped("tuple"),
            r"returns a tuple of 2: pass config=FitConfig\(output=lambda out: out\[I\]\)",
        ),
        (
            Wrapped("dict", field="scores"),
            r"a dict with keys \['early', 'scores'\] and no 'logits': pass config=FitConfig\(",
        ),
        (
            NoLogits(),
            r"returns a Scores without a 'logits' field: pass config=FitConfig\(output=lambda ",
        ),
        (
            Wrapped("namespace", field="scores"),
            r"returns a SimpleNamespace without a 'logits' field: pass config=FitConfig\(output=",
        ),
        (
            Plain(),
            "returns an object of class Scores2, which torch.fx cannot record: return the logits "
            "as a tensor, or in a dict, a tuple, a dataclass or a SimpleNamespace",
        ),
    ],
)
def test_outputs_without_logits_say_what_to_pass(model, message) -> None:
    with pytest.raises(ValueError, match=message):
        RepresentativeInterpreter(model.eval(), "net.relu2", progress=False)


def test_output_must_select_a_tensor() -> None:
    with pytest.raises(ValueError, match="output= must select the logits tensor"):
        RepresentativeInterpreter(tiny_mlp_cnn(), "relu2", config=FitConfig(output=lambda out: 3))


def test_target_layer_as_module_list_name_or_none(reference) -> None:
    model, images, expected = reference
    for layer in (model.relu2, [model.relu2]):
        ri = RepresentativeInterpreter(model, layer, n_boundaries=10, progress=False)
        assert ri.target_layer == "relu2"
    located = RepresentativeInterpreter(model, None, n_boundaries=10, progress=False)
    assert located.target_layer is None
    with pytest.raises(RuntimeError, match="the layer is chosen at fit"):
        located.split  # noqa: B018
    _same_as(located.fit(images), expected, images)
    assert located.target_layer == "relu2" and located.index.meta["target_layer"] == "relu2"
    config = FitConfig(input_shape=(1, 12, 12), progress=False)
    early = RepresentativeInterpreter(model, config=config)
    assert early.target_layer == "relu2"


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        (lambda m: [m.relu1, m.relu2], "a list of 2 layers; the model is split at one layer"),
        (lambda m: [], "a list of 0 layers"),
        (lambda m: "fc1", r"'fc1' \(Linear\) gives flat N x D outputs"),
        (lambda m: m.flatten, r"'flatten' \(Flatten\) gives flat N x D outputs"),
        (lambda m: "conv3", r"'conv3' is not a module of the model; similar names: conv2, conv1$"),
        (lambda m: "zzz", r"'zzz' is not a module of the model; its top-level modules: conv1, "),
    ],
)
def test_bad_target_layers_are_refused_at_construction(layer, message) -> None:
    model = tiny_mlp_cnn()
    with pytest.raises(ValueError, match=message):
        RepresentativeInterpreter(model, layer(model))


class _Flat(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(1)


def test_a_layer_with_flat_output_is_refused_before_any_work() -> None:
    model, images = random_setup(n=20)
    model = nn.Sequential(OrderedDict([*list(model.named_children())[:5], ("flat", _Flat())]))
    model.add_module("head", nn.Sequential(*list(random_setup(n=20)[0])[6:]))
    model.eval()
    message = r"'flat' gives outputs of shape \(1, 288\), not N x K x h x w"
    with pytest.raises(ValueError, match=message):
        RepresentativeInterpreter(model, "flat", config=FitConfig(input_shape=(1, 12, 12)))
    ri = RepresentativeInterpreter(model, "flat", progress=False)
    with pytest.raises(ValueError, match=r"'flat' gives outputs of shape \(10, 288\)"):
        ri.fit(images[:10])
    assert not ri.is_fitted


@pytest.mark.parametrize(
    ("arch", "size", "layer"),
    [("resnet18", 64, "layer4"), ("vgg11", 64, "features.19"), ("densenet121", 64, "features")],
)
def test_located_layers_of_torchvision_models(arch, size, layer) -> None:
    assert default_target_layer(arch) == layer  # the CLI's default is the same layer
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = getattr(torchvision.models, arch)(weights=None, num_classes=3).eval()
    split = locate_split(model, (3, size, size))
    assert split.layer == layer
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        assert torch.equal(split.head(split.psi(x)), model(x))


class _SkipToPool(nn.Module):
    """conv -> ReLU, plus the input added back before a 2 x 2 max pool: only the pool's
    output determines the logits alone."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.relu(self.conv(x)) + x).flatten(1))


def test_located_layer_is_a_pool_only_where_no_layer_before_it_splits() -> None:
    torch.manual_seed(0)
    model = _SkipToPool().eval()
    split = locate_split(model, (1, 8, 8))
    assert split.layer == "pool"
    x = torch.randn(2, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(split.head(split.psi(x)), model(x))


class _SkipToHead(_SkipToPool):
    """The input added back right before the head: no layer's output alone gives the logits."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4 * 8 * 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc((self.relu(self.conv(x)) + x).flatten(1))


def test_no_located_layer_is_one_line_that_names_the_tried_layers() -> None:
    message = r"no layer gives .* \(tried 2: relu, conv\); pass target_layer=NAME of a conv"
    with pytest.raises(ValueError, match=message):
        locate_split(_SkipToHead().eval(), (1, 8, 8))


def test_located_layer_skips_global_pools_and_names_a_nonlinear_head() -> None:
    model = nn.Sequential(
        OrderedDict(
            conv=nn.Conv2d(1, 4, 3),
            relu=nn.ReLU(),
            pool=nn.AdaptiveAvgPool2d(1),  # 1 x 1: spatial in name only
            flat=nn.Flatten(),
            fc=nn.Linear(4, 8),
            act=nn.GELU(),
            out=nn.Linear(8, 3),
        )
    ).eval()
    with pytest.raises(NonlinearHeadError, match=r"last spatial layer is 'relu', .*'act' \(GELU\)"):
        RepresentativeInterpreter(model, config=FitConfig(input_shape=(1, 8, 8)))
    config = FitConfig(input_shape=(1, 8, 8), allow_nonlinear_head=True, progress=False)
    ri = RepresentativeInterpreter(model, config=config)
    assert ri.target_layer == "relu"


def test_half_precision_models_are_refused_with_how() -> None:
    for dtype in (torch.float16, torch.bfloat16):
        model = tiny_mlp_cnn().to(dtype)
        with pytest.raises(ValueError, match=f"computes in {dtype}; .* pass model.float"):
            RepresentativeInterpreter(model, "relu2")


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the machine without CUDA")
@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("cuda", "device 'cuda': CUDA is not available here"),
        ("cuda:1", "device 'cuda:1': CUDA is not available here"),
        ("gpu", r"device 'gpu' is not a device \(auto, cpu, cuda"),
    ],
)
def test_unavailable_devices_are_one_line_errors(device, message) -> None:
    model = tiny_mlp_cnn()
    with pytest.raises(ValueError, match=message):
        RepresentativeInterpreter(model, "relu2", device=device)
    assert next(model.parameters()).device.type == "cpu"


class _Trunk(nn.Module):
    """`random_setup`'s model with ``trunk`` applied to the images before it and ``head`` to
    its logits: functions of the whole batch that the trace records as plain operations."""

    def __init__(self, trunk=None, head=None) -> None:
        super().__init__()
        self.net = random_setup(n=40)[0]
        self.trunk, self.head = trunk or (lambda x: x), head or (lambda z: z)

    def forward(self, x):
        return self.head(self.net(self.trunk(x)))


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            _Trunk(trunk=lambda x: x + torch.randn_like(x)),
            r"^the model's feature maps at 'net.relu2' differ when the same images run twice "
            r"\(by up to [0-9.]+\): it draws random numbers in eval mode",
        ),
        (
            _Trunk(head=lambda z: z - z.mean(0, keepdim=True)),
            r"^the model's logits for an image alone differ from its logits in a batch of 4 "
            r"\(by up to [0-9.]+\): they depend on the other images of the batch",
        ),
        (
            _Trunk(trunk=lambda x: x - x.mean(0, keepdim=True)),
            r"^the model's logits for an image alone differ from its logits in a batch of 4",
        ),
    ],
)
def test_a_model_not_a_function_of_the_image_alone_is_refused_at_fit(model, message) -> None:
    images = random_setup(n=40)[1]
    ri = RepresentativeInterpreter(model.eval(), "net.relu2", n_boundaries=8, progress=False)
    with pytest.raises(ValueError, match=message):
        ri.fit(images)
    assert not ri.is_fitted
    ri = RepresentativeInterpreter(_Trunk().eval(), "net.relu2", n_boundaries=8, progress=False)
    assert ri.fit(images).is_fitted  # the same model without them fits
