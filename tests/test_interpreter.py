import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from repinterp import RepresentativeInterpreter
from repinterp.core.heatmap import polytope_heatmaps
from repinterp.store.index_folder import IndexLoadError

from .networks import fit_random, randn, random_setup, tiny_mlp_cnn, triangle_model


@pytest.fixture(scope="module")
def fitted():
    return fit_random(400, 30)


def test_index_holds_projections_classes_and_sources(fitted) -> None:
    ri, images = fitted
    index = ri.index
    assert index.projections.shape == (400, 30)
    assert ri.boundary_sources.shape == (30,)
    assert torch.equal(ri.boundary_sources, ri.boundary_sources.sort().values)
    with torch.no_grad():
        logits = ri.model(images)
    assert torch.equal(index.predictions, logits.argmax(1))
    # each boundary's source image lies on its positive side (top1 - top2 >= 0)
    at_source = index.projections[ri.boundary_sources, torch.arange(30)]
    assert (at_source >= 0).all()
    assert len(index.predictions.unique()) > 1


def test_cover_is_consistent_with_stored_projections(fitted) -> None:
    ri, images = fitted
    for e in ri.explain_batch(images[:25]):
        proj = ri.index.projections
        x_side = torch.sign(e.projections)
        p = e.boundaries
        inside = (torch.sign(proj[:, p]) == x_side[p]).all(1)
        assert torch.equal(e.covered, inside.nonzero().flatten())
        other = ri.index.predictions != e.predicted_class
        everywhere = (torch.sign(proj) == x_side).all(1)
        assert e.delta == int((other & everywhere).sum())  # tau(x) by brute force
        assert e.conflicts == int((other & inside).sum()) <= e.delta
        assert len(p) <= 30 and len(set(p.tolist())) == len(p)


def test_similar_ranks_by_projected_l1_distance(fitted) -> None:
    ri, images = fitted
    e = ri.explain(images[5])
    p = e.boundaries
    ref = ri.index.projections
    dist = {int(i): float((ref[i, p] - e.projections[p]).abs().sum()) for i in e.covered.tolist()}
    ranked = sorted(dist, key=lambda i: (dist[i], i))
    assert e.similar().tolist() == ranked
    assert e.similar(3).tolist() == ranked[:3]
    # the input is a reference image: it is covered and most similar to itself
    assert e.similar(1).tolist() == [5]


def test_covers_agrees_with_stored_cover(fitted) -> None:
    ri, images = fitted
    e = ri.explain(images[7])
    flags = e.covers(images)
    assert torch.equal(flags.nonzero().flatten(), e.covered)


def test_heatmap_follows_section_5_1(fitted) -> None:
    ri, images = fitted
    e = ri.explain(images[11])
    others = images[20:23]
    maps = e.heatmap(others)
    assert maps.shape == (3, 12, 12)
    assert float(maps.min()) >= 0 and float(maps.max()) <= 1
    with torch.no_grad():
        t = ri.split.psi(others)
    expected = torch.zeros(3, 12, 12)
    for h in e.boundaries.tolist():
        w = ri.index.boundaries.weight[h]
        if e.projections[h] < 0:
            w = -w
        alpha = w.mean(dim=(1, 2))
        raw = F.relu((alpha[None, :, None, None] * t).sum(1, keepdim=True))
        up = F.interpolate(raw, size=(12, 12), mode="bilinear", align_corners=False)[:, 0]
        low = up.amin(dim=(1, 2), keepdim=True)
        high = up.amax(dim=(1, 2), keepdim=True)
        expected += (up - low) / (high - low + 1e-7)
    expected /= len(e.boundaries)
    assert torch.allclose(maps, expected, atol=1e-6)
    # the channel weights are the input's, reused unchanged for every image
    assert torch.allclose(e.heatmap(others[:1])[0], maps[0], atol=1e-6)


