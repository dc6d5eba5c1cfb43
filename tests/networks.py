"""Small seeded models and images for the tests; random weights, never downloaded.

Every model is built under ``torch.random.fork_rng``: its seed fixes its weights and leaves the
global random state as it was.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def tiny_cnn(seed: int = 0, n_classes: int = 4) -> nn.Sequential:
    """conv-ReLU-conv-ReLU-maxpool trunk and a linear head, for 3 x 16 x 16 inputs.

    Target layer ``"3"`` (second ReLU): 8 channels at 16 x 16.
    """
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Conv2d(3, 6, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(6, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(8 * 8 * 8, n_classes),
        )


def tiny_gap_cnn(seed: int = 0, n_classes: int = 3) -> nn.Sequential:
    """conv-ReLU-strided conv-ReLU-global average pool trunk and a linear head (16 x 16 input).

    Target layer ``"3"`` (second ReLU): 16 channels at 8 x 8, so heat maps are upsampled.
    """
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, n_classes),
        )


def tiny_mlp_cnn(in_channels: int = 1, classes: int = 4, seed: int = 0) -> nn.Sequential:
    """conv-relu-pool-conv-relu trunk (target layer "relu2": 8 channels at 6 x 6) and a ReLU
    MLP head, with named layers, for 12 x 12 inputs; in eval mode."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return nn.Sequential(
            OrderedDict(
                conv1=nn.Conv2d(in_channels, 6, 3, padding=1),
                relu1=nn.ReLU(),
                pool1=nn.MaxPool2d(2),
                conv2=nn.Conv2d(6, 8, 3, padding=1),
                relu2=nn.ReLU(),
                flatten=nn.Flatten(),
                fc1=nn.Linear(8 * 6 * 6, 24),
                relu3=nn.ReLU(),
                fc2=nn.Linear(24, 16),
                relu4=nn.ReLU(),
                fc3=nn.Linear(16, classes),
            )
        ).eval()


def images(n: int, size: int = 16, seed: int = 0) -> Tensor:
    """n x 3 x size x size images in [0, 1]."""
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, size, size, generator=generator)


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> Tensor:
    """Standard normal values of ``shape`` from their own seeded generator."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def balance(model: nn.Sequential, images: Tensor) -> nn.Sequential:
    """Shift the last bias so that random weights predict several classes on ``images``."""
    with torch.no_grad():
        model[-1].bias -= model(images).mean(0)
    return model


def random_setup(n: int = 300, classes: int = 4, seed: int = 0, dtype=torch.float32):
    """A balanced :func:`tiny_mlp_cnn` and N x 1 x 12 x 12 random images."""
    model = tiny_mlp_cnn(classes=classes, seed=seed).to(dtype)
    images = randn(n, 1, 12, 12, seed=seed, dtype=dtype)
    return balance(model, images), images


class TriangleHead(nn.Module):
    """A 2-D head like the paper's Fig. 1: class 0 ("dog") inside the triangle
    t1 > 0, t2 > 0, t1 + t2 < 1, class 1 ("cat") outside; logits = [min(t1, t2, 1 - t1 - t2), 0].
    """

    def forward(self, t: Tensor) -> Tensor:
        t1, t2 = t[:, 0, 0, 0], t[:, 1, 0, 0]
        low = t1 - F.relu(t1 - t2)
        third = 1 - t1 - t2
        margin = low - F.relu(low - third)
        return torch.stack([margin, torch.zeros_like(margin)], dim=1)


def triangle_model() -> nn.Sequential:
    """Images are 2 x 1 x 1 "feature maps"; psi is the identity layer "features"."""
    return nn.Sequential(OrderedDict(features=nn.Identity(), head=TriangleHead())).eval()


def normalize(pixels: Tensor) -> Tensor:
    """The test models' normalisation of [0, 1] pixels: mean 0.5, standard deviation 0.25."""
    return (pixels - 0.5) / 0.25


def fit_random(n: int, n_boundaries: int, **fit_options):
    """A :func:`random_setup` model (layer ``relu2``) fitted on its ``n`` images with
    ``|Q| = n_boundaries`` (seed 0, no progress bars): ``(interpreter, images)``."""
    from repinterp import RepresentativeInterpreter

    model, pictures = random_setup(n=n)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=n_boundaries, progress=False)
    return ri.fit(pictures, **fit_options), pictures
