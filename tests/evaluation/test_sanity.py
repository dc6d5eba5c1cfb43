"""The ``sanity`` protocol (Adebayo et al., 2018, through Quantus): the cascade randomises one
more layer at a time from the top and nothing else, the similarity is Quantus's Spearman
correlation, random logit shows that RI's map does not depend on the target, and the command
writes its results, table and plot."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace

import numpy as np
import pytest
import torch
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

from repinterp.evaluation.options import Options
from repinterp.evaluation.protocols import evaluate, results_markdown
from repinterp.evaluation.sanity import (
    RANDOM_METHODS,
    CAMExplainer,
    can_shuffle,
    cascade,
    draw_maps,
    efficient_mprt,
    map_similarity,
    no_map,
    shuffled_label_model,
)
from repinterp.evaluation.setup import Setup, load_setup
from repinterp.models.split import resolve_module

from ..commandline import run

quantus = pytest.importorskip("quantus")

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = Options(runs=2, split="fixed", sanity_images=4, shuffled_epochs=1, progress=False)


@pytest.fixture(scope="module")
def mnist() -> Setup:
    """The bundled MNIST CNN on 300 reference and 60 unseen digits."""
    return load_setup("mnist5k", n_reference=300, n_unseen=60)


def _batch(setup: Setup, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` unseen images as Quantus takes them, and the model's predictions."""
    return setup.inputs("unseen", range(n)).numpy(), setup.predictions["unseen"][:n].numpy()


def _parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_the_cascade_randomises_one_more_layer_at_a_time_from_the_top(mnist: Setup) -> None:
    model, (x, y) = mnist.model, _batch(mnist, 6)
    trained = _parameters(model)
    explain = CAMExplainer("Grad-CAM", mnist.target_layer)
    seen: list[dict[str, torch.Tensor]] = []

    def recording(model, inputs, targets, device=None) -> np.ndarray:
        if model is not mnist.model:  # a randomised copy, as the cascade has left it so far
            seen.append(_parameters(model))
        return explain(model, inputs, targets, device)

    steps = cascade(model, x, y, recording, seed=3).scores
    layers = list(steps)[1:]
    owners = [name for name, m in model.named_modules() if list(m.parameters(recurse=False))]
    assert layers == owners[::-1]  # every layer with parameters, the top one first
    assert list(steps) == ["original", *layers] and len(seen) == len(layers)
    for i, parameters in enumerate(seen):
        randomised = set(layers[: i + 1])
        for name, value in parameters.items():
            if name.rpartition(".")[0] in randomised:
                assert bool((value != trained[name]).all()), (layers[i], name)
            else:
                assert torch.equal(value, trained[name]), (layers[i], name)
    assert all(torch.equal(p, trained[name]) for name, p in model.named_parameters())

    # The similarity is Quantus's Spearman correlation of the maps, image by image.
    np.testing.assert_allclose(steps["original"], 1, atol=1e-9)
    randomised = copy.deepcopy(model)
    randomised.load_state_dict(seen[-1], strict=False)
    ours, theirs = explain(model, x, y), explain(randomised, x, y)
    spearman = quantus.functions.similarity_func.correlation_spearman
    expected = spearman(ours.reshape(6, -1), theirs.reshape(6, -1), batched=True)
    np.testing.assert_allclose(steps[layers[-1]], expected, atol=1e-9, equal_nan=True)
    assert np.nanmean(steps[layers[-1]]) < 0.5


def test_a_method_that_draws_nothing_on_a_randomised_model_scores_nan(mnist: Setup) -> None:
    """RI on a randomised model that predicts one class has no boundary: all-zero maps, which
    Quantus refuses; the cascade goes on and scores them NaN, like any constant map."""
    model, (x, y) = mnist.model, _batch(mnist, 4)
    explain = CAMExplainer("Grad-CAM", mnist.target_layer)

    def nothing_once_randomised(model, inputs, targets, device=None) -> np.ndarray:
        maps = explain(model, inputs, targets, device)
        return maps if model is mnist.model else np.zeros_like(maps)

    for order in ("top_down", "bottom_up"):
        steps, no_map = cascade(model, x, y, nothing_once_randomised, seed=0, order=order)
        np.testing.assert_allclose(steps["original"], 1, atol=1e-9)
        assert len(steps) > 2
        assert all(np.isnan(v).all() for k, v in steps.items() if k != "original")
        # every image of every randomised step is counted as drawing no map, none of the trained
        assert list(no_map) == list(steps) and not no_map["original"].any()
        assert all(v.tolist() == [True] * 4 for k, v in no_map.items() if k != "original")
    assert list(steps)[1] == "features.0"  # bottom up: the first layer first


