"""The audit (strategies/audit.py): its causal check, its reasons and its model-wide ranking,
without labels."""

import inspect

import pytest
import torch

from repinterp.strategies.audit import (
    REASONS,
    audit_scores,
    audit_strategies,
    flags_of,
    kept_audit_is_current,
    model_ranking,
    reasons_of,
    standout_scores,
)
from repinterp.strategies.causal_checks import blurred, causal_checks, relevant_masks

SIDE = 8


def _checks(sufficiency=0.0, control=0.0, necessity=0.0, detail=0.0, blur=0.0, pattern=0.0) -> dict:
    return {
        "tint_sufficiency": 0.0,
        "wide_sufficiency": 0.0,
        "wide_sufficiency_control": 0.0,
        "pattern_sufficiency": pattern,
        "moved_pattern_sufficiency": 0.0,
        "look_alike_pattern_sufficiency": 0.0,
        "look_alike_tint_sufficiency": 0.0,
        "nearest_pattern_sufficiency": 0.0,
        "nearest_tint_sufficiency": 0.0,
        "sufficiency": sufficiency,
        "sufficiency_control": control,
        "necessity": necessity,
        "necessity_control": 0.0,
        "detail_sufficiency": detail,
        "blur_necessity": blur,
    }


def _corner_model(images: torch.Tensor) -> torch.Tensor:
    """Class 1 exactly when the top-left pixel is above 0.8 (a one-pixel shortcut), else 0."""
    corner = images[:, 0, 0, 0]
    return torch.stack([torch.zeros_like(corner), corner - 0.8], 1)


