"""Paired comparisons (`evaluation.comparison`): the two-level bootstrap interval on cases with
a known answer, the t interval, sign-flip p and Holm correction against brute force, scipy and
a hand computation, and the verdict."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from repinterp.evaluation.comparison import (
    apply_holm,
    bootstrap_interval,
    bootstrap_with_error,
    compare,
    holm,
    is_win,
    paired_comparisons,
    paired_family,
    sign_flip_p,
    t_interval,
    verdict,
)


def test_constant_differences_give_a_degenerate_interval_at_their_value() -> None:
    low, high, mc_error = bootstrap_with_error(
        [np.full(50, 1.25), np.full(30, 1.25), np.full(8, 1.25)]
    )
    assert low == high == pytest.approx(1.25) and mc_error == pytest.approx(0.0)


def test_nan_values_and_runs_without_values_are_left_out() -> None:
    units = [[2.0, np.nan, 2.0], [np.nan], [2.0]]
    assert bootstrap_with_error(units) == pytest.approx((2.0, 2.0, 0.0))
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


def test_the_monte_carlo_error_is_the_seed_to_seed_spread_of_the_interval_ends() -> None:
    rng = np.random.default_rng(6)
    units = [rng.normal(m, 2.0, 30) for m in (0.3, 0.8, -0.1, 0.5)]
    ends = np.array([bootstrap_with_error(units, draws=1000, seed=s) for s in range(30)])
    spread = ends[:, :2].std(0, ddof=1).max()
    assert ends[:, 2].mean() == pytest.approx(spread, rel=0.5)


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
def test_the_rule_issue_29_was_written_with(differences, interval, win) -> None:
    assert is_win(differences, interval) is win


def test_the_t_interval_is_scipys_and_undefined_for_one_run() -> None:
    d = [1.5, -0.25, 2.0, 0.75, 3.0]
    expected = stats.t.interval(0.95, 4, loc=np.mean(d), scale=stats.sem(d))
    assert t_interval(d) == pytest.approx(expected)
    assert t_interval([*d, np.nan]) == pytest.approx(expected)
    assert t_interval([1.0]) is None


def _brute_sign_flip(d: list[float]) -> float:
    observed = abs(sum(d))
    flips = list(itertools.product((1, -1), repeat=len(d)))
    at_least = sum(
        abs(sum(s * v for s, v in zip(signs, d, strict=True))) >= observed - 1e-9 for signs in flips
    )
    return at_least / len(flips)


@pytest.mark.parametrize(
    "d",
    [
        [1.0, 2.0, 0.5, 3.0, 0.25],  # every sign the same: the smallest p, 2 / 32
        [1.0, -2.0, 0.5, 3.0, 0.25],
        [1.0, -1.0, 2.0, -2.0],  # ties: every flip reaches |0|
        [0.3],
        list(np.random.default_rng(7).normal(0.4, 1.0, 17)),  # past the 2^16 flips at a time
    ],
)
def test_the_sign_flip_p_is_the_brute_force_one(d) -> None:
    assert sign_flip_p(d) == pytest.approx(_brute_sign_flip(d))


def test_five_runs_cannot_go_below_0_0625() -> None:
    assert sign_flip_p([1.0, 2.0, 0.5, 3.0, 0.25]) == 0.0625
    assert sign_flip_p([np.nan]) is None


def test_holm_against_a_hand_computation() -> None:
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


@pytest.mark.parametrize(
    ("d", "higher", "bootstrap", "t", "p", "expected"),
    [
        ([1.0, 2.0], True, (0.5, 1.5), (0.2, 2.8), 0.01, "win"),
        ([1.0, 2.0], False, (0.5, 1.5), (0.2, 2.8), 0.01, "loss"),  # lower is better: b wins
        ([-1.0, -2.0], False, (-1.5, -0.5), (-2.8, -0.2), 0.01, "win"),
        ([1.0, 2.0], True, (0.5, 1.5), (0.2, 2.8), 0.06, "undecided"),  # p too large
        ([1.0, 2.0], True, (0.5, 1.5), (-0.2, 2.8), 0.01, "undecided"),  # t holds 0
        ([1.0, 2.0], True, (-0.5, 1.5), (0.2, 2.8), 0.01, "undecided"),  # bootstrap holds 0
        ([1.0], True, (0.5, 1.5), None, 0.01, "undecided"),  # no t interval
        ([1.0, -2.0], True, (0.5, 1.5), (0.2, 2.8), 0.01, "tie"),  # signs differ
        ([1.0, 0.0], True, (0.5, 1.5), (0.2, 2.8), 0.01, "tie"),  # a run with no difference
        ([], True, (0.5, 1.5), None, None, "tie"),
    ],
)
def test_the_verdict(d, higher, bootstrap, t, p, expected) -> None:
    assert verdict(d, higher, bootstrap, t, p) == expected


def test_a_verdict_holds_across_monte_carlo_seeds() -> None:
    """Eight runs with the same sign: a win, under both seeds; five: undecided."""
    rng = np.random.default_rng(8)
    units = [rng.normal(m, 3.0, 200) for m in (0.9, 1.2, 0.6, 1.5, 0.8, 1.1, 0.7, 1.3)]
    means = [u.mean() for u in units]
    assert all(m > 0 for m in means)
    calls = [compare(means, True, units, seed=s) for s in (0, 1)]
    assert [c.verdict for c in calls] == ["win", "win"]
    assert all(c.low - 4 * c.mc_error > 0 for c in calls)
    five = compare(means[:5], True, units[:5])
    assert (five.verdict, five.p_signflip, five.win) == ("undecided", 0.0625, False)


def test_compare_counts_the_better_runs_by_the_scores_direction() -> None:
    units = [np.full(10, d) for d in (-1.0, -2.0, -3.0)]
    lower = compare([-1.0, -2.0, -3.0], higher_is_better=False, units=units)
    assert (lower.better, lower.runs, lower.levels) == (3, 3, "runs and images")
    assert (lower.verdict, lower.p_signflip) == ("undecided", 0.25)  # 3 runs: p >= 2 / 8
    assert lower.mean == pytest.approx(-2.0) and lower.std == pytest.approx(1.0)
    assert -3.0 <= lower.low < lower.high <= -1.0
    assert lower.t_interval == pytest.approx(t_interval([-1.0, -2.0, -3.0]))
    higher = compare([-1.0, -2.0, -3.0], higher_is_better=True)
    assert higher.better == 0 and higher.levels == "runs"


def test_apply_holm_corrects_the_whole_family_in_place() -> None:
    strong = [1.0, 1.2, 0.9, 1.1, 1.3, 1.0, 0.8]  # p = 2 / 128
    tree = {
        "methods": {
            "A": {"B": {"mAD": compare(strong, False).to_dict(), "ROAD": [None]}},
            "B": {"C": {"ROAD": [compare(strong, True).to_dict(), None]}},
        }
    }
    alone = tree["methods"]["A"]["B"]["mAD"]
    assert (alone["p_holm"], alone["verdict"]) == (2 / 128, "loss")
    assert apply_holm(tree) == 2
    for c in (alone, tree["methods"]["B"]["C"]["ROAD"][0]):
        assert c["p_holm"] == pytest.approx(4 / 128) and c["p_signflip"] == 2 / 128
    assert tree["methods"]["B"]["C"]["ROAD"][0]["verdict"] == "win"


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
    assert mad["better"] == 3 and mad["verdict"] == "undecided" and mad["high"] < 0
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
    from repinterp.report import write_results

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
    assert json.loads(json.dumps(paired_family(runs)).replace("NaN", "null")) == saved["paired"]
    for reading in readings:
        assert {a: list(b) for a, b in saved["paired"][reading].items()} == {
            "RI": ["Grad-CAM", "Grad-CAM+class"],
            "Grad-CAM": ["Grad-CAM+class"],
        }
    for reading in readings:
        pairs = saved["paired"][reading]
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
