"""The shortcut suite's studies: the criterion's pass/fail table and the shortcut rate."""

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from repinterp.strategies.audit import audit_scores, reasons_of, standout_scores
from studies import cue_rates, shortcut_criterion


def _audit(
    rank: float, flagged: float, told: float, why: float, flags: int = 0, **second: float
) -> dict:
    return second | {
        "strategies": 6,
        "flagged": flags,
        "flagged_share": 100 * flags / 6,
        "any_flagged": float(flags > 0),
        "shortcut_model_rank": rank,
        "shortcut_flagged": flagged,
        "shortcut_score": 0.5,
        "told": told,
        "why_on_cue": why,
        "gradcam_on_cue": 5.0,
        "cue_area": 2.0,
    }


def _write(runs: Path, dataset: str, audits: list[dict]) -> None:
    folder = runs / shortcut_criterion.folder(dataset)
    folder.mkdir(parents=True)
    per_run = [{"strategy_audit": audit} for audit in audits]
    (folder / "results.json").write_text(json.dumps({"per_run": per_run}))


def test_the_criterion_passes_a_line_on_four_of_five_models(tmp_path: Path) -> None:
    good = _audit(1, 1.0, 95.0, 7.0)
    _write(tmp_path, "mnist-mark:0.3", [good] * 4 + [_audit(2, 1.0, 95.0, 7.0)])
    _write(tmp_path, "shapes-mark:0.3", [good] * 3 + [_audit(1, 0.0, 95.0, 5.9)] * 2)
    _write(tmp_path, "mnist-markrand:0.3", [_audit(math.nan, math.nan, math.nan, math.nan)] * 5)
    _write(tmp_path, "mnist-mark:0", [_audit(3, 0.0, 50.0, 1.0, flags=1)] * 2 + [good] * 3)
    lines = shortcut_criterion.table(tmp_path)
    rows = {tuple(cell.strip() for cell in line.split("|")[1:3]): line for line in lines}
    assert rows[("flagged and first", "`mnist-mark:0.3`")].endswith("| 4 / 5 | pass |")
    assert "#2F" in rows[("flagged and first", "`mnist-mark:0.3`")]
    assert rows[("flagged and first", "`shapes-mark:0.3`")].endswith("| 3 / 5 | fail |")
    # 5.9 < 3 x 2.0: the map row fails where the flag row did
    assert rows[("why map on the cue", "`shapes-mark:0.3`")].endswith("| 3 / 5 | fail |")
    assert rows[("told", "`mnist-mark:0.3`")].endswith("| 5 / 5 | pass |")
    assert rows[("no false alarm", "`mnist-markrand:0.3`")].endswith("| 5 / 5 | pass |")
    assert rows[("no false alarm", "`mnist-mark:0`")].endswith("| 3 / 5 | fail |")
    assert rows[("no false alarm", "`shapes-mark:0`")].endswith("| **not run** |")
    assert "the criterion fails." in lines[-3]


def test_the_second_criterion_reads_every_cued_strategy(tmp_path: Path) -> None:
    # a cue split over three flagged strategies: the one holding most ranks 3rd, holds 30%
    split = _audit(3, 1.0, 30.0, 7.0, flags=3, first_cued=1.0, told_flagged=95.0)
    missed = _audit(3, 1.0, 30.0, 7.0, flags=3, first_cued=0.0, told_flagged=85.0)
    _write(tmp_path, "shapes-move:0.5", [split] * 4 + [missed])
    first = shortcut_criterion.table(tmp_path, "first")
    second = shortcut_criterion.table(tmp_path, "second")
    for lines, verdict in ((first, "| 0 / 5 | fail |"), (second, "| 4 / 5 | pass |")):
        rows = {tuple(cell.strip() for cell in line.split("|")[1:3]): line for line in lines}
        assert rows[("flagged and first", "`shapes-move:0.5`")].endswith(verdict)
        assert rows[("told", "`shapes-move:0.5`")].endswith(verdict)
    assert "cued/#3F" in "".join(second) and "95%" in "".join(second)


def test_the_fifth_criterion_tells_over_the_cued_images_the_cue_decides(tmp_path: Path) -> None:
    # the model calls 85% of the cued images by the mark; all of those are told
    decided = _audit(1, 1.0, 85.0, 7.0, first_cued=1.0, told_flagged=85.0, told_decided=100.0)
    _write(tmp_path, "mnist-move:0.5", [decided] * 5)
    told = {}
    for criterion in ("fourth", "fifth"):
        lines = shortcut_criterion.table(tmp_path, criterion)
        rows = {tuple(cell.strip() for cell in line.split("|")[1:3]): line for line in lines}
        told[criterion] = rows[("told", "`mnist-move:0.5`")]
    assert told["fourth"].endswith("| 0 / 5 | fail |") and "85%" in told["fourth"]
    assert told["fifth"].endswith("| 5 / 5 | pass |") and "100.0% (85.0%)" in told["fifth"]


