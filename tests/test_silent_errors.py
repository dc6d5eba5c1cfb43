"""Issue 11's engine items: no wrong answer in silence, no raw error where an empty or
converted result belongs (items 10, 12, 13, 18, 19), and short summaries when printed."""

from __future__ import annotations

import math

import pytest
import torch

from repinterp import RepresentativeInterpreter
from repinterp.core.boundaries import sample_sources
from repinterp.models.zoo import build_model
from repinterp.workspace import BUNDLED_WEIGHTS

from .networks import fit_random, random_setup

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def fitted():
    return fit_random(120, 12, keep_features=True, class_names=["a", "b", "c", "d"])


# ------------------------------------------------------------------ 10: non-finite at fit
def test_nan_weights_are_an_error_at_fit_naming_how_many_images() -> None:
    model, images = random_setup(n=40)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(math.nan)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=6, progress=False)
    message = r"6 of the 6 reference images behind Q give non-finite boundaries \(NaN or Inf\)"
    with pytest.raises(ValueError, match=message):
        ri.fit(images)
    assert not ri.is_fitted


def test_reference_images_that_overflow_are_counted() -> None:
    model, images = random_setup(n=40)
    sources = set(sample_sources(40, 6, seed=0).tolist())
    bad = [i for i in range(40) if i not in sources][:3]
    images = images.clone()
    images[bad] = -3e38  # finite, but the model's logits are not
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=6, progress=False)
    message = (
        rf"images at batch positions \[{bad[0]}, {bad[1]}, {bad[2]}\] give non-finite logits or "
        r"projections of the reference set \(NaN or Inf, 3 of 40 images\)"
    )
    with pytest.raises(ValueError, match=message):
        ri.fit(images)


# ------------------------------------------------------------------ 13: an input that overflows
def test_an_image_filled_with_3e38_is_refused_like_nan() -> None:
    model = build_model("mnist_cnn", 10, weights=BUNDLED_WEIGHTS / "mnist_cnn.safetensors")
    ri = RepresentativeInterpreter(model, "features.7", n_boundaries=5, progress=False)
    ri.fit(torch.rand(30, 1, 28, 28, generator=torch.Generator().manual_seed(0)))
    message = r"images at batch positions \[0\] give non-finite logits or projections"
    with pytest.raises(ValueError, match=message):
        ri.explain(torch.full((1, 28, 28), 3e38))


def test_an_input_whose_logits_overflow_is_refused(fitted) -> None:
    ri, images = fitted
    huge = torch.full_like(images[0], -3e38)
    batch = torch.stack([images[0], huge])
    with pytest.raises(ValueError, match=r"batch positions \[0\] give non-finite logits or proj"):
        ri.explain(huge)
    with pytest.raises(ValueError, match=r"batch positions \[1\] give non-finite logits or proj"):
        ri.explain_batch(batch)
    e = ri.explain(images[0])
    with pytest.raises(ValueError, match=r"batch positions \[1\] give non-finite feature maps"):
        e.heatmap(batch)
    with pytest.raises(ValueError, match=r"batch positions \[1\] give non-finite logits"):
        e.covers(batch)


# ------------------------------------------------------------------ 12: negative k
def test_negative_k_is_an_error_and_zero_gives_nothing(fitted) -> None:
    ri, images = fitted
    e = ri.explain(images[3])
    assert e.representativeness > 2
    with pytest.raises(ValueError, match="k must be >= 0, got -1"):
        e.similar(-1)
    with pytest.raises(ValueError, match="k must be >= 0, got -3"):
        e.to_dict(top_k=-3)
    assert e.similar(0).tolist() == []
    assert e.to_dict(top_k=0)["similar"] == []
    assert len(e.similar(2)) == 2


# ------------------------------------------------------------------ 18: empty batches
def test_empty_batches_give_empty_results(fitted) -> None:
    ri, images = fitted
    none = images[:0]
    assert ri.explain_batch(none) == []
    logits, proj = ri.logits_and_projections(none)
    assert logits.shape == (0, 4) and proj.shape == (0, 12)
    assert ri.features(none).shape == (0, 8, 6, 6)
    e = ri.explain(images[0])
    assert e.heatmap(none).shape == (0, 12, 12)
    assert e.covers(none).shape == (0,)
    regions = ri.regions(n_regions=4)
    assert regions.predict(none).shape == (0,)
    assignment = regions.assign(none)
    assert assignment.region.shape == (0,) and assignment.covered.shape == (0,)
    assert regions.heatmap(none).shape == (0, 12, 12)


