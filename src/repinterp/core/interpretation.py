"""``Interpretation``: the representative interpretation ``P(x)`` of one input.

An interpretation refers back to the interpreter that made it through the small
`Explainer` protocol (its index, its feature maps and forward pass), so that this module
and [`regions`][repinterp.core.regions] never import `interpreter`;
[`RepresentativeInterpreter`][repinterp.interpreter.RepresentativeInterpreter] is the explainer in
practice.
"""

from __future__ import annotations

import warnings
from dataclasses import InitVar, dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from ..runtime.precision import exact_float32
from .cover import sides
from .heatmap import heatmaps
from .reference_index import ReferenceIndex
from .views import HtmlView, render

__all__ = [
    "METRIC_MEANINGS",
    "SIMILARITY_METRICS",
    "SOLVERS",
    "Explainer",
    "Interpretation",
    "check_solver",
]

# What each distance of ``Interpretation.similar`` is, one phrase each (smaller: more similar).
METRIC_MEANINGS = {
    "semantic": "the paper's Dist (§5.2): the summed absolute difference of the two images' "
    "projections on the boundaries of P(x)",
    "euclidean": "the Euclidean distance of the two images' feature maps at the target layer",
    "cosine": "the Euclidean distance of the two images' feature maps scaled to unit length "
    "(ranks as the cosine distance)",
}
SIMILARITY_METRICS = tuple(METRIC_MEANINGS)
SOLVERS = ("greedy", "exact")


def _deprecated(old: str, new: str) -> None:
    warnings.warn(
        f"Interpretation.{old} is deprecated and will be removed in 0.7: use {new}",
        DeprecationWarning,
        stacklevel=3,
    )


def check_solver(solver: str) -> str:
    """``solver`` if it is one of `SOLVERS`, else ``ValueError``."""
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)}")
    return solver


