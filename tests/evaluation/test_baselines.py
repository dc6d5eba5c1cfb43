"""CAM baselines with reused channel weights, checked against pytorch-grad-cam itself."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
from torch import nn
from torchvision.models import vgg11

from repinterp.evaluation import (
    CAM_METHODS,
    ReusableCAM,
    cam_weights,
    euclidean_neighbours,
    reused_cam,
)

from ..networks import images, tiny_cnn, tiny_gap_cnn


@pytest.fixture(scope="module")
def vgg() -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return vgg11(weights=None).eval()


def _setup(name: str, request: pytest.FixtureRequest) -> tuple[nn.Module, nn.Module, int, int]:
    """(model, target layer, its channels, input size) for a model name."""
    if name == "vgg11":
        model = request.getfixturevalue("vgg")
        return model, model.features[19], 512, 64
    model, channels = (tiny_cnn(), 8) if name == "tiny" else (tiny_gap_cnn(), 16)
    return model, model[3], channels, 16


def _library_cam(method: str, model: nn.Module, layer: nn.Module, x, classes) -> torch.Tensor:
    targets = [ClassifierOutputTarget(int(c)) for c in classes]
    with CAM_METHODS[method](model, target_layers=[layer]) as cam:
        return torch.from_numpy(cam(x, targets=targets))


def _hand_cam(model: nn.Module, layer: nn.Module, x, weights) -> torch.Tensor:
    """ReLU(sum_k w_k A_k), min-max, bilinear upsampling, min-max: the library's steps."""
    store = []
    handle = layer.register_forward_hook(lambda module, inputs, output: store.append(output))
    with torch.no_grad():
        model(x)
    handle.remove()
    cam = F.relu(torch.einsum("nk,nkhw->nhw", weights.double(), store[0].double()))

    def min_max(maps):
        maps = maps - maps.amin(dim=(1, 2), keepdim=True)
        return maps / (maps.amax(dim=(1, 2), keepdim=True) + 1e-7)

    up = F.interpolate(min_max(cam)[:, None], size=x.shape[2:], mode="bilinear")
    return min_max(up[:, 0]).float()


# Score-CAM runs one forward pass per channel: it is kept to the tiny models. VGG-11 is slow
# on CPU (its classifier has 120M parameters): one Grad-CAM case per test.
TINY_CASES = [(method, name) for method in CAM_METHODS for name in ("tiny", "tiny_gap")]
LIBRARY_CASES = [(method, name, batch) for method, name in TINY_CASES for batch in (1, 3)]
LIBRARY_CASES.append(("Grad-CAM", "vgg11", 3))


@pytest.mark.parametrize(("method", "name", "batch"), LIBRARY_CASES)
def test_reused_weights_on_the_input_give_the_library_map(method, name, batch, request):
    model, layer, channels, size = _setup(name, request)
    x = images(batch, size, seed=1) * 2 - 1
    cam = ReusableCAM(method, model, layer)
    weights = cam.fit(x)
    assert weights.shape == (batch, channels)
    assert weights.dtype == torch.float32
    expected = _library_cam(method, model, layer, x, cam.classes)
    maps = cam.heatmaps(x, torch.arange(batch))
    assert maps.shape == (batch, size, size)
    torch.testing.assert_close(maps, expected, atol=1e-5, rtol=0)
    assert maps.min() >= 0 and maps.max() <= 1


@pytest.mark.parametrize(("method", "name"), [*TINY_CASES, ("Grad-CAM", "vgg11")])
def test_reused_weights_on_other_images_match_a_hand_computation(method, name, request):
    model, layer, _, size = _setup(name, request)
    x = images(4, size, seed=2) * 2 - 1
    weights = cam_weights(method, model, layer, x[:2])
    assignment = torch.tensor([1, 0, 1, 1])
    maps = reused_cam(method, model, layer, x, weights[assignment])
    torch.testing.assert_close(
        maps, _hand_cam(model, layer, x, weights[assignment]), atol=1e-5, rtol=0
    )
    shared = reused_cam(method, model, layer, x, weights[0])
    torch.testing.assert_close(
        shared, _hand_cam(model, layer, x, weights[[0, 0, 0, 0]]), atol=1e-5, rtol=0
    )


