"""The research studies (`studies/`): importing one runs nothing, and each runs on a minimal
setting and gives rows of the shape its tables read (slow: each fits or trains a little)."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import studies
from repinterp.data.datasets import load_dataset
from repinterp.evaluation.options import Options
from repinterp.evaluation.setup import load_setup
from repinterp.models.zoo import build_model
from studies import (
    architecture,
    groups_sweep,
    law,
    paired,
    rescore,
    runner,
    strategies,
    subclass,
    vgg_groups,
    vgg_seeds,
    why,
)

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parent.parent.parent
NAMES = sorted(m.name for m in pkgutil.iter_modules(studies.__path__))


def test_importing_a_study_runs_nothing() -> None:
    code = "import importlib, sys\nfor n in sys.argv[1:]: importlib.import_module('studies.' + n)"
    done = subprocess.run(
        [sys.executable, "-c", code, *NAMES], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and {"groups_sweep", "law", "why", "paired"} <= set(NAMES)
    for name in NAMES:
        assert callable(importlib.import_module(f"studies.{name}").main)


def test_summary_is_mean_and_sample_std_over_the_finite_values() -> None:
    rows = [{"a": 1.0, "b": float("nan"), "n": 3}, {"a": 3.0, "b": 2.0, "n": 4}]
    assert runner.summary(rows) == {"a": [2.0, pytest.approx(2**0.5)], "b": [2.0, 0.0]}
    assert runner.cell(runner.summary(rows), "a") == "2.0 ± 1.4"
    assert runner.cell({}, "a") == "n/a"


@pytest.mark.slow
def test_groups_sweep_measures_every_point_and_seed() -> None:
    setup = load_setup("mnist5k", n_reference=200, n_unseen=80)
    points = groups_sweep.grid("mnist5k", "features.4,features.7")
    chosen = [points[0], points[1], points[-1]]  # the default, an earlier layer, T = 4
    swept = runner.sweep(chosen, [0], groups_sweep.measurer(setup, points[0]), str)
    assert list(swept) == [str(p) for p in chosen]
    for block in swept.values():
        (row,) = block["seeds"]
        assert {"distinct_polytopes", "CVR", "accuracy", "same_side"} <= set(row)
        assert block["mean_std"]["CVR"] == [row["CVR"], 0.0]
    tempered = swept[str(chosen[-1])]["seeds"][0]
    assert tempered["same_polytope_as_T1"] == tempered["same_delta_as_T1"] == 100.0
    assert "CVR_full_kmeans" in swept[str(chosen[0])]["seeds"][0]


@pytest.mark.slow
def test_law_measures_a_layer_and_q_and_renders_the_published_tables(tmp_path: Path) -> None:
    args = law.arguments(["--reference", "80", "--unseen", "40", "--pairs", "5"])
    setup = load_setup("mnist-super", n_unseen=None)
    swept = runner.sweep([("features.7", 10), ("features.7", 20)], [0], law.measurer(setup, args))
    rows = [block["seeds"][0] for block in swept.values()]
    assert [r["n_boundaries"] for r in rows] == [10, 20]
    assert rows[0]["segment_convexity"] == rows[1]["segment_convexity"]  # once per layer
    assert {"ami", "ami_excess", "graph_convexity", "groups_per_class"} <= set(rows[0])
    published = ROOT / "docs" / "results" / "law"
    (tmp_path / "results.json").write_bytes((published / "results.json").read_bytes())
    law.main(["--render", "--out", str(tmp_path)])
    assert (tmp_path / "results.md").read_text() == (published / "results.md").read_text()
    assert (tmp_path / "law.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_strategies_row_of_a_seed() -> None:
    args = strategies.arguments(["--reference", "200", "--unseen", "80"])
    setups = {"mnist-super": load_setup("mnist-super", n_unseen=None)}
    row = strategies.measure("mnist-super", 0, args, setups)
    assert row["strategies_per_class"] >= 1 and -1 <= row["ami"] <= 1
    assert 0 <= row["inside"] <= 100 and row["ami_null_p95"] < 1
    assert all(-1 <= row[name] <= 1 for name in strategies.AMI_FIELDS if name != "ami_null")
    # a data set without sub-concepts: the polytopes only
    row = strategies.measure("digits", 0, args, {"digits": load_setup("digits", n_unseen=None)})
    assert 0 <= row["inside"] <= 100 and all(np.isnan(row[n]) for n in strategies.AMI_FIELDS)


@pytest.mark.slow
def test_subclass_rows_of_every_grouping() -> None:
    args = subclass.arguments(["--reference", "80", "--unseen", "40", "--faithful", "4"])
    setup = load_setup("mnist-super", n_unseen=None)
    out = subclass.measure(runner.draw(setup, 0, args), 0, args.faithful)
    assert set(subclass.CONTROLS) <= set(out) and {"RI", "k-means k=m", "PCX"} <= set(out)
    for name, row in out.items():
        assert {"mAD", "ROAD", "deletion"} <= set(row)
        assert len(row["per_image"]["mAD"]) == 4
        assert name in subclass.CONTROLS or {"ami", "ami_null_p95", "groups_per_class"} <= set(row)


@pytest.mark.slow
def test_vgg_groups_row_of_a_vgg() -> None:
    split = load_dataset("shapes:64", seed=0)
    model = build_model("vgg11_bn", num_classes=3, seed=0)
    reference, unseen = split.reference.subset(range(60)), split.unseen.subset(range(20))
    row = vgg_groups.row_of(model, "features.27", reference, unseen)
    assert row["feature_shape"] == [512, 4, 4]  # 64 px, four poolings
    assert {"distinct_polytopes", "subconcept_purity_shuffled", "CVR", "accuracy"} <= set(row)
    text = vgg_groups.markdown([{"model_seed": s, "layer": "features.27"} | row for s in (0, 1)])
    assert text.count("\n| features.27 | 512x4x4 |") == 1


@pytest.mark.slow
def test_vgg_seeds_rewrites_the_published_table(tmp_path: Path) -> None:
    folder = ROOT / "docs" / "results" / "shapes64-vgg11bn-seeds"
    vgg_seeds.main(["--runs", str(folder), "--out", str(tmp_path)])
    assert (tmp_path / "results.md").read_text() == (folder / "results.md").read_text()


@pytest.mark.slow
def test_why_gives_a_heading_and_a_line_per_method(tmp_path: Path) -> None:
    argv = ["--datasets", "mnist5k", "--methods", "RI,Grad-CAM", "--reference", "200"]
    why.main([*argv, "--unseen", "40", "--out", str(tmp_path)])
    heading, ri, cam = (tmp_path / "why.txt").read_text().splitlines()
    drawn = load_setup("mnist5k", n_reference=200, n_unseen=40).draw(0, Options().draw)
    n = len(drawn.reference), len(drawn.unseen_pixels)
    assert heading == f"## mnist5k: {n[0]} reference / {n[1]} unseen images" and n[0] < 200
    assert ri.startswith("RI ") and "mAD covered" in ri
    assert cam.startswith("Grad-CAM ") and "|P|" not in cam


@pytest.mark.slow
def test_paired_prints_and_writes_one_line_per_metric(tmp_path: Path, capsys) -> None:
    results = ROOT / "docs" / "results" / "shapes-unseen-controls" / "results.json"
    found = paired.main([str(results), "RI", "Grad-CAM", "--out", str(tmp_path)])
    metrics = json.loads(results.read_text())["per_run"][0]["methods"]["RI"]
    assert found and all(line.split()[0] in metrics for line in found)
    assert capsys.readouterr().out == "\n".join(found) + "\n"
    assert (tmp_path / "paired.txt").read_text() == "\n".join(found) + "\n"


@pytest.mark.slow
def test_a_rescore_of_a_committed_result_changes_no_file(tmp_path: Path, capsys) -> None:
    """Issue 44, item 5: six committed ``results.md`` named a module since moved, so that a
    rescore of the committed tree rewrote them though no verdict changed (this one among
    them; the whole tree takes minutes)."""
    folder = ROOT / "docs" / "results" / "shapes64-vgg11bn-seeds5"
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    rescore.main([str(copy)])
    assert "verdicts that move with seed 1: 0" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == {
        p.name: p.read_bytes() for p in folder.iterdir()
    }


@pytest.mark.slow
def test_the_architecture_picture_is_the_same_bytes_at_every_run(tmp_path: Path) -> None:
    """Issue 44, item 6: the arrows were drawn in the order of a set of strings, which the hash
    seed of each process changes, so each run drew other pixels."""
    for seed in ("1", "2"):
        out = str(tmp_path / seed)
        code = f"from studies import architecture; architecture.main(['--out', {out!r}])"
        env = {**os.environ, "PYTHONHASHSEED": seed, "MPLCONFIGDIR": str(tmp_path / "mpl")}
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)
    png = (tmp_path / "1" / "architecture.png").read_bytes()
    assert png == (tmp_path / "2" / "architecture.png").read_bytes()
    assert b"Software" not in png and b"matplotlib" not in png


@pytest.mark.slow
def test_architecture_draws_the_picture(tmp_path: Path) -> None:
    architecture.main(["--out", str(tmp_path)])
    assert (tmp_path / "architecture.png").read_bytes()[:4] == b"\x89PNG"
