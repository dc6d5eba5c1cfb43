import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image

from repinterp.cli.parser import build_parser, main
from repinterp.core.regions import RegionSet, distinct_polytopes
from repinterp.evaluation.groupings import region_groups
from repinterp.store.regions_file import DEFAULT_REGIONS, DEFAULT_SEED, load_regions
from repinterp.workspace import open_index

from ..commandline import assert_one_line_error, edit_manifest, run


def train_digits(out: Path, seed: int) -> Path:
    """Weights of the digits CNN after one epoch on sklearn's digits."""
    main(
        [
            "train",
            "--dataset",
            "digits",
            "--model",
            "digits_cnn",
            "--epochs",
            "1",
            "--seed",
            str(seed),
            "--out",
            str(out),
            "--quiet",
        ]
    )
    return out


@pytest.fixture(scope="module")
def digits_index(tmp_path_factory):
    """Weights trained for one epoch on sklearn digits, and an index fitted with them."""
    root = tmp_path_factory.mktemp("cli")
    weights = train_digits(root / "digits.safetensors", seed=0)
    index = root / "index"
    main(
        [
            "fit",
            "--model",
            "digits_cnn",
            "--weights",
            str(weights),
            "--reference",
            "digits",
            "--boundaries",
            "20",
            "--out",
            str(index),
            "--quiet",
        ]
    )
    return weights, index


def test_every_command_has_help(capsys) -> None:
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert {"train", "fit", "explain", "report", "demo"} <= set(commands)
    for name, sub in commands.items():
        text = sub.format_help()
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{name} {action.option_strings} has no help"
        assert "--quiet" in text or name == "serve"


def test_train_fit_explain(digits_index, tmp_path, capsys) -> None:
    _, index = digits_index
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["recipe"]["arch"] == "digits_cnn" and manifest["n_boundaries"] == 20
    picture = tmp_path / "eight.png"
    Image.fromarray((torch.rand(20, 20) * 255).byte().numpy()).save(picture)
    out = tmp_path / "explained"
    code, stdout, _ = run(
        [
            "explain",
            "reference:0",
            "unseen:3",
            str(picture),
            "--index",
            str(index),
            "--out",
            str(out),
            "--top-k",
            "4",
            "--quiet",
        ],
        capsys,
    )
    assert code == 0
    assert stdout.count("representativeness") == 3
    for name in ("reference-0", "unseen-3", "eight"):
        summary = json.loads((out / f"{name}.json").read_text())
        assert len(summary["similar"]) <= 4 and summary["metric"] == "semantic"
        assert summary["representativeness"] >= len(summary["similar"])
        distances = [s["distance"] for s in summary["similar"]]
        assert distances == sorted(distances)
        with Image.open(out / f"{name}.png") as image:
            assert image.size[0] > image.size[1] > 100
    # an explained reference image is left out of its own similar images (as in the viewer)
    own = json.loads((out / "reference-0.json").read_text())["similar"]
    assert len(own) == 4 and 0 not in [s["reference"] for s in own]


@pytest.mark.parametrize("name", ["region", "logic"])
def test_fit_refuses_a_granularity_it_does_not_have(digits_index, tmp_path, capsys, name) -> None:
    """The choices are the registry's; ``logic`` was removed in 0.6 (issue 41)."""
    weights, _ = digits_index
    argv = ["fit", "--model", "digits_cnn", "--weights", str(weights), "--reference", "digits"]
    argv += ["--boundaries", "10", "--no-features", "--quiet", "--out", str(tmp_path / "bad")]
    code, _, err = run([*argv, "--granularity", name], capsys)
    assert_one_line_error(code, err, f"invalid choice: '{name}' (choose from 'class', 'strategy')")
    assert not (tmp_path / "bad").exists()


def test_fit_keeps_the_viewers_regions(digits_index) -> None:
    _, index = digits_index
    ri = open_index(index, progress=False).interpreter
    kept = load_regions(ri, DEFAULT_REGIONS, DEFAULT_SEED)
    assert kept is not None and len(kept) == DEFAULT_REGIONS
    computed = ri.regions(n_regions=DEFAULT_REGIONS, seed=DEFAULT_SEED)
    assert torch.equal(kept.inputs, computed.inputs)
    assert torch.allclose(kept.centres, computed.centres)


