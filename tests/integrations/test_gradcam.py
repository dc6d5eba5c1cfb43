"""RepresentativeCAM: RI behind pytorch-grad-cam's CAM interface, driven through the library's
own functions (show_cam_on_image, its metrics) and a loop written for GradCAM."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.metrics.cam_mult_image import CamMultImageConfidenceChange
from pytorch_grad_cam.metrics.road import ROADMostRelevantFirst
from pytorch_grad_cam.utils.image import show_cam_on_image
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

from repinterp import RepresentativeInterpreter
from repinterp.data.shape_drawing import draw_shapes
from repinterp.integrations import RepresentativeCAM

from ..networks import balance, normalize, tiny_cnn

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup():
    """A tiny CNN (layer "3": 8 x 16 x 16 maps) on 16 px shapes: 60 reference images, 6
    inputs in [0, 1] pixels, and RI fitted on the reference images."""
    drawn = draw_shapes(66, seed=0, size=16)
    reference, pixels = normalize(drawn.images[:60]), drawn.images[60:]
    model = balance(tiny_cnn().eval(), reference)
    ri = RepresentativeInterpreter(model, "3", n_boundaries=10, progress=False).fit(reference)
    return model, reference, pixels, ri


def _own_maps(ri: RepresentativeInterpreter, inputs: torch.Tensor) -> np.ndarray:
    """Each input's map as the interpreter draws it: explain, then heatmap of the input."""
    maps = [e.heatmap(inputs[i : i + 1])[0] for i, e in enumerate(ri.explain_batch(inputs))]
    return torch.stack(maps).numpy()


def test_a_gradcam_loop_takes_ri_unchanged(setup) -> None:
    model, _, pixels, ri = setup
    inputs = normalize(pixels)
    targets = [ClassifierOutputTarget(int(c)) for c in model(inputs).argmax(1)]
    scores = {}
    for make in (
        lambda: GradCAM(model=model, target_layers=[model[3]]),
        lambda: RepresentativeCAM(model=model, target_layers=[model[3]], reference=ri),
    ):
        with make() as cam:
            maps = cam(input_tensor=inputs, targets=targets)
            assert isinstance(maps, np.ndarray) and maps.dtype == np.float32
            assert maps.shape == (6, 16, 16) and maps.min() >= 0 and maps.max() <= 1
            overlay = show_cam_on_image(pixels[0].permute(1, 2, 0).numpy(), maps[0], use_rgb=True)
            assert overlay.shape == (16, 16, 3) and overlay.dtype == np.uint8
            change = CamMultImageConfidenceChange()(inputs, maps, targets, model)
            road = ROADMostRelevantFirst(percentile=50)(inputs, maps, targets, model)
            assert change.shape == road.shape == (6,)
            assert np.isfinite(change).all() and np.isfinite(road).all()
            scores[type(cam).__name__] = change
    np.testing.assert_allclose(maps, _own_maps(ri, inputs), atol=1e-5)
    assert not np.allclose(scores["GradCAM"], scores["RepresentativeCAM"])


def test_fits_on_a_reference_set_and_takes_any_batch_size(setup) -> None:
    model, reference, pixels, ri = setup
    inputs = normalize(pixels)
    cam = RepresentativeCAM(
        model, [model[3]], reference, n_boundaries=10, batch_size=4, progress=False
    )
    assert cam.interpreter is not ri and cam.interpreter.config.batch_size == 4
    maps = cam(inputs)  # 6 inputs in batches of 4
    np.testing.assert_allclose(maps, _own_maps(ri, inputs), atol=1e-5)
    np.testing.assert_allclose(cam(inputs[2:3])[0], maps[2], atol=1e-5)
    assert cam(inputs[:0]).shape == (0, 16, 16)


