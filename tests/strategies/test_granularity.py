"""``granularity="strategy"``: polytopes that follow the strategies of a class
(strategies/granularity.py, strategies/model.py)."""

from collections import OrderedDict

import pytest
import torch
from torch import nn

from repinterp import RepresentativeInterpreter
from repinterp.core.config import FitConfig
from repinterp.strategies.discovery import strategy_pairs
from repinterp.strategies.granularity import StrategySet
from repinterp.strategies.model import polytope_fidelity, strategy_fields

from ..networks import fit_random, randn, random_setup


class _Flat(nn.Module):
    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return t.flatten(1)


def _two_strategy_model() -> nn.Sequential:
    """Images are 2 x 2 x 2 feature maps themselves (``features`` is the identity); the head
    says class 0 where the first value is positive, else class 1."""
    head = nn.Linear(8, 2)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.weight[0, 0], head.weight[1, 0] = 1.0, -1.0
    layers = OrderedDict(features=nn.Identity(), flat=_Flat(), head=head)
    return nn.Sequential(layers).eval()


def _blobs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Class 0 in two blobs (second value +4 or -4), class 1 in one; N x 2 x 2 x 2 and each
    image's blob (0, 1: class 0's two; 2: class 1)."""
    g = torch.Generator().manual_seed(seed)
    blob = torch.arange(n) % 3
    x = torch.randn(n, 8, generator=g) * 0.5
    x[:, 0] += torch.where(blob < 2, 5.0, -5.0)
    x[:, 1] += torch.where(blob == 0, 4.0, torch.where(blob == 1, -4.0, 0.0))
    return x.view(n, 2, 2, 2), blob


def _fit(granularity: str, images: torch.Tensor) -> RepresentativeInterpreter:
    ri = RepresentativeInterpreter(
        _two_strategy_model(), "features", n_boundaries=20, progress=False, granularity=granularity
    )
    return ri.fit(images)


def test_a_polytope_follows_each_of_two_separable_strategies_of_one_class(one_thread) -> None:
    images, blob = _blobs(300, seed=0)
    ri = _fit("strategy", images)
    index = ri.index
    strategy = index.columns["strategy"]
    assert index.n_extra == 1  # one separator: class 0's two strategies
    for b in (0, 1):  # each blob of class 0 is one strategy, class 1 one more
        assert len(strategy[blob == b].unique()) == 1
    assert strategy[blob == 0][0] != strategy[blob == 1][0]
    new, new_blob = _blobs(60, seed=1)
    paper = _fit("class", images)
    explained = ri.explain_batch(new)
    ids = ri.index.granularity.columns(
        ri.split.head, ri.features(new), ri.logits_and_projections(new)[0]
    )
    assert [e.strategy for e in explained] == ids["strategy"].tolist()
    assert [e.strategy for e in ri.explain_reference([0, 1, 2])] == strategy[:3].tolist()
    for b, e, p in zip(new_blob, explained, paper.explain_batch(new), strict=True):
        assert p.strategy is None and "strategy" not in repr(p)
        assert f"strategy {e.strategy}," in repr(e) and e.to_dict()["strategy"] == e.strategy
        covered = blob[e.covered]
        if b < 2:  # the strategy's polytope holds its own blob and none of the other
            assert bool((covered == b).all()) and e.representativeness == int((blob == b).sum())
            assert set(blob[p.covered].tolist()) == {0, 1}  # the paper's holds the class
        else:
            assert e.boundary_ids.tolist() == p.boundary_ids.tolist()
            assert torch.equal(e.covered, p.covered)
    strategies = ri.strategies()
    assert sorted(len(s.members) for s in strategies) == [100, 100, 100]
    for s in strategies:
        assert s.inside == 1.0 and s.others_inside == 0.0
        assert bool(s.covers(images[s.members]).all())
    logits = ri.logits_and_projections(new)[0]
    columns = index.granularity.columns(ri.split.head, ri.features(new), logits)
    classes = logits.argmax(1)
    assert polytope_fidelity(strategies, new, columns["strategy"], classes) == (1.0, 0.0)


def test_a_strategys_polytope_is_cut_to_its_cell(one_thread) -> None:
    """On a random model: every bisector of a strategy's cell is in its polytope, so the
    polytope holds no reference or new image of another strategy of its class, and loses
    members only to Eq. 2's boundaries."""
    model, images = random_setup(n=400)
    images[::2, :, :6, :6] += 2.0  # a patch on half the images: classes of two strategies
    config = FitConfig(n_boundaries=20, progress=False, granularity=StrategySet())
    ri = RepresentativeInterpreter(model, "relu2", config=config).fit(images)
    index = ri.index
    assert index.n_extra > 0
    first = len(index.boundaries) - index.n_extra
    pairs = strategy_pairs(index.granularity.strategies.classes)
    column = index.columns["strategy"]
    new = randn(200, 1, 12, 12, seed=8)
    new[::2, :, :6, :6] += 2.0
    logits = ri.logits_and_projections(new)[0]
    assigned = index.granularity.columns(ri.split.head, ri.features(new), logits)["strategy"]
    for s in ri.strategies():
        cell = first + (pairs == s.id).any(1).nonzero().flatten()
        assert set(cell.tolist()) <= set(s.interpretation.boundary_ids.tolist())
        sign = torch.where(pairs[cell - first, 0] == s.id, 1, -1).to(torch.int8)
        assert bool((index.sides[s.members][:, cell] == sign).all())  # members: its side
        rivals = (index.predictions == s.predicted_class) & (column != s.id)
        assert not bool(rivals[s.interpretation.covered].any())
        same_class = logits.argmax(1) == s.predicted_class
        assert not bool(s.covers(new)[same_class & (assigned != s.id)].any())
        assert bool(s.covers(images[s.members]).float().mean() == s.inside)


