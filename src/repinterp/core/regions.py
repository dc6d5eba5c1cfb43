"""A set of representative interpretations that together cover the reference set (§6.4, App. D).

k-means on the reference feature maps gives ``k`` centres; the reference image nearest each
centre is an input and its polytope ``P(x)`` a *region*. An image is interpreted by the
covering region of largest representativeness, else by the region of its nearest centre; a
region predicts the class of its input, which makes the set a surrogate classifier.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..runtime.precision import exact_float32
from .boundaries import project
from .cover import sides
from .groups import PolytopeKey, polytope_key
from .heatmap import polytope_heatmaps
from .interpretation import Explainer, Interpretation
from .nearest import nearest_rows
from .views import HtmlView, render

__all__ = [
    "REGIONS_FILE",
    "Assignment",
    "Polytope",
    "RegionSet",
    "class_shares",
    "distinct_polytopes",
]

REGIONS_FILE = "regions.safetensors"
"""The k-means result kept in an index folder (see `regions_file`)."""


def class_shares(sizes: list[int], k: int) -> list[int]:
    """How ``RegionSet.build(by_class=True)`` shares ``k`` regions among classes of ``sizes``
    reference images: one region each, then the others one at a time to the class with the
    most images per region so far (ties: the first), never more regions than images.

    Raises:
        ValueError: ``k`` is less than the number of classes, or more than their images.
    """
    if k < len(sizes):
        raise ValueError(
            f"{k} regions cannot give each of the {len(sizes)} classes predicted on the "
            f"reference set one: ask for at least {len(sizes)}"
        )
    if k > sum(sizes):
        raise ValueError(f"{k} regions are more than the {sum(sizes)} images of the classes")
    shares = [1] * len(sizes)
    queue = [(-size, c) for c, size in enumerate(sizes) if size > 1]
    heapq.heapify(queue)
    for _ in range(k - len(sizes)):
        _, c = heapq.heappop(queue)
        shares[c] += 1
        if shares[c] < sizes[c]:
            heapq.heappush(queue, (-sizes[c] / shares[c], c))
    return shares


def _kmeans(features: Tensor, k: int, seed: int) -> tuple[Tensor, Tensor]:
    """k-means of the rows of ``features`` (N x D, CPU): the k x D centres and the row
    nearest each (k long)."""
    from sklearn.cluster import KMeans  # here: scikit-learn takes seconds to import

    kmeans = KMeans(n_clusters=k, random_state=seed, n_init=3).fit(np.asarray(features))
    centres = torch.from_numpy(kmeans.cluster_centers_).float()
    return centres, nearest_rows(centres, features)[0][:, 0]


@dataclass
class Assignment:
    """Which region interprets each of N images.

    Attributes:
        region: N long, index into the region set.
        covered: N bool, True when that region's polytope covers the image (else the region of
            the image's nearest k-means centre was used).
    """

    region: Tensor
    covered: Tensor


class RegionSet:
    """``k`` regions built from k-means centres of the reference feature maps.

    Attributes:
        interpreter: the fitted interpreter.
        inputs: k reference indices, the images nearest the centres.
        regions: their interpretations.
        centres: k x (K h w) k-means centres, on CPU.
    """

    def __init__(
        self,
        interpreter: Explainer,
        inputs: Tensor,
        regions: list[Interpretation],
        centres: Tensor,
    ) -> None:
        self.interpreter = interpreter
        self.inputs = inputs
        self.regions = regions
        self.centres = centres
        index = interpreter.index
        n_q = len(index.boundaries)
        self._mask = torch.zeros(len(regions), n_q, dtype=torch.bool, device=index.sides.device)
        for v, region in enumerate(regions):
            self._mask[v, region.boundary_ids] = True
        self._sides = sides(torch.stack([r.projections for r in regions]))
        self._size = torch.tensor([r.representativeness for r in regions], device=self._mask.device)
        self.classes = torch.tensor([r.predicted_class for r in regions], device=self._mask.device)

    @classmethod
    def build(
        cls,
        interpreter: Explainer,
        n_regions: int | None = None,
        seed: int = 0,
        by_class: bool = False,
    ) -> RegionSet:
        """k-means (``k = n_regions``, default 10 x classes) on the reference feature maps
        (`from_centres` rebuilds the set from its centres and inputs).

        Args:
            by_class: k-means within each class that the model predicts on the reference set
                instead, the ``k`` regions shared among those classes by
                [`class_shares`][repinterp.core.regions.class_shares] (at least one each, the rest
                in proportion to their images), so that every predicted class has a region; the
                centres come class by class.

        Raises:
            ValueError: the interpreter was fitted without ``keep_features=True``; with
                ``by_class``, fewer regions than predicted classes.
        """
        index = interpreter.index
        features = interpreter.reference_features
        k = n_regions if n_regions is not None else 10 * index.n_classes
        if not 1 <= k <= len(index):
            raise ValueError(f"n_regions must lie in [1, |R| = {len(index)}], got {k}")
        if not by_class:
            return cls.from_centres(interpreter, *_kmeans(features, k, seed))
        predictions = index.predictions.cpu()
        classes, sizes = predictions.unique(return_counts=True)
        parts = []
        for c, share in zip(classes.tolist(), class_shares(sizes.tolist(), k), strict=True):
            rows = (predictions == c).nonzero().flatten()
            centres, nearest = _kmeans(features[rows], share, seed)
            parts.append((centres, rows[nearest]))
        return cls.from_centres(
            interpreter, torch.cat([c for c, _ in parts]), torch.cat([i for _, i in parts])
        )

    @classmethod
    def from_centres(cls, interpreter: Explainer, centres: Tensor, inputs: Tensor) -> RegionSet:
        """The region set of k-means ``centres`` whose inputs are ``inputs``, as `build` made
        it (or a saved one, see `regions_file`), without k-means: the
        regions' interpretations come from the index (``explain_reference``).

        Args:
            centres: k x (K h w) float k-means centres.
            inputs: k reference indices, the images nearest the centres.

        Raises:
            ValueError: centres that are not k x (K h w) finite floats for k >= 1, or inputs
                that are not k whole numbers in [0, |R|).
        """
        index = interpreter.index
        size = math.prod(index.feature_shape)
        if not (
            centres.ndim == 2
            and centres.shape[0] >= 1
            and centres.shape[1] == size
            and centres.is_floating_point()
            and bool(centres.isfinite().all())
        ):
            raise ValueError(
                f"centres must be k x {size} finite floats, got {centres.dtype} "
                f"{tuple(centres.shape)}"
            )
        k = centres.shape[0]
        if not (
            inputs.shape == (k,)
            and inputs.dtype in (torch.int32, torch.int64)
            and bool(((inputs >= 0) & (inputs < len(index))).all())
        ):
            raise ValueError(
                f"inputs must be {k} reference indices in [0, {len(index)}), got "
                f"{inputs.dtype} {tuple(inputs.shape)}"
            )
        inputs = inputs.long().cpu()
        centres = centres.float().cpu()
        return cls(interpreter, inputs, interpreter.explain_reference(inputs), centres)

    def __len__(self) -> int:
        return len(self.regions)

    def __repr__(self) -> str:
        distinct = len({polytope_key(r) for r in self.regions})
        classes = len(set(self.classes.tolist()))
        return (
            f"RegionSet({len(self)} regions over {len(self.interpreter.index)} reference "
            f"images: {distinct} distinct polytopes, {classes} predicted classes)"
        )

    def _assign(self, features: Tensor) -> Assignment:
        index = self.interpreter.index
        img_sides = sides(project(features, index.boundaries))
        return self._assign_sides(img_sides, lambda rows: features[rows].flatten(1))

    def _assign_sides(self, img_sides: Tensor, rows_of: Callable[[Tensor], Tensor]) -> Assignment:
        """`assign` from N x |Q| sides; ``rows_of(rows)`` gives the flattened feature maps of
        the images ``rows`` (indices on ``img_sides``' device), read only for images no
        region covers."""
        differs = img_sides.unsqueeze(1) != self._sides.unsqueeze(0)  # N x V x Q
        covering = ~(differs & self._mask.unsqueeze(0)).any(2)  # N x V
        score = torch.where(covering, self._size.unsqueeze(0), -1)
        best = score.max(1)  # the first maximum: ties go to the lower region index
        covered = best.values >= 0
        region = best.indices.clone()
        outside = (~covered).nonzero().flatten()
        if outside.numel():  # only images no region covers need their nearest k-means centre
            nearest = nearest_rows(rows_of(outside).float(), self.centres)[0][:, 0]
            region[outside] = nearest.to(region.device)
        return Assignment(region=region, covered=covered)

    @exact_float32()
    def assign(self, images: Tensor) -> Assignment:
        """The region interpreting each image (N x C x H x W, any device; N may be 0)."""
        return self._assign(self.interpreter.features(images))

    def reference_assignment(self) -> Assignment:
        """The region interpreting each reference image, as `assign` gives it, from the index's
        sides (no forward pass; the reference feature maps only for images no region covers).

        Raises:
            ValueError: some image needs its nearest centre and the interpreter was fitted
                without ``keep_features=True``.
        """
        index = self.interpreter.index
        return self._assign_sides(
            index.sides, lambda rows: self.interpreter.reference_features[rows.cpu()]
        )

    def predict(self, images: Tensor) -> Tensor:
        """N long: the class of each image's region."""
        return self.classes[self.assign(images).region]

    @exact_float32()
    def heatmap(self, images: Tensor) -> Tensor:
        """N x H x W heat maps, each drawn with its region's channel weights."""
        features = self.interpreter.features(images)
        region = self._assign(features).region
        used = region.unique().tolist()
        for v in used:
            if not self.regions[v].has_heatmap:
                raise ValueError(f"region {v}: {self.regions[v].message}")
        alphas = [self.regions[v].channel_weights for v in used]
        which = torch.searchsorted(torch.tensor(used, device=region.device), region)
        return polytope_heatmaps(features, alphas, which, tuple(images.shape[-2:]))

    def show(self, reference: Any = None, **options: Any) -> HtmlView:
        """The regions as self-contained HTML, what a notebook shows for a region set; drawn
        by [`show_regions`][repinterp.display.regions.show_regions], whose arguments it
        takes."""
        return render(self, reference, **options)

    def _repr_html_(self) -> str:
        """The notebook's view of a region set: `show` with its defaults."""
        return self.show().html


@dataclass
class Polytope:
    """One distinct polytope of a region set: regions whose inputs share the predicted class,
    the boundaries ``P`` and the sides of them
    ([`polytope_key`][repinterp.core.groups.polytope_key]), hence the covered images.

    Attributes:
        regions: the regions (indices into the region set) that share it.
        inputs: their input reference images, in the same order.
        explanation: the interpretation of ``inputs[0]``.
        interpreted: reference images its regions interpret
            ([`RegionSet.reference_assignment`][repinterp.core.regions.RegionSet.reference_assignment]).
        members: those images (reference indices, ascending).
    """

    regions: list[int]
    inputs: list[int]
    explanation: Interpretation
    interpreted: int
    members: list[int] = field(default_factory=list)


def distinct_polytopes(regions: RegionSet) -> list[Polytope]:
    """A region set's distinct polytopes, the most representative first (then by class and
    first region); their ``interpreted`` counts add up to ``|R|``.

    Raises:
        ValueError: some reference image needs its nearest centre and the interpreter was
            fitted without ``keep_features=True``.
    """
    region = regions.reference_assignment().region.cpu()
    counts = torch.bincount(region, minlength=len(regions))
    cards: dict[PolytopeKey, Polytope] = {}
    inputs = regions.inputs.tolist()
    for v, (ref, e) in enumerate(zip(inputs, regions.regions, strict=True)):
        key = polytope_key(e)
        if key in cards:
            cards[key].regions.append(v)
            cards[key].inputs.append(ref)
            cards[key].interpreted += int(counts[v])
        else:
            cards[key] = Polytope([v], [ref], e, int(counts[v]))
    for card in cards.values():
        card.members = torch.isin(region, torch.tensor(card.regions)).nonzero().flatten().tolist()
    return sorted(
        cards.values(),
        key=lambda c: (-c.explanation.representativeness, c.explanation.predicted_class),
    )
