"""Deletion / insertion AUC (RISE) and ROAD (through pytorch-grad-cam)."""

import math

import numpy as np
import pytest
import torch
from pytorch_grad_cam.metrics import road as library_road
from pytorch_grad_cam.metrics.road import (
    ROADLeastRelevantFirstAverage,
    ROADMostRelevantFirstAverage,
)
from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget
from torch import nn
from torchvision.transforms.functional import gaussian_blur

from repinterp.evaluation.perturbation import (
    DeletionInsertion,
    baseline_images,
    deletion_insertion,
    pixel_order,
    road,
)

from ..networks import images, normalize, tiny_cnn

pytestmark = pytest.mark.usefixtures("one_thread")


def _brute_force_curve(model, image01, heat, mode, baseline, steps):
    """One image's curve, pixel by pixel and step by step."""
    height, width = heat.shape
    n = height * width
    flat = heat.flatten().tolist()
    ranked = sorted(range(n), key=lambda p: (-flat[p], p))  # descending, ties in raster order
    base = baseline_images(image01[None], baseline)[0]
    with torch.no_grad():
        c = int(model(normalize(image01[None])).argmax(1))
        curve = []
        for i in range(steps + 1):
            count = math.floor(i * n / steps + 0.5)
            chosen = torch.zeros(n, dtype=torch.bool)
            chosen[ranked[:count]] = True
            chosen = chosen.view(height, width)
            if mode == "deletion":
                x = torch.where(chosen, base, image01)
            else:
                x = torch.where(chosen, image01, base)
            curve.append(float(torch.softmax(model(normalize(x[None])), 1)[0, c]))
    auc = sum((curve[i] + curve[i + 1]) / 2 for i in range(steps)) / steps
    return curve, 100 * auc


@pytest.mark.parametrize(("mode", "baseline"), [("deletion", "black"), ("insertion", "blur")])
def test_deletion_insertion_match_a_brute_force_computation(mode, baseline):
    model = tiny_cnn()
    x = images(5, seed=1)
    heat = torch.rand(5, 16, 16, generator=torch.Generator().manual_seed(2))
    heat[0] = 0.0  # a flat map: raster order
    heat[1, :4] = heat[1, 4, 0]  # ties inside a map
    curves, auc = deletion_insertion(model, x, heat, normalize, mode, baseline, 7, batch_size=9)
    assert curves.shape == (5, 8)
    for i in range(5):
        curve, expected = _brute_force_curve(model, x[i], heat[i], mode, baseline, 7)
        torch.testing.assert_close(curves[i], torch.tensor(curve), atol=1e-6, rtol=0)
        assert auc[i].item() == pytest.approx(expected, abs=1e-4)