@pytest.mark.parametrize("max_elements", [1 << 25, 1])  # all images at once, or one by one
def test_polytope_heatmaps_draw_each_image_with_its_own_polytope(fitted, max_elements) -> None:
    ri, images = fitted
    explanations = [ri.explain(images[i]) for i in (3, 11, 40)]  # polytopes of several sizes
    assert len({len(e.boundaries) for e in explanations}) > 1
    others = images[100:110]
    which = torch.tensor([2, 0, 0, 1, 2, 1, 0, 2, 2, 1])
    with torch.no_grad():
        t = ri.split.psi(others)
    alphas = [e.channel_weights for e in explanations]
    maps = polytope_heatmaps(t, alphas, which, (12, 12), max_elements)
    for n, v in enumerate(which.tolist()):
        torch.testing.assert_close(maps[n], explanations[v].heatmap(others[n : n + 1])[0])
    with pytest.raises(ValueError, match="P\\(x\\) is empty"):
        polytope_heatmaps(t, [alphas[0], alphas[0][:0]], which.clamp(max=1), (12, 12))


def test_batch_equals_single(fitted) -> None:
    ri, images = fitted
    batch = ri.explain_batch(images[:6])
    for i, e in enumerate(batch):
        single = ri.explain(images[i])
        assert torch.equal(single.boundaries, e.boundaries)
        assert torch.equal(single.covered, e.covered)
        assert single.delta == e.delta


def test_same_seed_same_everything() -> None:
    def run(seed: int):
        model, images = random_setup(n=200)
        ri = RepresentativeInterpreter(model, "relu2", n_boundaries=20, seed=seed, progress=False)
        ri.fit(images)
        return ri, [ri.explain(images[i]) for i in range(5)]

    (a, ea), (b, eb), (c, _) = run(3), run(3), run(4)
    for name, tensor in a.index.tensors().items():
        assert torch.equal(tensor, b.index.tensors()[name]), name
    assert all(torch.equal(x.boundaries, y.boundaries) for x, y in zip(ea, eb, strict=True))
    assert not torch.equal(a.boundary_sources, c.boundary_sources)


def test_paper_figure_1_triangle() -> None:
    """Dogs inside a triangle, cats around it: P(x) is the triangle's three sides."""
    g = torch.Generator().manual_seed(0)
    pts = torch.rand(600, 2, generator=g) * 3 - 1
    model = triangle_model()
    ri = RepresentativeInterpreter(model, "features", n_boundaries=80, progress=False)
    ri.fit(pts.view(-1, 2, 1, 1))
    dogs = ri.index.predictions == 0
    e = ri.explain(torch.tensor([0.25, 0.25]).view(2, 1, 1))
    assert e.predicted_class == 0 and e.delta == 0
    assert torch.equal(e.covered, dogs.nonzero().flatten())
    q = ri.index.boundaries
    planes = torch.cat([q.weight.flatten(1), q.bias.unsqueeze(1)], 1)[e.boundaries]
    pivot = planes.gather(1, planes.abs().argmax(1, keepdim=True))
    lines = {tuple(round(v, 6) for v in row) for row in (planes / pivot).tolist()}
    assert lines == {(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (1.0, 1.0, -1.0)}


def test_degenerate_single_class() -> None:
    model = tiny_mlp_cnn()
    with torch.no_grad():
        model.fc3.bias.copy_(torch.tensor([100.0, 0, 0, 0]))
    images = randn(50, 1, 12, 12)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=10, progress=False).fit(images)
    e = ri.explain(images[0])
    assert e.boundaries.numel() == 0 and e.representativeness == 50
    assert not e.has_heatmap and "D(x) is empty" in e.message
    with pytest.raises(ValueError, match="no boundary to draw a heat map"):
        e.heatmap(images[:2])
    assert e.covers(images[:4]).all()


def test_degenerate_delta_positive() -> None:
    model, images = random_setup(n=300)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=1, progress=False).fit(images)
    explained = ri.explain_batch(images[:50])
    positive = [e for e in explained if e.delta > 0]
    assert positive, "one boundary cannot separate four classes"
    e = positive[0]
    assert e.conflicts <= e.delta and "delta = tau(x)" in e.message


