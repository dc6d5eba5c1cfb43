"""The CAM controls of polytope-averaged Score-CAM (``+class``, ``+cluster``) and the draw of
``RI+score``'s weight images, on a tiny model: each against a hand computation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from repinterp.data import ImageSet, Normalization
from repinterp.evaluation.baselines import cam_weights, reused_cam
from repinterp.evaluation.methods import METHODS, CAMMethod
from repinterp.evaluation.options import Options
from repinterp.evaluation.run import Run
from repinterp.evaluation.setup import Setup
from repinterp.maps.polytope_weights import covered_sample, draw_indices, with_score_weights

from ..networks import balance, tiny_mlp_cnn

pytestmark = pytest.mark.usefixtures("one_thread")

N_REFERENCE = 40
# score_images beyond every class's size: +class averages over all of a class's images
ALL = Options(runs=1, n_boundaries=8, n_regions=4, n_inputs=3, progress=False, score_images=99)


@pytest.fixture(scope="module")
def tiny() -> Setup:
    """A balanced 3-class tiny CNN on 40 reference and 12 unseen random 1 x 12 x 12 images."""
    pixels = torch.rand(N_REFERENCE + 12, 1, 12, 12, generator=torch.Generator().manual_seed(0))
    normalization = Normalization((0.5,), (0.25,))
    model = balance(tiny_mlp_cnn(classes=3), normalization(pixels))
    with torch.no_grad():
        labels = model(normalization(pixels)).argmax(1)
    parts = [
        ImageSet(pixels[rows], labels[rows], ["a", "b", "c"], normalization)
        for rows in (slice(0, N_REFERENCE), slice(N_REFERENCE, None))
    ]
    return Setup("tiny", model, "relu2", *parts, torch.device("cpu"), batch_size=16)


def _mean_weights(setup: Setup, method: str, rows: torch.Tensor) -> torch.Tensor:
    inputs = setup.inputs("reference", rows)
    return cam_weights(method, setup.model, setup.target_layer, inputs).mean(0)


def test_every_cam_has_a_class_control_beside_its_cluster_control() -> None:
    for name in ("Grad-CAM", "Grad-CAM++", "Score-CAM"):
        assert METHODS[f"{name}+class"].name == f"{name}+class"
        assert METHODS[f"{name}+cluster"].name == f"{name}+cluster"
    with pytest.raises(ValueError, match="unknown average 'polytope'; choose one of cluster"):
        CAMMethod("Grad-CAM", "polytope")


@pytest.mark.parametrize("name", ["Grad-CAM", "Score-CAM"])
def test_class_control_reuses_the_mean_weights_of_each_predicted_class(
    tiny: Setup, name: str
) -> None:
    run = Run(tiny, 0, ALL)
    predicted = tiny.predictions["unseen"]
    assert len(predicted.unique()) > 1  # several classes' weights are reused
    maps = METHODS[f"{name}+class"].unseen(run, tiny.unseen_pixels)
    by_class = {
        c: _mean_weights(tiny, name, (tiny.predictions["reference"] == c).nonzero().flatten())
        for c in predicted.unique().tolist()
    }
    weights = torch.stack([by_class[c] for c in predicted.tolist()])
    expected = reused_cam(name, tiny.model, tiny.target_layer, tiny.inputs("unseen"), weights)
    torch.testing.assert_close(maps, expected)
    assert torch.equal(METHODS[f"{name}+class"].groups(run), predicted)  # one per class


def test_class_control_in_reference_draws_the_input_and_its_class_outside_the_scored(
    tiny: Setup,
) -> None:
    run = Run(tiny, 0, ALL)
    index = int(run.inputs[0])
    similar, maps = METHODS["Grad-CAM+class"].reference(run, index, 5)
    assert similar.tolist() == run.neighbours(5)[0].tolist()
    same = (tiny.predictions["reference"] == tiny.predictions["reference"][index]).nonzero()
    rows = [i for i in same.flatten().tolist() if i == index or i not in similar.tolist()]
    assert index in rows and len(rows) < len(same)  # some of the class is scored, left out
    weights = _mean_weights(tiny, "Grad-CAM", torch.tensor(rows))
    inputs = tiny.inputs("reference", similar)
    expected = reused_cam("Grad-CAM", tiny.model, tiny.target_layer, inputs, weights)
    torch.testing.assert_close(maps, expected)


def test_a_class_no_reference_image_is_predicted_is_refused(tiny: Setup) -> None:
    missing = int(tiny.predictions["unseen"][0])
    others = (tiny.predictions["reference"] != missing).nonzero().flatten()
    without = replace(tiny, reference=tiny.reference.subset(others))
    run = Run(without, 0, ALL)
    with pytest.raises(
        ValueError, match=rf"^Grad-CAM\+class: no reference image is predicted class {missing}$"
    ):
        METHODS["Grad-CAM+class"].unseen(run, without.unseen_pixels)


def test_draw_indices_keeps_the_included_and_never_the_excluded() -> None:
    members = torch.arange(10, 30)
    drawn = draw_indices(members, 6, np.random.default_rng(3), include=25, exclude=members[:8])
    assert len(drawn) == 6 and 25 in drawn.tolist()
    assert bool((drawn.diff() > 0).all()) and not set(drawn.tolist()) & set(range(10, 18))
    assert set(drawn.tolist()) <= set(members.tolist())
    again = draw_indices(members, 6, np.random.default_rng(3), include=25, exclude=members[:8])
    assert torch.equal(drawn, again)  # seeded
    few = draw_indices(members, 50, np.random.default_rng(0), exclude=members[:15])
    assert few.tolist() == list(range(25, 30))  # fewer than n left: all of them
    plain = draw_indices(members, 4, np.random.default_rng(1))
    chosen = np.random.default_rng(1).permutation(20)[:4]
    assert plain.tolist() == sorted(members[torch.from_numpy(chosen)].tolist())
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        draw_indices(members, 0, np.random.default_rng(0))


def test_ri_score_draws_the_input_and_covered_images_outside_the_scored(tiny: Setup) -> None:
    options = Options(runs=1, n_boundaries=8, n_regions=4, n_inputs=3, progress=False)
    run = Run(tiny, 0, options)
    index = int(run.inputs[0])
    explanation = run.interpreter.explain_reference([index])[0]
    similar, maps = METHODS["RI+score"].reference(run, index, 4)
    assert len(similar) == 4
    sample = covered_sample(explanation, 16, run.seed, include=index, exclude=similar)
    outside = set(explanation.covered.tolist()) - set(similar.tolist())
    assert index in sample.tolist() and set(sample.tolist()) - {index} <= outside
    assert len(sample) == min(16, len(outside) + 1)
    weighted = with_score_weights(explanation, tiny.inputs("reference", sample))
    torch.testing.assert_close(maps, weighted.heatmap(tiny.inputs("reference", similar)))


@pytest.mark.parametrize("control", ["Grad-CAM+cluster", "Grad-CAM+class"])
def test_reference_controls_weigh_images_outside_the_scored_set(
    tiny: Setup, control: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both readings of ``reference``: the images a control's weights are averaged over (the
    input aside, which is explained and so scored too) are never images it is scored on."""
    options = replace(ALL, score_images=6)
    run = Run(tiny, 0, options)
    weighed: list[torch.Tensor] = []
    mean_weights = CAMMethod._mean_weights

    def record(self, run_, groups):
        weighed.extend(groups)
        return mean_weights(self, run_, groups)

    monkeypatch.setattr(CAMMethod, "_mean_weights", record)
    method = METHODS[control]
    for index in run.inputs.tolist():
        own = method.reference(run, index, 5)[0]  # its own S, the K nearest images
        common = torch.tensor([index, *[i for i in range(0, N_REFERENCE, 3) if i != index][:8]])
        method.reuse(run, index, common)  # a common S, the input first
        for scored in (common, own):
            weights = set(weighed.pop().tolist())
            assert index in weights
            assert not (weights - {index}) & set(scored.tolist()), control
            assert len(weights) == options.score_images or control.endswith("+class")
        assert not weighed
