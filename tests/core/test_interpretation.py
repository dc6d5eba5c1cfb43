"""``Interpretation``: the similar images' distance is the paper's ``Dist`` (§5.2) unless another
is asked for, whatever the interpreter kept, and every distance written names its metric; the
channel weights are ``heatmap.input_side_weights``'s."""

from __future__ import annotations

import json

import pytest
import torch

from repinterp import RepresentativeInterpreter
from repinterp.core.heatmap import channel_means, input_side_weights
from repinterp.core.interpretation import SIMILARITY_METRICS

from ..networks import fit_random, triangle_model

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair():
    """The same interpreter fitted without and with the reference feature maps, and its
    images."""
    plain, images = fit_random(200, 20)
    kept, _ = fit_random(200, 20, keep_features=True)
    return plain, kept, images


def test_the_ranking_is_the_same_with_and_without_kept_features(pair) -> None:
    plain, kept, images = pair
    rankings_differ = False
    for without, with_features in zip(
        plain.explain_batch(images[:12]), kept.explain_batch(images[:12]), strict=True
    ):
        assert without.features is None and with_features.features is not None
        assert torch.equal(with_features.similar(), without.similar())
        assert torch.equal(with_features.similar(), with_features.similar(metric="semantic"))
        torch.testing.assert_close(with_features.distances(), without.distances())
        assert with_features.to_dict() == without.to_dict()
        euclidean = with_features.similar(metric="euclidean")
        rankings_differ |= not torch.equal(euclidean, with_features.similar())
    # the feature maps would rank otherwise: a default that followed them would change it
    assert rankings_differ


def test_the_json_names_its_metric(pair) -> None:
    _, kept, images = pair
    e = kept.explain(images[3])
    assert e.to_dict()["metric"] == "semantic"
    for metric in SIMILARITY_METRICS:
        summary = json.loads(json.dumps(e.to_dict(top_k=5, metric=metric)))
        assert summary["metric"] == metric
        ranked = e.similar(5, metric)
        assert [s["reference"] for s in summary["similar"]] == ranked.tolist()
        at = torch.searchsorted(e.covered, ranked)
        expected = e.distances(metric)[at].tolist()
        assert [s["distance"] for s in summary["similar"]] == pytest.approx(expected)
    with pytest.raises(ValueError, match="unknown metric"):
        e.to_dict(metric="manhattan")
    plain, _, _ = pair
    with pytest.raises(ValueError, match="keep_features"):
        plain.explain(images[3]).to_dict(metric="euclidean")


def test_the_semantic_distance_by_hand_on_the_triangle() -> None:
    """The paper's Fig. 1: P(x) is the triangle's three sides, t1 = 0, t2 = 0 and
    t1 + t2 = 1, whose Eq. 2 weights are +-(1, 0), +-(0, 1) and +-(1, 1), so
    Dist(x, x') = |t1 - t1'| + |t2 - t2'| + |(t1 + t2) - (t1' + t2')|."""
    g = torch.Generator().manual_seed(0)
    points = torch.rand(300, 2, generator=g) * 3 - 1
    ri = RepresentativeInterpreter(triangle_model(), "features", n_boundaries=60, progress=False)
    ri.fit(points.view(-1, 2, 1, 1), keep_features=True)  # kept, and still the paper's Dist
    x = torch.tensor([0.25, 0.25])
    e = ri.explain(x.view(2, 1, 1))
    weights = ri.index.boundaries.weight.flatten(1)[e.boundary_ids].abs()
    assert sorted(weights.tolist()) == [[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]
    others = points[e.covered]
    by_hand = (
        (others[:, 0] - x[0]).abs() + (others[:, 1] - x[1]).abs() + (others.sum(1) - x.sum()).abs()
    )
    torch.testing.assert_close(e.distances(), by_hand)
    order = sorted(range(len(by_hand)), key=lambda n: (float(by_hand[n]), n))
    assert e.similar().tolist() == e.covered[order].tolist()
    assert e.to_dict(top_k=1)["similar"] == [
        {"reference": e.covered[order[0]].item(), "distance": pytest.approx(by_hand.min().item())}
    ]


def test_channel_weights_are_the_boundaries_means_flipped_to_the_input(pair) -> None:
    plain, _, images = pair
    index = plain.index
    for e in plain.explain_batch(images[:6]):
        p = e.boundary_ids
        w = index.boundaries.weight[p]
        flipped = torch.where(e.projections[p].view(-1, 1, 1, 1) < 0, -w, w)
        assert torch.equal(e.channel_weights, flipped.flatten(2).mean(2))
        sides = torch.sign(e.projections[p])
        assert torch.equal(
            e.channel_weights, input_side_weights(channel_means(index.boundaries)[p], sides)
        )


def test_the_distance_percentile_is_the_brute_force_share_and_grows_off_the_data() -> None:
    ri, images = fit_random(300, 20)
    e = ri.explain(images[5] * 0.9)
    covered, p = e.covered.tolist(), e.boundary_ids
    rows = ri.index.projections[:, p].double()

    def dist(a, b) -> float:
        return float((a - b).abs().sum())

    nearest = min(dist(rows[i], e.projections[p].double()) for i in covered)
    own = [min(dist(rows[i], rows[j]) for j in covered if j != i) for i in covered]
    expected = 100 * sum(d < nearest for d in own) / len(own)
    assert e.distance_percentile() == pytest.approx(expected, abs=1e-9)
    assert e.distance_percentile(chunk=7) == e.distance_percentile()
    assert 0 < e.distance_percentile() < 100
    assert ri.explain_reference([5])[0].distance_percentile() == 0  # its own image, at 0
    for i in (5, 6, 7):  # the same patterns, off the reference images' scale
        far = ri.explain(images[i] * 5)
        assert far.representativeness > 1 and far.distance_percentile() == 100
    few = e.distance_percentile(sample=4)  # four of the covered images, evenly spaced
    assert min(abs(few - 25 * k) for k in range(5)) < 1e-9