def test_default_baselines_and_the_curves_ends():
    model = tiny_cnn()
    x = images(3, seed=4)
    heat = torch.rand(3, 16, 16, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        probs = torch.softmax(model(normalize(x)), 1)
        c = probs.argmax(1, keepdim=True)
        full = probs.gather(1, c)[:, 0]
        black = torch.softmax(model(normalize(torch.zeros_like(x))), 1).gather(1, c)[:, 0]
        blurred = baseline_images(x, "blur")
        blur = torch.softmax(model(normalize(blurred)), 1).gather(1, c)[:, 0]
    deletion, _ = deletion_insertion(model, x, heat, normalize, "deletion", steps=4)
    insertion, _ = deletion_insertion(model, x, heat, normalize, "insertion", steps=4)
    for got, want in ((deletion[:, 0], full), (deletion[:, -1], black)):
        torch.testing.assert_close(got, want)
    for got, want in ((insertion[:, 0], blur), (insertion[:, -1], full)):
        torch.testing.assert_close(got, want)


def test_blur_is_torchvisions_gaussian_blur_with_the_documented_sigma():
    x = images(2, seed=6)  # 16 px: sigma 1, kernel 5
    torch.testing.assert_close(
        baseline_images(x, "blur"), gaussian_blur(x, kernel_size=5, sigma=1.0)
    )
    flat = torch.full((1, 3, 32, 32), 0.3)
    torch.testing.assert_close(baseline_images(flat, "blur"), flat)
    assert torch.equal(baseline_images(x, "black"), torch.zeros_like(x))
    with pytest.raises(ValueError, match="unknown baseline 'grey'"):
        baseline_images(x, "grey")


def test_the_metric_object_accumulates_batches():
    model = tiny_cnn()
    x = images(6, seed=7)
    heat = torch.rand(6, 16, 16, generator=torch.Generator().manual_seed(8))
    metric = DeletionInsertion(normalize, "insertion", steps=5)
    assert math.isnan(metric.summary()["AUC"]) and metric.summary()["n"] == 0
    first = metric.update(model, x[:4], heat[:4])
    metric.update(model, x[4:], heat[4:])
    _, whole = deletion_insertion(model, x, heat, normalize, "insertion", steps=5)
    torch.testing.assert_close(metric.result, whole)
    torch.testing.assert_close(first, whole[:4])
    summary = metric.summary()
    assert summary["n"] == 6 and summary["AUC"] == pytest.approx(whole.double().mean().item())
    metric.reset()
    assert metric.summary()["n"] == 0
    with pytest.raises(ValueError, match="mode must be"):
        DeletionInsertion(normalize, "removal")


def test_pixel_order_is_descending_with_ties_in_raster_order():
    heat = torch.tensor([[[0.5, 1.0], [0.5, 0.0]]])
    assert pixel_order(heat).tolist() == [[1, 0, 2, 3]]
    with pytest.raises(ValueError, match="NaN"):
        pixel_order(torch.full((1, 2, 2), math.nan))


def _library_road(model, x, heat, percentiles, seed):
    """The library's classes called directly on pixels, with a model that normalises."""
    scored = nn.Sequential(_Normalise(), model).eval()
    order = pixel_order(heat)
    n, _, h, w = x.shape
    scale = 1 - torch.arange(h * w) / (h * w - 1)
    cams = torch.empty(order.shape).scatter_(1, order, scale.expand(n, -1)).view(n, h, w).numpy()
    with torch.no_grad():
        targets = [ClassifierOutputSoftmaxTarget(int(c)) for c in scored(x).argmax(1)]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        morf = ROADMostRelevantFirstAverage(percentiles)(x, cams, targets, scored)
        lerf = ROADLeastRelevantFirstAverage(percentiles)(x, cams, targets, scored)
    return 100 * torch.from_numpy(morf), 100 * torch.from_numpy(lerf)


class _Normalise(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return normalize(x)


def test_road_is_the_librarys_on_pixels_seeded_and_restoring_the_global_generator():
    model = tiny_cnn()
    x = images(4, seed=9)
    heat = torch.rand(4, 16, 16, generator=torch.Generator().manual_seed(10))
    state = torch.random.get_rng_state()
    result = road(model, x, heat, normalize, percentiles=(20, 60), seed=11)
    assert torch.equal(torch.random.get_rng_state(), state)
    morf, lerf = _library_road(model, x, heat, [20, 60], seed=11)
    torch.testing.assert_close(result.morf, morf)
    torch.testing.assert_close(result.lerf, lerf)
    torch.testing.assert_close(result.combined, (result.lerf - result.morf) / 2)
    again = road(model, x, heat, normalize, percentiles=(20, 60), seed=11)
    assert torch.equal(again.morf, result.morf) and torch.equal(again.lerf, result.lerf)
    assert not torch.equal(road(model, x, heat, normalize, seed=12).morf, result.morf)
    with pytest.raises(ValueError, match=r"percentiles must lie in \(0, 100\)"):
        road(model, x, heat, normalize, percentiles=(0, 50))


def test_road_imputes_exact_shares_in_pixel_space(monkeypatch):
    seen = []
    imputer = library_road.NoisyLinearImputer.__call__

    def recording(self, img, mask):
        out = imputer(self, img, mask)
        seen.append((img, mask.clone(), out))
        return out

    monkeypatch.setattr(library_road.NoisyLinearImputer, "__call__", recording)
    model = tiny_cnn()
    x = torch.full((1, 3, 16, 16), 0.25)  # a flat image: imputed values are 0.25 + noise
    flat_map = torch.zeros(1, 16, 16)  # a flat map: every pixel ties
    road(model, x, flat_map, normalize, percentiles=(30,), seed=0)
    assert len(seen) == 2  # MoRF, then LeRF
    for img, mask, out in seen:
        assert torch.equal(img, x[0])  # the library is given pixels, not model inputs
        assert int((mask == 0).sum()) == round(0.7 * 256)  # 70 % imputed despite the ties
        noise = (out - img)[:, mask == 0]
        assert noise.std().item() == pytest.approx(0.01, rel=0.2)  # 0.01 in pixel units
    morf_kept = seen[0][1].flatten().nonzero().flatten()
    assert morf_kept.tolist() == list(range(256 - 77, 256))  # the last 30 % in raster order
    assert np.isclose(seen[1][1].flatten()[: round(0.3 * 256)].numpy(), 1).all()
