import copy
import json
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision import transforms

from repinterp import RepresentativeInterpreter
from repinterp.core.boundaries import project
from repinterp.core.heatmap import channel_means, polytope_heatmaps
from repinterp.data.shape_drawing import draw_shapes
from repinterp.store.index_folder import IndexLoadError
from repinterp.store.outputs import OutputError
from repinterp.workspace import ImageTransform, load_image_file, open_index

from .commandline import edit_manifest, run
from .networks import (
    balance,
    fit_random,
    normalize,
    randn,
    random_setup,
    tiny_mlp_cnn,
    triangle_model,
)


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
        p = e.boundary_ids
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
    p = e.boundary_ids
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
    for h in e.boundary_ids.tolist():
        w = ri.index.boundaries.weight[h]
        if e.projections[h] < 0:
            w = -w
        alpha = w.mean(dim=(1, 2))
        raw = F.relu((alpha[None, :, None, None] * t).sum(1, keepdim=True))
        up = F.interpolate(raw, size=(12, 12), mode="bilinear", align_corners=False)[:, 0]
        low = up.amin(dim=(1, 2), keepdim=True)
        high = up.amax(dim=(1, 2), keepdim=True)
        expected += (up - low) / (high - low + 1e-7)
    expected /= len(e.boundary_ids)
    assert torch.allclose(maps, expected, atol=1e-6)
    # the channel weights are the input's, reused unchanged for every image
    assert torch.allclose(e.heatmap(others[:1])[0], maps[0], atol=1e-6)


@pytest.mark.parametrize("max_elements", [1 << 25, 1])  # all images at once, or one by one
def test_polytope_heatmaps_draw_each_image_with_its_own_polytope(fitted, max_elements) -> None:
    ri, images = fitted
    explanations = [ri.explain(images[i]) for i in (3, 11, 40)]  # polytopes of several sizes
    assert len({len(e.boundary_ids) for e in explanations}) > 1
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
        assert torch.equal(single.boundary_ids, e.boundary_ids)
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
    assert all(torch.equal(x.boundary_ids, y.boundary_ids) for x, y in zip(ea, eb, strict=True))
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
    planes = torch.cat([q.weight.flatten(1), q.bias.unsqueeze(1)], 1)[e.boundary_ids]
    pivot = planes.gather(1, planes.abs().argmax(1, keepdim=True))
    lines = {tuple(round(v, 6) for v in row) for row in (planes / pivot).tolist()}
    assert lines == {(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (1.0, 1.0, -1.0)}


def test_degenerate_single_class() -> None:
    model = tiny_mlp_cnn()
    with torch.no_grad():
        model.fc3.bias.copy_(torch.tensor([100.0, 0, 0, 0]))
    images = randn(50, 1, 12, 12)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=10, progress=False)
    with pytest.warns(UserWarning, match="predicts class 0 for all 50 reference images"):
        ri.fit(images)
    e = ri.explain(images[0])
    assert e.boundary_ids.numel() == 0 and e.representativeness == 50
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
    assert torch.equal(e.boundary_ids, f.boundary_ids) and torch.equal(e.covered, f.covered)

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


def test_save_into_a_folder_of_other_files_needs_overwrite_true(fitted, tmp_path) -> None:
    ri, _ = fitted
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.txt").write_text("mine\n")
    message = r"holds files that repinterp did not write: .* pass overwrite=True to write an index"
    with pytest.raises(OutputError, match=message) as refused:
        ri.save(folder)
    assert "--overwrite" not in str(refused.value)  # the Python argument, not the CLI's option
    assert not (folder / "manifest.json").exists()
    ri.save(folder, overwrite=True)
    ri.save(folder, overwrite=True)  # the index in it is replaced, as --overwrite replaces it
    assert (folder / "todo.txt").read_text() == "mine\n"
    loaded = RepresentativeInterpreter.load(folder, ri.model, progress=False)
    assert torch.equal(loaded.index.projections, ri.index.projections)


@pytest.fixture(scope="module")
def grey():
    """:func:`tiny_mlp_cnn` fitted on 80 random 12 x 12 grey images of uint8 pixels,
    normalised as :func:`networks.normalize` does, with the torchvision transform that does the
    same to a PIL image; and 4 other images, as pixels (4 x 12 x 12 uint8) and as inputs."""
    generator = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (84, 12, 12), dtype=torch.uint8, generator=generator)
    inputs = normalize(pixels[:, None] / 255)
    model = balance(tiny_mlp_cnn(), inputs[:80])
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,), (0.25,))])
    ri = RepresentativeInterpreter(
        model, "relu2", n_boundaries=10, progress=False, transform=transform
    ).fit(inputs[:80])
    return ri, pixels[80:].numpy(), inputs[80:]


