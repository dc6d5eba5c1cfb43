"""Evaluation protocols (paper §6.4, Appendices C, D, E, and the measurable case study)."""

import json
import math
from dataclasses import replace

import pytest
import torch
from PIL import Image

from repinterp.data import shapes
from repinterp.evaluation import average_drop_increase_from_mask
from repinterp.evaluation.methods import METHODS, Method
from repinterp.evaluation.metrics import energy_in_mask, purity_at_k
from repinterp.evaluation.protocols import Options, drop_increase, evaluate
from repinterp.evaluation.run import Run, self_first
from repinterp.evaluation.setup import WEIGHTS_DIR, Setup, load_setup
from repinterp.zoo import build_model, default_target_layer, save_weights

from .test_cli import _assert_one_line_error, run

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = Options(
    runs=1, n_regions=10, n_inputs=4, ks=(1, 3), q_values=(1, 5), purity_ks=(2, 4), progress=False
)


@pytest.fixture(scope="module")
def mnist() -> Setup:
    """The bundled MNIST CNN on 300 reference and 60 unseen digits."""
    return load_setup("mnist5k", n_reference=300, n_unseen=60)


@pytest.fixture(scope="module")
def shapes_setup(mnist: Setup) -> Setup:
    """The bundled shapes CNN on 200 reference and 40 unseen shapes (with concepts and masks)."""
    return load_setup("shapes", n_reference=200, n_unseen=40)


def _in_range(value: float) -> bool:
    return math.isfinite(value) and 0 <= value <= 100


def test_unseen_reports_every_method_in_the_documented_shape(mnist: Setup) -> None:
    results = evaluate(mnist, "unseen", replace(SMALL, runs=2))
    assert (results["dataset"], results["protocol"], results["runs"]) == ("mnist5k", "unseen", 2)
    assert results["seeds"] == [0, 1] and results["n_regions"] == 10
    assert list(results["methods"]) == ["RI", "Grad-CAM", "Grad-CAM++", "Score-CAM"]
    for block in results["methods"].values():
        assert set(block) >= {"mAD", "mAD_std", "mAI", "mAI_std", "time_s"}
        assert all(_in_range(block[key]) for key in ("mAD", "mAI"))
        assert block["mAD_std"] >= 0 and block["time_s"] > 0


def test_coverage_matches_a_brute_force_recomputation(mnist: Setup) -> None:
    results = evaluate(mnist, "coverage", SMALL)
    for part in ("reference", "unseen"):
        block = results[part]
        assert all(_in_range(block[key]) for key in ("ACU-GT", "ACU-MD", "CVR", "model_acc"))
    # Brute force on the same run: each region's own `covers`, largest representativeness wins.
    regions = Run(mnist, 0, SMALL).regions
    inputs = mnist.inputs("reference")
    covers = torch.stack([region.covers(inputs).cpu() for region in regions.regions], 1)
    size = torch.tensor([region.representativeness for region in regions.regions])
    assignment = regions.assign(inputs)
    covered = covers.any(1)
    assert torch.equal(assignment.covered.cpu(), covered)
    best = torch.where(covers, size, -1).max(1).indices  # first maximum: lowest index
    assert torch.equal(assignment.region.cpu()[covered], best[covered])
    predicted = regions.classes.cpu()[best]
    model = mnist.predictions["reference"]
    labels = mnist.labels("reference")
    expected = {
        "CVR": 100 * covered.double().mean(),
        "ACU-MD": 100 * (predicted == model)[covered].double().mean(),
        "ACU-GT": 100 * (predicted == labels)[covered].double().mean(),
        "model_acc": 100 * (model == labels).double().mean(),
    }
    for key, value in expected.items():
        assert results["reference"][key] == pytest.approx(float(value)), key
    assert evaluate(mnist, "coverage", SMALL)["reference"] == results["reference"]  # same seed


@pytest.mark.parametrize("method", ["RI", "Grad-CAM", "Score-CAM"])
def test_reference_at_k1_evaluates_the_input_alone(mnist: Setup, method: str) -> None:
    options = replace(SMALL, methods=(method,), n_inputs=3)
    results = evaluate(mnist, "reference", options)
    block = results["methods"][method]
    assert len(block["mAD"]) == len(options.ks) and block["similar"][0] == 1
    assert all(_in_range(v) for v in block["mAD"] + block["mAI"])
    run_ = Run(mnist, 0, options)
    drops, increases = [], []
    for index in run_.inputs.tolist():
        similar, explanations = METHODS[method].reference(run_, index, 1)
        assert similar.tolist() == [index]
        scores = drop_increase(mnist, mnist.pixels("reference", [index]), explanations)
        drops.append(scores.ad)
        increases.append(scores.ai)
    assert block["mAD"][0] == pytest.approx(sum(drops) / len(drops))
    assert block["mAI"][0] == pytest.approx(sum(increases) / len(increases))