def test_more_boundaries_than_references_and_one_reference() -> None:
    model, images = random_setup(n=8)
    with pytest.warns(UserWarning, match="Q has 8 boundaries"):
        ri = RepresentativeInterpreter(model, "relu2", n_boundaries=50, progress=False)
        ri.fit(images)
    assert len(ri.index.boundaries) == 8
    ri.explain(images[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = RepresentativeInterpreter(model, "relu2", progress=False).fit(images[:1])
    e = one.explain(images[3])
    assert e.representativeness in (0, 1)
    assert e.covered.tolist() in ([], [0])


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (torch.randn(3, 2, 12, 12), r"C x H x W = \(2, 12, 12\), the index expects \(1, 12, 12\)"),
        (torch.randn(3, 1, 10, 12), r"the index expects \(1, 12, 12\)"),
        (torch.randn(1, 12, 12), r"N x C x H x W \(one image: image\[None\]\), got shape"),
        (torch.ones(3, 1, 12, 12).index_fill_(0, torch.tensor([1]), math.nan), "NaN or Inf"),
        (torch.full((2, 1, 12, 12), math.inf), "NaN or Inf"),
        (torch.ones(2, 1, 12, 12, dtype=torch.long), "floating point"),
    ],
)
def test_bad_input_is_refused(fitted, bad: torch.Tensor, message: str) -> None:
    ri, _ = fitted
    before = {k: v.clone() for k, v in ri.index.tensors().items()}
    with pytest.raises(ValueError, match=message):
        ri.explain_batch(bad)
    for k, v in ri.index.tensors().items():
        assert torch.equal(v, before[k])


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        (torch.empty(0, 1, 12, 12), "the reference set is empty"),
        (torch.full((4, 1, 12, 12), math.nan), "NaN or Inf"),
        (torch.randn(4, 3, 12, 12), "expected input"),
    ],
)
def test_bad_reference_keeps_previous_fit(fitted, reference: torch.Tensor, message: str) -> None:
    ri, _ = fitted
    before = ri.index
    with pytest.raises((ValueError, RuntimeError), match=message):
        ri.fit(reference)
    assert ri.index is before


def test_unknown_layer_and_unfitted() -> None:
    model, _ = random_setup(n=4)
    with pytest.raises(ValueError, match="'relu9' is not a module"):
        RepresentativeInterpreter(model, "relu9")
    with pytest.raises(RuntimeError, match="not fitted"):
        RepresentativeInterpreter(model, "relu2").explain(torch.randn(1, 12, 12))
    model.train()
    with pytest.raises(ValueError, match="training mode"):
        RepresentativeInterpreter(model, "relu2")


def test_save_load_roundtrip_and_refusals(fitted, tmp_path) -> None:
    ri, images = fitted
    path = tmp_path / "index"
    ri.save(path)
    loaded = RepresentativeInterpreter.load(path, ri.model, progress=False)
    for name, tensor in ri.index.tensors().items():
        assert torch.equal(tensor, loaded.index.tensors()[name]), name
    e, f = ri.explain(images[2]), loaded.explain(images[2])
    assert torch.equal(e.boundaries, f.boundaries) and torch.equal(e.covered, f.covered)

    other_weights, _ = random_setup(n=4, seed=1)
    with pytest.raises(IndexLoadError, match="other weights"):
        RepresentativeInterpreter.load(path, other_weights)
    renamed = torch.nn.Sequential(*ri.model)  # same weights, layers named 0, 1, ...
    with pytest.raises(IndexLoadError, match="layer 'relu2', which the model lacks"):
        RepresentativeInterpreter.load(path, renamed)

    saved = (path / "index.safetensors").read_bytes()
    (path / "index.safetensors").write_bytes(saved[:-10] + b"0123456789")
    with pytest.raises(IndexLoadError, match="damaged"):
        RepresentativeInterpreter.load(path, ri.model)
    (path / "index.safetensors").write_bytes(saved)
    (path / "manifest.json").write_text("{ not json")
    with pytest.raises(IndexLoadError, match=r"manifest\.json is damaged"):
        RepresentativeInterpreter.load(path, ri.model)


def test_save_replaces_atomically(fitted, tmp_path) -> None:
    ri, _ = fitted
    path = tmp_path / "index"
    ri.save(path)
    ri.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_no_hooks_left_after_many_calls() -> None:
    pts = torch.rand(100, 2, generator=torch.Generator().manual_seed(0)) * 3 - 1
    ri = RepresentativeInterpreter(triangle_model(), "features", n_boundaries=20, progress=False)
    ri.fit(pts.view(-1, 2, 1, 1))
    for i in range(1000):
        ri.explain(pts[i % 100].view(2, 1, 1))
    assert all(
        not m._forward_hooks and not m._forward_pre_hooks and not m._backward_hooks
        for m in ri.model.modules()
    )