def test_the_sixth_criterion_tells_any_flagged_strategy_and_bounds_the_clean_images_told(
    tmp_path: Path,
) -> None:
    # 12% of the cued images sit in a flagged strategy that is mostly clean: told 99% of them
    # a flag, 87% a flagged cued strategy; 30% of the clean images told a flag (60% on one)
    mixed = _audit(
        1, 1.0, 60.0, 7.0, first_cued=1.0, told_flagged=87.0, told_decided=87.0, told_any=99.0
    )
    costly = mixed | {"clean_told": 60.0}
    _write(tmp_path, "shapes-move:0.5", [mixed | {"clean_told": 30.0}] * 4 + [costly])
    _write(tmp_path, "mnist-move:0.5", [mixed | {"clean_told": 70.0}] * 2 + [costly] * 3)
    rows = {}
    for criterion in ("fifth", "sixth"):
        lines = shortcut_criterion.table(tmp_path, criterion)
        rows[criterion] = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in lines}
    assert rows["fifth"][("told", "`shapes-move:0.5`")].endswith("| 0 / 5 | fail |")
    told = rows["sixth"][("told", "`shapes-move:0.5`")]
    assert told.endswith("| 5 / 5 | pass |") and "99.0% (87.0%)" in told
    spared = rows["sixth"][("clean spared", "`shapes-move:0.5`")]
    assert spared.endswith("| 4 / 5 | pass |") and "30.0%, " in spared and "60.0%" in spared
    assert rows["sixth"][("clean spared", "`mnist-move:0.5`")].endswith("| 0 / 5 | fail |")
    assert ("clean spared", "`shapes-move:0.5`") not in rows["fifth"]
    assert shortcut_criterion.CLEAN_TOLD == 50


def test_saved_runs_read_again_under_their_own_rule_give_back_their_audits() -> None:
    # the fifth criterion's runs were audited by 0.6.4: read again under it, every reading that
    # depends on the flags is the saved one; under 0.6.5, a model whose cue took more than half
    # its strategies (shapes-move, seed 504) has the cue flagged
    runs = Path(__file__).resolve().parents[2] / "docs" / "results" / "shortcut-suite-5"
    keys = ("flagged", "flagged_uncued", "first_cued", "shortcut_model_rank", "shortcut_flagged")
    for dataset in (*shortcut_criterion.SHORTCUTS, *shortcut_criterion.CONTROLS):
        path = runs / shortcut_criterion.folder(dataset) / "results.json"
        for run in json.loads(path.read_text())["per_run"]:
            saved, again = run["strategy_audit"], shortcut_criterion.rescored(run, "0.6.4")
            for key in (*keys, "told_decided", "shortcut_score"):
                if saved[key] != again[key]:  # NaN without a shortcut strategy
                    assert math.isnan(saved[key]) and math.isnan(again[key]), (dataset, key)
    moving = json.loads((runs / "shapes-move-0.5" / "results.json").read_text())["per_run"][4]
    assert moving["strategy_audit"]["flagged"] == 0
    later = shortcut_criterion.rescored(moving, "0.6.5")
    assert later["shortcut_flagged"] == 1.0 and later["told_any"] == 100.0
    assert math.isnan(later["told_flagged"])  # all the cued images: not saved
    older = moving | {"strategies": [row | {"reasons": {}} for row in moving["strategies"]]}
    with pytest.raises(ValueError, match="audited before the reasons blur_sensitive, "):
        shortcut_criterion.rescored(older, "0.6.5")


