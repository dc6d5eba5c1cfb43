"""Evaluation protocols (paper §6.4, Appendices C, D, E, and the measurable case study)."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

from repinterp.core.polytope_weights import covered_sample, with_score_weights
from repinterp.data.datasets import ImageFormat, shapes
from repinterp.evaluation import average_drop_increase_from_mask
from repinterp.evaluation.baselines import cam_weights, reused_cam
from repinterp.evaluation.groupings import ami, polytope_groups, region_groups
from repinterp.evaluation.methods import METHODS, Method
from repinterp.evaluation.metrics import energy_in_mask, purity_at_k
from repinterp.evaluation.options import Options
from repinterp.evaluation.perturbation import deletion_insertion, road
from repinterp.evaluation.protocols import evaluate, overview_markdown, results_markdown
from repinterp.evaluation.protocols import reference as reference_protocol
from repinterp.evaluation.run import Run, self_first
from repinterp.evaluation.scoring import drop_increase, score
from repinterp.evaluation.setup import WEIGHTS_DIR, Setup, load_setup, stratified
from repinterp.models.zoo import build_model, default_target_layer, save_weights

from ..commandline import assert_one_line_error, run

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.slow,
]  # runs the evaluation protocols

SMALL = Options(
    runs=1,
    n_regions=10,
    n_inputs=4,
    ks=(1, 3),
    q_values=(1, 5),
    purity_ks=(2, 4),
    progress=False,
    split="fixed",
    metrics=("AD",),
    curve_images=6,
    curve_inputs=2,
    curve_k=2,
    score_images=3,
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
        assert set(block) >= {"mAD", "mAD_std", "mAI", "mAI_interp", "mAD_interp", "time_s"}
        assert all(_in_range(block[key]) for key in ("mAD", "mAI", "mAD_interp", "mAI_interp"))
        assert block["mAD_std"] >= 0 and block["time_s"] > 0
    assert set(results["methods"]["RI"]) >= {"CVR", "ACU-MD"}  # RI has regions, the CAMs none
    assert "CVR" not in results["methods"]["Grad-CAM"]
    assert 0 < results["model_acc"]["unseen"] <= 100


def test_unseen_pools_and_averages_per_interpretation_as_a_brute_force(mnist: Setup) -> None:
    options = replace(SMALL, methods=("RI", "Grad-CAM"), metrics=("AD", "deletion"))
    results = evaluate(mnist, "unseen", options)
    run_ = Run(mnist, 0, options)
    images01 = mnist.unseen_pixels
    for name, groups in (
        ("RI", run_.regions.assign(mnist.inputs("unseen")).region.cpu()),
        ("Grad-CAM", run_.unseen_centre),
    ):
        maps = METHODS[name].unseen(run_, images01)
        scores = drop_increase(mnist, images01, maps)
        block = results["methods"][name]
        assert block["mAD"] == pytest.approx(scores.ad) and block["mAI"] == pytest.approx(scores.ai)
        per_v = [100 * float(scores.drop[groups == v].double().mean()) for v in groups.unique()]
        assert block["mAD_interp"] == pytest.approx(sum(per_v) / len(per_v))
        rows = run_.curve_rows
        assert len(rows) == 6 and bool((rows.diff() > 0).all())
        _, auc = deletion_insertion(mnist.model, images01[rows], maps[rows], mnist.normalize)
        assert block["deletion"] == pytest.approx(float(auc.double().mean()), abs=1e-4)
        assert "ROAD" not in block and "insertion" not in block


def test_road_scores_the_same_images_for_every_method(mnist: Setup) -> None:
    options = replace(SMALL, methods=("Grad-CAM",), metrics=("AD", "ROAD"), curve_images=3)
    block = evaluate(mnist, "unseen", options)["methods"]["Grad-CAM"]
    run_ = Run(mnist, 0, options)
    rows = run_.curve_rows
    maps = METHODS["Grad-CAM"].unseen(run_, mnist.unseen_pixels)[rows]
    expected = road(mnist.model, mnist.unseen_pixels[rows], maps, mnist.normalize, seed=0)
    assert block["ROAD"] == pytest.approx(float(expected.combined.double().mean()), abs=1e-4)
    assert block["ROAD-MoRF"] == pytest.approx(float(expected.morf.double().mean()), abs=1e-4)
    assert block["ROAD-LeRF"] == pytest.approx(float(expected.lerf.double().mean()), abs=1e-4)


def test_ri_variants_solve_weigh_and_sample_their_own_way(mnist: Setup) -> None:
    names = ("RI", "RI+exact", "RI+pairs", "RI+score")
    options = replace(SMALL, methods=names, time_limit=2.0)
    results = evaluate(mnist, "unseen", options)
    assert list(results["methods"]) == list(names)
    run_ = Run(mnist, 0, options)
    paper = METHODS["RI"].regions(run_)
    exact = METHODS["RI+exact"].regions(run_)
    assert torch.equal(exact.inputs, paper.inputs)  # the same k-means inputs
    for greedy, optimal in zip(paper.regions, exact.regions, strict=True):
        assert optimal.solver == "exact"
        assert optimal.representativeness >= greedy.representativeness
    assert METHODS["RI+pairs"].regions(run_).interpreter.config.sampling == "pairs"
    scored = METHODS["RI+score"].regions(run_)
    v = 0
    x = int(paper.inputs[v])  # the region's input is among its weight images
    sample = covered_sample(paper.regions[v], options.score_images, run_.seed, include=x)
    assert x in sample.tolist() and len(sample) == options.score_images
    expected = with_score_weights(paper.regions[v], mnist.inputs("reference", sample))
    torch.testing.assert_close(scored.regions[v].channel_weights, expected.channel_weights)
    assert torch.equal(scored.regions[v].boundaries, paper.regions[v].boundaries)
    fit = results["fit_s"]
    assert set(fit) == {"uniform", "pairs"} and all(t > 0 for t in fit.values())


def test_ri_logic_runs_in_unseen_on_mnist_super() -> None:
    setup = load_setup("mnist-super", n_reference=300, n_unseen=60)
    assert setup.arch == "mnist_super_cnn" and setup.n_classes == 5
    options = replace(SMALL, methods=("RI", "RI+logic"))
    results = evaluate(setup, "unseen", options)
    assert list(results["methods"]) == ["RI", "RI+logic"]
    assert set(results["fit_s"]) == {"uniform", "uniform+logic"}
    for name in ("RI", "RI+logic"):
        block = results["methods"][name]
        assert _in_range(block["mAD"]) and _in_range(block["subconcept_purity"])
    run_ = Run(setup, 0, options)
    logic = METHODS["RI+logic"].regions(run_)
    paper = METHODS["RI"].regions(run_)
    assert logic.interpreter.granularity == "logic"
    assert torch.equal(logic.inputs, paper.inputs)
    assert sum(r.representativeness for r in logic.regions) < sum(
        r.representativeness for r in paper.regions
    )


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
    features = regions.interpreter.features(inputs).flatten(1).float().cpu()
    nearest = torch.cdist(features, regions.centres.float()).argmin(1)  # uncovered: nearest centre
    assert (~covered).any()
    assert torch.equal(assignment.region.cpu()[~covered], nearest[~covered])
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
    again = evaluate(mnist, "coverage", SMALL)["reference"]  # same seed, same numbers
    assert again == pytest.approx(results["reference"], rel=0, abs=0, nan_ok=True)


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


def test_reference_scores_curves_on_the_first_inputs_up_to_curve_k(mnist: Setup) -> None:
    options = replace(SMALL, methods=("RI+cosine",), n_inputs=3, ks=(1, 2, 3))
    options = replace(options, metrics=("AD", "insertion"))
    block = evaluate(mnist, "reference", options)["methods"]["RI+cosine"]
    assert block["insertion"][2] is None or math.isnan(block["insertion"][2])  # K = 3 > curve_k
    run_ = Run(mnist, 0, options)
    per_input = []
    for index in run_.inputs.tolist()[: options.curve_inputs]:
        similar, maps = METHODS["RI+cosine"].reference(run_, index, 3)
        explanation = run_.interpreter.explain_reference([index])[0]
        assert (
            similar[1:].tolist()
            == [i for i in explanation.similar(metric="cosine").tolist() if i != index][:2]
        )
        x = mnist.pixels("reference", similar[:2])
        per_input.append(
            deletion_insertion(mnist.model, x, maps[:2], mnist.normalize, "insertion")[1]
        )
    for k in (1, 2):
        expected = sum(float(a[:k].double().mean()) for a in per_input) / len(per_input)
        assert block["insertion"][k - 1] == pytest.approx(expected, abs=1e-4)


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


def test_reference_common_reading_scores_ris_covered_images_for_every_method(
    mnist: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = replace(
        SMALL,
        methods=("RI", "RI+cosine", "Grad-CAM", _Corner()),
        n_inputs=3,
        ks=(1, 3, 40),
        metrics=("AD", "insertion"),
    )
    scored: list[torch.Tensor] = []

    def recording(setup: Setup, images01: torch.Tensor, *args):
        scored.append(images01.clone())
        return score(setup, images01, *args)

    monkeypatch.setattr(reference_protocol, "score", recording)
    results = evaluate(mnist, "reference", options)
    own, common = results["methods"], results["common"]
    assert list(common) == ["RI", "RI+cosine", "Grad-CAM"]  # corner cannot reuse: left out
    run_ = Run(mnist, 0, options)
    inputs = run_.inputs.tolist()
    covered = [run_.interpreter.explain_reference([i])[0].similar().cpu() for i in inputs]
    expected = [self_first(c, i, 40) for c, i in zip(covered, inputs, strict=True)]
    assert len(scored) == len(own) * len(inputs) + len(common) * len(inputs)
    per_method = scored[len(own) * len(inputs) :]  # the common reading comes last, input-wise
    for m in range(len(common)):
        for j, images in enumerate(expected):
            assert torch.equal(per_method[m * len(inputs) + j], mnist.pixels("reference", images))
    sizes = [float(np.mean([min(k, len(s)) for s in expected])) for k in options.ks]
    assert all(block["similar"] == sizes for block in common.values())
    assert own["Grad-CAM"]["similar"][2] == 40 > sizes[2]  # its own S: of any class
    for key in ("mAD", "mAI", "insertion", "similar"):
        np.testing.assert_array_equal(common["RI"][key], own["RI"][key])  # RI's S: the common S
    assert common["Grad-CAM"]["mAD"][0] == own["Grad-CAM"]["mAD"][0]  # K = 1: the input alone
    markdown = results_markdown(results)
    assert "every method on one common S" in markdown and "choose): corner." in markdown


def test_q_sweep_reports_one_value_per_q_and_sampling(mnist: Setup) -> None:
    results = evaluate(mnist, "q-sweep", replace(SMALL, samplings=("uniform", "pairs")))
    assert list(results["samplings"]) == ["uniform", "pairs"]
    for block in results["samplings"].values():
        for part in ("reference", "unseen"):
            for key in ("ACU-GT", "ACU-MD", "CVR"):
                values = block[part][key]
                assert len(values) == 2 and all(_in_range(v) for v in values)
        assert len(block["fit_s"]) == 2 and min(block["fit_s"]) > 0


def test_similar_on_shapes(shapes_setup: Setup) -> None:
    results = evaluate(shapes_setup, "similar", replace(SMALL, methods=("RI", "Grad-CAM")))
    assert len(results["rankings"]) == 4
    for block in results["rankings"].values():
        for k in SMALL.purity_ks:
            keys = (f"sub-concept purity@{k}", f"class purity@{k}", f"mAD@{k}")
            assert all(_in_range(block[key]) for key in keys)
    for block in results["methods"].values():
        assert _in_range(block["energy"])
    assert 0 < results["mask_area"] < 100


def test_similar_without_concepts_ranks_by_class_and_reuse(mnist: Setup) -> None:
    results = evaluate(mnist, "similar", SMALL)
    assert "methods" not in results and "mask_area" not in results  # no masks: no pointing
    run_ = Run(mnist, 0, SMALL)
    labels = mnist.labels("reference")
    purity, drops = [], []
    for index in run_.inputs.tolist():
        explanation = run_.interpreter.explain_reference([index])[0]
        ranking = explanation.similar(metric="cosine").cpu()
        ranking = ranking[ranking != index]
        purity.append(float((labels[ranking[:2]] == labels[index]).double().mean()))
        top = ranking[:4]
        maps = explanation.heatmap(mnist.inputs("reference", top))
        drops.append(
            100 * float(drop_increase(mnist, mnist.pixels("reference", top), maps).drop[:2].mean())
        )
    block = results["rankings"]["cosine (covered)"]
    assert block["class purity@2"] == pytest.approx(100 * sum(purity) / len(purity))
    assert block["mAD@2"] == pytest.approx(sum(drops) / len(drops))
    assert "sub-concept purity@2" not in block


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
    # the default is the paper's Dist, feature maps kept or not (tests/core/test_interpretation)
    assert torch.equal(explanation.similar(), explanation.similar(metric="semantic"))
    torch.testing.assert_close(explanation.distances("euclidean"), explanation.feature_distances())
    p = explanation.boundaries
    dist = (ri.fitted_index.projections[covered][:, p] - explanation.projections[p]).abs().sum(1)
    torch.testing.assert_close(explanation.distances("semantic"), dist)
    with pytest.raises(ValueError, match="unknown metric"):
        explanation.similar(metric="manhattan")
    run = Run(mnist, 0, SMALL)
    plain = run.fit(run.fit_config(n_boundaries=10))  # fitted without the feature maps
    with pytest.raises(ValueError, match="keep_features"):
        plain.explain_reference([7])[0].similar(metric="cosine")
    alone = plain.explain_reference([7])[0]
    assert torch.equal(alone.similar(3), alone.similar(3, metric="semantic"))


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
    assert "--quick" in results["command"] and results["options"]["split"] == "fixed"
    for part in ("reference", "unseen"):
        assert set(results[part]) >= {"ACU-GT", "ACU-MD", "CVR", "CVR_std", "model_acc"}
        assert all(_in_range(results[part][k]) for k in ("ACU-GT", "ACU-MD", "CVR"))
    text = (out / "results.md").read_text()
    assert "| Set | ACU-GT of RI | ACU-GT of F |" in text and "![mnist5k-coverage.png]" in text
    assert f"{results['reference']['CVR']:.2f}" in text
    png = (out / "mnist5k-coverage.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_cli_evaluate_spells_out_the_new_options(tmp_path, capsys) -> None:
    out = tmp_path / "eval"
    argv = ["evaluate", "--dataset", "mnist5k", "--protocol", "unseen", "--quick", "--runs", "1"]
    argv += ["--methods", "RI,Grad-CAM", "--metrics", "deletion", "--curve-images", "5"]
    argv += ["--score-images", "3", "--regions", "4"]
    code, _, _ = run([*argv, "--boundaries", "20", "--out", str(out), "--quiet"], capsys)
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    options = results["options"]
    assert (options["metrics"], options["curve_images"], options["n_boundaries"]) == (
        ["AD", "deletion"],
        5,
        20,
    )
    assert (options["score_images"], options["n_regions"]) == (3, 4)
    assert results["n_regions"] == 4
    assert results["command"].endswith(
        "--quick --methods RI,Grad-CAM --metrics deletion --boundaries 20 --curve-images 5 "
        "--score-images 3 --regions 4"
    )
    text = (out / "results.md").read_text()
    assert "deletion AUC (%)" in text and "ROAD" not in text
    assert " ± " not in text and "one run, no spread" in text  # one run: no spread printed


def test_per_run_draws_are_stratified_and_stay_within_their_part(mnist: Setup) -> None:
    drawn = mnist.draw(3, (0.5, 0.75))
    assert (len(drawn.reference), len(drawn.unseen)) == (150, 45)
    for part in ("reference", "unseen"):
        pool = {tuple(x.flatten().tolist()) for x in mnist.pixels(part)}
        assert all(tuple(x.flatten().tolist()) in pool for x in drawn.pixels(part))
        counts = torch.bincount(drawn.labels(part), minlength=10)
        available = torch.bincount(mnist.labels(part), minlength=10)
        # as equal as the classes allow: a class short of the others gives all it has
        assert bool(((counts >= counts.max() - 1) | (counts == available)).all())
    again = mnist.draw(3, (0.5, 0.75))
    assert torch.equal(again.labels("reference"), drawn.labels("reference"))
    assert not torch.equal(mnist.draw(4, (0.5, 0.75)).pixels("unseen"), drawn.pixels("unseen"))
    results = evaluate(mnist, "coverage", replace(SMALL, runs=2, split="per-run", draw=(0.5, 0.75)))
    assert results["setup"]["run_sizes"] == [(150, 45)]
    assert results["options"]["split"] == "per-run"


def test_stratified_gives_equal_classes_and_passes_shortfalls_on() -> None:
    labels = torch.tensor([0] * 10 + [1] * 3 + [2] * 7)
    for n, expected in ((9, {(3, 3, 3)}), (14, {(5, 3, 6), (6, 3, 5)}), (20, {(10, 3, 7)})):
        drawn = stratified(labels, n, seed=1)
        assert len(drawn.unique()) == n and bool((drawn.diff() > 0).all())
        assert tuple(torch.bincount(labels[drawn], minlength=3).tolist()) in expected
    with pytest.raises(ValueError, match="cannot draw 21 of 20 images"):
        stratified(labels, 21, seed=0)


def test_cli_evaluate_bad_options(tmp_path, capsys) -> None:
    base = ["evaluate", "--out", str(tmp_path / "out"), "--quiet"]
    cases = [
        (["--dataset", "mnist5k", "--protocol", "table9"], "unknown protocol"),
        (["--dataset", "mnist5k", "--protocol", "unseen", "--runs", "0"], "runs must be >= 1"),
        (["--dataset", "mnist5k", "--protocol", "unseen", "--methods", "LIME"], "unknown method"),
        (["--dataset", "mnist5k", "--protocol", "unseen", "--metrics", "LIME"], "unknown metric"),
        (["--dataset", "mnist5k", "--protocol", "q-sweep", "--samplings", "near"], "unknown sampl"),
        (["--dataset", "mnist5k", "--protocol", "reference", "--ks", "1,a"], "--ks takes comma"),
        (
            ["--dataset", "mnist5k", "--protocol", "unseen", "--methods", "RI+fast"],
            "unknown method",
        ),
        (["--dataset", f"imagefolder:{tmp_path / 'images'}", "--protocol", "unseen"], "--model"),
        (["--dataset", "mnist5k", "--protocol", "unseen", "--weights", "w.pt"], "--model"),
        (["--dataset", "cifar", "--protocol", "unseen"], "unknown data set"),
        (
            ["--dataset", "mnist5k", "--protocol", "unseen", "--score-images", "0"],
            "score_images must be >= 1, got 0",
        ),
        (
            ["--dataset", "mnist5k", "--protocol", "unseen", "--regions", "0"],
            "n_regions must be >= 1, got 0",
        ),
    ]
    for argv, pattern in cases:
        code, _, err = run([*base, *argv], capsys)
        assert_one_line_error(code, err, pattern)


def test_other_models_load_from_their_weights(tmp_path) -> None:
    weights = tmp_path / "digits.safetensors"
    save_weights(build_model("digits_cnn", 10, 1), weights)
    setup = load_setup("digits", "digits_cnn", weights, n_reference=50, n_unseen=10)
    assert setup.target_layer == default_target_layer("digits_cnn")
    assert (len(setup.reference), len(setup.unseen)) == (50, 10)
    with pytest.raises(ValueError, match=r"'features\.99' is not a module of the model"):
        load_setup("digits", "digits_cnn", weights, layer="features.99")
    with pytest.raises(ValueError, match="needs --weights"):
        load_setup("digits", "mnist_cnn")  # digits_cnn has bundled weights, mnist_cnn not here


def _image_folder(folder, n: int):
    data = shapes(n, seed=5, size=32)
    for i, (image, label) in enumerate(zip(data.images, data.labels, strict=True)):
        (folder / data.class_names[int(label)]).mkdir(parents=True, exist_ok=True)
        pixels = (image.permute(1, 2, 0) * 255).round().byte().numpy()
        Image.fromarray(pixels).save(folder / data.class_names[int(label)] / f"{i}.png")
    return folder


def test_image_folders_run_with_a_named_model(tmp_path, capsys) -> None:
    folder = _image_folder(tmp_path / "small", 24)
    weights = WEIGHTS_DIR / "shapes_cnn.safetensors"
    setup = load_setup(f"imagefolder:{folder}", "shapes_cnn", weights, n_unseen=None)
    assert (len(setup.reference), len(setup.unseen)) == (19, 5)
    assert setup.pixels("unseen").shape == (5, 3, 224, 224)
    results = evaluate(setup, "coverage", replace(SMALL, n_regions=3, n_boundaries=10))
    assert all(_in_range(results[part]["CVR"]) for part in ("reference", "unseen"))
    # The command line, at another image size and normalisation (30 regions need 30 images).
    folder = _image_folder(tmp_path / "large", 50)
    out = tmp_path / "eval"
    argv = ["evaluate", "--dataset", f"imagefolder:{folder}", "--protocol", "coverage"]
    argv += ["--model", "shapes_cnn", "--weights", str(weights), "--runs", "1", "--quick"]
    argv += ["--image-size", "32", "--mean", "0", "0", "0", "--std", "1", "1", "1"]
    code, _, err = run([*argv, "--boundaries", "10", "--out", str(out), "--quiet"], capsys)
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    assert results["command"].endswith("--image-size 32 --mean 0.0 0.0 0.0 --std 1.0 1.0 1.0")
    small = load_setup(f"imagefolder:{folder}", "shapes_cnn", weights, image_format=ImageFormat(32))
    assert small.pixels("unseen").shape[-2:] == (32, 32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_protocols_run_on_cuda_as_on_the_cpu(mnist: Setup) -> None:
    options = replace(
        SMALL,
        methods=("RI", "RI+pairs", "RI+score", "Grad-CAM", "Score-CAM"),
        metrics=("AD", "ROAD", "deletion", "insertion"),
        curve_images=4,
    )
    cuda = load_setup("mnist5k", n_reference=300, n_unseen=60, device="cuda")
    on_gpu, on_cpu = (evaluate(s, "unseen", options)["methods"] for s in (cuda, mnist))
    for name, block in on_gpu.items():
        for key in ("mAD", "mAD_interp", "deletion", "insertion", "ROAD", "CVR"):
            if key in block:
                assert block[key] == pytest.approx(on_cpu[name][key], abs=1.0), (name, key)
    for protocol in ("reference", "similar", "q-sweep"):
        evaluate(cuda, protocol, replace(options, methods=("RI+score", "Grad-CAM")))


def test_overview_table_bolds_the_best_per_data_set_and_shows_the_targets() -> None:
    def block(mad: float, cvr: float | None = None) -> dict:
        out = {"mAD": mad, "mAD_std": 0.5, "ROAD": 30 - mad, "ROAD_std": 0.1}
        return out | ({"CVR": cvr, "CVR_std": 1.0} if cvr is not None else {})

    results = {
        "runs": 5,
        "model_acc": {"unseen": 97.5, "unseen_std": 0.25},
        "methods": {"RI": block(30.0, 85.0), "RI+score": block(16.0, 85.0), "Score-CAM": block(17)},
    }
    lines = overview_markdown({"mnist5k": results}).splitlines()
    assert lines[0].startswith("| Data set | Method | mAD | mAD per interp. | ROAD (pp) |")
    rows = {line.split(" | ")[1]: line for line in lines[2:]}
    scored = rows["polytope-averaged Score-CAM (RI+score)"]  # named for what it computes
    assert "**16.00 ± 0.50**" in scored and "**14.00 ± 0.10**" in scored
    assert "| 97.50 ± 0.25 |" in rows["Score-CAM"] and "n/a" in rows["Score-CAM"]
    assert (
        "| lowest |" in rows["*paper's target for RI*"]
        and "≥ 97" in rows["*paper's target for RI*"]
    )


def test_cam_cluster_control_reuses_mean_weights_of_cluster_members(mnist: Setup) -> None:
    run_ = Run(mnist, 0, SMALL)
    maps = METHODS["Grad-CAM+cluster"].unseen(run_, mnist.unseen_pixels)
    centre = run_.reference_centre[0]
    rng = np.random.default_rng(0)
    weights = []
    for v in range(len(run_.regions)):
        members = (centre == v).nonzero().flatten()
        chosen = members[torch.from_numpy(np.sort(rng.permutation(len(members))[:3]))]
        assert bool((centre[chosen] == v).all())
        weights.append(
            cam_weights(
                "Grad-CAM", mnist.model, mnist.target_layer, mnist.inputs("reference", chosen)
            ).mean(0)
        )
    expected = reused_cam(
        "Grad-CAM",
        mnist.model,
        mnist.target_layer,
        mnist.inputs("unseen"),
        torch.stack(weights)[run_.unseen_centre],
    )
    torch.testing.assert_close(maps, expected)
    similar, maps = METHODS["Grad-CAM+cluster"].reference(run_, int(run_.inputs[0]), 3)
    assert similar.tolist() == run_.neighbours(3)[0].tolist() and maps.shape == (3, 28, 28)


def test_the_evaluate_options_name_the_real_choices() -> None:
    """cli.evaluate writes the choices out (so that --help imports no torch): they must be
    the ones the code uses."""
    from repinterp.cli import evaluate as command
    from repinterp.core.boundaries import SAMPLINGS
    from repinterp.evaluation.options import PROTOCOLS
    from repinterp.evaluation.scoring import METRICS

    assert command.PROTOCOLS == PROTOCOLS
    assert command.SAMPLINGS == SAMPLINGS
    assert command.METRICS == METRICS


GROUP_KEYS = ("distinct_polytopes", "effective_groups", "largest_group_share", "singletons")
GROUP_KEYS += ("merged_groups", "merged_effective_groups")
OUTSIDE_KEYS = ("outside_share", "margin_main", "margin_outside", "error_main", "error_outside")
OUTSIDE_KEYS += ("jaccard_outside",)
AMI_KEYS = ("ami", "ami_null", "ami_null_p95", "ami_ceiling")


def _groups(block: dict) -> dict:
    return {key: block[key] for key in GROUP_KEYS}


def test_ri_reports_the_polytopes_it_finds_in_every_protocol(mnist: Setup) -> None:
    options = replace(SMALL, methods=("RI", "RI+score", "Score-CAM+class"))
    results = evaluate(mnist, "unseen", options)
    regions = Run(mnist, 0, options).regions
    region = regions.assign(mnist.inputs("unseen")).region.cpu()
    expected = polytope_groups([regions.regions[v] for v in region.tolist()]).to_dict()
    assert set(expected) == set(GROUP_KEYS)  # mnist has no sub-concepts
    for name in ("RI", "RI+score"):  # the same polytopes, other weights
        assert _groups(results["methods"][name]) == pytest.approx(expected)
        assert _groups(results["per_run"][0]["methods"][name]) == pytest.approx(expected)
    assert not set(GROUP_KEYS) & set(results["methods"]["Score-CAM+class"])  # no polytopes
    # the images outside their class's main polytope, by the model's logits and the labels
    with torch.no_grad():
        logits = mnist.model(mnist.inputs("unseen"))
    outside = region_groups(regions, region, logits=logits, labels=mnist.labels("unseen")).outside
    block = results["per_run"][0]["methods"]["RI"]
    found = {key: block[key] for key in OUTSIDE_KEYS}
    assert found == pytest.approx(outside, nan_ok=True)
    assert not set(AMI_KEYS) & set(block)  # no sub-concepts, no AMI
    text = results_markdown(results)
    assert "What RI finds: the unseen images grouped by the polytope" in text
    assert "No sub-concept labels on this data set: no purity or AMI." in text
    assert "| Method | outside the main polytope (%) | logit margin: main |" in text
    assert "| polytope-averaged Score-CAM (RI+score) |" in text and "| Score-CAM+class |" in text

    coverage = evaluate(mnist, "coverage", SMALL)
    assert _groups(coverage["unseen"]) == pytest.approx(expected)
    brute = region_groups(regions, regions.assign(mnist.inputs("reference")).region.cpu())
    assert _groups(coverage["reference"]) == pytest.approx(brute.to_dict())

    options = replace(options, methods=("RI", "Grad-CAM+class"))
    reference = evaluate(mnist, "reference", options)
    inputs = Run(mnist, 0, options).inputs.tolist()
    own = [regions.interpreter.explain_reference([i])[0] for i in inputs]  # each input's P(x)
    assert _groups(reference["methods"]["RI"]) == pytest.approx(polytope_groups(own).to_dict())
    assert "distinct_polytopes" not in reference["methods"]["Grad-CAM+class"]


def test_ri_reports_subconcept_purity_on_shapes(shapes_setup: Setup) -> None:
    results = evaluate(shapes_setup, "unseen", replace(SMALL, methods=("RI",)))
    regions = Run(shapes_setup, 0, SMALL).regions
    region = regions.assign(shapes_setup.inputs("unseen")).region.cpu()
    expected = region_groups(regions, region, shapes_setup.unseen.concepts)
    block = results["methods"]["RI"]
    assert block["subconcept_purity"] == pytest.approx(100 * expected.subconcept_purity)
    assert block["subconcept_purity_class"] == pytest.approx(100 * expected.subconcept_purity_class)
    assert block["subconcept_purity"] >= block["subconcept_purity_class"]  # groups nest in classes
    # within-class AMI, its null and its k-means ceiling, on the unseen images' feature maps
    ri = regions.interpreter
    inputs = shapes_setup.inputs("unseen")
    features, logits = ri.features(inputs).flatten(1).cpu(), ri.forward(inputs)[0].cpu()
    labels = shapes_setup.labels("unseen")
    concepts = shapes_setup.unseen.concepts
    full = region_groups(regions, region, concepts, features, logits, labels, seed=0).to_dict()
    first = results["per_run"][0]["methods"]["RI"]
    assert {key: first[key] for key in AMI_KEYS} == pytest.approx({k: full[k] for k in AMI_KEYS})
    assert -1 <= first["ami"] <= 1 and first["ami_null"] <= first["ami_null_p95"]
    assert "| Method | sub-concept purity (%) |" in results_markdown(results)
    # the per-image groups kept in units recompute the AMI
    kept = results["per_run"][0]["units"]["methods"]["RI"]
    assert ami(kept["group"], kept["subconcept"], kept["group_class"]) == pytest.approx(
        first["ami"]
    )
    coverage = evaluate(shapes_setup, "coverage", SMALL)
    for part in ("reference", "unseen"):
        kept = coverage["per_run"][0]["units"]["groups"][part]
        again = ami(kept["group"], kept["subconcept"], kept["group_class"])
        assert again == pytest.approx(coverage["per_run"][0][part]["ami"])
    assert "paired" not in coverage
