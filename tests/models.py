"""Small seeded models for the tests; random weights, never downloaded."""

import torch
from torch import nn


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


def images(n: int, size: int = 16, seed: int = 0) -> torch.Tensor:
    """n x 3 x size x size images in [0, 1]."""
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, size, size, generator=generator)