def _same(got: list, expected: list) -> None:
    """The same P(x) (boundaries, covered images) of the same input, for each pair."""
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a.boundary_ids, b.boundary_ids) and torch.equal(a.covered, b.covered)
        torch.testing.assert_close(a.image.to(b.image), b.image)


def test_explain_takes_images_as_they_come(grey) -> None:
    ri, pixels, inputs = grey
    expected = ri.explain_batch(inputs)
    given = {
        "PIL images": [Image.fromarray(p) for p in pixels],
        "uint8 H x W": list(pixels),
        "uint8 H x W x 1": list(pixels[..., None]),
        "float C x H x W": list(inputs.numpy()),
        "float H x W x C": list(inputs.permute(0, 2, 3, 1).numpy()),
        "tensors": list(inputs),
    }
    for images in given.values():
        _same([ri.explain(image) for image in images], expected)
        _same(ri.explain_batch(images), expected)
    _same(ri.explain_batch(pixels), expected)  # N x H x W uint8: N images of pixels
    _same(ri.explain_batch(inputs.numpy()), expected)
    _same(ri.explain_batch(inputs.permute(0, 2, 3, 1).numpy()), expected)
    assert ri.explain_batch([]) == []


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (
            Image.new("L", (12, 12)),
            r"got a PIL image \(Image\), but the interpreter has no transform .* pass transform=",
        ),
        (np.zeros((12, 12), np.uint8), "got a uint8 NumPy array of pixels, but the interpreter"),
        (
            torch.zeros(1, 12, 12, dtype=torch.uint8),
            r"must be floating point, got torch.uint8: scale the pixels to \[0, 1\] \(x / 255\) "
            "and normalise them as the model expects",
        ),
        ("digit.png", "an image to explain is a tensor, a NumPy array or a PIL image, got str"),
        (np.zeros((12, 12, 5), np.uint8), "a uint8 NumPy array of shape .* is not an image"),
    ],
)
def test_images_without_a_transform_say_what_to_do(grey, monkeypatch, image, message) -> None:
    ri = grey[0]
    monkeypatch.setattr(ri, "transform", None)
    with pytest.raises(ValueError, match=message):
        ri.explain(image)


def test_a_transform_must_give_a_float_tensor(grey, monkeypatch) -> None:
    ri, pixels, _ = grey
    monkeypatch.setattr(ri, "transform", np.asarray)
    with pytest.raises(ValueError, match=r"transform= must return .* float tensor, got a ndarray"):
        ri.explain(pixels[0])
    monkeypatch.setattr(ri, "transform", transforms.PILToTensor())
    with pytest.raises(ValueError, match=r"got a torch\.uint8 tensor of shape"):
        ri.explain(pixels[0])