def test_bad_inputs_end_with_one_line(digits_index, tmp_path, capsys) -> None:
    weights, index = digits_index
    out = tmp_path / "out"
    fit = ["fit", "--reference", "digits", "--out", str(tmp_path / "x"), "--quiet"]
    cases = [
        ([*fit, "--model", "digits_cnn", "--weights", str(tmp_path / "none.pt")], "not found"),
        ([*fit, "--model", "alexnet9", "--weights", str(weights)], "unknown arch"),
        (
            [*fit, "--model", "digits_cnn", "--weights", str(weights), "--layer", "features.99"],
            "is not a module",
        ),
        ([*fit, "--model", "mnist_cnn", "--weights", str(weights)], "do not fit"),
        (
            ["explain", "reference:0", "--index", str(tmp_path), "--out", str(tmp_path / "out")],
            "manifest.json is missing",
        ),
        (
            ["explain", str(tmp_path / "nope.png"), "--index", str(index), "--out", str(out)],
            "image file not found",
        ),
        (
            ["explain", "unseen:100000", "--index", str(index), "--out", str(out)],
            "the unseen set has",
        ),
        (
            ["train", "--dataset", "cifar", "--model", "digits_cnn", "--out", "w.safetensors"],
            "unknown data set",
        ),
    ]
    for argv, pattern in cases:
        code, _, err = run(argv, capsys)
        assert_one_line_error(code, err, pattern)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    code, _, err = run(["explain", str(broken), "--index", str(index), "--out", str(out)], capsys)
    assert_one_line_error(code, err, "cannot read")


def test_report_needs_the_feature_maps(digits_index, tmp_path, capsys) -> None:
    weights, _ = digits_index
    index = tmp_path / "index"
    fit = ["fit", "--model", "digits_cnn", "--weights", str(weights), "--reference", "digits"]
    main([*fit, "--boundaries", "5", "--no-features", "--out", str(index), "--quiet"])
    code, _, err = run(
        ["report", "--index", str(index), "--out", str(tmp_path / "report"), "--quiet"], capsys
    )
    assert_one_line_error(code, err, "feature maps were not kept")


def test_report_gives_every_predicted_class_a_region(digits_index, tmp_path, capsys) -> None:
    _, index = digits_index
    predicted = open_index(index, progress=False).interpreter.index.predictions.unique()
    m = len(predicted)
    report = ["report", "--index", str(index), "--top-k", "1", "--quiet"]
    code, _, err = run([*report, "--regions", str(m - 1), "--out", str(tmp_path / "a")], capsys)
    assert_one_line_error(code, err, f"{m - 1} regions cannot give each of the {m} classes")
    out = tmp_path / "b"
    code, _, err = run([*report, "--regions", str(m), "--out", str(out)], capsys)
    assert code == 0, err
    summaries = [json.loads(f.read_text()) for f in sorted(out.glob("polytope-*.json"))]
    assert sorted(s["predicted_class"] for s in summaries) == predicted.tolist()
    for s in summaries:  # the region's input and its similar image, each masked
        assert len(s["masked_scores"]) == 2
        assert all(0 <= p <= 1 for p in s["masked_scores"].values())
    page = (out / "index.html").read_text()
    assert "within each class the model predicts on them" in page
    regions = RegionSet.build(open_index(index, progress=False).interpreter, m, 0, by_class=True)
    assert f"Over the reference set, {region_groups(regions).sentence()}." in page
    assert ("Classes without a region" in page) == (m < 10)


def test_index_for_other_weights_is_refused(digits_index, tmp_path, capsys) -> None:
    _, index = digits_index
    copy = tmp_path / "index"
    shutil.copytree(index, copy)
    other = train_digits(tmp_path / "other.safetensors", seed=1)
    edit_manifest(copy, lambda m: m["recipe"].update(weights=str(other)))
    code, _, err = run(
        ["explain", "reference:0", "--index", str(copy), "--out", str(tmp_path / "out")], capsys
    )
    assert_one_line_error(code, err, "other weights")
    assert open_index(index, progress=False).interpreter.index is not None


