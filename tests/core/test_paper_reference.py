"""Every fast path of RI held to the paper as `repinterp.core.paper` states it: on random small
models (float64, so that no projection lies within rounding of 0 in one computation and not in
the other), fit, explain, heat maps and distances of the interpreter equal the reference: the
same ``Q`` (to rounding), the same ``P(x)`` in the same order, the same covered set and
``delta``, heat maps and distances allclose; so do the host's bit-set and masked covers, a
sharded fit, and the CUDA path where CUDA exists."""

import pytest
import torch

from repinterp import RepresentativeInterpreter
from repinterp.core import paper
from repinterp.core.cover import greedy_cover, sides
from repinterp.store.shards import Shards

from ..networks import randn, random_setup, tiny_gap_cnn

N, Q, INPUTS = 60, 12, 7
pytestmark = pytest.mark.usefixtures("one_thread")


def _model(kind: str, seed: int) -> tuple[torch.nn.Module, str, torch.Tensor, torch.Tensor]:
    """A balanced random model, its target layer, N reference images and INPUTS inputs."""
    if kind == "mlp":
        model, images = random_setup(n=N + INPUTS, seed=seed, dtype=torch.float64)
        return model, "relu2", images[:N], images[N:]
    model = tiny_gap_cnn(seed=seed).double().eval()
    images = randn(N + INPUTS, 3, 16, 16, seed=seed, dtype=torch.float64)
    with torch.no_grad():
        model[-1].bias -= model(images).mean(0)
    return model, "3", images[:N], images[N:]


def _interpreter(model, layer, batch_size, device=None) -> RepresentativeInterpreter:
    return RepresentativeInterpreter(
        model, layer, n_boundaries=Q, batch_size=batch_size, progress=False, device=device
    )


def _assert_index(ri: RepresentativeInterpreter, ref: paper.PaperIndex) -> None:
    index = ri.index
    torch.testing.assert_close(index.boundaries.weight.cpu(), ref.weight)
    torch.testing.assert_close(index.boundaries.bias.cpu(), ref.bias)
    torch.testing.assert_close(index.projections.cpu(), ref.projections)
    assert torch.equal(index.predictions.cpu(), ref.predictions)


def _assert_explanations(ri, ref, inputs, references) -> None:
    psi = ri.split.psi.cpu() if ri.device.type != "cpu" else ri.split.psi
    explanations = ri.explain_batch(inputs)
    for x, e in zip(inputs, explanations, strict=True):
        own = paper.explain(psi, ri.split.head.cpu(), ref, x.cpu())
        assert e.predicted_class == own.predicted
        assert e.boundary_ids.tolist() == own.boundaries
        assert e.covered.tolist() == own.covered and e.delta == own.delta
        torch.testing.assert_close(e.projections.cpu(), own.projections)
        expected = [paper.distance(ref, own, r) for r in own.covered]
        torch.testing.assert_close(e.distances().cpu(), torch.tensor(expected, dtype=torch.float64))
        if own.boundaries:
            maps = paper.heatmap(psi, ref, own, references[:4].cpu())
            torch.testing.assert_close(e.heatmap(references[:4]).cpu(), maps)


def _reference(ri: RepresentativeInterpreter, images: torch.Tensor) -> paper.PaperIndex:
    sources = ri.boundary_sources.tolist()
    return paper.fit(ri.split.psi, ri.split.head, images, sources)


@pytest.mark.parametrize("batch_size", [1, 3, 7])
@pytest.mark.parametrize(("kind", "seed"), [("mlp", 0), ("mlp", 1), ("gap", 2)])
def test_fit_explain_heat_maps_and_distances_are_the_papers(kind, seed, batch_size) -> None:
    model, layer, images, inputs = _model(kind, seed)
    ri = _interpreter(model, layer, batch_size).fit(images)
    ref = _reference(ri, images)
    _assert_index(ri, ref)
    _assert_explanations(ri, ref, inputs, images)
    own = [paper.explain(ri.split.psi, ri.split.head, ref, x) for x in images[:INPUTS]]
    for e, p in zip(ri.explain_reference(list(range(INPUTS))), own, strict=True):
        assert (e.boundary_ids.tolist(), e.covered.tolist(), e.delta) == (
            p.boundaries,
            p.covered,
            p.delta,
        )


@pytest.mark.parametrize("method", ["incremental", "masked"])
def test_each_cover_path_is_algorithm_1_as_the_paper_states_it(method) -> None:
    model, layer, images, inputs = _model("mlp", 3)
    ri = _interpreter(model, layer, 8).fit(images)
    ref = _reference(ri, images)
    index = ri.index
    own = [paper.explain(ri.split.psi, ri.split.head, ref, x) for x in inputs]
    projections = torch.stack([p.projections for p in own])
    other = index.predictions[None] != torch.tensor([p.predicted for p in own])[:, None]
    result = greedy_cover(index.cover_index, sides(projections), other, method=method)
    for i, p in enumerate(own):
        assert result.boundaries(i).tolist() == p.boundaries
        assert result.covered[i].nonzero().flatten().tolist() == p.covered
        assert int(result.delta[i]) == p.delta


def test_a_sharded_fit_is_the_papers(tmp_path) -> None:
    model, layer, images, inputs = _model("gap", 4)
    shards = Shards(tmp_path / "partial", size=6)  # shards of two batches of 3
    ri = _interpreter(model, layer, 3).fit(images, shards=shards)
    ref = _reference(ri, images)
    _assert_index(ri, ref)
    _assert_explanations(ri, ref, inputs, images)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_cuda_path_is_the_papers() -> None:
    model, layer, images, inputs = _model("mlp", 5)
    ri = _interpreter(model, layer, 7, device="cuda").fit(images)
    cpu = _interpreter(_model("mlp", 5)[0], layer, 7)
    ref = _reference(cpu.fit(images), images)
    _assert_index(ri, ref)
    _assert_explanations(ri, ref, inputs.cuda(), images.cuda())
