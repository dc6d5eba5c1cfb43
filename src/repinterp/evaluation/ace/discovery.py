"""ACE's discovery with the model (see [`ace`][repinterp.evaluation.ace] for the algorithm and
its departures from the original): `ACE` fits the concepts of a group of images (``fit``) and
reuses them on new images (``keep_masks``); `Concept` is one concept it found."""

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from scipy.stats import ttest_rel
from sklearn.cluster import KMeans
from torch import Tensor, nn

from ...data.reference import check_images
from ...models.split import resolve_module
from ...runtime.devices import eval_mode, model_device
from ..metrics import Normalize
from .concept_tests import passes_spread_test, tcav_score
from .reuse import assign_to_concepts, keep_segments
from .segments import Segments, grey_patch

__all__ = ["ACE", "Concept"]


@dataclass(frozen=True, eq=False)
class Concept:
    """A concept ACE discovered.

    Attributes:
        centre: (K,) k-means centre: target-layer activations averaged over space.
        radius: distance from ``centre`` of its farthest kept member.
        size: patches in the cluster before keeping the ``max_imgs`` nearest.
        member_images: (M,) discovery image of each kept member, nearest the centre first.
        member_masks: M x H x W bool masks of the kept members' segments.
        tcav_scores: (n_random,) TCAV score against each random set.
        cav_accuracy: mean held-out accuracy of its CAVs.
        p_value: two-sided paired t-test against the random-vs-random scores.
        importance: mean TCAV score.
    """

    centre: np.ndarray
    radius: float
    size: int
    member_images: np.ndarray
    member_masks: np.ndarray
    tcav_scores: np.ndarray
    cav_accuracy: float
    p_value: float
    importance: float


class _Stop(Exception):
    """Raised by the feature hook to skip the layers after the target layer."""