def test_one_strategy_per_class_is_the_papers_ri(one_thread) -> None:
    """``k_max=1``: no separator, nothing excluded: the paper's explanations, bit for bit."""
    ri, images = fit_random(300, 20)
    config = FitConfig(n_boundaries=20, progress=False, granularity=StrategySet(k_max=1))
    one = RepresentativeInterpreter(ri.model, "relu2", config=config).fit(images)
    assert one.index.n_extra == 0 and torch.equal(one.index.projections, ri.index.projections)
    inputs = randn(30, 1, 12, 12, seed=5)
    for a, b in zip(ri.explain_batch(inputs), one.explain_batch(inputs), strict=True):
        assert a.boundary_ids.tolist() == b.boundary_ids.tolist()
        assert torch.equal(a.covered, b.covered) and torch.equal(
            a.channel_weights, b.channel_weights
        )


def test_a_strategy_index_saved_and_loaded_explains_alike(one_thread, tmp_path) -> None:
    images, _ = _blobs(300, seed=0)
    ri = _fit("strategy", images)
    ri.save(tmp_path / "index")
    loaded = RepresentativeInterpreter.load(tmp_path / "index", _two_strategy_model())
    assert loaded.granularity == "strategy" and loaded.granularity_text == ri.granularity_text
    new, _ = _blobs(30, seed=2)
    for a, b in zip(ri.explain_batch(new), loaded.explain_batch(new), strict=True):
        assert a.boundary_ids.tolist() == b.boundary_ids.tolist() and torch.equal(
            a.covered, b.covered
        )
    with pytest.raises(ValueError, match="does not hold its reference set"):
        loaded.strategies()
    assert len(loaded.strategies(images)) == 3


def test_a_class_whose_images_are_one_picture_is_one_strategy(one_thread) -> None:
    """Issue 44, item 3: fit ended in scikit-learn's "Number of labels is 1"."""
    images, blob = _blobs(300, seed=0)
    images[blob == 2] = images[blob == 2][0]  # class 1: 100 copies of one picture
    strategy = _fit("strategy", images).index.columns["strategy"]
    assert len(strategy[blob == 2].unique()) == 1 and len(strategy[blob < 2].unique()) == 2