def test_model_and_weights_are_checked_before_the_image_folder(tmp_path, capsys) -> None:
    folder = f"imagefolder:{tmp_path / 'not-there'}"  # scanned first, it would be "not found"
    missing = str(tmp_path / "none.safetensors")
    fit = ["fit", "--reference", folder, "--out", str(tmp_path / "index"), "--quiet"]
    evaluate = ["evaluate", "--dataset", folder, "--protocol", "unseen", "--quiet", "--out"]
    evaluate += [str(tmp_path / "evaluation")]
    train = ["train", "--dataset", folder, "--out", str(tmp_path / "w.safetensors"), "--quiet"]
    for command in (fit, evaluate, train):
        for model, weights, message in (
            ("resnet19", missing, "unknown arch 'resnet19'"),
            ("resnet18", missing, f"weights file not found: {missing}"),
        ):
            code, _, err = run([*command, "--model", model, "--weights", weights], capsys)
            assert_one_line_error(code, err, message)


@pytest.mark.slow  # ~8 s: a ResNet-18 saved, built and fitted
def test_the_default_layer_has_maps_of_7_pixels_a_coarser_one_warns_one_pixel_is_refused(
    tmp_path, capsys
) -> None:
    from repinterp.models.zoo import build_model, save_weights

    for c, name in enumerate(("dark", "light")):
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (32, 32), (60 + 120 * c + 5 * i,) * 3).save(
                tmp_path / "imgs" / name / f"{i}.png"
            )
    weights = tmp_path / "resnet18.safetensors"
    save_weights(build_model("resnet18", 2), weights)
    fit = ["fit", "--model", "resnet18", "--weights", str(weights), "--image-size", "32"]
    fit += ["--reference", f"imagefolder:{tmp_path / 'imgs'}", "--boundaries", "3", "--quiet"]
    code, out, err = run([*fit, "--out", str(tmp_path / "index")], capsys)
    assert code == 0, err
    assert "at layer 'layer1'" in out  # 8 x 8; layer4, the ResNets' own, is 1 x 1 at 32 px
    with pytest.warns(UserWarning) as caught:  # the command line prints it as one line
        code, out, _ = run([*fit, "--layer", "layer3", "--out", str(tmp_path / "coarse")], capsys)
    assert code == 0 and "at layer 'layer3'" in out
    assert [str(w.message) for w in caught] == [
        "layer 'layer3' of resnet18 gives 2 x 2 feature maps for 32 x 32 px images: its heat "
        "maps are coarse ('layer1', the default there, gives 8 x 8)"
    ]
    refused = "layer 'layer4' of resnet18 gives 1 x 1 feature maps for 32 x 32 px images, so "
    refused += "every heat map would be constant: use 'layer3'"
    code, _, err = run([*fit, "--layer", "layer4", "--out", str(tmp_path / "other")], capsys)
    assert_one_line_error(code, err, refused)
    evaluate = ["evaluate", "--dataset", f"imagefolder:{tmp_path / 'imgs'}", "--model"]
    evaluate += ["resnet18", "--weights", str(weights), "--image-size", "32", "--layer"]
    evaluate += ["layer4", "--protocol", "unseen", "--quiet", "--out", str(tmp_path / "eval")]
    code, _, err = run(evaluate, capsys)
    assert_one_line_error(code, err, refused)


@pytest.mark.slow
def test_demo_end_to_end(tmp_path, capsys) -> None:
    out = tmp_path / "demo"
    (out / "index").mkdir(parents=True)
    (out / "mine.txt").write_text("mine")
    (out / "index" / "notes.txt").write_text("notes")
    argv = ["demo", "--out", str(out), "--quiet", "--top-k", "5"]
    code, _, err = run(argv, capsys)
    assert_one_line_error(code, err, f"{out} holds files that repinterp did not write")
    code, stdout, _ = run([*argv, "--overwrite"], capsys)
    assert code == 0 and "index.html" in stdout
    assert (out / "mine.txt").read_text() == "mine"  # --overwrite touched only its own files
    assert (out / "index" / "notes.txt").read_text() == "notes"
    page = (out / "index.html").read_text()
    for source in re.findall(r"(?:src|href)='([^'#][^']*)'", page):  # files, not #anchors
        assert (out / source).is_file(), source
    summaries = sorted(out.glob("unseen-*.json"))
    assert len(summaries) == 10
    classes = set()
    for path in summaries:
        summary = json.loads(path.read_text())
        classes.add(summary["predicted_class"])
        assert summary["representativeness"] > 50
        assert 0 < len(summary["boundaries"]) <= 50
        assert summary["delta"] >= summary["conflicts"] >= 0
        assert set(summary["masked_scores"]) == {"input"} | {s["name"] for s in summary["similar"]}
        assert [s["name"] for s in summary["similar"]] == [
            f"reference:{s['reference']}" for s in summary["similar"]
        ]
        assert f"src='{path.stem}.png'" in page
        with Image.open(path.with_suffix(".png")) as image:
            assert image.format == "PNG"
    assert len(classes) >= 9  # one input per digit, nearly all predicted right
    ws = open_index(out / "index", progress=False)
    assert len(ws.interpreter.index) == 4000
    assert Path(ws.interpreter.index.files["features.npy"]).is_file()
    assert load_regions(ws.interpreter, DEFAULT_REGIONS, DEFAULT_SEED) is not None  # serve's


