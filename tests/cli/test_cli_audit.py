"""``repinterp audit``: the strategies of an index fitted at ``granularity="strategy"``."""

import html
import json
from pathlib import Path

import numpy as np
from PIL import Image

from repinterp.strategies.audit import FLAG_SCORE, REASONS

from ..commandline import FIT, assert_one_line_error, run


def test_audit_lists_every_strategy_of_a_strategy_index(tmp_path, capsys, one_thread) -> None:
    index, out = tmp_path / "index", tmp_path / "audit"
    code, _, err = run([*FIT, "--granularity", "strategy", "--out", str(index)], capsys)
    assert code == 0, err
    code, stdout, err = run(["audit", "--index", str(index), "--out", str(out)], capsys)
    assert code == 0, err
    audit = json.loads((out / "audit.json").read_text())
    manifest = json.loads((index / "manifest.json").read_text())
    assert audit["granularity"].startswith("granularity strategy")
    members = [m for c in audit["classes"] for s in c["strategies"] for m in s["members"]]
    assert sorted(members) == list(range(manifest["n_reference"]))  # each image in one strategy
    names = manifest["class_names"]
    entries = {s["id"]: s for c in audit["classes"] for s in c["strategies"]}
    for c in audit["classes"]:
        ranks = [s["rank"] for s in c["strategies"]]
        assert ranks == list(range(1, len(ranks) + 1))  # listed in the audit's order
        assert sum(s["main"] for s in c["strategies"]) == 1
        for s in c["strategies"]:
            assert s["predicted_class"] == c["class"] and s["input"] == s["members"][0]
            assert 0 <= s["inside"] <= 1 and s["flagged"] == (s["score"] >= FLAG_SCORE)
            assert s["member_names"] == [f"reference:{m}" for m in s["members"]]  # all of them
            assert s["class_name"] == names[c["class"]] == c["class_name"]
            assert s["runner_up_name"] == names[s["runner_up"]]
            assert set(s["reasons"]) == set(REASONS)
    # one ranking over the whole model, highest score first, as the page lists them
    ranking = audit["ranking"]
    assert [r["model_rank"] for r in ranking] == list(range(1, len(entries) + 1))
    assert [r["score"] for r in ranking] == sorted((r["score"] for r in ranking), reverse=True)
    assert all(entries[r["id"]]["model_rank"] == r["model_rank"] for r in ranking)
    page = (out / "index.html").read_text()
    assert page.count("class='strategy") == audit["strategies"] and "<img " in page
    cards = [page.index(f"id='strategy-{r['id']}'") for r in ranking]
    assert cards == sorted(cards) and page.index("class='ranking'") < cards[0]
    assert html.escape(audit["strategy"]) in page and html.escape(audit["flag"]) in page
    first = entries[ranking[0]["id"]]
    assert first["member_names"][0] in page and "why map" in page  # members named, why shown
    assert f"audit of {audit['strategies']} strategies" in stdout


def test_audit_of_a_class_index_is_one_line(tmp_path, capsys) -> None:
    index = tmp_path / "index"
    assert run([*FIT, "--out", str(index)], capsys)[0] == 0
    code, _, err = run(["audit", "--index", str(index), "--out", str(tmp_path / "a")], capsys)
    assert_one_line_error(code, err, "granularity 'class': the audit needs an index")
    assert not (tmp_path / "a" / "audit.json").exists()


def test_the_report_of_a_strategy_index_has_the_strategies(tmp_path, capsys, one_thread) -> None:
    index, out = tmp_path / "index", tmp_path / "report"
    assert run([*FIT, "--granularity", "strategy", "--out", str(index)], capsys)[0] == 0
    code, _, err = run(["report", "--index", str(index), "--out", str(out)], capsys)
    assert code == 0, err
    audit = json.loads((out / "audit.json").read_text())
    assert "strategies.html" in (out / "index.html").read_text()
    assert (out / "strategies.html").read_text().count("class='strategy") == audit["strategies"]


def _image_folder(root: Path, per_class: int, same: str | None = None) -> Path:
    """``per_class`` 32 x 32 images in each of three classes (one colour channel at 255),
    those of class ``same`` all one picture."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(("circle", "square", "star")):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
            pixels[..., c] = 255
            if name == same:
                pixels[:] = 200
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


FOLDER_FIT = ["fit", "--model", "shapes_cnn", "--image-size", "32", "--boundaries", "3"]
FOLDER_FIT += ["--granularity", "strategy", "--quiet"]


def test_no_member_tiles_draws_the_pages_of_an_image_folder(tmp_path, capsys, one_thread) -> None:
    """Issue 44, item 2: ``audit --members 0`` and ``report --top-k 0`` ended in an IndexError
    (``ReferenceSet.gather([])`` of an image folder)."""
    folder = _image_folder(tmp_path / "imgs", 6)
    index = tmp_path / "index"
    code, _, err = run(
        [*FOLDER_FIT, "--reference", f"imagefolder:{folder}", "--out", str(index)], capsys
    )
    assert code == 0, err
    code, _, err = run(
        ["audit", "--index", str(index), "--out", str(tmp_path / "a"), "--members", "0"], capsys
    )
    assert code == 0, err
    page, audit = (tmp_path / "a" / "index.html").read_text(), tmp_path / "a" / "audit.json"
    n = json.loads(audit.read_text())["strategies"]
    assert page.count("class='strategy") == n > 0
    assert page.count('class="ri-tile"') == n  # each strategy's mean maps, no member tile
    report = ["report", "--index", str(index), "--out", str(tmp_path / "r"), "--top-k", "0"]
    code, _, err = run([*report, "--regions", "3"], capsys)
    assert code == 0, err
    strategies_page = (tmp_path / "r" / "strategies.html").read_text()
    assert strategies_page.count('class="ri-tile"') == strategies_page.count("class='strategy")
