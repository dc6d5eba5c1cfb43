"""QuantusExplainer: Quantus's metrics evaluate RI next to Grad-CAM, a faithfulness metric
(FaithfulnessCorrelation) and a randomisation one (MPRT, whose randomised models RI fits
anew)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

from repinterp import RepresentativeInterpreter
from repinterp.data.shape_drawing import draw_shapes
from repinterp.integrations import QuantusExplainer

from ..networks import balance, normalize, tiny_cnn

quantus = pytest.importorskip("quantus")

pytestmark = pytest.mark.usefixtures("one_thread")
QUIET = {"disable_warnings": True, "display_progressbar": False}


@pytest.fixture(scope="module")
def setup():
    """A tiny CNN (layer "3") on 16 px shapes, RI fitted on 60 of them, and 8 others as
    Quantus takes them: x (N x 3 x 16 x 16 float NumPy) and y (the model's predictions)."""
    drawn = draw_shapes(68, seed=0, size=16)
    reference, inputs = normalize(drawn.images[:60]), normalize(drawn.images[60:])
    model = balance(tiny_cnn().eval(), reference)
    ri = RepresentativeInterpreter(model, "3", n_boundaries=10, progress=False).fit(reference)
    with torch.no_grad():
        y = model(inputs).argmax(1).numpy()
    return model, ri, inputs.numpy(), y


def grad_cam(model, inputs, targets, **kwargs) -> np.ndarray:
    """Grad-CAM (pytorch-grad-cam) as a Quantus explain_func, at the same layer of ``model``."""
    with GradCAM(model, [model[3]]) as cam:
        targets = [ClassifierOutputTarget(int(t)) for t in targets]
        return cam(torch.from_numpy(inputs), targets)[:, None]


def test_explain_func_gives_each_inputs_own_map(setup) -> None:
    model, ri, x, y = setup
    maps = QuantusExplainer(ri)(model=model, inputs=x, targets=y, device="cpu")
    assert maps.shape == (8, 1, 16, 16) and maps.dtype == np.float32
    own = [e.heatmap(torch.from_numpy(x[i : i + 1]))[0] for i, e in enumerate(ri.explain_batch(x))]
    np.testing.assert_allclose(maps[:, 0], torch.stack(own).numpy(), atol=1e-5)


def test_faithfulness_and_randomisation_of_ri_next_to_grad_cam(setup) -> None:
    model, ri, x, y = setup
    explainers = {
        "RI": QuantusExplainer(ri, other_targets="predicted"),
        "Grad-CAM": grad_cam,
    }
    for name, explain in explainers.items():
        faithfulness = quantus.FaithfulnessCorrelation(
            nr_runs=10, subset_size=32, return_aggregate=False, **QUIET
        )(model=model, x_batch=x, y_batch=y, explain_func=explain, device="cpu")
        assert len(faithfulness) == 8 and np.isfinite(faithfulness).all(), name
        mprt = quantus.MPRT(**QUIET)(
            model=model, x_batch=x, y_batch=y, explain_func=explain, device="cpu"
        )
        assert list(mprt) == ["original", "6", "2", "0"], name  # top-down: fc, conv2, conv1
        np.testing.assert_allclose(mprt["original"], 1, atol=1e-6)  # the same maps again
        # a randomised model's maps are its own: RI fits an index for each one
        assert all(np.mean(mprt[layer]) < 0.9 for layer in ("6", "2", "0")), (name, mprt)
    assert explainers["RI"].interpreter_of(model) is ri


def test_labels_other_than_the_predictions_are_refused_by_default(setup) -> None:
    model, ri, x, y = setup
    labels = (y + 1) % 4
    message = r"image 0 is predicted class \d, its target is class \d \(8 of 8 images differ\)"
    with pytest.raises(ValueError, match=message):
        quantus.FaithfulnessCorrelation(nr_runs=2, subset_size=32, **QUIET)(
            model=model, x_batch=x, y_batch=labels, explain_func=QuantusExplainer(ri)
        )
    explain = QuantusExplainer(ri, other_targets="predicted")
    np.testing.assert_array_equal(explain(model, x, labels), explain(model, x, y))
    with pytest.raises(ValueError, match="unknown explain_func_kwargs method"):
        explain(model, x, y, method="GradCAM")


def test_another_model_needs_the_reference_set(setup, tmp_path) -> None:
    model, ri, x, y = setup
    ri.save(tmp_path / "index")
    loaded = RepresentativeInterpreter.load(tmp_path / "index", model, progress=False)
    other = balance(tiny_cnn(seed=1).eval(), torch.from_numpy(x))
    explain = QuantusExplainer(loaded)
    assert explain(model, x, y).shape == (8, 1, 16, 16)  # its own model: no reference needed
    with pytest.raises(ValueError, match=r"set interpreter\.reference to the set it was fitted on"):
        explain(other, x, y)
    loaded.reference = ri.reference
    refitted = explain.interpreter_of(other)
    assert refitted.model is other and refitted.config == ri.config
    assert explain.interpreter_of(other) is refitted  # kept for the next calls