class ACE:
    """ACE fitted on a group of discovery images, reusable on new images (see the package).

    Example::

        ace = ACE(model, "features.29", normalize).fit(group01, random_images01=others01)
        keep = ace.keep_masks(images01)  # N x H x W bool, for average_drop_increase_from_mask

    Args:
        model: classifier returning logits; run in eval mode (each module's mode restored).
        target_layer: the layer (or its name in ``model``) whose output is the activations.
        normalize: maps [0, 1] images and patches to the model's input (None: identity).
        n_concepts: k-means clusters (at most the number of patches).
        min_imgs: a cluster needs more than this many patches.
        max_imgs: patches kept per concept, and images per random set.
        n_random: random sets (CAVs and TCAV scores per concept), >= 2.
        p_value: significance level of the t-test.
        tcav_output: differentiate the class's log-softmax probability (``"log_prob"``, the
            original) or its logit (``"logit"``).
        seed: seed of k-means, the random sets, the splits and the CAVs.
        batch_size: patches or images per forward pass.

    Attributes (after ``fit``):
        concepts: significant concepts, most important first.
        candidates: every concept that passed the size and spread tests, in cluster order,
            significant or not.
        random_tcav_scores: (n_random,) random-vs-random TCAV scores.
        target_class: the class explained.
        input_shape: C x H x W of the discovery images; patches are resized to H x W.
    """

    def __init__(
        self,
        model: nn.Module,
        target_layer: str | nn.Module,
        normalize: Normalize | None,
        n_concepts: int = 25,
        min_imgs: int = 20,
        max_imgs: int = 40,
        n_random: int = 10,
        p_value: float = 0.01,
        tcav_output: Literal["log_prob", "logit"] = "log_prob",
        seed: int = 0,
        batch_size: int = 64,
    ) -> None:
        _, self.layer = resolve_module(model, target_layer)
        if min_imgs < 1 or max_imgs < 2 or n_random < 2 or n_concepts < 1 or batch_size < 1:
            raise ValueError(
                "need min_imgs >= 1, max_imgs >= 2, n_random >= 2, n_concepts >= 1, batch_size >= 1"
            )
        if tcav_output not in ("log_prob", "logit"):
            raise ValueError(f"tcav_output must be 'log_prob' or 'logit', got {tcav_output!r}")
        self.model = model
        self.normalize = normalize or (lambda x: x)
        self.n_concepts = n_concepts
        self.min_imgs = min_imgs
        self.max_imgs = max_imgs
        self.n_random = n_random
        self.p_value = p_value
        self.tcav_output = tcav_output
        self.seed = seed
        self.batch_size = batch_size
        self.concepts: list[Concept] = []
        self.candidates: list[Concept] = []
        self.random_tcav_scores: np.ndarray | None = None
        self.target_class: int | None = None
        self.input_shape: tuple[int, int, int] | None = None

    def fit(
        self,
        discovery_images01: Tensor,
        target_class: int | None = None,
        random_images01: Tensor | None = None,
    ) -> "ACE":
        """Discover the concepts of a group of images and test their importance.

        Args:
            discovery_images01: D x C x H x W images in [0, 1]; H x W is the patch size.
            target_class: class explained; None: the class predicted most often on the group
                (lowest on ties).
            random_images01: R x C x H x W images in [0, 1] to draw the random sets from
                (R >= 2); None: random sets of discovery patches.

        Returns:
            ``self``, with ``concepts``, ``candidates``, ``random_tcav_scores`` and
            ``target_class`` set.
        """
        check_images(discovery_images01, what="discovery_images01", pixels=True, nonempty=True)
        images = discovery_images01.detach().cpu()
        n_images = images.shape[0]
        self.input_shape = tuple(images.shape[1:])
        if random_images01 is not None:
            check_images(random_images01, what="random_images01", pixels=True, nonempty=True)
            if random_images01.shape[1:] != images.shape[1:] or random_images01.shape[0] < 2:
                raise ValueError(
                    f"random_images01 must be R x {tuple(images.shape[1:])} with R >= 2, "
                    f"got {tuple(random_images01.shape)}"
                )
        rng = np.random.default_rng(self.seed)
        with eval_mode(self.model):
            self.target_class = (
                self._majority_class(images) if target_class is None else int(target_class)
            )
            segments = Segments.of(images)
            n_segments = len(segments)
            features = self._mean_activations(images, segments, range(n_segments))
            clusters = self._clusters(features, segments.keys[:, 0], n_images)
            if random_images01 is None:
                size = min(self.max_imgs, n_segments)
                random_sets = [
                    self._flat_activations(images, segments, rng.choice(n_segments, size, False))
                    for _ in range(self.n_random + 1)
                ]
            else:
                pool = random_images01.detach().cpu()
                size = min(self.max_imgs, len(pool))
                random_sets = [
                    self._flat_image_activations(pool[rng.choice(len(pool), size, False)])
                    for _ in range(self.n_random + 1)
                ]
            gradients = self._gradients(images, self.target_class)
            self.random_tcav_scores = np.array(
                [
                    tcav_score(random_sets[0], negative, gradients, self.seed)[0]
                    for negative in random_sets[1:]
                ]
            )
            self.candidates = []
            for centre, members, radius, cluster_size in clusters:
                acts = self._flat_activations(images, segments, members)
                scores, accuracies = zip(
                    *(
                        tcav_score(acts, negative, gradients, self.seed)
                        for negative in random_sets[1:]
                    ),
                    strict=True,
                )
                scores = np.array(scores)
                with warnings.catch_warnings():
                    # Equal score lists give NaN with a precision warning; NaN fails the test.
                    warnings.simplefilter("ignore", RuntimeWarning)
                    p = float(ttest_rel(scores, self.random_tcav_scores).pvalue)
                self.candidates.append(
                    Concept(
                        centre=centre,
                        radius=radius,
                        size=cluster_size,
                        member_images=segments.keys[members, 0],
                        member_masks=np.stack([segments.mask(s) for s in members]),
                        tcav_scores=scores,
                        cav_accuracy=float(np.mean(accuracies)),
                        p_value=p,
                        importance=float(scores.mean()),
                    )
                )
        significant = [c for c in self.candidates if c.p_value <= self.p_value]
        self.concepts = sorted(significant, key=lambda c: -c.importance)
        return self

    def keep_masks(self, images01: Tensor, fraction: float = 0.2) -> Tensor:
        """Pixels kept for AD/AI: each image's most important segments, past ``fraction``.

        Args:
            images01: N x C x H x W images in [0, 1] (C as the discovery images).
            fraction: share of pixels to exceed, in (0, 1).

        Returns:
            N x H x W bool; all False for an image with no segment near a concept.
        """
        if self.input_shape is None:
            raise RuntimeError("call fit(discovery_images01) before keep_masks()")
        check_images(images01, what="images01", pixels=True, nonempty=True)
        if images01.shape[1] != self.input_shape[0]:
            raise ValueError(
                f"images01 must have {self.input_shape[0]} channels, got {images01.shape[1]}"
            )
        images = images01.detach().cpu()
        keep = torch.zeros(images.shape[0], *images.shape[2:], dtype=torch.bool)
        if not self.concepts:
            return keep
        centres = np.stack([c.centre for c in self.concepts])
        radii = np.array([c.radius for c in self.concepts])
        importance = np.array([c.importance for c in self.concepts])
        with eval_mode(self.model):
            for i, image in enumerate(images):
                segments = Segments.of(image[None])
                features = self._mean_activations(image[None], segments, range(len(segments)))
                assigned = assign_to_concepts(features, centres, radii)
                used = np.flatnonzero(assigned >= 0)
                if used.size:
                    kept = keep_segments(
                        [segments.mask(s) for s in used], importance[assigned[used]], fraction
                    )
                    keep[i] = torch.from_numpy(kept)
        return keep

    def _clusters(
        self, features: np.ndarray, image_numbers: np.ndarray, n_images: int
    ) -> list[tuple[np.ndarray, np.ndarray, float, int]]:
        """(centre, kept member indices nearest first, radius, size) of each kept cluster."""
        n_clusters = min(self.n_concepts, len(features))
        kmeans = KMeans(n_clusters, n_init=10, random_state=self.seed).fit(features)
        centres = kmeans.cluster_centers_
        distances = np.linalg.norm(features[:, None, :] - centres[None, :, :], axis=-1)
        labels, costs = distances.argmin(1), distances.min(1)
        clusters = []
        for k in range(n_clusters):
            members = np.flatnonzero(labels == k)
            if len(members) > self.min_imgs and passes_spread_test(
                image_numbers[members], n_images
            ):
                nearest = members[np.argsort(costs[members], kind="stable")[: self.max_imgs]]
                clusters.append((centres[k], nearest, float(costs[nearest].max()), len(members)))
        return clusters

    def _majority_class(self, images: Tensor) -> int:
        device = model_device(self.model)
        with torch.no_grad():
            batches = images.split(self.batch_size)
            predicted = [self.model(self.normalize(b.to(device))).argmax(1).cpu() for b in batches]
        return int(torch.bincount(torch.cat(predicted)).argmax())

    def _patch_batches(
        self, images: Tensor, segments: Segments, indices: Sequence[int]
    ) -> Iterator[Tensor]:
        indices = list(indices)
        for start in range(0, len(indices), self.batch_size):
            yield torch.stack(
                [
                    grey_patch(images[segments.keys[s, 0]], segments.mask(s), self.input_shape[1:])
                    for s in indices[start : start + self.batch_size]
                ]
            )

    def _mean_activations(
        self, images: Tensor, segments: Segments, indices: Sequence[int]
    ) -> np.ndarray:
        """S x K activations of the segments' patches, averaged over space."""
        acts = [
            self._activations(batch) for batch in self._patch_batches(images, segments, indices)
        ]
        return np.concatenate([a.reshape(*a.shape[:2], -1).mean(2) for a in acts])

    def _flat_activations(
        self, images: Tensor, segments: Segments, indices: Sequence[int]
    ) -> np.ndarray:
        """S x D flattened activations of the segments' patches."""
        acts = [self._activations(b) for b in self._patch_batches(images, segments, indices)]
        return np.concatenate([a.reshape(len(a), -1) for a in acts])

    def _flat_image_activations(self, images: Tensor) -> np.ndarray:
        """N x D flattened activations of whole images."""
        acts = [self._activations(batch) for batch in images.split(self.batch_size)]
        return np.concatenate([a.reshape(len(a), -1) for a in acts])

    def _activations(self, batch01: Tensor) -> np.ndarray:
        """Target-layer output for a batch of [0, 1] images; the layers after it are skipped."""
        with torch.no_grad(), _hook(self.layer, stop=True) as store:
            try:
                self.model(self.normalize(batch01.to(model_device(self.model))))
            except _Stop:
                pass
        if "output" not in store:
            raise RuntimeError("the target layer was not run by the model's forward pass")
        return store["output"].float().cpu().numpy()

    def _gradients(self, images: Tensor, target_class: int) -> np.ndarray:
        """N x D gradients of the class output (``tcav_output``) at the target layer."""
        device = model_device(self.model)
        gradients = []
        with torch.enable_grad(), _hook(self.layer, stop=False) as store:
            for batch in images.split(self.batch_size):
                logits = self.model(self.normalize(batch.to(device)))
                outputs = logits.log_softmax(1) if self.tcav_output == "log_prob" else logits
                # Images are independent in eval mode: the sum's gradient is per image.
                (grad,) = torch.autograd.grad(outputs[:, target_class].sum(), store["output"])
                gradients.append(grad.reshape(len(batch), -1).float().cpu().numpy())
        return np.concatenate(gradients)


@contextmanager
def _hook(layer: nn.Module, stop: bool) -> Iterator[dict[str, Tensor]]:
    """Capture the layer's output in the yielded dict; the hook is removed on exit.

    ``stop``: keep a detached copy and abort the forward pass (raises `_Stop`). Otherwise the
    output becomes a leaf that requires grad (no gradients flow to earlier layers) and the
    forward pass continues on a copy, so in-place operations after the layer are allowed.
    """
    store: dict[str, Tensor] = {}

    def hook(module: nn.Module, inputs: tuple, output: Tensor) -> Tensor | None:
        if not isinstance(output, Tensor):
            raise TypeError(f"the target layer must return a tensor, got {type(output)}")
        if stop:
            store["output"] = output.detach()
            raise _Stop
        store["output"] = output.detach().requires_grad_(True)
        return store["output"].clone()

    handle = layer.register_forward_hook(hook)
    try:
        yield store
    finally:
        handle.remove()
