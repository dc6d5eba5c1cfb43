"""The shortcut protocol's measures (exact values on hand-built cases) and the protocol."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from repinterp.data.cues import MARKS
from repinterp.evaluation.groupings import ami_null
from repinterp.evaluation.options import Options
from repinterp.evaluation.protocols import evaluate
from repinterp.evaluation.protocols import shortcut as sc
from repinterp.evaluation.setup import WEIGHTS_DIR, load_setup
from repinterp.report import write_results

from ..commandline import assert_one_line_error, run


def test_f1_marked_scores_the_group_holding_most_marked_images() -> None:
    # group 0 holds 2 of the 3 marked images in 3 images: F1 = 2 * 2 / (3 + 3)
    assert sc.f1_marked([0, 0, 0, 1, 1, 2], [1, 1, 0, 1, 0, 0]) == pytest.approx(4 / 6)
    # a tie of 1 marked image each: "a" (2 images) 2/4, "b" (1 image) 2/3; the better is kept
    assert sc.f1_marked(["a", "a", "b"], [True, False, True]) == pytest.approx(2 / 3)
    assert sc.f1_marked([5, 5, 7, 7], [False, False, True, True]) == 1.0
    assert sc.f1_marked([0, 0, 0], [True, True, True]) == 1.0  # one group: all of them
    assert math.isnan(sc.f1_marked([0, 1], [False, False]))
    with pytest.raises(ValueError, match=r"^3 group labels for 2 marked flags$"):
        sc.f1_marked([0, 1, 2], [True, False])


def test_mass_in_box_is_the_positive_share_on_the_box_and_uniform_gets_the_area() -> None:
    maps = torch.zeros(4, 4, 5)
    maps[0] = 1.0  # uniform: the box's area share
    maps[1, 0:2, 1:3] = 2.0  # all on the box
    maps[1, 3, :] = -5.0  # negative relevance counts as none
    maps[2, 0, 1], maps[2, 3, 4] = 1.0, 3.0  # a quarter on the box
    shares, area = sc.mass_in_box(maps, (1, 0, 3, 2))  # x 1..2, y 0..1: 4 of 20 pixels
    assert area == pytest.approx(4 / 20)
    assert shares[:3].tolist() == pytest.approx([4 / 20, 1.0, 0.25])
    assert math.isnan(shares[3])  # no positive relevance
    for bad in ((0, 0, 6, 1), (2, 0, 2, 1), (-1, 0, 1, 1)):
        with pytest.raises(ValueError, match=r"^the box .* is not inside N x 4 x 5 maps$"):
            sc.mass_in_box(maps, bad)


def test_mass_on_cue_reads_each_images_own_cue() -> None:
    maps = torch.zeros(2, 3, 4)
    maps[0, 0, 0], maps[0, 2, 3] = 1.0, 3.0
    maps[1] = 1.0
    cue = torch.zeros(2, 3, 4, dtype=torch.bool)
    cue[0, 2, 3] = True  # image 0: its cue holds 3 of its 4 units
    cue[1, :2, :2] = True  # image 1: a uniform map puts the area there
    shares, area = sc.mass_on_cue(maps, cue)
    assert shares.tolist() == pytest.approx([0.75, 4 / 12])
    assert area.tolist() == pytest.approx([1 / 12, 4 / 12])
    with pytest.raises(ValueError, match=r"^cue masks \(1, 3, 4\) for maps \(2, 3, 4\)$"):
        sc.mass_on_cue(maps, cue[:1])


def test_model_ranks_are_the_audits_model_wide_ranks() -> None:
    strategies = [
        SimpleNamespace(id=id_, audit=SimpleNamespace(model_rank=rank))
        for id_, rank in ((0, 4), (1, 1), (2, 2), (3, 3))
    ]
    assert sc.model_ranks(strategies) == {1: 1, 2: 2, 3: 3, 0: 4}


def test_told_shares_count_each_reading_over_its_own_images() -> None:
    # 40 cued images in all; 30 the model calls by the cue (looked at), in three strategies:
    # a flagged cued one (18 of 20), a flagged mixed one (8 of 30) and an unflagged one (4 of 50)
    rows = [(True, 20, 18), (True, 30, 8), (False, 50, 4)]
    table = [
        {"flagged": f, "unseen": n, "cued": c, "cued_strategy": 2 * c >= n} for f, n, c in rows
    ]
    told = sc.told_shares(table, looked=30, all_cued=40)
    assert told["told_flagged"] == pytest.approx(100 * 18 / 40)  # a flagged cued strategy
    assert told["told_decided"] == pytest.approx(100 * 18 / 30)  # the same, of those looked at
    assert told["told_any"] == pytest.approx(100 * 26 / 30)  # any flagged strategy
    assert told["clean_told"] == pytest.approx(100 * (2 + 22) / (2 + 22 + 46))  # uncued ones
    nothing = sc.told_shares(
        [{"flagged": False, "unseen": 0, "cued": 0, "cued_strategy": False}], 0, 0
    )
    assert all(math.isnan(v) for v in nothing.values())


def test_grouping_scores_against_the_marked_flag_within_each_class() -> None:
    rng = np.random.default_rng(0)
    classes = np.repeat([0, 1], 20)
    marked = np.tile([True] * 5 + [False] * 15, 2)
    features = torch.from_numpy(rng.normal(size=(40, 3)) + 10 * marked[:, None]).float()
    perfect = sc.grouping_scores(marked.astype(int), marked, classes, features)
    assert perfect["ami"] == pytest.approx(1.0) and perfect["ami_ceiling"] == pytest.approx(1.0)
    keys = [(int(c), int(m)) for c, m in zip(classes, marked, strict=True)]
    null, p95 = ami_null(keys, torch.from_numpy(marked).long(), classes)
    assert (perfect["ami_null"], perfect["ami_null_p95"]) == (null, p95) and p95 < 0.5
    # groups are per class: the marked group of class 0 holds 5 of the 10 marked images
    assert perfect["f1_marked"] == pytest.approx(2 * 5 / (5 + 10)) and perfect["groups"] == 4
    one = sc.grouping_scores(np.zeros(40, int), marked, classes, features)
    assert one["ami"] == pytest.approx(0.0) and one["groups"] == 2
    assert one["f1_marked"] == pytest.approx(2 * 5 / (20 + 10))


def test_target_class_of_the_marked_sets_and_refusal_of_others() -> None:
    assert sc.target_class("mnist-mark:0.3") == MARKS["mnist"].target == 1
    assert sc.target_class("shapes-mark:0") == 1
    assert sc.target_class("shapes-markrand:0.2") is None
    for kind in ("move", "texture", "majority"):
        assert sc.target_class(f"mnist-{kind}:0.3") == 1
    with pytest.raises(ValueError, match=r"^the shortcut protocol runs on .*, not 'shapes'$"):
        sc.target_class("shapes")


def test_cli_refuses_the_shortcut_protocol_on_another_data_set(capsys) -> None:
    argv = ["evaluate", "--dataset", "mnist5k", "--protocol", "shortcut", "--quick"]
    code, _, err = run(argv, capsys)
    assert_one_line_error(
        code, err, "the shortcut protocol runs on a planted cue (FAMILY-mark:F, FAMILY-move:F"
    )
    argv = ["evaluate", "--dataset", "mnist-mark:1.5", "--protocol", "shortcut", "--quick"]
    code, _, err = run([*argv, "--model-seeds", "2"], capsys)
    assert_one_line_error(
        code, err, "mnist-mark:F needs a number F in [0, 1], got 'mnist-mark:1.5'"
    )


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_protocol_scores_every_grouping_and_map_and_takes_one_line_registrations(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    setup = load_setup(
        "mnist-markrand:0.3",
        "mnist_cnn",
        WEIGHTS_DIR / "mnist_cnn.safetensors",
        n_reference=300,
        n_unseen=60,
    )
    marked = setup.unseen.marked
    monkeypatch.setitem(sc.GROUPINGS, "oracle", lambda images: images.marked.long().numpy())
    uniform = lambda images: torch.ones(len(images.unseen), 28, 28)  # noqa: E731
    monkeypatch.setitem(sc.MAPS, "uniform", uniform)
    options = Options(runs=1, n_regions=10, progress=False, split="fixed", score_images=3)
    results = evaluate(setup, "shortcut", options)
    assert list(results["groupings"]) == [*sc.GROUPINGS]
    assert list(results["maps"]) == [*sc.MAPS]
    assert results["images"] == 60 and results["marked"] == int(marked.sum()) > 0
    assert math.isnan(results["marked_to_target"])  # a control: no target class
    assert results["box_area"] == pytest.approx(100 * 16 / 784)
    oracle = results["groupings"]["oracle"]
    assert oracle["ami"] == pytest.approx(1.0)
    assert oracle["audit_rank"] >= 1 and oracle["flagged_groups"] >= 0  # the audit ranked it
    classes = setup.predictions["unseen"]
    keys = [(int(c), int(m)) for c, m in zip(classes, marked, strict=True)]
    assert oracle["f1_marked"] == pytest.approx(sc.f1_marked(keys, marked))
    assert results["maps"]["uniform"]["mass_in_box"] == pytest.approx(results["box_area"])
    for name, block in results["groupings"].items():
        assert 0 <= block["f1_marked"] <= 1 and block["groups"] >= 1, name
    for block in results["maps"].values():
        assert 0 <= block["mass_in_box"] <= 100 and block["box_area"] == results["box_area"]
    per_image = results["per_run"][0]["units"]["maps"]["RI"]["mass_in_box"]
    assert len(per_image) == int(marked.sum())
    assert np.nanmean(per_image) == pytest.approx(results["maps"]["RI"]["mass_in_box"], abs=1e-3)
    assert set(results["paired"]) == {"groupings", "maps"}
    table = results["per_run"][0]["strategies"]
    audit = results["strategy_audit"]
    assert [row["model_rank"] for row in table] == list(range(1, len(table) + 1))
    assert audit["strategies"] == len(table) and audit["flagged"] == sum(
        r["flagged"] for r in table
    )
    assert audit["flagged_share"] == pytest.approx(100 * audit["flagged"] / len(table))
    assert sum(row["unseen"] for row in table) == 60  # every unseen image has its strategy
    shortcut = [row for row in table if row["shortcut"]]
    assert len(shortcut) == 1 and shortcut[0]["cued"] == max(row["cued"] for row in table)
    assert audit["shortcut_model_rank"] == shortcut[0]["model_rank"]
    assert audit["told"] == pytest.approx(100 * shortcut[0]["cued"] / int(marked.sum()))
    cued = [row for row in table if row["cued_strategy"]]
    assert all(2 * row["cued"] >= row["unseen"] > 0 for row in cued)
    assert all(
        2 * row["cued"] < row["unseen"] or not row["unseen"] for row in table if row not in cued
    )
    told = sum(row["cued"] for row in cued if row["flagged"])
    assert audit["told_flagged"] == pytest.approx(100 * told / int(marked.sum()))
    # over the cued images looked at (predicted the cue's class), each assigned one strategy
    assert audit["told_decided"] == pytest.approx(100 * told / sum(row["cued"] for row in table))
    assert audit["flagged_uncued"] == sum(r["flagged"] and r not in cued for r in table)
    told_any = sum(row["cued"] for row in table if row["flagged"])
    assert audit["told_any"] == pytest.approx(100 * told_any / sum(row["cued"] for row in table))
    clean = [(row["unseen"] - row["cued"], row["flagged"]) for row in table]
    assert audit["clean_told"] == pytest.approx(
        100 * sum(n for n, f in clean if f) / sum(n for n, _ in clean)
    )
    assert audit["first_cued"] == float(table[0]["flagged"] and table[0]["cued_strategy"])
    assert {row["class"] for row in table} <= set(setup.unseen.class_names)
    files = {path.name for path in write_results(results, tmp_path)}
    assert files >= {"results.json", "results.md", "units.json", "mnist-markrand-0.3-shortcut.png"}
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["groupings"]["RI"]["audit_rank"] == results["groupings"]["RI"]["audit_rank"]
    markdown = (tmp_path / "results.md").read_text()
    assert "| Grouping | F1 marked | AMI |" in markdown and "| oracle | " in markdown
    assert written["per_run"][0]["strategies"] == json.loads(json.dumps(table))
    assert "| Rank | class | id | size | score | flagged | cued | reasons |" in markdown


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_protocol_reads_each_images_own_cue_and_audits_the_whole_model() -> None:
    setup = load_setup(
        "mnist-majority:0.9",
        "mnist_cnn",
        WEIGHTS_DIR / "mnist_cnn.safetensors",
        n_reference=300,
        n_unseen=80,
    )
    options = Options(runs=1, n_regions=10, progress=False, split="fixed", score_images=3)
    results = evaluate(setup, "shortcut", options)
    cue = setup.unseen.cue_masks
    looked = setup.predictions["unseen"] == 1  # the watermark's class
    assert results["box_area"] == pytest.approx(100 * float(cue[looked].double().mean()))
    assert results["box_area"] == pytest.approx(100 * (28 * 28 - 24 * 24) / (28 * 28))
    audit = results["strategy_audit"]
    table = results["per_run"][0]["strategies"]
    shortcut = next(row for row in table if row["shortcut"])
    assert shortcut["class"] == "1" and audit["cue_area"] == pytest.approx(results["box_area"])
    assert audit["told"] == pytest.approx(100 * shortcut["cued"] / int(setup.unseen.marked.sum()))
    for key in ("why_on_cue", "gradcam_on_cue"):
        assert 0 <= audit[key] <= 100
    assert {row["class"] for row in table} == set(setup.unseen.class_names)  # every class
