"""k-means regions (§6.4, App. D): inputs nearest the centres, their polytopes, and the
assignment of new images (the covering region of largest representativeness, else the nearest
centre), each checked against a brute-force recomputation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans

from repinterp.core.regions import RegionSet, class_shares

from ..networks import fit_random, random_setup

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def regions():
    ri, _ = fit_random(200, 10, keep_features=True)
    return ri, ri.regions(n_regions=12, seed=0)


def test_inputs_are_the_reference_images_nearest_the_centres(regions) -> None:
    ri, rs = regions
    features = ri.reference_features
    centres = KMeans(n_clusters=12, random_state=0, n_init=3).fit(np.asarray(features))
    assert torch.equal(rs.centres, torch.from_numpy(centres.cluster_centers_).float())
    distances = torch.cdist(rs.centres.double(), features.double())
    assert torch.equal(rs.inputs, distances.argmin(1))
    for region, row in zip(rs.regions, rs.inputs.tolist(), strict=True):
        alone = ri.explain_reference([row])[0]
        assert torch.equal(region.boundary_ids, alone.boundary_ids)
        assert (
            region.predicted_class == alone.predicted_class == rs.classes[rs.regions.index(region)]
        )


def test_assignment_is_the_largest_covering_region_else_the_nearest_centre(regions) -> None:
    ri, rs = regions
    _, unseen = random_setup(n=260)
    images = unseen[200:]
    features = ri.features(images).flatten(1)
    covers = torch.stack([r.covers(images) for r in rs.regions], 1)  # N x V
    expected = []
    for n in range(len(images)):
        covering = covers[n].nonzero().flatten().tolist()
        if covering:  # ties go to the lower region index
            sizes = [rs.regions[v].representativeness for v in covering]
            expected.append(covering[sizes.index(max(sizes))])
        else:
            expected.append(
                int(torch.cdist(features[n : n + 1].double(), rs.centres.double()).argmin())
            )
    assignment = rs.assign(images)
    assert assignment.region.tolist() == expected
    assert assignment.covered.tolist() == covers.any(1).tolist()
    assert 0 < int(assignment.covered.sum()) < len(images)  # both branches are exercised
    assert torch.equal(rs.predict(images), rs.classes[torch.tensor(expected)])


def test_heat_maps_reuse_each_assigned_regions_weights(regions) -> None:
    _, rs = regions
    _, unseen = random_setup(n=230)
    images = unseen[200:]
    region = rs.assign(images).region
    maps = rs.heatmap(images)
    assert maps.shape == (len(images), *images.shape[-2:])
    for n, v in enumerate(region.tolist()):
        assert torch.allclose(maps[n], rs.regions[v].heatmap(images[n : n + 1])[0], atol=1e-6)


def test_short_reprs(regions) -> None:
    ri, rs = regions
    text = repr(rs)
    distinct = {
        (
            r.predicted_class,
            tuple(r.boundary_ids.tolist()),
            tuple((r.projections[r.boundary_ids] > 0).tolist()),
        )
        for r in rs.regions
    }
    assert len(text) < 500 and f"{len(distinct)} distinct polytopes" in text
    assert text.startswith("RegionSet(12 regions over 200 reference images")
    index = repr(ri.index)
    assert len(index) < 500
    assert index.startswith("ReferenceIndex(|R| = 200, |Q| = 10, 4 classes")
    assert "feature maps kept" in index


def test_class_shares_give_each_class_one_region_then_follow_the_sizes() -> None:
    assert class_shares([94, 2], 2) == [1, 1]
    assert class_shares([94, 2], 4) == [3, 1]
    assert class_shares([50, 30, 20], 10) == [5, 3, 2]
    assert class_shares([1, 99], 3) == [1, 2]  # never more regions than images
    assert class_shares([1, 2], 3) == [1, 2]
    assert sum(class_shares([7, 1, 40, 3], 30)) == 30
    with pytest.raises(ValueError, match="2 regions cannot give each of the 3 classes"):
        class_shares([5, 5, 5], 2)
    with pytest.raises(ValueError, match="more than the 10 images"):
        class_shares([5, 5], 11)


def test_regions_by_class_give_every_predicted_class_a_region(regions) -> None:
    ri, _ = regions
    predictions = ri.index.predictions.cpu()
    classes, sizes = predictions.unique(return_counts=True)
    assert len(classes) >= 3
    k = len(classes)
    assert len(set(RegionSet.build(ri, n_regions=k, seed=0).classes.tolist())) < k  # k-means
    by_class = RegionSet.build(ri, n_regions=k, seed=0, by_class=True)
    assert by_class.classes.tolist() == classes.tolist()
    more = RegionSet.build(ri, n_regions=3 * k, seed=0, by_class=True)
    shares = class_shares(sizes.tolist(), 3 * k)
    expected = [c for c, n in zip(classes.tolist(), shares, strict=True) for _ in range(n)]
    assert more.classes.tolist() == expected  # class by class, as many as the shares
    assert torch.equal(predictions[more.inputs], more.classes.cpu())
    with pytest.raises(ValueError, match=f"ask for at least {k}"):
        RegionSet.build(ri, n_regions=k - 1, by_class=True)