def test_emprt_gives_no_score_where_the_randomised_model_draws_no_map(mnist: Setup) -> None:
    """A constant map's entropy is 0, so Quantus's eMPRT gives it -1: here it is no score, and
    an image whose map is drawn on both models keeps Quantus's rise."""
    model, (x, y) = mnist.model, _batch(mnist, 4)
    explain = CAMExplainer("Grad-CAM", mnist.target_layer)

    def nothing_for_two(model, inputs, targets, device=None) -> np.ndarray:
        maps = explain(model, inputs, targets, device)
        if model is not mnist.model and len(inputs) == 4:  # the randomised model's pass
            maps[:2] = 0
        return maps

    rises, missing = efficient_mprt(model, x, y, nothing_for_two, seed=0)
    assert missing.tolist() == [True, True, False, False]
    assert np.isnan(rises[:2]).all() and np.isfinite(rises[2:]).all()
    metric = quantus.EfficientMPRT(seed=0, disable_warnings=True, display_progressbar=False)
    quantus_rises = np.asarray(metric(model, x, y, explain_func=nothing_for_two, batch_size=64))
    np.testing.assert_allclose(quantus_rises[:2], -1.0)  # what we no longer report
    np.testing.assert_allclose(rises[2:], quantus_rises[2:], rtol=1e-6)


def test_a_sanity_metric_without_any_map_reports_no_score(mnist: Setup, monkeypatch) -> None:
    """RI on a model that draws no map once randomised: eMPRT's mean is NaN with every image
    counted, and the table says ``no map``, never -1.00."""
    from repinterp.evaluation.protocols import sanity as module

    drawn = module._explainer

    def blank_once_randomised(run, name):
        explain = drawn(run, name)

        def explain_func(model, inputs, targets, device=None, **kwargs):
            maps = np.asarray(explain(model, inputs, targets, device=device, **kwargs))
            return maps if model is mnist.model else np.zeros_like(maps)

        return explain_func

    monkeypatch.setattr(module, "_explainer", blank_once_randomised)
    results = evaluate(mnist, "sanity", replace(SMALL, methods=("Grad-CAM",)))
    for one in results["per_run"]:
        block = one["methods"]["Grad-CAM"]
        assert np.isnan(block["eMPRT"]) and block["eMPRT_no_map"] == 4
        assert block["eMPRT_undefined"] == 100
        assert block["RandomLogit_no_map"] == 0 and np.isfinite(block["RandomLogit"])
    assert "| Grad-CAM | no map | 4 of 4 |" in results_markdown(results).splitlines()


def test_cam_explain_func_gives_the_librarys_own_maps(mnist: Setup) -> None:
    x, y = _batch(mnist, 5)
    maps = CAMExplainer("Grad-CAM", mnist.target_layer)(mnist.model, x, y)
    layer = resolve_module(mnist.model, mnist.target_layer)[1]
    with GradCAM(mnist.model, [layer]) as cam:
        targets = [ClassifierOutputTarget(int(c)) for c in y]
        expected = cam(torch.from_numpy(x), targets)
    assert maps.shape == (5, 1, 28, 28) and maps.dtype == np.float32
    np.testing.assert_allclose(maps[:, 0], expected, atol=1e-5)
    with pytest.raises(ValueError, match="unknown CAM method 'LIME'"):
        CAMExplainer("LIME", mnist.target_layer)


def test_runs_are_seeded_and_ri_ignores_the_target(mnist: Setup) -> None:
    options = replace(SMALL, methods=("RI", "Grad-CAM"))
    results = evaluate(mnist, "sanity", options)
    again = evaluate(mnist, "sanity", options)
    assert len(results["per_run"]) == 2
    for first, second in zip(results["per_run"], again["per_run"], strict=True):
        for name in ("RI", "Grad-CAM"):
            a, b = first["methods"][name], second["methods"][name]
            assert a["MPRT"] == b["MPRT"] and a["RandomLogit"] == b["RandomLogit"]
    seeds = [r["methods"]["RI"]["MPRT"] for r in results["per_run"]]
    assert seeds[0] != seeds[1]  # each run its own images and re-initialisations
    ri, cam = results["methods"]["RI"], results["methods"]["Grad-CAM"]
    assert ri["RandomLogit"] == pytest.approx(1) and cam["RandomLogit"] < 0.9
    # RI fits an index anew for each randomised model: its maps change with the weights
    top = list(ri["MPRT"])[2]  # "original", "original_std", then the top layer
    assert ri["MPRT"]["original"] == pytest.approx(1) and ri["MPRT"][top] < 0.95


