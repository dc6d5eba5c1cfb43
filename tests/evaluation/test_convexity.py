"""Class regions' convexity on hand-built cases."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from repinterp.evaluation.convexity import graph_convexity, q_convexity, segment_convexity


def test_q_convexity_counts_images_on_their_class_side_of_every_boundary() -> None:
    top = torch.tensor([[0, 1], [1, 0]])  # class 0's side of boundary 0 is +1, of boundary 1 -1
    sides = torch.tensor([[1, -1], [1, -1], [1, 1], [-1, 1], [-1, 1]])
    predictions = torch.tensor([0, 0, 0, 1, 1])
    out = q_convexity(top, sides, predictions)
    assert out["same_side"] == pytest.approx(100 * (2 / 3 + 1) / 2)  # one of class 0 is out
    assert out["largest_cell"] == pytest.approx(100 * (2 / 3 + 1) / 2)
    assert out["boundaries_with_class_min"] == out["boundaries_with_class_max"] == 100


class _Slabs(nn.Module):
    """Class 0 where |x_0| > 1 (two slabs: not convex), class 1 between them."""

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        x = t.flatten(1)[:, :1]
        return torch.cat([x.abs() - 1, torch.zeros_like(x)], 1)


def test_segment_convexity_is_the_share_of_segment_points_kept_in_the_class() -> None:
    features = torch.tensor([[3.0, 0], [-3, 0], [0.5, 0], [-0.5, 0]]).view(4, 2, 1, 1)
    classes = _Slabs()(features).argmax(1)
    assert classes.tolist() == [0, 0, 1, 1]
    # class 0's segment from 3 to -3 at t = 0.2 .. 0.8: 1.8, 0.6, -0.6, -1.8: half in class 0;
    # class 1's segments stay in (-1, 1)
    assert segment_convexity(_Slabs(), features, classes, pairs=10, points=4) == pytest.approx(75)
    convex = nn.Sequential(nn.Flatten(), nn.Linear(2, 2))
    with torch.no_grad():
        convex[1].weight.copy_(torch.tensor([[1.0, 0], [-1, 0]]))
        convex[1].bias.zero_()
    assert segment_convexity(convex, features, convex(features).argmax(1), 10, 4) == 100


def test_graph_convexity_is_the_share_of_shortest_path_images_in_the_class() -> None:
    """Images on a line: class 0 at both ends (0..4 and 10..14), class 1 between (5..9). With
    2 neighbours the graph is the chain; a class-0 path across the middle holds 5 class-1
    images of its interior, class 1's paths stay in class 1."""
    x = torch.arange(15.0).view(15, 1)
    classes = torch.tensor([0] * 5 + [1] * 5 + [0] * 5)
    share = graph_convexity(x, classes, neighbours=2, pairs=200, seed=0)
    assert 50 < share < 100  # class 1: 100; class 0: 100 within an end, < 100 across
    ends = torch.tensor([0.0, 1, 2, 3, 4, 10, 11, 12, 13, 14])
    assert graph_convexity(ends[:5].view(5, 1), torch.zeros(5), 2, 50) == 100
    crossing = torch.tensor([0.0, 5, 6, 7, 8, 9, 14]).view(7, 1)  # chain 0-5-...-9-14
    labels = torch.tensor([0, 1, 1, 1, 1, 1, 0])
    # class 0's only pair crosses the 5 class-1 images (0 %), class 1's stay inside (100 %)
    assert graph_convexity(crossing, labels, neighbours=2, pairs=20) == pytest.approx(50)