def _save_png(pixels: torch.Tensor, path) -> None:
    """Save 3 x H x W pixels in [0, 1] as an 8-bit PNG."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray((pixels * 255).round().byte().permute(1, 2, 0).numpy()).save(path)


def _cli_index(tmp_path, capsys):
    """An index fitted by ``repinterp fit`` on a folder of 15 PNGs, and a new 60 x 52 PNG."""
    drawn = draw_shapes(16, seed=0, size=48)
    for i, (image, label) in enumerate(zip(drawn.images[:15], drawn.labels, strict=False)):
        _save_png(image, tmp_path / "shapes" / f"class{int(label)}" / f"{i}.png")
    fit = ["fit", "--model", "shapes_cnn", "--reference", f"imagefolder:{tmp_path / 'shapes'}"]
    fit += ["--image-size", "48", "--boundaries", "5", "--out", str(tmp_path / "index"), "--quiet"]
    code, _, err = run(fit, capsys)
    assert code == 0, err
    file = tmp_path / "new.png"  # 60 x 52: resized and cropped to 48 x 48
    _save_png(F.interpolate(drawn.images[15:], size=(60, 52), mode="bilinear")[0], file)
    return tmp_path / "index", file


def test_an_index_fitted_by_the_cli_reads_images_as_the_cli_does(tmp_path, capsys) -> None:
    index, file = _cli_index(tmp_path, capsys)
    ws = open_index(index, progress=False)
    ri = ws.interpreter
    cli = ws.normalization(load_image_file(file, ri.index.input_shape))
    expected = ri.explain(cli)
    assert expected.has_heatmap
    with Image.open(file) as image:
        for given in (image, np.asarray(image)):
            e = ri.explain(given)
            torch.testing.assert_close(e.image, cli, rtol=0, atol=0)
            _same([e], [expected])


def test_a_batch_norm_put_in_training_mode_is_refused_and_the_model_never_changes() -> None:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 6, 3, padding=1),
            torch.nn.BatchNorm2d(6),
            torch.nn.ReLU(),
            torch.nn.Conv2d(6, 8, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
            torch.nn.Linear(8 * 8 * 8, 3),
        ).eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    reference = randn(40, 3, 8, 8)
    model[1].train()
    with pytest.raises(ValueError, match=r"'1' \(BatchNorm2d\) is in training mode"):
        RepresentativeInterpreter(model, "4", n_boundaries=5, progress=False)
    with pytest.raises(ValueError, match=r"'1' \(BatchNorm2d\) is in training mode"):
        RepresentativeInterpreter(model, None, n_boundaries=5, progress=False).fit(reference)
    model[1].eval()
    ri = RepresentativeInterpreter(model, "4", n_boundaries=5, progress=False).fit(reference)
    model[1].train()  # after the interpreter is made: refused before anything runs
    for call in (lambda: ri.explain(reference[0]), lambda: ri.fit(reference)):
        with pytest.raises(ValueError, match=r"'1' \(BatchNorm2d\) is in training mode"):
            call()
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())


def test_an_index_refuses_a_model_whose_graph_changed(fitted, tmp_path) -> None:
    ri, images = fitted
    path = tmp_path / "index"
    ri.save(path)
    assert json.loads((path / "manifest.json").read_text())["graph_fingerprint"]
    swapped = copy.deepcopy(ri.model)
    swapped.relu1 = torch.nn.LeakyReLU(0.2)  # same state_dict, another trunk
    with pytest.raises(IndexLoadError, match="another graph"):
        RepresentativeInterpreter.load(path, swapped)
    # an index saved before the graph was recorded loads with the weights checked alone
    edit_manifest(path, lambda manifest: manifest.pop("graph_fingerprint"))
    loaded = RepresentativeInterpreter.load(path, ri.model, progress=False)
    assert torch.equal(loaded.explain(images[0]).covered, ri.explain(images[0]).covered)


def test_an_interpretation_keeps_its_own_index_after_a_new_fit() -> None:
    model, pictures = random_setup(n=300)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=20, progress=False)
    ri.fit(pictures[:200], keep_features=True)
    e = ri.explain(pictures[0])
    similar, distances = e.similar(10), e.distances()
    euclidean = e.similar(5, "euclidean")
    summary = e.to_dict(5)
    ri.fit(pictures[100:], keep_features=True)  # another reference set, another Q
    assert not torch.equal(ri.index.boundaries.weight, e.index.boundaries.weight)
    assert bool(e.covers(pictures[:1])[0])
    assert torch.equal(e.similar(10), similar) and torch.equal(e.distances(), distances)
    assert torch.equal(e.similar(5, "euclidean"), euclidean)
    assert e.to_dict(5) == summary
    html = e.show().html  # its reference set is not the interpreter's any more: said so
    assert "fitted again" in html
    assert e.show(reference=pictures[:200]).html.count("<img") > html.count("<img")


def test_a_loaded_index_reads_the_features_it_was_loaded_with(tmp_path) -> None:
    model, pictures = random_setup(n=300)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=10, progress=False)
    ri.fit(pictures[:200], keep_features=True).save(tmp_path / "index")
    expected = ri.features(pictures[:200]).flatten(1)
    loaded = RepresentativeInterpreter.load(tmp_path / "index", model, progress=False)
    other = RepresentativeInterpreter(model, "relu2", n_boundaries=10, progress=False)
    other.fit(pictures[100:], keep_features=True).save(tmp_path / "index")  # a re-fit
    assert torch.equal(loaded.reference_features, expected)
    assert torch.equal(ri.reference_features, expected)  # the saved index's own, too


def test_loading_a_cli_index_with_its_model_gives_the_cli_transform(tmp_path, capsys) -> None:
    index, file = _cli_index(tmp_path, capsys)
    ws = open_index(index, progress=False)
    loaded = RepresentativeInterpreter.load(index, ws.interpreter.model, progress=False)
    assert loaded.transform == ws.interpreter.transform
    with Image.open(file) as image:
        _same([loaded.explain(image)], [ws.interpreter.explain(image)])
    mine = RepresentativeInterpreter.load(index, ws.interpreter.model, transform=None)
    assert mine.transform is None  # a transform given is kept, None included
    record = json.loads((index / "manifest.json").read_text())["transform"]
    assert ImageTransform.from_record(record) == loaded.transform
    for bad in ({**record, "std": [0.0, 1.0, 1.0]}, {**record, "mean": [0.5]}, {}, None):
        with pytest.raises(ValueError, match=r"the recorded transform .* is not one"):
            ImageTransform.from_record(bad)


def test_the_contrastive_map_is_the_boundary_of_the_two_classes_at_the_input() -> None:
    ri, images = fit_random(200, 20)
    x = images[:8]
    predicted = ri.model(x).argmax(1)
    others = (predicted + 1 + torch.arange(8) % 3) % 4  # every other class, never the predicted
    t = ri.split.psi(x).detach().requires_grad_(True)
    logits = ri.split.head(t)
    rows = torch.arange(8)
    gap = logits[rows, predicted] - logits[rows, others]
    (gradient,) = torch.autograd.grad(gap.sum(), t)
    alphas = gradient.flatten(2).mean(2)  # the mean over positions of d(G_c - G_c')/dt at x
    b = ri.contrastive_boundaries(x, others)
    assert torch.equal(b.top_classes, torch.stack([predicted, others], 1))
    assert torch.equal(channel_means(b), alphas)
    torch.testing.assert_close(project(t.detach(), b).diagonal(), gap.detach())  # exact at t
    maps = ri.contrastive_heatmap(x, others)
    raw = torch.relu((alphas[:, :, None, None] * t.detach()).sum(1, keepdim=True))
    up = F.interpolate(raw, size=(12, 12), mode="bilinear", align_corners=False)[:, 0]
    low, high = up.amin((1, 2), keepdim=True), up.amax((1, 2), keepdim=True)
    torch.testing.assert_close(maps, (up - low) / (high - low + 1e-7))
    one = ri.contrastive_heatmap(x[2:3], int(others[2]))  # one class for all, or one each
    torch.testing.assert_close(one[0], maps[2])
    with pytest.raises(ValueError, match=r"image 0 is predicted class \d, the contrast class"):
        ri.contrastive_heatmap(x, predicted)
    with pytest.raises(ValueError, match="contrast class 4 is not one of the model's 4 classes"):
        ri.contrastive_heatmap(x, 4)
    with pytest.raises(ValueError, match="3 contrast classes for 8 images"):
        ri.contrastive_heatmap(x, [0, 1, 2])


def test_forward_is_a_deprecated_name_of_logits_and_projections(fitted) -> None:
    """``ri.forward`` is not a module's forward: it is kept for one release and says its new
    name (issue 41, item 6)."""
    ri, images = fitted
    logits, projections = ri.logits_and_projections(images[:3])
    with pytest.warns(DeprecationWarning, match="forward is deprecated .*logits_and_projections"):
        old = ri.forward(images[:3])
    assert torch.equal(old[0], logits) and torch.equal(old[1], projections)


def test_the_index_has_one_name_and_fitted_index_is_a_deprecated_alias(fitted) -> None:
    """Issue 41, item 6: ``ri.index`` is the index (it raises before ``fit``, as
    ``fitted_index`` did); ``fitted_index`` is kept for one release and warns."""
    ri, _ = fitted
    with pytest.warns(DeprecationWarning, match="fitted_index is deprecated .*use index"):
        assert ri.fitted_index is ri.index
    fresh = RepresentativeInterpreter(ri.model, "relu2", progress=False)
    assert ri.is_fitted and not fresh.is_fitted
    with pytest.raises(RuntimeError, match="not fitted: call fit"):
        fresh.index  # noqa: B018


def test_an_interpretations_ids_and_index_have_one_name_each(fitted) -> None:
    """Issue 41, item 6: ``e.boundary_ids`` (``P(x)``; an index's ``boundaries`` are
    hyperplanes) and ``e.index``; ``boundaries`` and ``reference_index`` are kept for one
    release and warn."""
    ri, images = fitted
    e = ri.explain(images[0])
    assert e.index is ri.index
    with pytest.warns(DeprecationWarning, match="boundaries is deprecated .*use boundary_ids"):
        assert e.boundaries is e.boundary_ids
    with pytest.warns(DeprecationWarning, match="reference_index is deprecated .*use index"):
        assert e.reference_index is e.index