def test_only_ri_draws_at_random_and_its_reseeded_floor_is_reported(mnist: Setup) -> None:
    """The CAMs' maps are a function of model and image (two calls, the same maps), so only
    RI, whose Q is sampled, has a reseeded row: its maps with another seed of Q correlate
    with its own below 1 (the floor), on the trained model."""
    assert RANDOM_METHODS == ("RI", "RI+logic")
    x, y = _batch(mnist, 4)
    for name in ("Grad-CAM", "Grad-CAM++", "Score-CAM"):
        explain = CAMExplainer(name, mnist.target_layer)
        np.testing.assert_array_equal(explain(mnist.model, x, y), explain(mnist.model, x, y))
    results = evaluate(mnist, "sanity", replace(SMALL, methods=("RI", "Grad-CAM")))
    for block in (results, *results["per_run"]):
        assert "reseeded" in block["methods"]["RI"]
        assert "reseeded" not in block["methods"]["Grad-CAM"]
    floor = results["methods"]["RI"]["reseeded"]
    assert 0 < floor["Spearman"] < 0.999 and floor["no_map"] == 0
    for name in ("RI", "Grad-CAM"):  # every check of every method, per step and order
        block = results["per_run"][0]["methods"][name]
        for key in ("MPRT", "MPRT_bottom_up"):
            assert list(block[f"{key}_no_map"]) == list(block[key])
            assert all(0 <= v <= 4 for v in block[f"{key}_no_map"].values())
        assert {"Spearman", "SSIM", "no_map"} <= set(block["data_randomisation"])
        assert "eMPRT" in block
    text = results_markdown(results)
    assert "| RI (Q reseeded) | " in text
    assert "Images whose map is constant, i.e. no map" in text and " of 4 |" in text


def test_ri_logic_is_checked_with_its_own_reseeded_floor(mnist: Setup) -> None:
    """RI+logic (granularity="logic") goes through every check, refitted at its granularity on
    each randomised model, and has its own floor: its maps with Q drawn anew."""
    results = evaluate(mnist, "sanity", replace(SMALL, runs=1, methods=("RI", "RI+logic")))
    ri, logic = results["methods"]["RI"], results["methods"]["RI+logic"]
    assert set(logic) == set(ri)  # MPRT, eMPRT, RandomLogit, data randomisation, reseeded
    assert logic["RandomLogit"] == pytest.approx(1)  # its map ignores the target, as RI's
    assert logic["MPRT"]["original"] == pytest.approx(1)
    assert 0 < logic["reseeded"]["Spearman"] < 0.999 and logic["reseeded"]["no_map"] == 0
    assert logic["MPRT"] != ri["MPRT"]  # another index: the logic one
    assert "| RI+logic (Q reseeded) | " in results_markdown(results)


def test_a_step_without_maps_reads_no_map_never_a_score(mnist: Setup) -> None:
    results = evaluate(mnist, "sanity", replace(SMALL, methods=("RI", "Grad-CAM")))
    top = [k for k in results["methods"]["RI"]["MPRT"] if not k.endswith("_std")][1]
    row = next(line for line in results_markdown(results).splitlines() if line.startswith("| RI |"))
    assert "no map" not in row
    for block in results["per_run"]:  # as if RI drew nothing once the top layer is randomised
        block["methods"]["RI"]["MPRT"][top] = None
        block["methods"]["RI"]["MPRT_no_map"][top] = 4.0
    row = next(line for line in results_markdown(results).splitlines() if line.startswith("| RI |"))
    assert row.split(" | ")[2] == "no map"
    results["per_run"][0]["methods"]["RI"]["MPRT"][top] = 0.5  # one run with a map
    row = next(line for line in results_markdown(results).splitlines() if line.startswith("| RI |"))
    assert row.split(" | ")[2] == "0.50 in 1 runs, no map in 1"