def test_heatmaps_batched_equal_one_at_a_time():
    model = tiny_gap_cnn()
    x = images(7, seed=3)
    cam = ReusableCAM("Grad-CAM++", model, "3", batch_size=3)
    cam.fit(x[:3])
    assignment = torch.tensor([2, 0, 0, 1, 2, 1, 0])
    together = cam.heatmaps(x, assignment)
    alone = [
        reused_cam("Grad-CAM++", model, model[3], x[i : i + 1], cam.weights[a])
        for i, a in enumerate(assignment)
    ]
    torch.testing.assert_close(together, torch.cat(alone), atol=1e-6, rtol=0)


def test_grad_cam_weights_are_mean_gradients_of_the_class_logit():
    model = tiny_cnn()
    x = images(3, seed=4)
    classes = torch.tensor([0, 3, 1])
    store = []
    handle = model[3].register_forward_hook(lambda module, inputs, output: store.append(output))
    logits = model(x)
    handle.remove()
    (grads,) = torch.autograd.grad(logits.gather(1, classes[:, None]).sum(), store[0])
    weights = cam_weights("Grad-CAM", model, model[3], x, target_classes=classes)
    torch.testing.assert_close(weights, grads.mean(dim=(2, 3)), atol=1e-6, rtol=1e-5)


def test_default_classes_are_the_predicted_ones_and_explicit_ones_are_kept():
    model = tiny_cnn()
    x = images(5, seed=5)
    cam = ReusableCAM("Grad-CAM", model, model[3])
    default = cam.fit(x)
    assert torch.equal(cam.classes, model(x).argmax(dim=1))
    explicit = cam.fit(x, target_classes=cam.classes.tolist())
    torch.testing.assert_close(explicit, default)
    other = (cam.classes + 1) % 4
    assert not torch.allclose(cam.fit(x, target_classes=other), default)
    assert torch.equal(cam.classes, other)


def test_hooks_are_released_and_modes_restored():
    model = tiny_gap_cnn().train()
    layer = model[3]
    x = images(2, seed=6)
    for _ in range(25):
        weights = cam_weights("Grad-CAM++", model, layer, x)
        reused_cam("Grad-CAM++", model, layer, x, weights)
    cam_weights("Score-CAM", model, layer, x)
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks
        assert not module._backward_hooks
        assert module.training
    assert all(p.grad is None for p in model.parameters())


def test_weights_are_computed_under_no_grad_too():
    model = tiny_cnn()
    x = images(2, seed=7)
    with torch.no_grad():
        weights = cam_weights("Grad-CAM", model, model[3], x)
    by_class = cam_weights(CAM_METHODS["Grad-CAM"], model, model[3], x)
    torch.testing.assert_close(weights, by_class)


@pytest.mark.parametrize("method", list(CAM_METHODS))
def test_reuse_takes_one_forward_pass_per_batch(method):
    model = tiny_gap_cnn()
    x = images(5, seed=9)
    weights = cam_weights(method, model, model[3], x[:1])
    calls = []
    handle = model.register_forward_pre_hook(lambda module, inputs: calls.append(len(inputs[0])))
    reused_cam(method, model, model[3], x, weights[0], batch_size=2)
    handle.remove()
    assert calls == [2, 2, 1]


class _LibraryScoreCAM(CAM_METHODS["Score-CAM"]):
    """pytorch-grad-cam's own Score-CAM, its weights kept."""

    def get_cam_weights(self, *args):
        self.recorded = super().get_cam_weights(*args)
        return self.recorded


@pytest.mark.parametrize("name", ["tiny", "tiny_gap"])
@pytest.mark.parametrize("batch", [1, 3, 64])
def test_batched_score_cam_weights_are_the_librarys(name, batch, request):
    model, layer, _, size = _setup(name, request)
    x = images(3, size, seed=4) * 2 - 1
    with torch.no_grad():  # channel 0 all zero after the ReLU: its masked copies are all zero
        model[2].weight[0] = 0
        model[2].bias[0] = -1
    classes = torch.tensor([0, 2, 1])
    weights = cam_weights("Score-CAM", model, layer, x, classes, batch_size=batch)
    expected = []
    for image, c in zip(x, classes, strict=True):
        with _LibraryScoreCAM(model, target_layers=[layer]) as cam:
            cam(image[None], targets=[ClassifierOutputTarget(int(c))])
            expected.append(torch.from_numpy(cam.recorded))
    torch.testing.assert_close(weights, torch.cat(expected), atol=1e-6, rtol=1e-5)
    predicted = ReusableCAM("Score-CAM", model, layer, batch_size=batch)
    predicted.fit(x)
    assert torch.equal(predicted.classes, model(x).argmax(1))


