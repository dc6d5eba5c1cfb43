"""The pre-registered primary family (`evaluation.primary`): TOST and the t test on hand-made
cases with closed-form answers, TOST's duality with the 90 % t interval, and Holm's verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from repinterp.evaluation.comparison import holm, t_interval
from repinterp.evaluation.primary import FAMILY, Endpoint, decide, primary_table, t_test_p, tost

# With 2 degrees of freedom the t distribution's CDF is 1/2 + t / (2 sqrt(2 + t^2)).


def test_tost_of_a_hand_made_case() -> None:
    """[1, 2, 3] within ±4: mean 2, se 1/sqrt(3); the upper test's t is -2 sqrt(3), p = 1/2 -
    sqrt(3/14); the lower one's 6 sqrt(3), p = 1/2 - sqrt(27/110); TOST's p is the larger."""
    assert tost([1, 2, 3], 4) == pytest.approx(0.5 - math.sqrt(3 / 14), rel=1e-12)
    assert tost([-3, -2, -1], 4) == pytest.approx(0.5 - math.sqrt(3 / 14), rel=1e-12)
    assert tost([1, 2, 3, math.nan], 4) == tost([1, 2, 3], 4)


def test_the_t_test_of_a_hand_made_case() -> None:
    """[1, 2, 3]: t = 2 sqrt(3) on 2 degrees of freedom, two-sided p = 1 - 2 sqrt(3/14)."""
    assert t_test_p([1, 2, 3]) == pytest.approx(1 - 2 * math.sqrt(3 / 14), rel=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_tost_rejects_exactly_when_the_90_percent_t_interval_is_inside_the_margin(seed) -> None:
    rng = np.random.default_rng(seed)
    d = rng.normal(rng.uniform(-2, 2), rng.uniform(0.5, 3), size=rng.integers(3, 20))
    margin = float(rng.uniform(0.5, 4))
    low, high = t_interval(d, level=0.90)
    assert (tost(d, margin) < 0.05) == (-margin < low and high < margin)


def test_tost_refuses_a_margin_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match=r"^the equivalence margin must be positive, got 0$"):
        tost([1, 2], 0)


def test_no_p_without_spread_or_with_one_model() -> None:
    assert t_test_p([2.0]) is None and tost([2.0, 2.0], 3) is None


def test_the_family_holds_its_verdicts_under_holm() -> None:
    """Holm over the family's pre-registered p values: the t p of a difference endpoint, the
    TOST p of an equivalence one; fewer models than pre-registered is undecided."""
    big = [-9.0, -10.0, -11.0, -10.5, -9.5]  # RI's mAD far lower: a win
    worse = [9.0, 10.0, 11.0, 10.5, 9.5]  # far higher: a loss
    near = [0.1, -0.1, 0.05, -0.05, 0.0]  # within ±3: equivalent
    noise = [1.0, -2.0, 3.0, -1.5, 0.5]
    family = (
        Endpoint("x", "RI", "A", "mAD", "difference", 3.0, 5),
        Endpoint("x", "RI", "B", "mAD", "difference", 3.0, 5),
        Endpoint("x", "RI", "C", "mAD", "equivalence", 3.0, 5),
        Endpoint("x", "RI", "D", "mAD", "difference", 3.0, 5),
        Endpoint("y", "RI", "A", "mAD", "difference", 3.0, 6),
    )
    data = dict(zip(family, (big, worse, near, noise, big), strict=False))
    rows = decide(data, family)
    p = [t_test_p(big), t_test_p(worse), tost(near, 3.0), t_test_p(noise), t_test_p(big)]
    assert [r["p_holm"] for r in rows] == pytest.approx(holm(p))
    assert [r["verdict"] for r in rows] == [
        "win",
        "loss",
        "equivalent within ±3",
        "undecided",
        "undecided",  # 5 of the 6 models pre-registered
    ]
    # the sensitivity: five models' sign-flip p is at least 1/16, never below 0.05 / 4
    assert [r["verdict_signflip"] for r in rows] == ["undecided"] * 2 + [None] + ["undecided"] * 2


def test_an_endpoint_without_models_keeps_the_family_size() -> None:
    data = {FAMILY[0]: np.full(15, -5.0) + np.linspace(-1, 1, 15)}
    rows = decide(data)
    assert rows[0]["p_holm"] == pytest.approx(min(1.0, len(FAMILY) * rows[0]["p_t"]))
    assert rows[0]["verdict"] == "win"
    assert all(r["runs"] == 0 and r["verdict"] == "undecided" for r in rows[1:])


def test_the_table_gives_each_endpoint_its_verdict_and_models() -> None:
    rows = decide({FAMILY[1]: [27.0, 30.0, 25.0, 28.0, 26.0]})
    table = primary_table(rows)
    assert len(table) == 2 + len(FAMILY)
    assert "| `mnist5k` RI − Score-CAM, mAD | t | +27.20 ± 1.92 [" in table[3]
    assert table[3].endswith("| **undecided** | 5 of 15 |")  # 15 pre-registered
    assert "| TOST ±3 |" in table[-1] and table[-1].endswith("| **undecided** | 0 of 17 |")
