"""The paper's path end to end: Eq. 2 from autograd, the projections, Algorithm 1 as the paper
states it and §5.1's channel weights, held against the fitted interpreter (docs/method.md)."""

import torch

from repinterp.core.cover import algorithm_1, sides

from ..networks import fit_random, randn

N, Q = 300, 20


def test_class_granularity_is_the_papers_path(one_thread) -> None:
    """The default decision set adds nothing: ``Q`` is Eq. 2 at its sources, computed here one
    image at a time with autograd; the projections are ``<W, psi(x)> + b``; and each
    explanation is Algorithm 1 as the paper states it (`algorithm_1`, exact fractions) on the
    index's sides with ``D(x)`` = the other classes, with §5.1's channel weights. Computed in
    the same run (no stored digest of floating-point results, which holds on one CPU only)."""
    ri, images = fit_random(N, Q)
    index = ri.index
    assert ri.granularity == "class" and index.columns == {} and index.n_extra == 0
    assert "granularity" not in index.meta
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