class Explainer(Protocol):
    """What an [`Interpretation`][repinterp.core.interpretation.Interpretation] (and a
    [`RegionSet`][repinterp.core.regions.RegionSet]) uses of the fitted interpreter behind it.

    Attributes:
        device: where the interpreter computes.
        reference: the reference set of its last fit, as it was given (None once loaded).
    """

    device: torch.device
    reference: Any

    @property
    def index(self) -> ReferenceIndex:
        """The reference index; raises if the interpreter is not fitted."""
        ...

    @property
    def reference_features(self) -> Tensor:
        """|R| x (K h w) flattened reference feature maps (CPU); raises if they were not kept."""
        ...

    @property
    def class_names(self) -> list[str] | None:
        """Names of the classes, if known."""
        ...

    @property
    def granularity_text(self) -> str:
        """The granularity the index was fitted at, in words (``granularity class (the
        paper's RI)``, ...)."""
        ...

    def features(self, images: Tensor) -> Tensor:
        """``psi(images)``: N x C x H x W -> N x K x h x w, on the device."""
        ...

    def logits_and_projections(
        self, images: Tensor, index: ReferenceIndex | None = None
    ) -> tuple[Tensor, Tensor]:
        """Logits (N x classes) and projections (N x |Q|) of N x C x H x W images on the ``Q``
        of ``index`` (None: the interpreter's)."""
        ...

    def explain_reference(
        self, indices: Tensor | list[int], solver: str | None = None
    ) -> list[Interpretation]:
        """Interpretations of reference images, from the index alone."""
        ...

    def input_relevance(
        self, images: Tensor, contrast: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Logits (N x classes) and gradient x input maps of the predicted class's logit (minus
        class ``contrast``'s; N x H x W, ReLU), on the CPU."""
        ...

    def reference_images(self, indices: Tensor, reference: Any = None) -> Tensor | None:
        """The reference images at ``indices`` (N x C x H x W, as the model takes them) from
        ``reference`` if given, else from the set the interpreter was fitted on if it holds it;
        None when neither is known."""
        ...


@dataclass(eq=False)
class Interpretation:
    """The representative interpretation ``P(x)`` of one input.

    Attributes:
        predicted_class: ``Class(x)``.
        score: softmax probability of the predicted class.
        boundary_ids: ``P(x)``, indices into ``Q`` in the order the greedy chose them
            (ascending for the exact solver).
        covered: reference indices covered by ``P(x)`` (ascending).
        delta: ``tau(x)``, images of ``D(x)`` that no polytope of ``Q`` separates from ``x``.
        conflicts: ``|P(x) ∩ D(x)|`` (at most ``delta``).
        projections: |Q| signed projections of the input on ``Q``.
        channel_weights: |P| x K, the ``alpha`` of each boundary, flipped to the input's side.
        n_reference: |R|.
        interpreter: the interpreter that made it.
        solver: ``"greedy"`` or ``"exact"``, which solved the cover.
        optimal: (exact) whether the representativeness is proven maximal.
        gap: (exact) ``(bound - representativeness) / max(representativeness, 1)`` for a proven
            upper bound on the optimum; 0 when optimal.
        greedy_representativeness: (exact) what Algorithm 1 covers for the same input.
        features: (K h w,) the input's flattened feature map, kept when the interpreter keeps
            the reference feature maps (for ``similar(metric="euclidean" | "cosine")``).
        image: the input as ``explain`` took it (C x H x W: the caller's tensor, not a copy,
            or the tensor made of a NumPy array or PIL image), to draw it (`show`); None for
            ``explain_reference``.

    The index it was solved on is `index`.

    Beyond the paper, on an index fitted at ``granularity="strategy"``, `strategy` is the id of
    the input's strategy (the nearest centre of its predicted class, as
    ``RepresentativeInterpreter.strategies()`` numbers them); None on another index, or for a
    class no reference image is predicted.
    """

    predicted_class: int
    score: float
    boundary_ids: Tensor
    covered: Tensor
    delta: int
    conflicts: int
    projections: Tensor
    channel_weights: Tensor
    n_reference: int
    interpreter: Explainer
    solver: str = "greedy"
    optimal: bool | None = None
    gap: float | None = None
    greedy_representativeness: int | None = None
    features: Tensor | None = None
    image: Tensor | None = None
    solved_on: InitVar[ReferenceIndex | None] = None
    strategy: int | None = None

    def __post_init__(self, solved_on: ReferenceIndex | None) -> None:
        self._index = solved_on

    @property
    def index(self) -> ReferenceIndex:
        """The index it was solved on, kept when the interpreter is fitted again (its similar
        images, distances and `covers` stay its own)."""
        return self.interpreter.index if self._index is None else self._index

    @property
    def reference_index(self) -> ReferenceIndex:
        """Deprecated (0.6; removed in 0.7): the index's other name; use ``index``."""
        _deprecated("reference_index", "index")
        return self.index

    @property
    def boundaries(self) -> Tensor:
        """Deprecated (0.6; removed in 0.7): ``P(x)``'s ids, now ``boundary_ids`` (an index's
        ``boundaries`` are hyperplanes)."""
        _deprecated("boundaries", "boundary_ids")
        return self.boundary_ids

    @property
    def stale(self) -> bool:
        """Whether its interpreter was fitted (or loaded) again since: its index and reference
        set are then no longer the interpreter's."""
        return self._index is not None and self.interpreter.index is not self._index

    @property
    def class_names(self) -> list[str] | None:
        """Names of the classes of its index, if known."""
        return self.index.meta.get("class_names")

    def __repr__(self) -> str:
        names = self.class_names
        name = f" ({names[self.predicted_class]!r})" if names else ""
        exact = f", optimal {self.optimal}" if self.optimal is not None else ""
        strategy = f", strategy {self.strategy}" if self.strategy is not None else ""
        return (
            f"Interpretation(class {self.predicted_class}{name}{strategy}, score "
            f"{self.score:.3f}, |P| = {self.boundary_ids.numel()}, representativeness "
            f"{self.representativeness} of {self.n_reference}, delta {self.delta}, solver "
            f"{self.solver!r}{exact})"
        )

    @property
    def representativeness(self) -> int:
        """``|P(x) ∩ R|``: the number of reference images covered."""
        return int(self.covered.numel())

    @property
    def optimum(self) -> int | None:
        """The optimal representativeness when the exact solver proved it, else None."""
        return self.representativeness if self.optimal else None

    @property
    def has_heatmap(self) -> bool:
        return self.boundary_ids.numel() > 0

    @property
    def message(self) -> str | None:
        """A note on a degenerate result, or None."""
        if not self.has_heatmap:
            return (
                f"every reference image is predicted class {self.predicted_class}: D(x) is empty, "
                f"so P(x) = {{}} covers all {self.n_reference} reference images and there is no "
                "boundary to draw a heat map from"
            )
        if self.delta > 0:
            return (
                f"delta = tau(x) = {self.delta}: that many reference images of other classes lie "
                "on x's side of every sampled boundary, so P(x) must cover them"
            )
        return None

    def distances(self, metric: str = "semantic") -> Tensor:
        """Distance of each covered reference image to the input by ``metric`` (see `similar`),
        in ``covered``'s order: ``Dist(x, x')`` for ``"semantic"``.

        Raises:
            ValueError: an unknown metric, or a feature-map metric without the feature maps.
        """
        if metric not in SIMILARITY_METRICS:
            raise ValueError(
                f"unknown metric {metric!r}; choose one of {', '.join(SIMILARITY_METRICS)}"
            )
        if metric != "semantic":
            return self.feature_distances(metric)
        index = self.index
        p = self.boundary_ids
        ref = index.projections[self.covered][:, p]
        return (ref - self.projections[p]).abs().sum(1)

    def feature_distances(self, metric: str = "euclidean", chunk: int = 1024) -> Tensor:
        """Euclidean (or cosine: Euclidean between unit vectors) distance of each covered
        reference image's flattened feature map to the input's, in ``covered``'s order (CPU).

        Raises:
            ValueError: the interpreter was fitted without ``keep_features=True``.
        """
        if self.features is None:
            raise ValueError(
                f"metric {metric!r} needs the feature maps: fit with keep_features=True"
            )
        reference = self.index.features
        query = self.features.cpu().float().unsqueeze(0)
        if metric == "cosine":
            query = torch.nn.functional.normalize(query, dim=1)
        parts = []
        for rows in self.covered.cpu().split(chunk):
            ref = reference[rows]
            if metric == "cosine":
                ref = torch.nn.functional.normalize(ref, dim=1)
            parts.append(torch.cdist(query, ref, compute_mode="donot_use_mm_for_euclid_dist")[0])
        return torch.cat(parts) if parts else query.new_zeros(0)

    def similar(self, k: int | None = None, metric: str = "semantic") -> Tensor:
        """Covered reference indices, most similar first (ties by lower index).

        Args:
            k: how many (0 gives none); None means all covered images.
            metric: ``"semantic"`` (the default, whether or not the feature maps were kept),
                the paper's ``Dist`` (§5.2); or, on request, ``"euclidean"`` / ``"cosine"``,
                the distance of the feature maps (see `feature_distances`; they need
                ``keep_features=True``). `METRIC_MEANINGS` says what each is.

        Raises:
            ValueError: a negative ``k`` or an unknown metric.
        """
        if k is not None and k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        distances = self.distances(metric)
        order = torch.sort(distances, stable=True).indices
        return self.covered[order.to(self.covered.device)][:k]

    @exact_float32()
    def heatmap(self, images: Tensor) -> Tensor:
        """Heat maps of ``P(x)`` on N images (N x C x H x W, any device; none gives 0 x H x W),
        reusing ``x``'s channel weights.

        Returns:
            N x H x W in [0, 1] on the interpreter's device.

        Raises:
            ValueError: ``P(x)`` is empty (see
                [`message`][repinterp.core.interpretation.Interpretation.message]).
        """
        if not self.has_heatmap:
            raise ValueError(self.message)
        features = self.interpreter.features(images)
        return heatmaps(features, self.channel_weights, tuple(images.shape[-2:]))

    @exact_float32()
    def covers(self, images: Tensor) -> Tensor:
        """N booleans: whether each image (N x C x H x W, any device) lies on ``x``'s side of
        every boundary of ``P(x)``."""
        _, proj = self.interpreter.logits_and_projections(images, self.index)
        p = self.boundary_ids
        return (sides(proj[:, p]) == sides(self.projections[p]).unsqueeze(0)).all(1)

    def distance_percentile(self, sample: int = 1000, chunk: int = 100) -> float | None:
        """How unlike the covered reference images the input is: its semantic distance
        (`distances`) to the nearest covered image, as a percentile (0 to 100) of the covered
        images' own distances to their nearest other covered image: the share of them whose
        nearest neighbour is nearer than the input's. About 50 for an input like them, 100
        when it lies farther from every covered image than any of them does from the others.

        Args:
            sample: at most this many covered images (evenly spaced in ``covered``) give the
                reference distances, each against all covered images.
            chunk: covered images per distance computation (memory ``chunk x |covered|``).

        Returns:
            The percentile, or None with fewer than two covered images or ``P(x)`` empty.
        """
        m = self.representativeness
        if m < 2 or not self.has_heatmap:
            return None
        p = self.boundary_ids
        rows = self.index.projections[self.covered][:, p].double()
        nearest = (rows - self.projections[p].double()).abs().sum(1).min()
        picked = torch.linspace(0, m - 1, min(sample, m), device=rows.device).round().long()
        own = []
        for part in picked.split(chunk):
            d = torch.cdist(rows[part], rows, p=1)
            d[torch.arange(len(part), device=rows.device), part] = float("inf")  # not itself
            own.append(d.min(1).values)
        return 100 * (torch.cat(own) < nearest).double().mean().item()

    def to_dict(self, top_k: int = 10, metric: str = "semantic") -> dict[str, Any]:
        """A JSON-ready summary, with the ``top_k`` (>= 0) most similar covered images by
        ``metric`` (see `similar`), which ``"metric"`` names, and their distances."""
        similar = self.similar(top_k, metric)
        dist = dict(zip(self.covered.tolist(), self.distances(metric).tolist(), strict=True))
        names = self.class_names
        return {
            "predicted_class": self.predicted_class,
            "class_name": names[self.predicted_class] if names else None,
            "strategy": self.strategy,
            "score": self.score,
            "delta": self.delta,
            "conflicts": self.conflicts,
            "boundaries": self.boundary_ids.tolist(),
            "representativeness": self.representativeness,
            "solver": self.solver,
            "optimal": self.optimal,
            "gap": self.gap,
            "greedy_representativeness": self.greedy_representativeness,
            "optimum": self.optimum,
            "message": self.message,
            "metric": metric,
            "similar": [{"reference": i, "distance": dist[i]} for i in similar.tolist()],
        }

    @exact_float32()
    def feature_heatmap(self, features: Tensor) -> Tensor:
        """`heatmap` from flattened feature maps, as ``fit(..., keep_features=True)`` keeps
        them ([`features`][repinterp.core.reference_index.ReferenceIndex.features], the
            interpreter's ``reference_features``): no forward pass.

        Args:
            features: N x (K h w), any device.

        Returns:
            N x H x W in [0, 1] (the index's image size) on the interpreter's device.

        Raises:
            ValueError: ``P(x)`` is empty (see
                [`message`][repinterp.core.interpretation.Interpretation.message]).
        """
        if not self.has_heatmap:
            raise ValueError(self.message)
        index = self.index
        maps = features.to(self.channel_weights).view(-1, *index.feature_shape)
        return heatmaps(maps, self.channel_weights, tuple(index.input_shape[-2:]))

    def display_heatmaps(
        self, image: Tensor | None, rows: Tensor, images: Tensor | None
    ) -> tuple[Tensor | None, Tensor | None]:
        """Heat maps of ``P(x)`` on the input and on reference images, from what is known: the
        kept feature maps (no forward pass), else the images given.

        Args:
            image: the input, C x H x W, or None.
            rows: M reference indices.
            images: their images, M x C x H x W, or None.

        Returns:
            The input's H x W map and the images' M x H x W maps (CPU), each None where it
            cannot be drawn; both None when ``P(x)`` is empty.
        """
        if not self.has_heatmap:
            return None, None
        if self.features is not None:
            kept = self.index.features[rows.cpu()]
            maps = self.feature_heatmap(torch.cat([self.features.cpu().float()[None], kept]))
            return maps[0].cpu(), maps[1:].cpu()
        on_input = None if image is None else self.heatmap(image[None])[0].cpu()
        return on_input, None if images is None else self.heatmap(images).cpu()

    def show(self, reference: Any = None, **options: Any) -> HtmlView:
        """The case-study strip as self-contained HTML, what a notebook shows for ``e``; drawn
        by [`show_interpretation`][repinterp.display.interpretation.show_interpretation], whose
        arguments it takes."""
        return render(self, reference, **options)

    def _repr_html_(self) -> str:
        """The notebook's view of ``e``: `show` with its defaults."""
        return self.show().html
