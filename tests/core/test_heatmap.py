"""Heat maps (§5.1): one upsampling per image gives the mean of the boundaries' min-max
normalised, upsampled maps, for any sizes, up or down."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from repinterp.core.heatmap import EPS, _extreme_samples, polytope_heatmaps


def per_boundary(features: torch.Tensor, alphas: torch.Tensor, size: tuple[int, int]):
    """The paper's recipe boundary by boundary: ReLU(sum_k alpha_k t_k), upsampled, min-max
    normalised, averaged."""
    raw = torch.relu(torch.einsum("pk,nkij->npij", alphas.double(), features.double()))
    up = F.interpolate(raw, size=size, mode="bilinear", align_corners=False)
    low = up.amin(dim=(2, 3), keepdim=True)
    high = up.amax(dim=(2, 3), keepdim=True)
    return ((up - low) / (high - low + EPS)).mean(1)


@pytest.mark.parametrize(
    ("feature_size", "size"),
    [((4, 4), (64, 64)), ((7, 7), (28, 28)), ((5, 3), (13, 17)), ((6, 6), (6, 6)),
     ((9, 8), (4, 5)), ((1, 1), (10, 10)), ((14, 14), (224, 224)), ((2, 7), (3, 50))],
)  # fmt: skip
def test_one_upsampling_per_image_equals_the_per_boundary_maps(feature_size, size) -> None:
    g = torch.Generator().manual_seed(sum(feature_size) + sum(size))
    features = torch.relu(torch.randn(6, 8, *feature_size, generator=g))
    alphas = [torch.randn(p, 8, generator=g) for p in (1, 4, 9)]
    alphas[1][0] = -1.0  # a boundary whose map is all zeros after the ReLU
    which = torch.tensor([0, 1, 2, 2, 1, 0])
    maps = polytope_heatmaps(features, alphas, which, size)
    assert maps.shape == (6, *size) and maps.dtype == torch.float32
    assert float(maps.min()) >= 0 and float(maps.max()) <= 1
    for n, v in enumerate(which.tolist()):
        expected = per_boundary(features[n : n + 1], alphas[v], size)[0]
        torch.testing.assert_close(maps[n].double(), expected, atol=2e-6, rtol=0)


@pytest.mark.parametrize("n_in", [1, 2, 3, 4, 7, 14])
@pytest.mark.parametrize("n_out", [1, 3, 5, 16, 28, 64, 224])
def test_the_extremes_of_any_interpolated_signal_are_on_the_kept_samples(n_in, n_out) -> None:
    g = torch.Generator().manual_seed(n_in * 1000 + n_out)
    signals = torch.randn(200, 1, 1, n_in, dtype=torch.float64, generator=g)
    full = F.interpolate(signals, size=(1, n_out), mode="bilinear", align_corners=False)
    kept = signals[:, 0, 0] @ _extreme_samples(n_in, n_out).T
    torch.testing.assert_close(kept.amax(1), full.flatten(1).amax(1), atol=1e-12, rtol=0)
    torch.testing.assert_close(kept.amin(1), full.flatten(1).amin(1), atol=1e-12, rtol=0)
    assert kept.shape[1] <= min(n_out, 2 * n_in)