def test_score_cam_is_quiet_unless_asked(capsys):
    model = tiny_cnn()
    cam_weights("Score-CAM", model, model[3], images(1))
    assert capsys.readouterr().err == ""
    cam_weights("Score-CAM", model, model[3], images(1), progress=True)
    assert "100%" in capsys.readouterr().err


def test_frozen_models_work_and_flags_are_restored():
    model = tiny_cnn()
    x = images(2, seed=8)
    expected = cam_weights("Grad-CAM++", model, model[3], x)
    model[0].requires_grad_(False)
    model[6].weight.requires_grad_(False)
    torch.testing.assert_close(cam_weights("Grad-CAM++", model, model[3], x), expected)
    flags = [p.requires_grad for p in model.parameters()]
    assert flags == [False, False, True, True, False, True]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m, x: cam_weights("CAM", m, m[3], x), "unknown CAM method"),
        (lambda m, x: cam_weights("Grad-CAM", m, nn.ReLU(), x), "not part of the model"),
        (lambda m, x: cam_weights("Grad-CAM", m, "9", x), "'9' is not a module"),
        (lambda m, x: cam_weights("Grad-CAM", m, m[3], x[0]), "N x C x H x W"),
        (lambda m, x: cam_weights("Grad-CAM", m, m[3], x[:0]), "holds no image"),
        (lambda m, x: cam_weights("Grad-CAM", m, m[3], x, [0]), "must be 2 integers"),
        (lambda m, x: cam_weights("Grad-CAM", m, m[3], x, batch_size=0), "batch_size"),
        (lambda m, x: reused_cam("Grad-CAM", m, m[3], x, torch.ones(5)), "target layer has 8"),
        (lambda m, x: reused_cam("Grad-CAM", m, m[3], x, torch.ones(3, 8)), "N = 2"),
        (lambda m, x: reused_cam("Grad-CAM", m, m[3], x, torch.full((8,), np.nan)), "NaN"),
        (lambda m, x: ReusableCAM("Grad-CAM", m, m[3]).heatmaps(x, [0, 0]), "call fit"),
    ],
)
def test_bad_inputs_give_clear_errors(call, message):
    model = tiny_cnn()
    with pytest.raises((ValueError, RuntimeError), match=message):
        call(model, images(2))


def test_bad_assignment_is_refused():
    model = tiny_cnn()
    cam = ReusableCAM("Grad-CAM", model, model[3])
    cam.fit(images(2))
    with pytest.raises(ValueError, match=r"in \[0, 2\)"):
        cam.heatmaps(images(3), [0, 1, 2])
    with pytest.raises(ValueError, match="1-D integer"):
        cam.heatmaps(images(2), torch.zeros(2))
    assert cam.heatmaps(images(0), torch.zeros(0, dtype=torch.long)).shape == (0, 16, 16)


def test_euclidean_neighbours_match_brute_force_with_ties_by_lower_index():
    generator = torch.Generator().manual_seed(0)
    ref = torch.randint(0, 3, (40, 2, 2, 2), generator=generator).float()
    query = torch.cat([ref[:5], torch.randint(0, 3, (6, 2, 2, 2), generator=generator).float()])
    neighbours = euclidean_neighbours(query, ref, k=7, chunk_size=4)
    distances = ((query.flatten(1)[:, None] - ref.flatten(1)[None]) ** 2).sum(-1).numpy()
    expected = np.argsort(distances, axis=1, kind="stable")[:, :7]
    assert neighbours.dtype == torch.long
    np.testing.assert_array_equal(neighbours.numpy(), expected)
    assert (distances[np.arange(5), neighbours[:5, 0].numpy()] == 0).all()


def test_euclidean_neighbours_errors():
    ref = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="same d"):
        euclidean_neighbours(torch.zeros(2, 5), ref, 1)
    with pytest.raises(ValueError, match=r"k must be in \[1, 4\]"):
        euclidean_neighbours(torch.zeros(2, 3), ref, 5)
    with pytest.raises(ValueError, match="NaN"):
        euclidean_neighbours(torch.full((2, 3), np.nan), ref, 1)
