"""The streaming build of an index: the trunk runs once per reference image, the rows equal the
model's, and what is kept grows with |R| x (|Q| + classes), never with the feature size."""

import pytest
import torch

from repinterp import RepresentativeInterpreter
from repinterp.core.boundaries import project
from repinterp.models.split import CHECKED_IMAGES

from ..networks import random_setup

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("batch_size", [7, 64, 400])
def test_fit_runs_the_trunk_once_per_reference_image(batch_size: int) -> None:
    model, images = random_setup(n=150)
    seen = []
    handle = model.relu2.register_forward_hook(lambda _m, _i, out: seen.append(out.shape[0]))
    try:
        ri = RepresentativeInterpreter(
            model, "relu2", n_boundaries=40, batch_size=batch_size, progress=False
        ).fit(images, keep_features=True)
    finally:
        handle.remove()
    # Q's 40 source images once, for Eq. 2 and their own rows; the other 110 in the pass; and
    # the first CHECKED_IMAGES three times, to check that the model is a function of each image
    assert sum(seen) == 150 + 3 * CHECKED_IMAGES
    with torch.no_grad():
        t = ri.split.psi(images)
    torch.testing.assert_close(ri.index.projections, project(t, ri.index.boundaries))
    torch.testing.assert_close(ri.reference_features, t.flatten(1))
    assert torch.equal(ri.index.predictions, model(images).argmax(1))


def test_memory_grows_with_reference_times_boundaries() -> None:
    """What fit keeps: |R| x (|Q| + classes + 1) numbers plus |Q| boundaries, never
    |R| x feature size."""
    sizes = {}
    for n in (100, 400):
        model, images = random_setup(n=n)
        ri = RepresentativeInterpreter(model, "relu2", n_boundaries=10, progress=False)
        ri.fit(images)
        stored = ri.index.tensors()
        per_reference = sum(
            t.numel()
            for k, t in stored.items()
            if k not in ("boundary_weight", "boundary_bias", "boundary_classes", "sources")
        )
        sizes[n] = per_reference
        assert per_reference == n * (10 + 4 + 1)
        assert stored["boundary_weight"].numel() == 10 * 8 * 6 * 6
    assert sizes[400] == 4 * sizes[100]
