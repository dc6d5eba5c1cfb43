"""``granularity="logic"``: decision logic below the class (core/logic.py, docs/method.md)."""

import pytest
import torch

from repinterp import RepresentativeInterpreter
from repinterp.core.cover import algorithm_1, sides
from repinterp.core.logic import (
    GAMMA_QUANTILE,
    default_gamma,
    excluded,
    logic_vectors,
    neuron_boundaries,
    pre_activations,
)
from repinterp.models.split import split_model
from repinterp.store.index_folder import IndexLoadError

from ..networks import fit_random, randn, random_setup

N, Q = 300, 20


@pytest.fixture(scope="module")
def setup(one_thread):
    model, images = random_setup(n=N)
    return model, images, randn(40, 1, 12, 12, seed=5)


def _fit(model, images, **options) -> RepresentativeInterpreter:
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=Q, progress=False, **options)
    return ri.fit(images)


def _same(a, b) -> bool:
    return (
        torch.equal(a.boundaries, b.boundaries)
        and torch.equal(a.covered, b.covered)
        and torch.equal(a.channel_weights, b.channel_weights)
        and (a.delta, a.conflicts, a.predicted_class) == (b.delta, b.conflicts, b.predicted_class)
    )


def test_class_granularity_is_the_papers_path(one_thread) -> None:
    """The default decision set adds nothing: ``Q`` is Eq. 2 at its sources, computed here one
    image at a time with autograd; the projections are ``<W, psi(x)> + b``; and each
    explanation is Algorithm 1 as the paper states it (`algorithm_1`, exact fractions) on the
    index's sides with ``D(x)`` = the other classes, with §5.1's channel weights. Computed in
    the same run (no stored digest of floating-point results, which holds on one CPU only)."""
    ri, images = fit_random(N, Q)
    index = ri.index
    assert ri.granularity == "class" and index.columns == {} and index.n_extra == 0
    assert "granularity" not in index.meta and "gamma" not in index.meta
    psi, head = ri.split.psi, ri.split.head
    for h, source in enumerate(ri.boundary_sources.tolist()):
        t = psi(images[source : source + 1]).detach().requires_grad_(True)
        top = head(t)[0].topk(2).indices
        margin = head(t)[0, top[0]] - head(t)[0, top[1]]
        (weight,) = torch.autograd.grad(margin, t)
        bias = margin.detach() - (weight * t.detach()).sum()
        assert torch.equal(index.boundaries.top_classes[h], top)
        torch.testing.assert_close(index.boundaries.weight[h], weight[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(index.boundaries.bias[h], bias, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        t = psi(images)
        plain = (t.flatten(1) @ index.boundaries.weight.flatten(1).T) + index.boundaries.bias
    torch.testing.assert_close(index.projections, plain, rtol=1e-5, atol=1e-4)
    inputs = randn(40, 1, 12, 12, seed=5)
    for x, e in zip(inputs, ri.explain_batch(inputs), strict=True):
        x_sides = sides(e.projections)
        other = index.predictions != e.predicted_class
        chosen, covered, delta = algorithm_1(index.sides, x_sides, other)
        assert e.boundaries.tolist() == chosen
        assert e.covered.tolist() == covered and e.delta == delta
        w = index.boundaries.weight[chosen] * x_sides[chosen].float().view(-1, 1, 1, 1)
        torch.testing.assert_close(e.channel_weights, w.mean((2, 3)))
        with torch.no_grad():
            own = psi(x[None]).flatten(1) @ index.boundaries.weight.flatten(1).T
        torch.testing.assert_close(
            e.projections, own[0] + index.boundaries.bias, atol=1e-4, rtol=1e-5
        )


def test_gamma_minus_one_is_the_papers_ri(setup) -> None:
    model, images, inputs = setup
    paper = _fit(model, images)
    logic = _fit(model, images, granularity="logic", gamma=-1.0)
    q = len(paper.index.boundaries)
    assert logic.index.n_extra > 0 and len(logic.index.boundaries) == q + logic.index.n_extra
    assert torch.equal(logic.index.projections[:, :q], paper.index.projections)
    assert torch.equal(logic.index.boundaries.weight[:q], paper.index.boundaries.weight)
    pairs = [
        *zip(paper.explain_batch(inputs), logic.explain_batch(inputs), strict=True),
        *zip(
            paper.explain_reference(range(0, N, 7)),
            logic.explain_reference(range(0, N, 7)),
            strict=True,
        ),
    ]
    assert all(_same(a, b) for a, b in pairs)
    # with the default gamma the covers do change: the class is cut by logic
    default = _fit(model, images, granularity="logic")
    assert -1 < default.index.meta["gamma"] < 1
    covered = [e.representativeness for e in default.explain_batch(inputs)]
    assert sum(covered) < sum(e.representativeness for e in paper.explain_batch(inputs))


def test_logic_never_covers_an_excluded_same_class_image_beyond_delta(setup) -> None:
    model, images, inputs = setup
    ri = _fit(model, images, granularity="logic")
    index, gamma = ri.index, ri.index.meta["gamma"]
    logits, _ = ri.forward(inputs)
    vectors = logic_vectors(ri.split.head, ri.features(inputs))
    extra = excluded(vectors, logits.argmax(1), index.columns["logic"], index.predictions, gamma)
    assert extra.any(1).float().mean() >= 0.25  # the default excludes images for many inputs
    used_neurons = 0
    for i, e in enumerate(ri.explain_batch(inputs)):
        d_x = (index.predictions != e.predicted_class) | extra[i]
        inside = int(d_x[e.covered].sum())
        assert inside == e.conflicts <= e.delta
        assert not bool(extra[i][e.covered].any()) or e.delta > 0
        used_neurons += bool((e.boundaries >= len(index.boundaries) - index.n_extra).any())
    assert used_neurons > 0


def test_logic_vectors_are_the_pooled_relevance(setup) -> None:
    model, images, _ = setup
    split = split_model(model, "relu2")
    with torch.no_grad():
        t = split.psi(images[:5])
    vectors = logic_vectors(split.head, t)
    for i in range(5):
        ti = t[i : i + 1].clone().requires_grad_(True)
        logits = split.head(ti)[0]
        c = int(logits.argmax())
        contrast = logits[c] - (logits.sum() - logits[c]) / (len(logits) - 1)
        (grad,) = torch.autograd.grad(contrast, ti)
        torch.testing.assert_close(vectors[i], (ti * grad)[0].sum((1, 2)).detach())


def test_neuron_hyperplanes_are_the_first_relus_pre_activations(setup) -> None:
    model, images, _ = setup
    split = split_model(model, "relu2")
    with torch.no_grad():
        t = split.psi(images[:50])
        z = pre_activations(split.head)(t)
    assert z.shape == (50, 24)  # fc1's 24 neurons, before relu3
    q = neuron_boundaries(split.head, t, 10, seed=3)
    chosen = torch.randperm(24, generator=torch.Generator().manual_seed(3))[:10].sort().values
    projected = (q.weight.flatten(1) @ t.flatten(1).T).T + q.bias
    torch.testing.assert_close(projected, z[:, chosen], atol=1e-5, rtol=1e-5)
    assert (q.top_classes == -1).all()


def test_default_gamma_is_a_quantile_of_the_within_class_cosines() -> None:
    logic = torch.tensor([[1.0, 0], [0, 1], [1, 1], [-1, 0], [5, 5]])
    classes = torch.tensor([0, 0, 0, 1, 1])
    s = 2**-0.5
    pairs = torch.tensor([0.0, s, s, -s])  # class 0's three pairs, class 1's one
    assert default_gamma(logic, classes, quantile=0.5) == pytest.approx(float(pairs.median()))
    assert default_gamma(logic, classes, quantile=0.0) == pytest.approx(-s)
    assert default_gamma(logic, classes, quantile=1.0) == pytest.approx(s)
    assert default_gamma(logic[:1], classes[:1]) == -1.0
    with pytest.raises(ValueError, match="quantile"):
        default_gamma(logic, classes, quantile=1.5)


def test_default_gamma_excludes_only_a_minority_logic() -> None:
    """A class of 95 images of one logic and 5 of the opposite one: the default excludes the
    rarest pairs only, and every pair it excludes joins the two logics (the median would
    exclude half of the majority's own pairs)."""
    g = torch.Generator().manual_seed(0)
    major = torch.tensor([1.0, 0.0]) + 0.3 * torch.randn(95, 2, generator=g)
    minor = torch.tensor([-1.0, 0.0]) + 0.3 * torch.randn(5, 2, generator=g)
    logic, mode = torch.cat([major, minor]), torch.arange(100) >= 95
    classes = torch.zeros(100, dtype=torch.long)
    gamma = default_gamma(logic, classes)
    assert gamma == default_gamma(logic, classes, quantile=GAMMA_QUANTILE)
    pairs = torch.triu_indices(100, 100, 1)
    cos = torch.nn.functional.cosine_similarity(logic[pairs[0]], logic[pairs[1]])
    below = cos < gamma
    assert 0 < below.double().mean() <= GAMMA_QUANTILE
    assert (mode[pairs[0]] != mode[pairs[1]])[below].all()
    median = default_gamma(logic, classes, quantile=0.5)
    assert ((cos < median) & (mode[pairs[0]] == mode[pairs[1]])).any()


def test_logic_index_round_trips_and_a_mismatched_granularity_is_refused(setup, tmp_path):
    model, images, inputs = setup
    ri = _fit(model, images, granularity="logic")
    ri.save(tmp_path / "logic")
    loaded = RepresentativeInterpreter.load(tmp_path / "logic", model, progress=False)
    assert loaded.granularity == "logic" and torch.equal(
        loaded.index.columns["logic"], ri.index.columns["logic"]
    )
    gamma = ri.index.meta["gamma"]
    assert repr(loaded).endswith(f"granularity logic (γ = {gamma:.3g}, beyond the paper))")
    assert ri.granularity_text == loaded.granularity_text
    assert _fit(model, images).granularity_text == "granularity class (the paper's RI)"
    assert loaded.index.meta["gamma"] == ri.index.meta["gamma"]
    assert all(
        _same(a, b)
        for a, b in zip(ri.explain_batch(inputs), loaded.explain_batch(inputs), strict=True)
    )
    with pytest.raises(IndexLoadError, match="granularity='logic', not 'class'"):
        RepresentativeInterpreter.load(tmp_path / "logic", model, granularity="class")
    _fit(model, images).save(tmp_path / "class")
    with pytest.raises(IndexLoadError, match="granularity='class', not 'logic'"):
        RepresentativeInterpreter.load(tmp_path / "class", model, granularity="logic")
    paper = RepresentativeInterpreter.load(tmp_path / "class", model, granularity="class")
    assert paper.granularity == "class"


def test_bad_settings_are_refused(setup) -> None:
    model, _, _ = setup
    with pytest.raises(ValueError, match="unknown granularity 'region'"):
        RepresentativeInterpreter(model, "relu2", granularity="region")
    with pytest.raises(ValueError, match=r"gamma must be in \[-1, 1\]"):
        RepresentativeInterpreter(model, "relu2", granularity="logic", gamma=2.0)
    with pytest.raises(ValueError, match="gamma applies to granularity='logic' only"):
        RepresentativeInterpreter(model, "relu2", gamma=0.5)


def test_a_sharded_and_resumed_logic_fit_equals_the_one_pass_fit(setup, tmp_path) -> None:
    from repinterp.store.shards import Shards

    model, images, _ = setup
    plain = _fit(model, images, granularity="logic")
    sharded = RepresentativeInterpreter(
        model, "relu2", n_boundaries=Q, progress=False, granularity="logic"
    ).fit(images, shards=Shards(tmp_path / "partial", size=128))
    for name, tensor in plain.index.tensors().items():
        assert torch.equal(tensor, sharded.index.tensors()[name]), name
    assert sharded.index.meta["gamma"] == plain.index.meta["gamma"]
    # a partial folder of a class fit is not resumed as a logic fit
    _fit(model, images).fit(images, shards=Shards(tmp_path / "class", size=128))
    again = RepresentativeInterpreter(
        model, "relu2", n_boundaries=Q, progress=False, granularity="logic"
    )
    with pytest.raises(ValueError, match="granularity"):
        again.fit(images, shards=Shards(tmp_path / "class", size=128, resume=True))


def test_a_head_without_relu_has_no_logic() -> None:
    from ..networks import images as pictures
    from ..networks import tiny_cnn

    ri = RepresentativeInterpreter(tiny_cnn().eval(), "3", progress=False, granularity="logic")
    with pytest.raises(ValueError, match="granularity='logic' needs a ReLU in the head"):
        ri.fit(pictures(20))


def test_every_fit_reads_gamma_off_its_own_reference_set(setup) -> None:
    """A second ``fit`` with ``gamma=None`` reads ``gamma`` again (issue 38, failure 6): it
    equals a fresh interpreter's on the second set, and so do its explanations."""
    model, images, inputs = setup
    again = _fit(model, images[:150], granularity="logic")
    first = again.index.decisions.gamma
    again.fit(images[150:])
    fresh = _fit(model, images[150:], granularity="logic")
    assert again.index.decisions.gamma == fresh.index.decisions.gamma != first
    assert again.index.meta["gamma"] == fresh.index.meta["gamma"]
    pairs = zip(again.explain_batch(inputs), fresh.explain_batch(inputs), strict=True)
    assert all(_same(a, b) for a, b in pairs)


def test_logic_is_retired_with_a_warning_and_its_indexes_still_load(setup, tmp_path) -> None:
    """Issue 36, item 6: ``logic`` won no row of the criterion that no other option wins; a
    fit with it says so (FutureWarning), and an index made with it still loads."""
    from repinterp.core.granularities import RETIRED, decision_set

    with pytest.warns(FutureWarning, match="granularity='logic' is retired"):
        decision_set("logic")
    model, images, _ = setup
    with pytest.warns(FutureWarning, match=RETIRED[:40]):
        ri = _fit(model, images, granularity="logic")
    ri.save(tmp_path / "index")
    loaded = RepresentativeInterpreter.load(tmp_path / "index", model)
    assert loaded.index.decisions.gamma == ri.index.decisions.gamma