# ------------------------------------------------------------------ 19: other floating dtypes
def test_half_and_double_images_are_converted(fitted) -> None:
    ri, images = fitted
    x = images[:6].half().float()  # representable in float16: the same image in every dtype
    expected = ri.explain_batch(x)
    for dtype in (torch.float16, torch.float64, torch.bfloat16):
        y = x.to(dtype) if dtype != torch.bfloat16 else images[:6].bfloat16()
        got = ri.explain_batch(y)
        reference = expected if dtype != torch.bfloat16 else ri.explain_batch(y.float())
        for a, b in zip(got, reference, strict=True):
            assert torch.equal(a.boundary_ids, b.boundary_ids) and torch.equal(a.covered, b.covered)
        assert torch.equal(ri.explain(x[0]).heatmap(y), ri.explain(x[0]).heatmap(y.float()))


def test_a_float64_model_takes_float32_images() -> None:
    model, images = random_setup(n=60, dtype=torch.float64)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=6, progress=False)
    ri.fit(images.float())
    assert ri.index.projections.dtype == torch.float64
    single = ri.explain(images[0].float())
    assert torch.equal(single.boundary_ids, ri.explain(images[0]).boundary_ids)


def test_overflow_on_conversion_counts_as_inf(fitted) -> None:
    ri, images = fitted
    with pytest.raises(ValueError, match="NaN or Inf"):
        ri.explain(torch.full(images[0].shape, 1e300, dtype=torch.float64))


# ------------------------------------------------------------------ explain's input
def test_explain_takes_c_h_w_or_1_c_h_w(fitted) -> None:
    ri, images = fitted
    a, b = ri.explain(images[5]), ri.explain(images[5:6])
    assert torch.equal(a.boundary_ids, b.boundary_ids) and torch.equal(a.covered, b.covered)
    with pytest.raises(ValueError, match=r"one C x H x W \(or 1 x C x H x W\) image, got \(2, 1,"):
        ri.explain(images[:2])


# ------------------------------------------------------------------ summaries
def test_printing_shows_a_short_summary(fitted) -> None:
    ri, images = fitted
    e = ri.explain(images[0])
    text = repr(e)
    assert text == str(e) and len(text) < 200 and "tensor" not in text
    assert text.startswith(
        f"Interpretation(class {e.predicted_class} ({'abcd'[e.predicted_class]!r}), score "
        f"{e.score:.3f}, |P| = {len(e.boundary_ids)}, representativeness {e.representativeness} "
        f"of 120, delta {e.delta}, solver 'greedy'"
    )
    assert repr(ri) == (
        "RepresentativeInterpreter(Sequential at 'relu2', |Q| = 12, |R| = 120, seed 0, "
        "device cpu, solver 'greedy')"
    )
    fresh = RepresentativeInterpreter(ri.model, None, n_boundaries=5)
    assert repr(fresh) == (
        "RepresentativeInterpreter(Sequential at a layer chosen at fit, |Q| = 5, not fitted, "
        "seed 0, device cpu, solver 'greedy')"
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda x: torch.empty_like(x, device="meta"), "on the meta device, which holds no values"),
        (lambda x: x.to_sparse(), r"sparse_coo tensor: pass a dense one \(tensor.to_dense\(\)\)"),
        (lambda x: x.to_sparse_csr(), "sparse_csr tensor: pass a dense one"),
    ],
)
def test_sparse_and_meta_tensors_are_refused_in_one_line(fitted, make, message) -> None:
    ri, images = fitted
    one, batch = make(images[0, 0]), make(images[:2])
    if batch.layout != torch.sparse_csr:  # a CSR tensor is 2-D: no image of it
        one = make(images[0])
    calls = [lambda: ri.explain(one), lambda: ri.explain_batch(batch)]
    calls += [lambda: ri.logits_and_projections(batch), lambda: ri.features(batch)]
    for call in calls:
        with pytest.raises(ValueError, match=message):
            call()
