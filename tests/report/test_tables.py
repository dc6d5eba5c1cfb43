"""The evaluation tables bold a column's best only where it is one: a tie is bold nowhere; the
reference tables and plot show both readings."""

import os

from repinterp.evaluation.comparison import compare
from repinterp.evaluation.primary import FAMILY, decide
from repinterp.evaluation.protocols import comparison_cell, overview_markdown, results_markdown


def _unseen(methods: dict[str, dict]) -> dict:
    """``unseen`` results of one run, as `evaluate` gives them (what the header needs)."""
    return {
        "protocol": "unseen",
        "dataset": "imagefolder:imgs",
        "runs": 1,
        "seeds": [0],
        "setup": {
            "model": "resnet18",
            "target_layer": "layer4",
            "n_reference": 8,
            "n_unseen": 2,
            "device": "cpu",
        },
        "options": {"n_boundaries": 50, "split": "fixed"},
        "n_regions": 20,
        "time_s": 3.0,
        "ri_fit_s": 1.0,
        "kmeans_s": 0.0,
        "machine": {"cpus": 2, "torch_threads": 2, "torch": "2", "platform": "Linux"},
        "methods": methods,
    }


def _rows(markdown: str) -> dict[str, str]:
    return {line.split(" | ")[0].lstrip("| "): line for line in markdown.splitlines()[6:]}


def test_equal_values_at_the_shown_precision_are_a_tie_bold_nowhere() -> None:
    # A layer of 1 x 1: every heat map is constant, so every method scores the same.
    same = {"mAD": 41.2501, "mAI": 3.0, "CVR": 100.0, "time_s": 1.0}
    methods = {name: dict(same) for name in ("RI", "Grad-CAM", "Grad-CAM++", "Score-CAM")}
    methods["Score-CAM"]["mAD"] = 41.2512  # 41.25 too, as shown
    markdown = results_markdown(_unseen(methods))
    assert "**" not in markdown  # RI was bold in every column, "the best"
    rows = _rows(markdown)
    assert set(rows) == set(methods) and len({row.split(" | ", 1)[1] for row in rows.values()}) == 1


def test_a_best_value_of_its_own_is_bold_and_a_tie_for_best_is_not() -> None:
    methods = {
        "RI": {"mAD": 20.0, "mAI": 9.0, "time_s": 1.0},
        "Grad-CAM": {"mAD": 30.0, "mAI": 9.001, "time_s": 1.0},
        "Score-CAM": {"mAD": 20.004, "mAI": 2.0, "time_s": 1.0},
    }
    rows = _rows(results_markdown(_unseen(methods)))
    assert "**" not in rows["RI"] + rows["Score-CAM"]  # mAD 20.00 twice: a tie for best
    assert "**" not in rows["Grad-CAM"]  # mAI 9.00 twice: a tie too
    methods["Score-CAM"]["mAD"] = 20.006  # 20.01 as shown: RI is best alone
    rows = _rows(results_markdown(_unseen(methods)))
    assert "| **20.00** |" in rows["RI"] and "**" not in rows["Score-CAM"]
    overview = overview_markdown(
        {"imgs": {**_unseen(methods), "model_acc": {"unseen": 50.0, "unseen_std": 0.0}}}
    )
    assert overview.count("**") == 2 and "| **20.00** |" in overview


def test_reference_tables_show_each_reading_with_the_images_it_scores() -> None:
    def block(mad: list[float], sizes: list[float]) -> dict:
        zeros = [0.0, 0.0]
        return {
            **{"mAD": mad, "mAD_std": zeros, "mAI": zeros, "mAI_std": zeros},
            **{"similar": sizes, "time_s": 1.0},
        }

    results = _unseen(
        {
            "RI": block([20.0, 30.0], [1.0, 2.5]),
            "Grad-CAM": block([25.0, 40.0], [1.0, 3.0]),
            "ACE": block([50.0, 60.0], [1.0, 3.0]),
        }
    )
    results["protocol"] = "reference"
    results["options"] |= {"ks": [1, 3], "curve_k": 2, "curve_inputs": 2}
    without = results_markdown(results)  # results of before the common reading
    assert "common S" not in without and "each method on its own S" in without
    results["common"] = {
        "RI": block([20.0, 30.0], [1.0, 2.5]),
        "Grad-CAM": block([25.0, 35.0], [1.0, 2.5]),
    }
    markdown = results_markdown(results)
    assert markdown.startswith(without.rstrip())  # reading (a) as it was, then (b)
    own, common = markdown.split("Common S, mean size per K: 1.0, 2.5.")
    assert "| Grad-CAM | 25.00 | 40.00 |" in own and "| Grad-CAM | 25.00 | 35.00 |" in common
    assert "choose): ACE." in common and "| ACE |" not in common
    assert common.count("every method on one common S (the images the paper's RI's P(x)") == 2


