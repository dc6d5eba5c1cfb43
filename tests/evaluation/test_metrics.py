"""Average Drop / Increase (paper §6.2) and region metrics (Appendix D)."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from repinterp.evaluation import (
    AverageDropIncrease,
    average_drop_increase,
    average_drop_increase_from_mask,
    keep_top_pixels,
    kept_pixel_count,
    region_metrics,
)
from repinterp.evaluation.metrics import BatchMetric

from ..networks import images, normalize, tiny_cnn


def _hand_scores(model, images01, keep):
    """(classes, Y_c(e), Y_c(e')) computed directly."""
    with torch.no_grad():
        probs = torch.softmax(model(normalize(images01)), dim=1)
        masked = torch.softmax(model(normalize(images01 * keep[:, None])), dim=1)
    classes = probs.argmax(dim=1)
    rows = torch.arange(len(classes))
    return classes, probs[rows, classes], masked[rows, classes]


@pytest.mark.parametrize(
    ("height", "width", "fraction", "expected"),
    [(32, 32, 0.2, 205), (224, 224, 0.2, 10035), (1, 5, 0.5, 3), (4, 4, 0.01, 1), (3, 3, 1.0, 9)],
)
def test_kept_pixel_count_rounds_half_up_and_keeps_at_least_one(height, width, fraction, expected):
    assert kept_pixel_count(height, width, fraction) == expected


def test_keep_top_pixels_keeps_exactly_the_most_important():
    x = images(3, size=10, seed=1)
    heat = torch.rand(3, 10, 10, generator=torch.Generator().manual_seed(2))
    masked, keep = keep_top_pixels(x, heat, fraction=0.2)
    assert keep.dtype == torch.bool and keep.shape == (3, 10, 10)
    assert keep.flatten(1).sum(1).tolist() == [20, 20, 20]
    for i in range(3):
        assert heat[i][keep[i]].min() > heat[i][~keep[i]].max()
    torch.testing.assert_close(masked, torch.where(keep[:, None], x, torch.zeros(())))


def test_keep_top_pixels_breaks_ties_by_raster_order():
    heat = torch.zeros(1, 4, 5)
    heat[0, 3, 4] = 1.0
    _, keep = keep_top_pixels(images(1, size=1).expand(1, 3, 4, 5), heat, fraction=0.2)
    expected = torch.zeros(20, dtype=torch.bool)
    expected[[19, 0, 1, 2]] = True
    assert torch.equal(keep.flatten(), expected)


def test_keep_top_pixels_accepts_numpy_heatmaps():
    x = images(2, size=6)
    heat = np.random.default_rng(0).random((2, 6, 6))
    _, keep = keep_top_pixels(x, heat)
    _, expected = keep_top_pixels(x, torch.from_numpy(heat))
    assert torch.equal(keep, expected)


@pytest.mark.parametrize(
    ("images01", "heatmaps", "fraction", "message"),
    [
        (images(2, 8), torch.rand(2, 8, 8), 0.0, r"fraction must be in \(0, 1\]"),
        (images(2, 8), torch.rand(2, 8, 8), 1.5, r"fraction must be in \(0, 1\]"),
        (images(2, 8), torch.rand(2, 8, 7), 0.2, "N x H x W"),
        (images(2, 8), torch.rand(2, 1, 8, 8), 0.2, "N x H x W"),
        (images(2, 8), torch.full((2, 8, 8), math.nan), 0.2, "NaN"),
        (images(2, 8)[0], torch.rand(2, 8, 8), 0.2, "N x C x H x W"),
        (images(2, 8) * 255, torch.rand(2, 8, 8), 0.2, r"\[0, 1\] pixel space"),
        ((images(2, 8) * 255).byte(), torch.rand(2, 8, 8), 0.2, "floating point"),
    ],
)
def test_keep_top_pixels_errors(images01, heatmaps, fraction, message):
    with pytest.raises(ValueError, match=message):
        keep_top_pixels(images01, heatmaps, fraction)


def test_average_drop_increase_matches_a_hand_computation():
    model = tiny_cnn()
    x = images(7, seed=3)
    heat = torch.rand(7, 16, 16, generator=torch.Generator().manual_seed(4))
    result = average_drop_increase(model, x, heat, normalize, batch_size=3)
    classes, score, masked_score = _hand_scores(model, x, keep_top_pixels(x, heat)[1])
    assert torch.equal(result.classes, classes)
    torch.testing.assert_close(result.score, score)
    torch.testing.assert_close(result.masked_score, masked_score)
    drop = (score - masked_score).clamp(min=0) / score
    assert result.ad == pytest.approx(100 * drop.double().mean().item(), abs=1e-4)
    assert result.ai == pytest.approx(100 * (score < masked_score).double().mean().item())
    assert result.summary() == {"AD": result.ad, "AI": result.ai, "n": 7}
    assert 0 <= result.ad <= 100 and 0 <= result.ai <= 100


class Scripted(nn.Module):
    """Returns the given logits on successive calls, cycling; records every input batch."""

    def __init__(self, *logits: list[list[float]]) -> None:
        super().__init__()
        self.logits = [torch.tensor(values) for values in logits]
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x)
        return self.logits[(len(self.seen) - 1) % len(self.logits)]


def test_class_is_the_one_predicted_on_the_unmasked_image():
    # Unmasked: p = (0.5, 0.5), class 0 (first on ties); masked: p = (0.25, 0.75).
    model = Scripted([[0.0, 0.0]], [[0.0, math.log(3.0)]])
    keep = torch.zeros(1, 4, 4, dtype=torch.bool)
    result = average_drop_increase_from_mask(model, images(1, size=4), keep, None)
    assert result.classes.tolist() == [0]
    assert result.score.tolist() == pytest.approx([0.5])
    assert result.masked_score.tolist() == pytest.approx([0.25])
    assert result.drop.tolist() == pytest.approx([0.5])
    assert result.ad == pytest.approx(50.0)
    assert result.ai == 0.0


def test_an_increase_counts_and_does_not_drop():
    model = Scripted([[0.0, 1.0]], [[0.0, 2.0]])
    result = average_drop_increase_from_mask(
        model, images(1, size=4), torch.ones(1, 4, 4, dtype=torch.bool), None
    )
    assert result.increase.tolist() == [True]
    assert (result.ad, result.ai) == (0.0, 100.0)


def test_normalize_is_applied_after_masking():
    model = Scripted([[1.0, 2.0]])
    x = images(1, size=5, seed=5)
    masked01, keep = keep_top_pixels(x, torch.rand(1, 5, 5), fraction=0.4)
    average_drop_increase_from_mask(model, x, keep, normalize)
    unmasked_input, masked_input = model.seen
    torch.testing.assert_close(unmasked_input, normalize(x))
    torch.testing.assert_close(masked_input, normalize(masked01))
    assert (masked_input[~keep[:, None].expand_as(x)] == normalize(torch.zeros(()))).all()


def test_keeping_every_pixel_changes_nothing():
    model = tiny_cnn()
    x = images(4, seed=6)
    result = average_drop_increase(model, x, torch.rand(4, 16, 16), normalize, fraction=1.0)
    assert result.ad == 0.0 and result.ai == 0.0


def test_model_modes_are_restored():
    model = tiny_cnn().train()
    model[1].eval()
    average_drop_increase(model, images(2), torch.rand(2, 16, 16), normalize)
    assert [m.training for m in model] == [True, False, True, True, True, True, True]


def test_accumulating_over_batches_equals_one_call():
    model = tiny_cnn()
    x = images(9, seed=7)
    heat = torch.rand(9, 16, 16, generator=torch.Generator().manual_seed(8))
    metric = AverageDropIncrease(normalize, fraction=0.3, batch_size=2)
    assert metric.summary()["n"] == 0 and math.isnan(metric.summary()["AD"])
    metric.update(model, x[:4], heat[:4])
    metric.update(model, x[4:], heat[4:])
    whole = average_drop_increase(model, x, heat, normalize, fraction=0.3)
    torch.testing.assert_close(metric.result.masked_score, whole.masked_score)
    assert metric.summary() == pytest.approx(whole.summary())
    _, keep = keep_top_pixels(x, heat, fraction=0.3)
    metric.reset()
    metric.update_from_mask(model, x, keep)
    assert metric.summary() == pytest.approx(whole.summary())


def test_a_batch_metric_defines_only_how_it_scores_joins_and_sums_up():
    class Count(BatchMetric[int]):
        def summary(self) -> dict[str, int]:
            return {"n": self.result}

        def _score(self, model, images01, heatmaps) -> int:
            return len(images01)

        @staticmethod
        def _join(parts: list[int]) -> int:
            return sum(parts)

    metric = Count(normalize, batch_size=1)
    assert metric.update(None, images(3), None) == 3
    metric.update(None, images(2), None)
    assert metric.summary() == {"n": 5}
    metric.reset()
    assert metric.result == 0
    assert issubclass(AverageDropIncrease, BatchMetric)
    with pytest.raises(TypeError, match="abstract"):
        BatchMetric(normalize, 1)


def test_mask_errors():
    model = tiny_cnn()
    x = images(2)
    with pytest.raises(ValueError, match="bool tensor of shape"):
        average_drop_increase_from_mask(model, x, torch.ones(2, 16, 16), normalize)
    with pytest.raises(ValueError, match="bool tensor of shape"):
        average_drop_increase_from_mask(model, x, torch.ones(2, 8, 8, dtype=torch.bool), normalize)
    with pytest.raises(ValueError, match="batch_size"):
        average_drop_increase(model, x, torch.rand(2, 16, 16), normalize, batch_size=0)
    with pytest.raises(ValueError, match="fraction"):
        AverageDropIncrease(normalize, fraction=0)


def test_region_metrics_by_hand():
    region = torch.tensor([0, 1, -1, 1, -1])
    model_pred = torch.tensor([0, 0, 1, 1, 0])
    labels = torch.tensor([0, 1, 1, 0, 0])
    metrics = region_metrics(region, model_pred, labels)
    assert list(metrics) == ["ACU-GT", "ACU-MD", "CVR", "n_covered", "n"]
    assert metrics["ACU-GT"] == pytest.approx(200 / 3)
    assert metrics["ACU-MD"] == pytest.approx(200 / 3)
    assert metrics["CVR"] == pytest.approx(60.0)
    assert (metrics["n_covered"], metrics["n"]) == (3, 5)
    assert "ACU-GT" not in region_metrics(region, model_pred)
    assert region_metrics(np.array([2, 2]), np.array([2, 2]))["ACU-MD"] == 100.0


def test_region_metrics_with_nothing_covered():
    metrics = region_metrics(torch.tensor([-1, -1]), torch.tensor([0, 1]), torch.tensor([0, 1]))
    assert metrics["CVR"] == 0.0
    assert math.isnan(metrics["ACU-GT"]) and math.isnan(metrics["ACU-MD"])


@pytest.mark.parametrize(
    ("region", "model_pred", "labels", "message"),
    [
        ([0, 1], [0, 1, 1], None, "model_pred has 3 entries, expected 2"),
        ([0, 1], [0, 1], [1], "labels has 1 entries"),
        ([0.0, 1.0], [0, 1], None, "1-D integer"),
        ([[0, 1]], [0, 1], None, "1-D integer"),
        ([-2, 1], [0, 1], None, "region_pred must be >= -1"),
        ([0, 1], [-1, 1], None, "model_pred must be >= 0"),
    ],
)
def test_region_metrics_errors(region, model_pred, labels, message):
    labels = None if labels is None else torch.tensor(labels)
    with pytest.raises(ValueError, match=message):
        region_metrics(torch.tensor(region), torch.tensor(model_pred), labels)