def _corner_data(n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    """n images, half with the corner pixel at 1 (strategy 1, predicted 1), half at 0."""
    images = torch.rand(n, 1, SIDE, SIDE, generator=torch.Generator().manual_seed(0)) * 0.6
    images[: n // 2, 0, 0, 0] = 1.0
    images[n // 2 :, 0, 0, 0] = 0.0
    strategy = torch.tensor([1] * (n // 2) + [0] * (n - n // 2))
    return images, strategy


def _relevance(images: torch.Tensor) -> torch.Tensor:
    """What the corner model's gradient x input is: the corner pixel's value, nothing else."""
    out = torch.zeros(images.shape[0], SIDE, SIDE)
    out[:, 0, 0] = images[:, 0, 0, 0]
    return out


def _causal(seed: int = 0) -> dict:
    images, strategy = _corner_data()
    return causal_checks(
        strategy,
        _corner_model(images).argmax(1),
        lambda rows: images[rows],
        _corner_model,
        _relevance,
        seed=seed,
        area=1 / SIDE**2,
    )


def test_the_causal_check_finds_a_one_pixel_shortcut():
    checks = _causal()
    cue = checks[1]
    assert cue["sufficiency"] == 1.0 and cue["necessity"] == 1.0  # the pixel decides, both ways
    # the same area from a random place moves a prediction only when it lands on the corner
    assert cue["sufficiency_control"] < 0.1 and cue["necessity_control"] < 0.1
    # class 0 is the corner's absence: filling any pixel with the mean keeps it class 0
    assert checks[0]["necessity"] == 0.0 == checks[0]["necessity_control"]
    assert reasons_of(cue)["portable_cue"] > 0.9


def test_a_shared_pattern_carries_a_fixed_place_cue_and_not_once_moved():
    images, strategy = _corner_data()

    def model(x: torch.Tensor) -> torch.Tensor:  # class 1 from a corner of 0.4: half the mark
        corner = x[:, 0, 0, 0]
        return torch.stack([torch.zeros_like(corner), corner - 0.4], 1)

    checks = causal_checks(
        strategy, model(images).argmax(1), lambda rows: images[rows], model, _relevance, seed=0
    )
    # the members' mean minus all images' mean is +0.5 on the corner: added to an image of
    # class 0 it makes it class 1; moved to a random place it almost never lands on the corner
    assert checks[1]["pattern_sufficiency"] == 1.0
    assert checks[1]["moved_pattern_sufficiency"] < 0.1
    reasons = reasons_of(checks[1])
    assert reasons["shared_pattern"] == 1.0 and reasons["moved_pattern"] < 0.1
    # the wide paste (twice the area) holds the corner as the narrow one does
    assert checks[1]["wide_sufficiency"] == 1.0 and reasons["wide_portable_cue"] > 0.8


def test_a_strategy_of_fewer_members_than_the_discovery_keeps_has_no_shared_pattern():
    images, strategy = _corner_data()
    strategy[0] = 2  # one marked image alone: its "pattern" would be the whole image

    def model(x: torch.Tensor) -> torch.Tensor:
        corner = x[:, 0, 0, 0]
        return torch.stack([torch.zeros_like(corner), corner - 0.4], 1)

    checks = causal_checks(
        strategy, model(images).argmax(1), lambda rows: images[rows], model, _relevance, seed=0
    )
    assert checks[2]["pattern_sufficiency"] == 0.0  # a standard deviation of one image is 0
    assert checks[1]["pattern_sufficiency"] == 1.0  # the 19 others share the corner


def _stripe_data(n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    """n images of noise, the first half with faint diagonal stripes (strategy 1)."""
    images = torch.rand(n, 1, SIDE, SIDE, generator=torch.Generator().manual_seed(1)) * 0.1
    diagonal = torch.arange(SIDE)[:, None] + torch.arange(SIDE)[None, :]
    images[: n // 2] += 0.4 * (diagonal % 2).float()
    return images, torch.tensor([1] * (n // 2) + [0] * (n - n // 2))


def _look_alike(model) -> dict[str, float]:
    images, strategy = _stripe_data()
    checks = causal_checks(
        strategy, model(images).argmax(1), lambda rows: images[rows], model, _relevance, seed=0
    )
    return checks[1]


def test_a_look_alike_pattern_is_a_texture_that_makes_the_look_alikes_the_class():
    def texture(x: torch.Tensor) -> torch.Tensor:  # class 1 from a stripe energy of 0.1
        energy = (x - x.roll(1, -1)).abs().mean((1, 2, 3))
        return torch.stack([torch.zeros_like(energy), energy - 0.1], 1)

    cue = _look_alike(texture)
    # the members' mean difference is the stripes (+-0.1): moved anywhere and added to images
    # of the class they look most like (the only other), it carries the class; its mean colour
    # alone (a uniform 0.1) changes no difference between neighbours, so carries nothing
    assert cue["look_alike_pattern_sufficiency"] == 1.0
    assert cue["look_alike_tint_sufficiency"] == 0.0
    assert reasons_of(cue)["look_alike_pattern"] == 1.0
    # the class whose mean image is nearest the members' is that one too
    assert cue["nearest_pattern_sufficiency"] == 1.0 and cue["nearest_tint_sufficiency"] == 0.0


def test_a_pattern_that_carries_its_class_by_its_colour_alone_is_no_look_alike_pattern():
    def brightness(x: torch.Tensor) -> torch.Tensor:  # class 1 from a mean brightness of 0.12
        mean = x.mean((1, 2, 3))
        return torch.stack([torch.zeros_like(mean), mean - 0.12], 1)

    cue = _look_alike(brightness)
    assert cue["look_alike_pattern_sufficiency"] == 1.0 == cue["look_alike_tint_sufficiency"]
    assert reasons_of(cue)["look_alike_pattern"] == 0.0


def test_the_nearest_class_not_the_runner_up_is_where_a_texture_is_read():
    # class 0: dim noise; strategy 1: the same with stripes (a texture deciding class 1);
    # class 2: bright noise. The striped images' runner-up is class 2 (brighter than class
    # 0's), but their mean image is nearest class 0's
    n = 20
    noise = torch.rand(3 * n, 1, SIDE, SIDE, generator=torch.Generator().manual_seed(2)) * 0.1
    diagonal = torch.arange(SIDE)[:, None] + torch.arange(SIDE)[None, :]
    images = noise.clone()
    images[n : 2 * n] += 0.4 * (diagonal % 2).float()
    images[2 * n :] += 0.55
    strategy = torch.tensor([0] * n + [1] * n + [2] * n)

    def model(x: torch.Tensor) -> torch.Tensor:
        energy = (x - x.roll(1, -1)).abs().mean((1, 2, 3))
        bright = 2 * (x.mean((1, 2, 3)) - 0.2)
        return torch.stack([torch.zeros_like(energy), energy - 0.1, bright], 1)

    predicted = model(images).argmax(1)
    assert predicted.tolist() == strategy.tolist()
    assert model(images[n : 2 * n]).topk(2, dim=1).indices[:, 1].eq(2).all()  # runner-up 2
    cue = causal_checks(strategy, predicted, lambda rows: images[rows], model, _relevance, seed=0)[
        1
    ]
    # the stripes added to bright images leave them class 2; added to dim ones, class 1
    assert cue["look_alike_pattern_sufficiency"] == 0.0
    assert cue["nearest_pattern_sufficiency"] == 1.0
    assert cue["nearest_tint_sufficiency"] == 0.0


def test_the_causal_check_is_deterministic_by_seed():
    assert _causal(3) == _causal(3)


def test_relevant_masks_keep_the_top_share():
    relevance = torch.arange(2 * 16, dtype=torch.float32).reshape(2, 4, 4)
    relevance[1] = relevance[1].flip(-1)
    masks = relevant_masks(relevance, area=0.25)
    assert masks.sum((1, 2)).tolist() == [4, 4]
    assert masks[0, 3].all() and masks[1, 3].all()  # the last row holds the largest values
    assert relevant_masks(relevance, area=0.001).sum((1, 2)).tolist() == [1, 1]  # at least one


def test_blur_keeps_a_constant_image_and_removes_fine_stripes():
    flat = torch.full((1, 3, 40, 40), 0.3)
    assert torch.allclose(blurred(flat), flat)
    # stripes of period 4 px under a blur of 2 px (0.05 of 40): amplitude x exp(-2 pi^2 / 4)
    stripes = (torch.arange(40)[None, :] // 2 % 2).float().expand(40, 40)[None, None]
    inner = blurred(stripes)[..., 8:-8, 8:-8]
    assert float((inner - 0.5).abs().max()) < 0.01


def test_standout_scores_and_model_ranking():
    reasons = [
        {"portable_cue": 0.1, "blur_sensitive": 0.0},
        {"portable_cue": 0.2, "blur_sensitive": 0.0},
        {"portable_cue": 0.9, "blur_sensitive": 0.1},
        {"portable_cue": 0.1, "blur_sensitive": 0.9},
    ]
    # medians 0.15 and 0.05; the blur weighs half
    scored = {"portable_cue": 1.0, "blur_sensitive": 0.5}
    assert standout_scores(reasons, scored) == pytest.approx([-0.025, 0.05, 0.75, 0.425])
    assert model_ranking([0.2, 0.5, 0.5, 0.1], [10, 30, 20, 5]) == [3, 2, 1, 4]


def test_medians_over_images_are_not_set_by_a_cue_split_over_many_small_strategies():
    # five small strategies of one cue (0.9) beside three large natural ones (0.1)
    reasons = [{"fine_detail": v} for v in [0.9] * 5 + [0.1] * 3]
    sizes = [10] * 5 + [100] * 3
    scored = {"fine_detail": 1.0}
    assert standout_scores(reasons, scored)[:5] == [0.0] * 5  # the median is the cue's own
    over_images = standout_scores(reasons, scored, sizes=sizes)  # median over 350 images: 0.1
    assert over_images == pytest.approx([0.8] * 5 + [0.0] * 3)
    # with one image a strategy, the medians are the strategies' (an even count: the mean of
    # the two middle values, as statistics.median)
    assert standout_scores(reasons, scored, sizes=[1] * 8) == standout_scores(reasons, scored)
    halves = standout_scores([{"fine_detail": v} for v in (0.0, 1.0)], scored, sizes=[3, 3])
    assert halves == pytest.approx([-0.5, 0.5])


def test_model_wide_medians_over_classes_are_not_set_by_a_class_split_into_many_strategies():
    # class 0: five strategies of one cue (0.9); class 1: two natural ones, class 2: one
    reasons = [{"fine_detail": v} for v in [0.9] * 5 + [0.1, 0.2, 0.1]]
    classes = [0] * 5 + [1, 1, 2]
    scored = {"fine_detail": 1.0}
    assert standout_scores(reasons, scored)[:5] == [0.0] * 5  # the median of 8 is the cue's
    # the classes' medians 0.9, 0.15 and 0.1: their median 0.15
    over_classes = standout_scores(reasons, scored, classes, {}, over_classes=True)
    assert over_classes == pytest.approx([0.75] * 5 + [-0.05, 0.05, -0.05])
    # the audit's reading: the same medians over its other reasons too (here all 0, so no
    # score falls below 0)
    wide = [dict.fromkeys(REASONS, 0.0) | x for x in reasons]
    assert audit_scores(wide, classes) == pytest.approx([0.75] * 5 + [0.0, 0.05, 0.0])
    with pytest.raises(ValueError, match="over_classes needs each strategy's class"):
        standout_scores(reasons, scored, over_classes=True)
    with pytest.raises(ValueError, match=r"classes must be one per strategy \(8\), got 1"):
        standout_scores(reasons, scored, [0], {}, over_classes=True)
    with pytest.raises(ValueError, match=r"sizes must be one per strategy \(8\), got 7"):
        standout_scores(reasons, scored, sizes=[1] * 7)


def test_class_reasons_are_read_against_the_other_strategies_of_the_class():
    reasons = [
        {"portable_cue": 0.0, "shared_pattern": p} for p in (0.9, 0.1, 0.2, 0.9)
    ]  # strategies 0-2 of class 0, strategy 3 alone in class 1
    scored, within = {"portable_cue": 1.0}, {"shared_pattern": 1.0}
    # 0: 0.9 against the median of 0.1 and 0.2; 1 and 2 fall below their class's others (the
    # model-wide reading, 0, stays); 3 has no other strategy in its class to be read against
    assert standout_scores(reasons, scored, [0, 0, 0, 1], within) == pytest.approx(
        [0.75, 0.0, 0.0, 0.0]
    )
    assert standout_scores(reasons, scored) == [0.0] * 4  # without classes: the model only


def test_a_main_strategy_can_be_flagged_and_the_ranking_runs_over_the_model():
    # class 0: strategies 0 (3 images) and 1 (1); class 1: strategies 2 (1) and 3 (2)
    strategy = torch.tensor([0, 0, 0, 1, 2, 3, 3])
    logits = torch.zeros(7, 3)
    logits[:4, 0], logits[4:, 1] = 2.0, 2.0
    logits[:4, 2] = 1.0
    checks = {
        0: _checks(0.9, 0.1),
        1: _checks(0.2),
        2: _checks(0.1),
        3: _checks(0.3, detail=0.2),
    }
    audits = audit_strategies(strategy, logits, checks)
    assert [a.id for a in audits] == [0, 3, 1, 2]  # model-wide ranking order
    by_id = {a.id: a for a in audits}
    # portable_cue: 0.8, 0.2 | 0.1, 0.3 (the classes' medians 0.5 and 0.2: 0.35); fine_detail:
    # 0, 0 | 0, 0.2 (0 and 0.1: 0.05); tint and blur 0: strategies 1 and 2 score 0, tied, the
    # earlier first
    assert by_id[0].score == pytest.approx(0.45) and by_id[0].flagged and by_id[0].main
    assert by_id[3].score == pytest.approx(0.15) and not by_id[3].flagged
    assert [by_id[s].model_rank for s in range(4)] == [1, 3, 4, 2]
    assert [by_id[s].rank for s in range(4)] == [1, 2, 2, 1]
    assert by_id[0].runner_up == 2 and by_id[0].margin == pytest.approx(1.0)
    assert set(by_id[0].reasons) == set(REASONS) and by_id[0].checks == checks[0]


def test_the_score_reads_the_blur_within_the_class_and_the_nearest_pattern_over_the_model():
    # classes 0 (strategies 0-2), 1 (3-6) and 2 (7-8), one row each
    strategy = torch.arange(9)
    owner = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2])
    logits = torch.nn.functional.one_hot(owner, 3).float()
    blur = [0.9, 0.0, 0.0, 0.7, 0.0, 0.0, 0.0, 0.9, 0.9]
    checks = {s: _checks(blur=b) for s, b in enumerate(blur)}
    checks[4] |= {"nearest_pattern_sufficiency": 0.45}
    checks[5] |= {"nearest_pattern_sufficiency": 0.6, "nearest_tint_sufficiency": 0.3}
    checks[2] |= {"look_alike_pattern_sufficiency": 0.9}  # the runner-up's: not scored
    by_id = {a.id: a for a in audit_strategies(strategy, logits, checks)}
    assert reasons_of(checks[5])["nearest_pattern"] == pytest.approx(0.3)
    assert reasons_of(checks[5] | {"nearest_tint_sufficiency": 0.9})["nearest_pattern"] == 0.0
    # the blur at half weight against the class's others (0: 0.9 against 0, 3: 0.7 against
    # 0); a class all sensitive to blur (7, 8) is not flagged for it, which the model-wide
    # median (0) would; the nearest pattern at full weight, less its tint
    scores = [by_id[s].score for s in range(9)]
    assert scores == pytest.approx([0.45, 0.0, 0.0, 0.35, 0.45, 0.3, 0.0, 0.0, 0.0])
    # flagged from 0.4, and from 0.2 beside one in its class (3 and 5 beside 4)
    assert [s for s in range(9) if by_id[s].flagged] == [0, 3, 4, 5]
    assert [
        a.id for a in audit_strategies(strategy, logits, checks, kin_score=0.4) if a.flagged
    ] == [
        0,
        4,
    ]


def test_a_flagged_strategy_s_class_has_its_others_flagged_from_the_kin_score():
    scores = [0.5, 0.3, 0.19, 0.35, 0.2, 0.39]
    classes = [0, 0, 0, 1, 1, 2]
    # class 0 holds a strategy from 0.4: its 0.3 is flagged, its 0.19 is not; classes 1 and 2
    # hold none, so 0.35 and 0.39 are not, however close
    assert flags_of(scores, classes) == [True, True, False, False, False, False]
    assert flags_of(scores, classes, kin_score=0.4) == [True, False, False, False, False, False]
    assert flags_of([0.4, 0.2], [3, 3]) == [True, True]  # both bounds included
    assert flags_of([], []) == []


def test_a_kept_audit_is_current_only_when_this_rule_gives_its_scores_and_flags():
    strategy = torch.arange(4)
    logits = torch.nn.functional.one_hot(torch.tensor([0, 0, 1, 1]), 2).float()
    checks = {0: _checks(0.9), 1: _checks(0.1), 2: _checks(0.2), 3: _checks(blur=0.9)}
    kept = [a.to_dict() for a in audit_strategies(strategy, logits, checks)]
    assert kept_audit_is_current(kept) and any(a["flagged"] for a in kept)
    assert not kept_audit_is_current([])
    for change in (
        lambda a: a.update(score=a["score"] + 0.01),  # another rule's score
        lambda a: a.update(flagged=not a["flagged"]),  # another threshold
        lambda a: a["reasons"].pop("nearest_pattern"),  # an older version's reasons
        lambda a: a.pop("predicted_class"),  # a damaged entry
    ):
        stale = [{**a, "reasons": dict(a["reasons"])} for a in kept]
        change(stale[0])
        assert not kept_audit_is_current(stale)
    # kept by 0.6.4, whose medians were over all the model's strategies: found again
    reasons = [a["reasons"] for a in kept]
    classes = [a["predicted_class"] for a in kept]
    before = standout_scores(reasons, classes=classes)
    assert before != [a["score"] for a in kept]
    stale = [
        a | {"score": s, "flagged": f}
        for a, s, f in zip(kept, before, flags_of(before, classes), strict=True)
    ]
    assert not kept_audit_is_current(stale)


def test_the_audit_reads_no_labels():
    assert list(inspect.signature(audit_strategies).parameters) == [
        "strategy",
        "logits",
        "checks",
        "flag_score",
        "kin_score",
    ]
    assert list(inspect.signature(causal_checks).parameters)[:5] == [
        "strategy",
        "predicted",
        "images_of",
        "predict",
        "relevance_of",
    ]


def test_bad_input_is_refused():
    strategy, logits = torch.tensor([0, 0]), torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    checks = {0: _checks()}
    with pytest.raises(ValueError, match=r"^logits hold NaN or infinite values$"):
        audit_strategies(strategy, logits * float("nan"), checks)
    with pytest.raises(
        ValueError, match=r"^logits must be 2 x classes \(at least 2\), got \(3, 2\)$"
    ):
        audit_strategies(strategy, torch.ones(3, 2), checks)
    with pytest.raises(ValueError, match=r"^no causal checks for strategies 0$"):
        audit_strategies(strategy, logits, {})
    with pytest.raises(ValueError, match=r"^strategy 0 holds images of predicted classes 0, 1$"):
        audit_strategies(strategy, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), checks)
