"""Eq. 2's boundaries (exact on the linear region of each source), projections, and how Q's
sources are sampled (uniformly, balanced over classes, by pairs of classes)."""

import pytest
import torch

from repinterp.core.boundaries import Boundaries, compute_boundaries, project, sample_sources
from repinterp.models.split import split_model

from ..networks import random_setup


def _pattern(model, t: torch.Tensor) -> torch.Tensor:
    """On/off pattern of the head's ReLUs: it fixes the linear region of G."""
    h = model.flatten(t)
    states = []
    for fc, relu in ((model.fc1, model.relu3), (model.fc2, model.relu4)):
        pre = fc(h)
        states.append(pre > 0)
        h = relu(pre)
    return torch.cat(states, 1)


def split_features(n: int, dtype=torch.float64):
    """A balanced tiny CNN, its split at "relu2", and the feature maps of n random images."""
    model, images = random_setup(n=n, dtype=dtype)
    split = split_model(model, "relu2")
    with torch.no_grad():
        return model, split, split.psi(images)


def test_boundary_equals_score_difference_in_linear_region() -> None:
    model, split, t = split_features(40)
    q = compute_boundaries(split.head, t)
    c1, c2 = q.top_classes[:, 0], q.top_classes[:, 1]
    rows = torch.arange(len(q))

    def score_diff(features: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            logits = split.head(features)
        return logits[rows, c1] - logits[rows, c2]

    at_source = project(t, q).diagonal()
    assert torch.allclose(at_source, score_diff(t), atol=1e-10)
    assert (at_source >= 0).all()

    generator = torch.Generator().manual_seed(1)
    checked = 0
    for scale in (1e-4, 1e-3, 1e-2):
        near = t + scale * torch.randn(t.shape, generator=generator, dtype=t.dtype)
        same_region = (_pattern(model, near) == _pattern(model, t)).all(1)
        predicted = project(near, q).diagonal()
        assert torch.allclose(predicted[same_region], score_diff(near)[same_region], atol=1e-10)
        checked += int(same_region.sum())
    assert checked > 40


def test_batched_equals_one_at_a_time() -> None:
    _, split, t = split_features(7)
    batched = compute_boundaries(split.head, t)
    for i in range(len(t)):
        single = compute_boundaries(split.head, t[i : i + 1])
        assert torch.allclose(single.weight[0], batched.weight[i], atol=1e-12)
        assert torch.allclose(single.bias[0], batched.bias[i], atol=1e-12)
        assert torch.equal(single.top_classes[0], batched.top_classes[i])


def test_top_classes_are_the_two_largest_logits() -> None:
    _, split, t = split_features(20, dtype=torch.float32)
    with torch.no_grad():
        logits = split.head(t)
    q = compute_boundaries(split.head, t)
    assert torch.equal(q.top_classes, logits.topk(2, dim=1).indices)


def _at_offset(t: torch.Tensor, floats: int) -> torch.Tensor:
    """A copy of ``t`` starting ``floats`` floats past a 64-byte boundary."""
    buffer = torch.empty(t.numel() + floats + 16)
    base = (-buffer.data_ptr() // 4) % 16
    out = buffer[base + floats : base + floats + t.numel()].view_as(t)
    return out.copy_(t)


@pytest.mark.parametrize(("n", "k", "q"), [(11, 8, 20), (1, 32, 50), (3, 5, 7)])
def test_projections_do_not_depend_on_where_the_operands_lie(n: int, k: int, q: int) -> None:
    g = torch.Generator().manual_seed(n)
    features = torch.relu(torch.randn(n, k, 6, 6, generator=g))
    boundaries = Boundaries(
        torch.randn(q, k, 6, 6, generator=g), torch.randn(q, generator=g), torch.zeros(q, 2)
    )
    expected = project(features, boundaries)
    for offset in range(1, 8):  # e.g. a slice of a batch, or weights read at an odd file offset
        weight = _at_offset(boundaries.weight, offset)
        moved = Boundaries(weight, boundaries.bias, boundaries.top_classes)
        assert torch.equal(project(_at_offset(features, offset), moved), expected)


def _logits(n: int, classes: int, seed: int) -> torch.Tensor:
    return torch.randn(n, classes, generator=torch.Generator().manual_seed(seed))


def test_uniform_sampling_is_unchanged():
    expected = torch.randperm(30, generator=torch.Generator().manual_seed(4))[:7].sort().values
    assert torch.equal(sample_sources(30, 7, 4), expected)
    assert torch.equal(sample_sources(30, 7, 4, "uniform", _logits(30, 3, 0)), expected)


def test_balanced_sampling_takes_the_predicted_classes_in_turn():
    logits = _logits(60, 4, 1)
    predicted = logits.argmax(1)
    for n in (4, 9, 13):
        sources = sample_sources(60, n, 2, "balanced", logits)
        assert len(sources.unique()) == n and bool((sources.diff() > 0).all())
        counts = torch.bincount(predicted[sources], minlength=4)
        assert int(counts.max() - counts.min()) <= 1  # every class in turn
    small = torch.zeros(10, 3)
    small[:, 0] = 1.0
    small[:2, 0], small[:2, 1] = 0.0, 1.0  # two images of class 1, eight of class 0
    assert torch.bincount(
        small[sample_sources(10, 6, 0, "balanced", small)].argmax(1)
    ).tolist() == [4, 2]


def test_pairs_sampling_covers_every_pair_nearest_its_boundary_first():
    logits = _logits(80, 4, 3)
    top = logits.topk(2, 1)
    pair = top.indices.sort(1).values
    pair_id = pair[:, 0] * 4 + pair[:, 1]
    margin = top.values[:, 0] - top.values[:, 1]
    pairs = pair_id.unique()
    sources = sample_sources(80, len(pairs), 5, "pairs", logits)
    assert sorted(pair_id[sources].tolist()) == pairs.tolist()  # one per pair
    for p in pairs:  # and the one nearest that pair's boundary
        members = (pair_id == p).nonzero().flatten()
        chosen = sources[pair_id[sources] == p]
        assert chosen.tolist() == [int(members[margin[members].argmin()])]
    more = sample_sources(80, 2 * len(pairs), 5, "pairs", logits)
    assert set(sources.tolist()) <= set(more.tolist())


def test_sampling_errors():
    with pytest.raises(ValueError, match="unknown sampling 'stratified'"):
        sample_sources(10, 3, 0, "stratified", _logits(10, 3, 0))
    with pytest.raises(ValueError, match="needs the 10 reference logits"):
        sample_sources(10, 3, 0, "pairs")
