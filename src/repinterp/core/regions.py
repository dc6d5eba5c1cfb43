"""A set of representative interpretations that together cover the reference set (§6.4, App. D).

k-means on the reference feature maps gives ``k`` centres; the reference image nearest each
centre is an input and its polytope ``P(x)`` a *region*. An image is interpreted by the
covering region of largest representativeness, else by the region of its nearest centre; a
region predicts the class of its input, which makes the set a surrogate classifier.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.cluster import KMeans
from torch import Tensor

from ..runtime.precision import exact_float32
from .boundaries import project
from .cover import sides
from .groups import GroupStats, polytope_groups
from .heatmap import polytope_heatmaps
from .interpretation import Explainer, Interpretation
from .nearest import nearest_rows

__all__ = ["Assignment", "RegionSet"]


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
        index = interpreter.fitted_index
        n_q = len(index.boundaries)
        self._mask = torch.zeros(len(regions), n_q, dtype=torch.bool, device=index.sides.device)
        for v, region in enumerate(regions):
            self._mask[v, region.boundaries] = True
        self._sides = sides(torch.stack([r.projections for r in regions]))
        self._size = torch.tensor([r.representativeness for r in regions], device=self._mask.device)
        self.classes = torch.tensor([r.predicted_class for r in regions], device=self._mask.device)

    @classmethod
    def build(
        cls, interpreter: Explainer, n_regions: int | None = None, seed: int = 0
    ) -> RegionSet:
        """k-means (``k = n_regions``, default 10 x classes) on the reference feature maps.

        Raises:
            ValueError: the interpreter was fitted without ``keep_features=True``.
        """
        index = interpreter.fitted_index
        features = interpreter.reference_features
        k = n_regions if n_regions is not None else 10 * index.n_classes
        if not 1 <= k <= len(index):
            raise ValueError(f"n_regions must lie in [1, |R| = {len(index)}], got {k}")
        kmeans = KMeans(n_clusters=k, random_state=seed, n_init=3).fit(np.asarray(features))
        centres = torch.from_numpy(kmeans.cluster_centers_).float()
        inputs = nearest_rows(centres, features)[0][:, 0]
        return cls(interpreter, inputs, interpreter.explain_reference(inputs), centres)

    def __len__(self) -> int:
        return len(self.regions)

    def __repr__(self) -> str:
        distinct = len(
            {
                (
                    r.predicted_class,
                    *zip(
                        r.boundaries.tolist(),
                        (r.projections[r.boundaries] > 0).tolist(),
                        strict=True,
                    ),
                )
                for r in self.regions
            }
        )
        classes = len(set(self.classes.tolist()))
        return (
            f"RegionSet({len(self)} regions over {len(self.interpreter.fitted_index)} reference "
            f"images: {distinct} distinct polytopes, {classes} predicted classes)"
        )

    def _assign(self, features: Tensor) -> Assignment:
        index = self.interpreter.fitted_index
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
        index = self.interpreter.fitted_index
        return self._assign_sides(
            index.sides, lambda rows: self.interpreter.reference_features[rows.cpu()]
        )

    def group_stats(
        self, region: Tensor | None = None, subconcepts: Tensor | None = None
    ) -> GroupStats:
        """Images grouped by the polytope of the region interpreting them
        (:func:`repinterp.core.groups.polytope_groups`; regions of one polytope are one group).

        Args:
            region: (N,) the region of each image (`Assignment.region`); None: the reference
                set's (`reference_assignment`).
            subconcepts: (N,) sub-concept labels of the images, or None.
        """
        if region is None:
            region = self.reference_assignment().region
        return polytope_groups([self.regions[v] for v in region.tolist()], subconcepts)

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