def test_the_data_randomisation_model_learns_permuted_labels(mnist: Setup) -> None:
    model, measured = shuffled_label_model(mnist, seed=0, epochs=1)
    again, _ = shuffled_label_model(mnist, seed=0, epochs=1)
    weights, weights_again = model.state_dict(), again.state_dict()
    assert all(torch.equal(weights[key], weights_again[key]) for key in weights)
    assert type(model) is type(mnist.model) and not model.training
    assert measured["epochs"] == 1 and measured["unseen_accuracy"] < 40  # chance: 10 %
    x, _ = _batch(mnist, 8)
    maps = draw_maps(CAMExplainer("Grad-CAM", mnist.target_layer), model, x, np.zeros(8, int), 8)
    similarity = map_similarity(maps, maps)
    drawn = ~no_map(maps)
    np.testing.assert_allclose(similarity["Spearman"][drawn], 1, atol=1e-9)
    assert np.isnan(similarity["Spearman"][~drawn]).all()


def test_without_a_zoo_architecture_the_data_randomisation_is_left_out(mnist: Setup) -> None:
    custom = replace(mnist, arch=None)  # a model of one's own: nothing to train anew
    assert not can_shuffle(custom) and can_shuffle(mnist)
    with pytest.raises(ValueError, match="it needs a zoo model"):
        shuffled_label_model(custom, seed=0, epochs=1)
    results = evaluate(custom, "sanity", replace(SMALL, runs=1, methods=("Grad-CAM",)))
    assert "shuffled_model" not in results
    assert "data_randomisation" not in results["methods"]["Grad-CAM"]
    assert "Data randomisation not run" in results_markdown(results)


def test_methods_other_than_ri_and_the_cams_are_refused(mnist: Setup) -> None:
    refused = r"checks RI, RI\+logic, Grad-CAM, Grad-CAM\+\+, Score-CAM, not ACE$"
    with pytest.raises(ValueError, match=refused):
        evaluate(mnist, "sanity", replace(SMALL, runs=1, methods=("RI", "ACE")))
    with pytest.raises(
        ValueError, match=r"^the sanity checks need at least 2 unseen images, got 1$"
    ):
        evaluate(mnist, "sanity", replace(SMALL, runs=1, sanity_images=1, methods=("RI",)))


@pytest.mark.slow
def test_cli_sanity_quick_writes_results_table_and_plot(tmp_path, capsys) -> None:
    out = tmp_path / "sanity"
    argv = ["evaluate", "--dataset", "mnist5k", "--protocol", "sanity", "--quick"]
    code, stdout, _ = run([*argv, "--out", str(out), "--quiet"], capsys)
    assert code == 0 and str(out) in stdout
    results = json.loads((out / "results.json").read_text())
    assert results["protocol"] == "sanity" and results["options"]["sanity_images"] == 8
    assert len(results["per_run"]) == 2 and results["seeds"] == [0, 1]
    methods = ["RI", "Grad-CAM", "Grad-CAM++", "Score-CAM"]
    layers = ["classifier.5", "classifier.2", "features.6", "features.3", "features.0"]
    for block in (results, *results["per_run"]):
        assert list(block["methods"]) == methods
        for method in block["methods"].values():
            assert [k for k in method["MPRT"] if not k.endswith("_std")] == ["original", *layers]
            assert method["MPRT"]["original"] == pytest.approx(1)
    mean = np.mean([r["methods"]["Score-CAM"]["RandomLogit"] for r in results["per_run"]])
    assert results["methods"]["Score-CAM"]["RandomLogit"] == pytest.approx(mean)
    text = (out / "results.md").read_text()
    header = "| Method | `original` | " + " | ".join(f"`{layer}`" for layer in layers)
    assert header + " | time (s) |" in text and "| Method | SSIM | images with no map |" in text
    assert "| RI | 1.00 ± 0.00 | 0 of 8 |" in text  # random logit: RI ignores the target
    assert "| RI (Q reseeded) | " in text and "(Quantus `MPRT`, bottom-up)" in text
    for method in methods:  # images without a map, per method and layer
        assert re.search(rf"\n\| {re.escape(method)} \|( [0-9.]+ of 8 \|){{6}}\n", text)
    assert "![mnist5k-sanity.png](mnist5k-sanity.png)" in text
    png = (out / "mnist5k-sanity.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