class _Corner(Method):
    """Keeps the top-left quarter of every image, as kept pixels (the path ACE takes)."""

    name = "corner"

    @staticmethod
    def _keep(images01: torch.Tensor) -> torch.Tensor:
        keep = torch.zeros(images01.shape[0], *images01.shape[2:], dtype=torch.bool)
        keep[:, : images01.shape[2] // 2, : images01.shape[3] // 2] = True
        return keep

    def unseen(self, run: Run, images01: torch.Tensor) -> torch.Tensor:
        return self._keep(images01)

    def reference(self, run: Run, index: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        similar = run.neighbours(k)[run.inputs.tolist().index(index)]
        return similar, self._keep(run.setup.pixels("reference", similar))


def test_methods_of_ones_own_may_give_kept_pixels(mnist: Setup) -> None:
    corner = _Corner()
    assert "corner" not in METHODS  # given to the protocols, not registered
    with pytest.raises(TypeError):
        METHODS["corner"] = corner  # the built-in methods are read-only
    results = evaluate(mnist, "unseen", replace(SMALL, methods=(corner,)))
    assert results["options"]["methods"] == ["corner"]
    images01 = mnist.unseen_pixels
    expected = average_drop_increase_from_mask(
        mnist.model, images01, _Corner._keep(images01), mnist.normalize
    )
    assert results["methods"]["corner"]["mAD"] == pytest.approx(expected.ad)
    assert results["methods"]["corner"]["mAI"] == pytest.approx(expected.ai)
    results = evaluate(mnist, "reference", replace(SMALL, methods=(corner,)))
    assert results["methods"]["corner"]["similar"] == [1.0, 3.0]


def test_q_sweep_reports_one_value_per_q(mnist: Setup) -> None:
    results = evaluate(mnist, "q-sweep", SMALL)
    for part in ("reference", "unseen"):
        for key in ("ACU-GT", "ACU-MD", "CVR"):
            values = results[part][key]
            assert len(values) == 2 and all(_in_range(v) for v in values)


def test_similar_on_shapes(shapes_setup: Setup) -> None:
    results = evaluate(shapes_setup, "similar", replace(SMALL, methods=("RI", "Grad-CAM")))
    assert len(results["rankings"]) == 4
    for block in results["rankings"].values():
        assert all(_in_range(block[f"purity@{k}"]) for k in SMALL.purity_ks)
    for block in results["methods"].values():
        assert _in_range(block["energy"])
    assert 0 < results["mask_area"] < 100


def test_similar_needs_concepts(mnist: Setup) -> None:
    with pytest.raises(ValueError, match="sub-concepts"):
        evaluate(mnist, "similar", SMALL)


def test_similar_by_feature_distance(mnist: Setup) -> None:
    ri = Run(mnist, 0, SMALL).interpreter
    explanation = ri.explain_reference([7])[0]
    features = ri.reference_features
    covered = explanation.covered.cpu()
    euclidean = (features[covered] - features[7]).norm(dim=1)
    cosine = torch.nn.functional.cosine_similarity(features[covered], features[7:8])
    for metric, key in (("euclidean", euclidean), ("cosine", -cosine)):
        ranked = explanation.similar(metric=metric).cpu()
        assert ranked[0] == 7 and sorted(ranked.tolist()) == covered.tolist()
        along = key[torch.searchsorted(covered, ranked)]  # covered is ascending
        assert bool((along.diff() >= -1e-5).all())  # ascending distance, up to float rounding
    # explaining the same image from pixels keeps its features and ranks alike
    again = ri.explain(mnist.inputs("reference", [7])[0])
    assert torch.allclose(again.features, features[7], atol=1e-5)
    assert torch.equal(
        again.similar(5, metric="euclidean"), explanation.similar(5, metric="euclidean")
    )
    with pytest.raises(ValueError, match="unknown metric"):
        explanation.similar(metric="manhattan")
    plain = Run(mnist, 0, SMALL).fit(10)  # fitted without the feature maps
    with pytest.raises(ValueError, match="keep_features"):
        plain.explain_reference([7])[0].similar(metric="cosine")
    assert plain.explain_reference([7])[0].similar(3).numel() == 3


def test_purity_at_k_by_hand() -> None:
    ranked = torch.tensor([3, 1, 3, 3, 0])
    assert purity_at_k(ranked, 3, 1) == 1.0
    assert purity_at_k(ranked, 3, 2) == 0.5
    assert purity_at_k(ranked, 3, 4) == 0.75
    assert purity_at_k(ranked, 3, 10) == 0.6  # fewer than k ranked: all of them
    assert math.isnan(purity_at_k(ranked[:0], 3, 5))


def test_energy_pointing_game_by_hand() -> None:
    heat = torch.zeros(3, 2, 3)
    heat[0] = torch.tensor([[1.0, 3.0, 0.0], [0.0, 0.0, 4.0]])
    heat[1, 0, 0] = 2.0
    masks = torch.zeros(3, 2, 3, dtype=torch.bool)
    masks[0, 0, :2] = True
    masks[1, 1, 1] = True
    energy = energy_in_mask(heat, masks)
    assert energy[0] == pytest.approx(0.5) and energy[1] == 0 and math.isnan(energy[2])
    kept = torch.zeros(1, 2, 3, dtype=torch.bool)
    kept[0, 0] = True
    assert energy_in_mask(kept, masks[:1]).item() == pytest.approx(2 / 3)


def test_self_first() -> None:
    assert self_first(torch.tensor([4, 2, 7]), 7).tolist() == [7, 4, 2]
    assert self_first(torch.tensor([4, 2]), 9, 2).tolist() == [9, 4]


def test_cli_evaluate_writes_results(tmp_path, capsys) -> None:
    out = tmp_path / "eval"
    argv = ["evaluate", "--dataset", "mnist5k", "--protocol", "coverage", "--quick"]
    code, stdout, _ = run([*argv, "--runs", "1", "--out", str(out), "--quiet"], capsys)
    assert code == 0 and str(out) in stdout
    results = json.loads((out / "results.json").read_text())
    assert (results["protocol"], results["runs"], results["setup"]["n_reference"]) == (
        "coverage",
        1,
        600,
    )
    assert "--quick" in results["command"]
    for part in ("reference", "unseen"):
        assert set(results[part]) >= {"ACU-GT", "ACU-MD", "CVR", "CVR_std", "model_acc"}
        assert all(_in_range(results[part][k]) for k in ("ACU-GT", "ACU-MD", "CVR"))
    text = (out / "results.md").read_text()
    assert "| Set | ACU-GT of RI | ACU-GT of F |" in text and "![mnist5k-coverage.png]" in text
    assert f"{results['reference']['CVR']:.2f}" in text
    png = (out / "mnist5k-coverage.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_cli_evaluate_bad_options(tmp_path, capsys) -> None:
    base = ["evaluate", "--out", str(tmp_path), "--quiet"]
    cases = [
        (["--dataset", "mnist5k", "--protocol", "table9"], "unknown protocol"),
        (["--dataset", "mnist5k", "--protocol", "unseen", "--runs", "0"], "runs must be >= 1"),
        (["--dataset", "mnist5k", "--protocol", "unseen", "--methods", "LIME"], "unknown method"),
        (["--dataset", "mnist5k", "--protocol", "similar", "--quick"], "sub-concepts"),
        (["--dataset", f"imagefolder:{tmp_path}", "--protocol", "unseen"], "--model"),
        (["--dataset", "mnist5k", "--protocol", "unseen", "--weights", "w.pt"], "--model"),
        (["--dataset", "cifar", "--protocol", "unseen"], "unknown data set"),
    ]
    for argv, pattern in cases:
        code, _, err = run([*base, *argv], capsys)
        _assert_one_line_error(code, err, pattern)


def test_other_models_load_from_their_weights(tmp_path) -> None:
    weights = tmp_path / "digits.safetensors"
    save_weights(build_model("digits_cnn", 10, 1), weights)
    setup = load_setup("digits", "digits_cnn", weights, n_reference=50, n_unseen=10)
    assert setup.target_layer == default_target_layer("digits_cnn")
    assert (len(setup.reference), len(setup.unseen)) == (50, 10)
    with pytest.raises(ValueError, match="no layer"):
        load_setup("digits", "digits_cnn", weights, layer="features.99")
    with pytest.raises(ValueError, match="needs --weights"):
        load_setup("digits", "mnist_cnn")  # digits_cnn has bundled weights, mnist_cnn not here


def test_image_folders_run_with_a_named_model(tmp_path) -> None:
    data = shapes(24, seed=5, size=32)
    for i, (image, label) in enumerate(zip(data.images, data.labels, strict=True)):
        folder = tmp_path / data.class_names[int(label)]
        folder.mkdir(exist_ok=True)
        pixels = (image.permute(1, 2, 0) * 255).round().byte().numpy()
        Image.fromarray(pixels).save(folder / f"{i}.png")
    weights = WEIGHTS_DIR / "shapes_cnn.safetensors"
    setup = load_setup(f"imagefolder:{tmp_path}", "shapes_cnn", weights, n_unseen=None)
    assert (len(setup.reference), len(setup.unseen)) == (19, 5)
    assert setup.pixels("unseen").shape == (5, 3, 224, 224)
    results = evaluate(setup, "coverage", replace(SMALL, n_regions=3, n_boundaries=10))
    assert all(_in_range(results[part]["CVR"]) for part in ("reference", "unseen"))