def test_report_draws_one_figure_per_distinct_polytope(digits_index, tmp_path, capsys) -> None:
    _, index = digits_index
    out = tmp_path / "report"
    report = ["report", "--index", str(index), "--top-k", "1", "--regions", "30", "--quiet"]
    code, printed, err = run([*report, "--out", str(out)], capsys)
    assert code == 0, err
    regions = RegionSet.build(open_index(index, progress=False).interpreter, 30, 0, by_class=True)
    polytopes = distinct_polytopes(regions)
    assert len(polytopes) < len(regions)  # some regions share a polytope: drawn once
    assert len(list(out.glob("*.png"))) == len(polytopes)
    summaries = [json.loads(f.read_text()) for f in sorted(out.glob("polytope-*.json"))]
    assert sorted(s["regions"] for s in summaries) == sorted(p.regions for p in polytopes)
    assert sorted(v for s in summaries for v in s["regions"]) == list(range(len(regions)))
    assert sum(s["interprets"] for s in summaries) == len(regions.interpreter.index)
    assert f"30 regions, {len(polytopes)} distinct polytopes" in printed
    page = (out / "index.html").read_text()
    assert f"drawn once: {len(polytopes)} distinct polytopes" in page
    assert "<p class='granularity'>granularity class (the paper&#x27;s RI)</p>" in page
    assert "sub-labels" not in page  # sklearn's digits know no sub-labels
    assert all("sub_labels" not in s for s in summaries)


def test_report_shows_each_polytopes_sub_labels_on_mnist_super(tmp_path, capsys) -> None:
    """mnist-super's digits are its sub-labels: each polytope's card and JSON count the digits
    of the reference images its regions interpret."""
    index, out = tmp_path / "index", tmp_path / "report"
    fit = ["fit", "--model", "mnist_super_cnn", "--reference", "mnist-super", "--boundaries"]
    code, _, err = run([*fit, "10", "--out", str(index), "--quiet"], capsys)
    assert code == 0, err
    report = ["report", "--index", str(index), "--top-k", "1", "--regions", "10", "--quiet"]
    code, _, err = run([*report, "--out", str(out)], capsys)
    assert code == 0, err
    ws = open_index(index, progress=False)
    digits = ws.data.reference.concepts
    regions = RegionSet.build(ws.interpreter, 10, 0, by_class=True)
    region = regions.reference_assignment().region.cpu()
    page = (out / "index.html").read_text()
    summaries = [json.loads(f.read_text()) for f in sorted(out.glob("polytope-*.json"))]
    assert summaries and page.count('class="ri-sub-labels"') == len(summaries)
    for s in summaries:
        mine = torch.isin(region, torch.tensor(s["regions"]))
        counts = torch.bincount(digits[mine], minlength=10)
        shown = {int(c["name"]): c["count"] for c in s["sub_labels"]}
        assert shown == {d: int(n) for d, n in enumerate(counts.tolist()) if n}
        assert sum(shown.values()) == s["interprets"]
        text = ", ".join(f"{c['name']}: {c['count']}" for c in s["sub_labels"])
        assert f"sub-labels {text}<div" in page


