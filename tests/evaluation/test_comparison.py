"""Paired comparisons (`evaluation.comparison`): the two-level bootstrap interval on cases with
a known answer, and the win rule."""

from __future__ import annotations

import numpy as np
import pytest

from repinterp.evaluation.comparison import (
    bootstrap_interval,
    compare,
    is_win,
    paired_comparisons,
)


def test_constant_differences_give_a_degenerate_interval_at_their_value() -> None:
    low, high = bootstrap_interval([np.full(50, 1.25), np.full(30, 1.25), np.full(8, 1.25)])
    assert low == high == pytest.approx(1.25)


def test_nan_values_and_runs_without_values_are_left_out() -> None:
    units = [[2.0, np.nan, 2.0], [np.nan], [2.0]]
    assert bootstrap_interval(units) == pytest.approx((2.0, 2.0))
    assert all(np.isnan(bootstrap_interval([[np.nan]])))


def test_one_runs_interval_is_the_normal_one_of_its_images() -> None:
    """One run of n images from N(mu, 1): the interval covers the sample mean, its width is
    2 x 1.96 / sqrt(n) within sampling error, and it halves when n quadruples."""
    rng = np.random.default_rng(0)
    widths = {}
    for n in (400, 1600):
        values = rng.normal(3.0, 1.0, n)
        low, high = bootstrap_interval([values], draws=4000, seed=1)
        assert low < values.mean() < high and low < 3.0 < high
        assert high - low == pytest.approx(2 * 1.96 * values.std(ddof=1) / np.sqrt(n), rel=0.1)
        assert values.mean() - low == pytest.approx(high - values.mean(), rel=0.15)  # symmetric
        widths[n] = high - low
    assert widths[400] / widths[1600] == pytest.approx(2.0, rel=0.15)


def test_runs_resampled_across_runs_give_the_spread_of_the_run_means() -> None:
    """Runs constant within themselves: only the runs vary, and the interval is that of a mean
    of R values, 2 x 1.96 x sd / sqrt(R) wide."""
    means = np.random.default_rng(2).normal(0.5, 2.0, 200)
    low, high = bootstrap_interval([np.full(20, m) for m in means], draws=4000, seed=3)
    assert low < means.mean() < high
    assert high - low == pytest.approx(2 * 1.96 * means.std(ddof=1) / np.sqrt(200), rel=0.1)


def test_the_interval_is_seeded() -> None:
    units = [np.random.default_rng(4).normal(size=60) for _ in range(3)]
    assert bootstrap_interval(units, seed=7) == bootstrap_interval(units, seed=7)
    assert bootstrap_interval(units, seed=7) != bootstrap_interval(units, seed=8)


@pytest.mark.parametrize(
    ("differences", "interval", "win"),
    [
        ([1.0, 2.0, 0.5], (0.4, 1.9), True),
        ([-1.0, -2.0, -0.5], (-1.9, -0.4), True),
        ([1.0, 2.0, 0.5], (-0.1, 1.9), False),  # the interval holds 0
        ([1.0, -2.0, 3.5], (0.1, 3.0), False),  # not the same sign in every run
        ([1.0, 0.0, 3.5], (0.1, 3.0), False),  # a run with no difference
        ([1.0, 2.0], (-2.0, -1.0), False),  # the interval on the other side
        ([], (1.0, 2.0), False),
    ],
)
def test_the_win_rule(differences, interval, win) -> None:
    assert is_win(differences, interval) is win


def test_compare_counts_the_better_runs_by_the_scores_direction() -> None:
    units = [np.full(10, d) for d in (-1.0, -2.0, -3.0)]
    lower = compare([-1.0, -2.0, -3.0], higher_is_better=False, units=units)
    assert (lower.better, lower.runs, lower.win, lower.levels) == (3, 3, True, "runs and images")
    assert lower.mean == pytest.approx(-2.0) and lower.std == pytest.approx(1.0)
    assert -3.0 <= lower.low < lower.high <= -1.0
    higher = compare([-1.0, -2.0, -3.0], higher_is_better=True)
    assert higher.better == 0 and higher.win and higher.levels == "runs"