def test_strategies_refuse_a_set_other_than_the_indexed_one(one_thread, tmp_path) -> None:
    """Issue 44, item 1: another set of the same size, or the indexed one reordered, gave
    audit scores, members and mean maps computed on the wrong images."""
    images, _ = _blobs(300, seed=0)
    _fit("strategy", images).save(tmp_path / "index")
    loaded = RepresentativeInterpreter.load(tmp_path / "index", _two_strategy_model())
    other, _ = _blobs(300, seed=3)
    with pytest.raises(ValueError, match="not the one the index was fitted on: 300 of 300 images"):
        loaded.strategies(other)
    swapped = torch.arange(300)
    swapped[[0, 7]] = swapped[[7, 0]]  # two images of one class swapped
    with pytest.raises(ValueError, match=r"2 of 300 images give other projections .* image 0\)"):
        loaded.strategies(images[swapped])
    assert len(loaded.strategies(images.clone())) == 3


def test_strategies_are_found_once_and_saved_with_the_index(
    one_thread, tmp_path, strategy_searches
) -> None:
    images, _ = _blobs(300, seed=0)
    ri = _fit("strategy", images)
    first = ri.strategies()
    again = ri.strategies()
    ri.save(tmp_path / "index")
    loaded = RepresentativeInterpreter.load(tmp_path / "index", _two_strategy_model())
    kept = loaded.strategies()  # no reference set: read from the index folder
    assert len(strategy_searches) == 1
    for a, b, c in zip(first, again, kept, strict=True):
        assert a.to_dict() == b.to_dict() == c.to_dict()
        assert torch.equal(a.mean_heatmap, c.mean_heatmap) and torch.equal(a.members, c.members)
        assert a.audit == c.audit and type(c.audit) is type(a.audit)
    ri.fit(images)  # a new fit finds them again
    ri.strategies()
    assert len(strategy_searches) == 2
    entries = loaded.index.granularity.summary[1]
    for entry in entries:  # kept by another version: found again, not refused
        entry["audit"]["retired"] = 1.0
    assert len(loaded.strategies(images)) == 3 and len(strategy_searches) == 3
    assert strategy_fields(loaded, 0)["strategy_flagged"] is not None
    assert strategy_fields(loaded, 0)["strategy_audit_kept"] == "current"
    for entry in loaded.index.granularity.summary[1]:  # an audit of 0.6.0's reasons
        del entry["audit"]["reasons"]["moved_pattern"]
    assert strategy_fields(loaded, 0) == {
        "strategy_flagged": None,
        "strategy_rank": None,
        "strategy_audit_kept": "another version's",
    }
    assert len(loaded.strategies(images)) == 3 and len(strategy_searches) == 4
    assert strategy_fields(loaded, 0)["strategy_flagged"] is not None
    for entry in loaded.index.granularity.summary[1]:  # the same reasons, another rule's scores
        entry["audit"]["score"] += 0.25
    assert strategy_fields(loaded, 0) == {
        "strategy_flagged": None,
        "strategy_rank": None,
        "strategy_audit_kept": "another version's",
    }
    assert len(loaded.strategies(images)) == 3 and len(strategy_searches) == 5


def test_strategies_of_another_granularity_are_refused(one_thread) -> None:
    ri, _ = fit_random(100, 5)
    with pytest.raises(ValueError, match="granularity 'class': strategies need"):
        ri.strategies()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"k_max": 0}, "k_max must be a whole number >= 1, got 0"),
        (
            {"vectors": "pixels"},
            "unknown strategy vectors 'pixels'; choose one of features, pooled",
        ),
    ],
)
def test_bad_strategy_settings_are_one_line(settings, message) -> None:
    with pytest.raises(ValueError, match=message):
        StrategySet(**settings)
