"""The audit's reasons and ranking (strategies/audit.py), without labels."""

import inspect

import pytest
import torch

from repinterp.strategies.audit import REASONS, audit_strategies, concentration

SIDE = 16


def _blob_maps(centres: torch.Tensor, width: float = 2.5) -> torch.Tensor:
    """N x SIDE x SIDE Gaussian bumps at ``centres`` (N x 2, row and column), peak 1."""
    grid = torch.arange(SIDE, dtype=torch.float32)
    rows = (grid[None, :] - centres[:, :1]) ** 2
    cols = (grid[None, :] - centres[:, 1:]) ** 2
    return torch.exp(-(rows[:, :, None] + cols[:, None, :]) / (2 * width**2))


def _logits(n: int, predicted: int, runner_up: torch.Tensor, classes: int = 4) -> torch.Tensor:
    logits = torch.zeros(n, classes)
    logits[torch.arange(n), runner_up] = 1.0
    logits[:, predicted] = 3.0
    return logits


def _class(generator: torch.Generator, sizes: list[int], shortcut: int | None) -> tuple:
    """One predicted class (0) of strategies of ``sizes`` whose maps lie around the centre at
    random and whose vectors and runner-up classes are alike; strategy ``shortcut`` (if any) has
    every map on the top-left corner, vectors of its own, and runner-up class 2 throughout."""
    strategy, maps, vectors, logits = [], [], [], []
    base = torch.rand(6, generator=generator)
    for s, n in enumerate(sizes):
        if s == shortcut:
            maps.append(_blob_maps(torch.full((n, 2), 1.0), width=1.0))
            vectors.append(torch.rand(n, 6, generator=generator) * torch.tensor([0, 0, 0, 1, 1, 1]))
            runner = torch.full((n,), 2)
        else:
            maps.append(_blob_maps(SIDE / 2 + 3 * torch.randn(n, 2, generator=generator)))
            vectors.append(base + 0.1 * torch.rand(n, 6, generator=generator))
            runner = torch.randint(1, 4, (n,), generator=generator)
        strategy.append(torch.full((n,), s))
        logits.append(_logits(n, 0, runner))
    return torch.cat(strategy), torch.cat(maps), torch.cat(vectors), torch.cat(logits)


def test_a_fixed_position_cue_ranks_first_and_is_flagged():
    strategy, maps, vectors, logits = _class(torch.Generator().manual_seed(0), [60, 30, 12], 2)
    audits = {a.id: a for a in audit_strategies(strategy, maps, vectors, logits)}
    assert audits[2].rank == 1 and audits[2].flagged
    assert [audits[s].flagged for s in (0, 1)] == [False, False]
    assert audits[0].main and audits[0].rank == 3 and audits[0].score == 0
    assert audits[2].runner_up == 2
    shortcut = audits[2].reasons
    assert all(shortcut[r] > audits[1].reasons[r] for r in REASONS)


def test_a_clean_class_flags_nothing():
    for seed in range(5):
        strategy, maps, vectors, logits = _class(
            torch.Generator().manual_seed(seed), [50, 40, 30], None
        )
        assert not any(a.flagged for a in audit_strategies(strategy, maps, vectors, logits))


def test_the_audit_reads_no_labels_and_no_row_order():
    assert list(inspect.signature(audit_strategies).parameters) == [
        "strategy",
        "maps",
        "vectors",
        "logits",
        "flag_score",
    ]
    strategy, maps, vectors, logits = _class(torch.Generator().manual_seed(1), [40, 20, 10], 1)
    order = torch.randperm(len(strategy), generator=torch.Generator().manual_seed(2))
    first = audit_strategies(strategy, maps, vectors, logits)
    again = audit_strategies(strategy[order], maps[order], vectors[order], logits[order])
    assert [(a.id, a.rank, a.flagged) for a in first] == [(a.id, a.rank, a.flagged) for a in again]
    for a, b in zip(first, again, strict=True):
        assert a.reasons == pytest.approx(b.reasons, abs=1e-9)


def test_reasons_on_a_small_exact_case():
    # class 1: strategy 5 (3 images, maps on the left column) and 8 (1 image, on the right)
    maps = torch.zeros(4, 2, 2)
    maps[:3, :, 0] = 1.0
    maps[3, :, 1] = 1.0
    vectors = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    logits = _logits(4, 1, torch.tensor([0, 2, 3, 0]))
    audits = audit_strategies(torch.tensor([5, 5, 5, 8]), maps, vectors, logits)
    assert [(a.id, a.rank, a.main) for a in audits] == [(8, 1, False), (5, 2, True)]
    assert audits[0].reasons == pytest.approx(
        {
            "fixed_position": 0.0,  # both mean maps: all mass on 2 of 4 pixels
            "map_shift": 1.0,
            "logic_distance": 0.5,  # orthogonal
            "look_alike": 1 - 1 / 3,
            "size": 1 - 1 / 3,
        }
    )
    assert audits[0].score == pytest.approx((1 + 0.5 + 2 / 3 + 2 / 3) / 5)
    assert audits[0].margin == pytest.approx(2.0) and audits[0].runner_up == 0


def test_concentration():
    assert concentration(torch.ones(10, 10)) == pytest.approx(0.05)
    assert concentration(torch.zeros(10, 10)) == pytest.approx(0.05)
    spike = torch.zeros(10, 10)
    spike[3, 4] = 0.2
    assert concentration(spike) == 1.0


def test_bad_input_is_refused():
    strategy, maps, vectors, logits = (
        torch.tensor([0, 0]),
        torch.zeros(2, 3, 3),
        torch.ones(2, 2),
        None,
    )
    logits = _logits(2, 0, torch.tensor([1, 1]))
    with pytest.raises(ValueError, match=r"^maps must lie in \[0, 1\]$"):
        audit_strategies(strategy, maps + 2, vectors, logits)
    with pytest.raises(
        ValueError, match=r"^vectors must have 2 dimensions and 2 rows, got shape \(3, 2\)$"
    ):
        audit_strategies(strategy, maps, torch.ones(3, 2), logits)
    with pytest.raises(ValueError, match=r"^logits hold NaN or infinite values$"):
        audit_strategies(strategy, maps, vectors, logits * float("nan"))
    with pytest.raises(ValueError, match=r"^strategy 0 holds images of predicted classes 0, 1$"):
        audit_strategies(strategy, maps, vectors, torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