def test_targets_of_other_classes_get_the_contrastive_map_or_are_refused(setup) -> None:
    model, _, pixels, ri = setup
    inputs = normalize(pixels)
    predicted = model(inputs).argmax(1).tolist()
    cam = RepresentativeCAM(model, [model[3]], ri)
    own = cam(inputs, [ClassifierOutputTarget(c) for c in predicted])
    np.testing.assert_array_equal(own, cam(inputs))
    others = [(c + 1) % 4 for c in predicted]
    other = [ClassifierOutputTarget(c) for c in others]
    contrastive = ri.contrastive_heatmap(inputs, others).numpy()
    np.testing.assert_array_equal(cam(inputs, other), contrastive)
    assert not np.allclose(contrastive, own, atol=1e-3)
    mixed = [ClassifierOutputTarget(c) for c in predicted[:3] + others[3:]]
    np.testing.assert_array_equal(cam(inputs, mixed), np.concatenate([own[:3], contrastive[3:]]))
    refusing = RepresentativeCAM(model, [model[3]], ri, other_targets="refuse")
    message = rf"image 0 is predicted class {predicted[0]}, its target is class .*6 of 6 images"
    with pytest.raises(ValueError, match=message):
        refusing(inputs, other)
    anyway = RepresentativeCAM(model, [model[3]], ri, other_targets="predicted")
    np.testing.assert_array_equal(anyway(inputs, other), own)
    with pytest.raises(ValueError, match="name classes, as ClassifierOutputTarget"):
        cam(inputs, [lambda out: out[0]] * 6)
    # a class as a 0-d tensor or array, as grad-cam loops over argmax() pass it
    as_tensors = [ClassifierOutputTarget(c) for c in model(inputs).argmax(1)]
    np.testing.assert_array_equal(cam(inputs, as_tensors), own)
    as_arrays = [ClassifierOutputTarget(np.array(c)) for c in predicted]
    np.testing.assert_array_equal(cam(inputs, as_arrays), own)
    for category in (torch.tensor(1.0), torch.tensor([1, 2]), torch.tensor(True)):
        with pytest.raises(ValueError, match="name classes, as ClassifierOutputTarget"):
            cam(inputs, [ClassifierOutputTarget(category)] * 6)
    with pytest.raises(ValueError, match="2 targets for 6 images"):
        cam(inputs, other[:2])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda cam, x: cam(x, aug_smooth=True), "aug_smooth=True is not supported"),
        (lambda cam, x: cam(x, eigen_smooth=True), "eigen_smooth=True is not supported"),
    ],
)
def test_smoothing_is_refused(setup, call, message) -> None:
    model, _, pixels, ri = setup
    with pytest.raises(ValueError, match=message):
        call(RepresentativeCAM(model, [model[3]], ri), normalize(pixels))


def test_what_does_not_fit_is_refused(setup) -> None:
    model, reference, _, ri = setup
    with pytest.raises(ValueError, match="reshape_transform is not supported"):
        RepresentativeCAM(model, [model[3]], ri, reshape_transform=lambda t: t)
    with pytest.raises(ValueError, match="a list of 2 layers"):
        RepresentativeCAM(model, [model[1], model[3]], reference)
    with pytest.raises(ValueError, match="split at '3', not at the target layer '1'"):
        RepresentativeCAM(model, [model[1]], ri)
    with pytest.raises(ValueError, match="n_boundaries: settings of a fit"):
        RepresentativeCAM(model, [model[3]], ri, n_boundaries=5)
    other = balance(tiny_cnn(seed=1).eval(), reference)
    with pytest.raises(ValueError, match="an interpreter of another model object"):
        RepresentativeCAM(other, [other[3]], ri)
    with pytest.raises(ValueError, match="must be one of refuse, predicted, contrast"):
        RepresentativeCAM(model, [model[3]], ri, other_targets="any")


def test_an_empty_polytope_is_a_map_of_zeros_with_a_warning(setup) -> None:
    """Reference images of class 0 alone: an input predicted class 0 has no boundary (D(x) is
    empty), the others do."""
    model, reference, pixels, _ = setup
    inputs = normalize(pixels)
    zero = model(inputs).argmax(1) == 0
    assert 0 < int(zero.sum()) < len(inputs)
    one_class = reference[model(reference).argmax(1) == 0]
    cam = RepresentativeCAM(model, [model[3]], one_class, n_boundaries=3, progress=False)
    message = rf"^{int(zero.sum())} of 6 images are drawn as maps of zeros: every reference image"
    with pytest.warns(UserWarning, match=message) as caught:
        maps = cam(inputs)
    assert caught[0].filename == __file__
    assert maps.reshape(6, -1).any(1).tolist() == (~zero).tolist()