def test_the_reference_plot_has_a_row_for_each_reading(tmp_path) -> None:
    from PIL import Image

    from repinterp.report.plots import plot_reference

    curve = {"mAD": [20.0, 30.0], "mAD_std": [1.0, 1.0], "mAI": [5.0, 4.0], "mAI_std": [0, 0]}
    results = _unseen({"RI": curve, "RI+score": curve, "Grad-CAM": curve})
    results["protocol"] = "reference"
    results["options"] |= {"ks": [1, 3]}
    sizes = []
    for common in (None, {"RI": curve, "Grad-CAM": curve}):
        if common is not None:
            results["common"] = common
        with Image.open(plot_reference(results, tmp_path / f"{len(sizes)}.png")) as image:
            sizes.append(image.size)
    (width, one), (same_width, two) = sizes
    assert same_width == width and 1.8 * one < two < 2.2 * one  # own S, then RI's S below


def test_results_and_reports_are_replaced_never_written_through_links(tmp_path) -> None:
    """Issue 30, item 3: writing results (and the HTML report) again over a folder leaves a
    hard-linked backup of its files (cp -al) as it was, and the file outside the folder that a
    symbolic link there points to."""
    from repinterp.report import write_report, write_results

    methods = {"RI": {"mAD": 20.0, "mAD_std": 1.0, "mAI": 9.0, "mAI_std": 1.0, "time_s": 1.0}}
    out, backup, outside = tmp_path / "out", tmp_path / "backup", tmp_path / "outside.md"
    files = write_results(_unseen(methods), out)
    write_report(out / "index.html", "a report", "intro", [])
    backup.mkdir()
    for file in out.iterdir():
        os.link(file, backup / file.name)
    saved = {p.name: p.read_bytes() for p in backup.iterdir()}
    outside.write_text("my notes")
    (out / "results.md").unlink()
    (out / "results.md").symlink_to(outside)
    methods["RI"]["mAD"] = 30.0
    assert write_results(_unseen(methods), out) == files
    write_report(out / "index.html", "another report", "intro", [])
    assert {p.name: p.read_bytes() for p in backup.iterdir()} == saved
    assert outside.read_text() == "my notes"
    assert "30.00" in (out / "results.md").read_text()
    assert "another report" in (out / "index.html").read_text()
    assert sorted(p.name for p in out.iterdir()) == sorted(saved)  # no stray file


def test_a_paired_cell_is_bold_only_for_the_first_methods_win() -> None:
    """Bold: the first method wins; italic: the other one does; †: undecided; plain: a tie."""
    eight = [1.0, 1.2, 0.9, 1.1, 1.3, 1.0, 0.8, 1.05]  # sign-flip p = 2 / 256
    first = compare(eight, higher_is_better=True).to_dict()
    other = compare(eight, higher_is_better=False).to_dict()
    five = compare(eight[:5], higher_is_better=True).to_dict()
    tie = compare([1.0, -1.0, 0.5], higher_is_better=True).to_dict()
    assert (first["verdict"], other["verdict"], five["verdict"], tie["verdict"]) == (
        "win",
        "loss",
        "undecided",
        "tie",
    )
    t = first["t_interval"]
    assert comparison_cell(first) == (
        f"**+1.04 ± 0.16 [{first['low']:+.2f}, {first['high']:+.2f}] t [{t[0]:+.2f}, "
        f"{t[1]:+.2f}], 8/8, p 0.01**"
    )
    assert comparison_cell(other).startswith("*+1.04") and not comparison_cell(other).startswith(
        "**"
    )
    assert comparison_cell(other).endswith(", 0/8, p 0.01*")
    assert comparison_cell(five).endswith(", 5/5, p 0.06 †")
    assert comparison_cell(tie).endswith(", 2/3, p 1.00") and "*" not in comparison_cell(tie)
    one = compare([2.0], higher_is_better=True).to_dict()
    assert comparison_cell(one) == "+2.00 [+2.00, +2.00], 1/1, p 1.00 †"  # no std, no t interval


def test_a_run_with_the_primary_family_shows_its_table_first() -> None:
    """Issue 43: a run that holds the primary family opens its results.md with its table."""
    methods = {"RI": {"mAD": 40.0, "mAI": 3.0, "time_s": 1.0}}
    rows = decide({FAMILY[0]: [-4.0, -6.0, -5.0]})
    lines = results_markdown(_unseen(methods) | {"primary": rows}).splitlines()
    assert lines[2].startswith("The pre-registered primary family over all of its runs")
    assert lines[4].startswith("| endpoint | test |") and len(lines[6:12]) == len(FAMILY)
    assert lines[6].startswith("| `mnist5k` RI − Grad-CAM, mAD | t | -5.00 ± 1.00 [")
    assert "**undecided** | 3 of 15 |" in lines[6]
    assert "primary family" not in results_markdown(_unseen(methods))