def test_paired_comparisons_of_runs_per_k_and_pooled() -> None:
    """Two methods over three runs: per-image units for mAD (scalar score), per-K units for
    ROAD (one list per K, the second K not scored)."""
    rng = np.random.default_rng(5)
    runs = []
    for _ in range(3):
        a, b = rng.normal(10, 1, 40), rng.normal(12, 1, 40)
        road_a, road_b = rng.normal(1, 1, 6), rng.normal(0, 1, 6)
        runs.append(
            {
                "methods": {
                    "A": {"mAD": a.mean(), "ROAD": [road_a.mean(), np.nan]},
                    "B": {"mAD": b.mean(), "ROAD": [road_b.mean(), np.nan]},
                },
                "units": {
                    "methods": {
                        "A": {"mAD": a.tolist(), "ROAD": [road_a.tolist(), []]},
                        "B": {"mAD": b.tolist(), "ROAD": [road_b.tolist(), []]},
                    }
                },
            }
        )
    out = paired_comparisons(runs, "A", "B")
    mad = out["mAD"]
    assert mad["better"] == 3 and mad["win"] and mad["high"] < 0
    assert mad["mean"] == pytest.approx(np.mean(mad["differences"]))
    assert len(out["ROAD"]) == 2 and out["ROAD"][1] is None
    assert out["ROAD"][0]["levels"] == "runs and images"
    assert set(out) == {"mAD", "ROAD"}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    """``unseen`` and ``reference`` on the bundled digits CNN, 3 runs, written to folders."""
    import torch

    from repinterp.evaluation.options import Options
    from repinterp.evaluation.protocols import evaluate
    from repinterp.evaluation.setup import load_setup
    from repinterp.report.tables import write_results

    torch.set_num_threads(1)
    setup = load_setup("digits", n_reference=150, n_unseen=40)
    options = Options(
        runs=3,
        n_boundaries=8,
        n_regions=10,
        n_inputs=4,
        ks=(1, 3),
        progress=False,
        metrics=("AD", "ROAD"),
        curve_images=6,
        curve_inputs=2,
        curve_k=1,
        score_images=3,
        methods=("RI", "Grad-CAM", "Grad-CAM+class"),
    )
    out = {}
    for protocol in ("unseen", "reference"):
        folder = tmp_path_factory.mktemp(protocol)
        results = evaluate(setup, protocol, options)
        write_results(results, folder)
        out[protocol] = (results, folder)
    return out


@pytest.mark.parametrize("protocol", ["unseen", "reference"])
def test_results_hold_every_pair_and_units_json_recomputes_them(written, protocol) -> None:
    import json

    _, folder = written[protocol]
    saved = json.loads((folder / "results.json").read_text())
    units = json.loads((folder / "units.json").read_text())
    assert not any("units" in run for run in saved["per_run"]) and len(units) == 3
    runs = [run | {"units": u} for run, u in zip(saved["per_run"], units, strict=True)]
    readings = ("methods", "common") if protocol == "reference" else ("methods",)
    assert tuple(saved["paired"]) == readings
    for reading in readings:
        pairs = saved["paired"][reading]
        assert {a: list(b) for a, b in pairs.items()} == {
            "RI": ["Grad-CAM", "Grad-CAM+class"],
            "Grad-CAM": ["Grad-CAM+class"],
        }
        again = paired_comparisons(runs, "RI", "Grad-CAM+class", reading)
        assert json.loads(json.dumps(again).replace("NaN", "null")) == pairs["RI"]["Grad-CAM+class"]
        mad = pairs["RI"]["Grad-CAM"]["mAD"]
        first = mad if protocol == "unseen" else mad[0]
        per_run = [
            np.subtract(run[reading]["RI"]["mAD"], run[reading]["Grad-CAM"]["mAD"]) for run in runs
        ]
        per_run = per_run if protocol == "unseen" else [d[0] for d in per_run]
        assert first["differences"] == pytest.approx(per_run)
        assert first["levels"] == "runs and images" and first["low"] <= first["high"]
    # a run's mean is the mean of its units (to their 4 decimals)
    for run in runs:
        for name, block in run["methods"].items():
            for key in ("mAD", "ROAD"):
                values = run["units"]["methods"][name][key]
                if protocol == "reference":
                    values, block_value = values[0], block[key][0]
                else:
                    block_value = block[key]
                finite = [v for v in values if v is not None]
                assert np.mean(finite) == pytest.approx(block_value, abs=1e-3)
    text = (folder / "results.md").read_text()
    assert "Paired differences RI − each other method" in text
    assert "| RI − Grad-CAM+class |" in text