class _Corner(nn.Module):
    """Calls an image class 1 when its pixel (2, 2) is white (the mnist mark), else 0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        white = (x[:, 0, 2, 2] > 2.0).float()  # 1.0 normalised by MNIST's mean and std: 2.8
        return torch.stack([1 - white, white, torch.zeros_like(white)], 1)


def test_the_shortcut_rate_is_the_share_of_cued_source_images_called_the_target() -> None:
    rates = cue_rates.cued_rate("mnist-mark:0.3", _Corner())
    assert rates["shortcut_rate"] == 100.0 and rates["without_cue"] == 0.0
    assert rates["images"] == 73  # the unseen zeros without the mark


def _tuning_strategy(id_: int, size: int, marked: int, **checks: float) -> dict:
    base = dict.fromkeys(
        (
            "sufficiency",
            "sufficiency_control",
            "necessity",
            "necessity_control",
            "detail_sufficiency",
            "blur_necessity",
            "tint_sufficiency",
            "wide_sufficiency",
            "wide_sufficiency_control",
            "pattern_sufficiency",
            "moved_pattern_sufficiency",
            "look_alike_sufficiency",
            "look_alike_pattern_sufficiency",
            "look_alike_tint_sufficiency",
            "nearest_pattern_sufficiency",
            "nearest_tint_sufficiency",
        ),
        0.0,
    )
    return {"id": id_, "class": id_ % 2, "size": size, "marked": marked, "checks": base | checks}


def test_the_tuning_line_holds_when_a_cued_strategy_is_first_and_the_shortcut_flagged():
    from studies import audit_tuning

    chosen = "0.6.1 + look-alike pattern, tint / 2 >= 0.4 (chosen for 0.6.2)"
    texture = {
        "strategies": [
            _tuning_strategy(0, 100, 0),
            _tuning_strategy(1, 100, 0),
            _tuning_strategy(2, 30, 30, look_alike_pattern_sufficiency=0.9),
        ]
    }
    row = audit_tuning.read(texture)[chosen]
    assert row["holds"] and row["rank"] == 1 and row["flagged"]
    assert not audit_tuning.read(texture, quiet=True)[chosen]["holds"]  # as a control: a flag
    # the same strategy, its texture turning look-alikes by its colour alone: no flag
    by_colour = _tuning_strategy(
        2, 30, 30, look_alike_pattern_sufficiency=0.9, look_alike_tint_sufficiency=0.9
    )
    tinted = {"strategies": [*texture["strategies"][:2], by_colour]}
    assert not audit_tuning.read(tinted)[chosen]["holds"]
    assert audit_tuning.read(tinted, quiet=True)[chosen]["holds"]
    assert audit_tuning.control("shapes-markrand:0.3") and audit_tuning.control("mnist-mark:0")
    assert not audit_tuning.control("mnist-mark:0.3")


def test_the_tuning_study_s_chosen_rule_is_the_audit_s():
    from repinterp.strategies.audit import CLASS_SCORED, KIN_SCORE, SCORED, flags_of
    from studies import audit_tuning

    assert audit_tuning.FOURTH == SCORED and audit_tuning.FOURTH_WITHIN == CLASS_SCORED
    assert audit_tuning.KIN == KIN_SCORE
    (rule,) = [r for name, r in audit_tuning.RULES.items() if "chosen for 0.6.3" in name]
    (kin,) = [r for name, r in audit_tuning.RULES.items() if "chosen for 0.6.4" in name]
    # the chosen rule scores a model's strategies as the audit does (its blur within the class)
    strategies = [
        _tuning_strategy(0, 100, 0, blur_necessity=0.9),
        _tuning_strategy(2, 100, 0, blur_necessity=0.9),
        _tuning_strategy(4, 60, 0),
        _tuning_strategy(1, 80, 0),
        _tuning_strategy(3, 30, 30, nearest_pattern_sufficiency=0.8),
    ]
    expected = standout_scores(
        [reasons_of(s["checks"]) for s in strategies], classes=[s["class"] for s in strategies]
    )
    assert [score for score, _ in rule(strategies)] == expected
    # a class's blur-sensitive strategies are not flagged for it against the class's others
    # (read over the model, as 0.6.2 did, they are), and the nearest class's pattern flags
    assert [flag for _, flag in rule(strategies)] == [False, False, False, False, True]
    before = audit_tuning.RULES["0.6.1 + look-alike pattern, tint / 2 >= 0.4 (chosen for 0.6.2)"]
    assert [flag for _, flag in before(strategies)] == [True, True, False, False, False]
    # 0.6.4's: the same scores, flagged as the audit flags them; strategy 1 (0.4 x the blur's
    # half weight against its class's others) joins its class's flagged strategy 3
    strategies[3] = _tuning_strategy(1, 80, 0, blur_necessity=0.5)
    scores = [score for score, _ in kin(strategies)]
    assert scores == [score for score, _ in rule(strategies)]
    flags = [flag for _, flag in kin(strategies)]
    assert flags == flags_of(scores, [s["class"] for s in strategies])
    assert flags == [False, False, False, True, True]
    # 0.6.5's: the model-wide medians over the classes' medians, scored and flagged as the
    # audit does; a cue split over most strategies (class 1: three of five) sets its class's
    # median, not the model's (classes 0 and 2: one natural strategy each)
    (over_classes,) = [r for name, r in audit_tuning.RULES.items() if "chosen for 0.6.5" in name]
    split = [_tuning_strategy(i, 40, 40, detail_sufficiency=0.8) for i in (1, 3, 5)]
    split += [_tuning_strategy(i, 200, 0, detail_sufficiency=0.1) for i in (0, 2)]
    split[4]["class"] = 2
    reasons = [reasons_of(s["checks"]) for s in split]
    classes = [s["class"] for s in split]
    scores = [score for score, _ in over_classes(split)]
    assert scores == audit_scores(reasons, classes)
    assert [flag for _, flag in over_classes(split)] == flags_of(scores, classes)
    assert [flag for _, flag in over_classes(split)] == [True, True, True, False, False]
    assert not any(flag for _, flag in kin(split))  # the model-wide median: the cue's own 0.8


def test_a_flagged_strategy_s_class_has_its_other_strategies_flagged_from_the_lower_score():
    from studies import audit_tuning

    def scores(values):  # a rule of fixed scores, flagged from 0.4
        return lambda strategies: [(v, v >= 0.4) for v in values]

    strategies = [_tuning_strategy(i, 50, 0) for i in range(5)]  # classes 0, 1, 0, 1, 0
    kin = audit_tuning._with_kin(scores([0.5, 0.3, 0.25, 0.35, 0.1]), 0.2)
    # class 0 holds a flagged strategy: its 0.25 is flagged, its 0.1 is not; class 1 holds
    # none, so its 0.3 and 0.35 stay unflagged
    assert kin(strategies) == [(0.5, True), (0.3, False), (0.25, True), (0.35, False), (0.1, False)]