def test_explain_draws_the_contrastive_map_of_a_class_asked_for(
    digits_index, tmp_path, capsys
) -> None:
    _, index = digits_index
    ws = open_index(index, progress=False)
    ri = ws.interpreter
    predicted = ri.explain(ws.normalization(ws.data.unseen.pixels(0))).predicted_class
    other = (predicted + 1) % 10
    explain = ["explain", "unseen:0", "--index", str(index), "--quiet", "--contrast"]
    code, _, err = run([*explain, ri.class_names[other], "--out", str(tmp_path / "a")], capsys)
    assert code == 0, err
    summary = json.loads((tmp_path / "a" / "unseen-0.json").read_text())
    assert summary["contrast"]["class"] == other
    assert summary["contrast"]["figure"] == f"unseen-0-vs-{other}.png"
    with Image.open(tmp_path / "a" / f"unseen-0-vs-{other}.png") as image:
        assert image.format == "PNG"
    code, _, err = run([*explain, str(predicted), "--out", str(tmp_path / "b")], capsys)
    assert code == 0, err
    summary = json.loads((tmp_path / "b" / "unseen-0.json").read_text())
    assert "figure" not in summary["contrast"]
    assert "its map is its interpretation's own" in summary["contrast"]["message"]
    code, _, err = run([*explain, "dog", "--out", str(tmp_path / "c")], capsys)
    assert_one_line_error(code, err, "--contrast dog: no such class (classes: 0, 1, 2")
    assert not (tmp_path / "c").exists()


def test_explain_and_report_draw_an_input_with_no_similar_image(
    digits_index, tmp_path, capsys
) -> None:
    _, index = digits_index
    explain = ["explain", "reference:0", "unseen:0", "--index", str(index), "--top-k", "0"]
    code, _, err = run([*explain, "--out", str(tmp_path / "x"), "--quiet"], capsys)
    assert code == 0, err
    for name in ("reference-0", "unseen-0"):
        summary = json.loads((tmp_path / "x" / f"{name}.json").read_text())
        assert summary["similar"] == [] and list(summary["masked_scores"]) == ["input"]
        with Image.open(tmp_path / "x" / f"{name}.png") as image:
            assert image.format == "PNG"


def test_fit_prints_the_models_accuracy_on_the_reference_images(digits_index, tmp_path, capsys):
    weights, _ = digits_index
    out = tmp_path / "index"
    fit = ["fit", "--model", "digits_cnn", "--weights", str(weights), "--reference", "digits"]
    code, stdout, _ = run([*fit, "--boundaries", "5", "--out", str(out), "--quiet"], capsys)
    assert code == 0
    index = open_index(out, progress=False).interpreter.index
    right = int((index.predictions == index.labels).sum())
    share = f"{100 * right / len(index):.1f}%"
    assert f"the model's accuracy on them: {share} ({right} of {len(index)})" in stdout


def test_quick_cuts_the_perturbation_metrics_and_says_so_in_its_command() -> None:
    from repinterp.cli.evaluate import prepare

    evaluate = ["evaluate", "--dataset", "digits", "--protocol", "reference", "--device", "cpu"]
    _, quick, command = prepare(build_parser().parse_args([*evaluate, "--quick"]))
    assert (quick.runs, quick.n_inputs, quick.curve_images, quick.curve_inputs) == (2, 30, 10, 2)
    assert "--quick" in command
    _, full, _ = prepare(build_parser().parse_args(evaluate))
    assert (full.runs, full.n_inputs, full.curve_images, full.curve_inputs) == (5, 200, 200, 40)


def test_explain_warns_about_an_input_far_from_every_covered_image(
    digits_index, tmp_path, capsys
) -> None:
    _, index = digits_index
    ws = open_index(index, progress=False)
    pixels = torch.stack([ws.data.unseen.pixels(3), ws.data.unseen.pixels(3) * 0 + 1.0])
    files = []
    for i, image in enumerate(pixels):  # a digit, and an all-white image unlike every digit
        files.append(tmp_path / f"{i}.png")
        Image.fromarray((image[0] * 255).round().byte().numpy()).save(files[-1])
    out = tmp_path / "explained"
    code, stdout, _ = run(
        ["explain", *map(str, files), "--index", str(index), "--out", str(out), "--quiet"], capsys
    )
    assert code == 0
    near, far = (json.loads((out / f"{i}.json").read_text()) for i in (0, 1))
    assert near["distance_percentile"] < 95 < far["distance_percentile"]
    warnings = [line for line in stdout.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: 1 lies farther from its nearest covered reference image than "
        f"{far['distance_percentile']:.1f}% of them from theirs (above 95%): it may be unlike "
        "every reference image, and its explanation a guess"
    ]
