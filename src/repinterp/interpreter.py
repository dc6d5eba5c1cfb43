"""``RepresentativeInterpreter``: fit on a reference set, then explain inputs.

It returns :class:`repinterp.interpretation.Interpretation` objects (re-exported here) and
builds region sets (:class:`repinterp.regions.RegionSet`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .boundaries import project
from .build import build_index
from .cover import ExactCoverResult, exact_cover, greedy_cover, sides
from .heatmap import channel_weights
from .index import FEATURE_FILE, IndexLoadError, ReferenceIndex
from .inputs import Reference, check_batch
from .interpretation import Interpretation
from .model import model_fingerprint, split_model
from .regions import RegionSet
from .shards import Shards
from .utils import model_device

__all__ = ["FEATURE_FILE", "Interpretation", "RepresentativeInterpreter"]

SOLVERS = ("greedy", "exact")


def _check_solver(solver: str) -> str:
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)}")
    return solver


def _exact_fields(result: ExactCoverResult, i: int) -> dict[str, Any]:
    return {
        "optimal": bool(result.optimal[i]),
        "gap": float(result.gap[i]),
        "greedy_representativeness": int(result.greedy_representativeness[i]),
    }


class RepresentativeInterpreter:
    """Finds representative interpretations of a CNN classifier (Lam, Chu et al., ICCV 2021).

    ``fit`` samples ``|Q|`` linear boundaries of the head ``G`` from the reference set and indexes
    every reference image's side of them; ``explain`` solves the cover problem (Eq. 3) for an input
    and returns its polytope ``P(x)`` as an :class:`Interpretation`.

    Args:
        model: a classifier in eval mode, N x C x H x W -> N x classes logits.
        target_layer: where ``psi`` ends: a name from ``model.named_modules()`` or the module.
        n_boundaries: ``|Q|``, the number of sampled boundaries.
        seed: seeds the sample of ``Q``.
        device: where to compute; None means the model's device (the model is moved otherwise).
        batch_size: images per forward pass.
        allow_nonlinear_head: accept a head that is not piecewise linear.
        progress: show progress bars.
        num_workers: DataLoader workers when the reference set is a Dataset.
        solver: ``"greedy"`` (Algorithm 1) or ``"exact"`` (a MILP, see
            :func:`repinterp.cover.exact_cover`); ``explain`` can override it.
        time_limit: seconds the exact solver may spend per input.
    """

    def __init__(
        self,
        model: nn.Module,
        target_layer: str | nn.Module,
        n_boundaries: int = 50,
        seed: int = 0,
        device: str | torch.device | None = None,
        batch_size: int = 64,
        allow_nonlinear_head: bool = False,
        progress: bool = True,
        num_workers: int = 0,
        solver: str = "greedy",
        time_limit: float = 5.0,
    ) -> None:
        if model.training:
            raise ValueError("the model is in training mode: call model.eval() first")
        if n_boundaries < 1:
            raise ValueError(f"n_boundaries must be >= 1, got {n_boundaries}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if time_limit <= 0:
            raise ValueError(f"time_limit must be > 0, got {time_limit}")
        self.solver = _check_solver(solver)
        self.time_limit = time_limit
        self.device = torch.device(device) if device is not None else model_device(model)
        self.model = model.to(self.device)
        self.split = split_model(model, target_layer, allow_nonlinear_head)
        self.target_layer = self.split.layer
        self.n_boundaries = n_boundaries
        self.seed = seed
        self.batch_size = batch_size
        self.allow_nonlinear_head = allow_nonlinear_head
        self.progress = progress
        self.num_workers = num_workers
        self.index: ReferenceIndex | None = None
        self._feature_dir: tempfile.TemporaryDirectory | None = None
        self._features: tuple[ReferenceIndex, Tensor] | None = None

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        reference: Reference,
        class_names: list[str] | None = None,
        keep_features: bool = False,
        shards: Shards | None = None,
    ) -> RepresentativeInterpreter:
        """Sample ``Q`` and index the reference set.

        Args:
            reference: N x C x H x W tensor, or a Dataset of images or ``(image, label)``.
            class_names: optional names of the classes, kept in the index.
            keep_features: also keep the reference feature maps, in a memory-mapped file on
                disk (needed by :meth:`regions` and the evaluation protocols).
            shards: write the index in shards to ``shards.directory`` as it goes (the feature
                maps too), so that a killed fit resumes (see :class:`repinterp.shards.Shards`).

        Returns:
            self.
        """
        feature_dir = None
        if keep_features and shards is None:
            feature_dir = tempfile.TemporaryDirectory(prefix="repinterp-")
        feature_file = None
        if keep_features:
            folder = shards.directory if shards is not None else Path(feature_dir.name)
            feature_file = folder / FEATURE_FILE
        index = build_index(
            self.split,
            reference,
            n_boundaries=self.n_boundaries,
            seed=self.seed,
            batch_size=self.batch_size,
            device=self.device,
            progress=self.progress,
            num_workers=self.num_workers,
            feature_file=feature_file,
            shards=shards,
        )
        self._feature_dir = feature_dir
        if len(index.boundaries) < self.n_boundaries:
            import warnings

            warnings.warn(
                f"n_boundaries={self.n_boundaries} > |R|={len(index)}: Q has "
                f"{len(index.boundaries)} boundaries, one per reference image",
                stacklevel=2,
            )
        if class_names is not None and len(class_names) != index.n_classes:
            raise ValueError(
                f"{len(class_names)} class names given for a model with {index.n_classes} classes"
            )
        index.meta = {
            "target_layer": self.target_layer,
            "seed": self.seed,
            "requested_boundaries": self.n_boundaries,
            "model_class": type(self.model).__name__,
            "class_names": class_names,
        }
        self.index = index
        return self

    @property
    def fitted_index(self) -> ReferenceIndex:
        """The index; raises if ``fit`` (or ``load``) has not been called."""
        if self.index is None:
            raise RuntimeError("the interpreter is not fitted: call fit(reference) first")
        return self.index

    @property
    def boundary_sources(self) -> Tensor:
        """Reference indices of the images behind ``Q``, in ``Q``'s order."""
        return self.fitted_index.sources

    @property
    def class_names(self) -> list[str] | None:
        return self.fitted_index.meta.get("class_names")

    @property
    def reference_features(self) -> Tensor:
        """|R| x (K h w) flattened reference feature maps, memory-mapped from disk (CPU).

        The file is mapped once per fitted or loaded index: a file that replaces it later (a
        new fit saved to the same folder) does not change what this interpreter reads.

        Raises:
            ValueError: the interpreter was fitted without ``keep_features=True``.
        """
        index = self.fitted_index
        path = index.files.get(FEATURE_FILE)
        if path is None:
            raise ValueError(
                "the reference feature maps were not kept: fit with keep_features=True "
                "(repinterp fit without --no-features)"
            )
        if self._features is None or self._features[0] is not index:
            self._features = (index, torch.from_numpy(np.load(path, mmap_mode="c")))
        return self._features[1]

    # ------------------------------------------------------------------ features
    def _check(self, images: Tensor) -> Tensor:
        check_batch(images, self.fitted_index.input_shape)
        return images

    @torch.inference_mode()
    def features(self, images: Tensor) -> Tensor:
        """``psi(images)``: N x C x H x W -> N x K x h x w, in batches, on the device."""
        self._check(images)
        parts = [
            self.split.psi(images[i : i + self.batch_size].to(self.device))
            for i in range(0, images.shape[0], self.batch_size)
        ]
        return torch.cat(parts)

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """The model's logits and the projections on ``Q`` of N images, in batches.

        Args:
            images: N x C x H x W, normalised as the model expects.

        Returns:
            Logits (N x classes) and projections ``<W_h, psi(x)> + b_h`` (N x |Q|), on the
            device.

        Raises:
            RuntimeError: the interpreter is not fitted.
            ValueError: the images are not a finite float batch of the index's C x H x W.
        """
        return self._forward(images)

    @torch.inference_mode()
    def _forward(
        self, images: Tensor, features: list[Tensor] | None = None
    ) -> tuple[Tensor, Tensor]:
        """:meth:`forward`; each batch's flattened feature maps (on the CPU) are also appended
        to ``features`` when it is given."""
        index = self.fitted_index
        self._check(images)
        logits, proj = [], []
        for i in range(0, images.shape[0], self.batch_size):
            t = self.split.psi(images[i : i + self.batch_size].to(self.device))
            logits.append(self.split.head(t))
            proj.append(project(t, index.boundaries))
            if features is not None:
                features.append(t.flatten(1).float().cpu())
        return torch.cat(logits), torch.cat(proj)

    # ------------------------------------------------------------------ explaining
    def explain(self, image: Tensor, solver: str | None = None) -> Interpretation:
        """Interpret one image (C x H x W, normalised as the model expects).

        Args:
            solver: ``"greedy"`` or ``"exact"``; None means the interpreter's.
        """
        if not isinstance(image, Tensor) or image.ndim != 3:
            shape = tuple(image.shape) if isinstance(image, Tensor) else type(image).__name__
            raise ValueError(f"explain takes one C x H x W image, got {shape}")
        return self.explain_batch(image.unsqueeze(0), solver)[0]

    def explain_batch(self, images: Tensor, solver: str | None = None) -> list[Interpretation]:
        """Interpret N images (N x C x H x W) at once; the covers are solved together.

        Args:
            solver: ``"greedy"`` or ``"exact"``; None means the interpreter's.
        """
        features = [] if FEATURE_FILE in self.fitted_index.files else None
        logits, proj = self._forward(images, features)
        return self._interpret(logits, proj, solver, torch.cat(features) if features else None)

    def explain_reference(
        self, indices: Tensor | list[int], solver: str | None = None
    ) -> list[Interpretation]:
        """Interpret reference images from the index alone, with no forward pass.

        Args:
            solver: ``"greedy"`` or ``"exact"``; None means the interpreter's.
        """
        index = self.fitted_index
        rows = torch.as_tensor(indices, dtype=torch.long, device=index.projections.device)
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= len(index)):
            raise IndexError(f"reference indices must lie in [0, {len(index)})")
        features = None
        if FEATURE_FILE in index.files:
            features = self.reference_features[rows.cpu()]
        return self._interpret(index.logits[rows], index.projections[rows], solver, features)

    def _interpret(
        self,
        logits: Tensor,
        proj: Tensor,
        solver: str | None = None,
        features: Tensor | None = None,
    ) -> list[Interpretation]:
        index = self.fitted_index
        solver = self.solver if solver is None else _check_solver(solver)
        predicted = logits.argmax(1)
        other = index.predictions.unsqueeze(0) != predicted.unsqueeze(1)
        input_sides = sides(proj)
        result = greedy_cover(index.sides, input_sides, other)
        if solver == "exact":
            result = exact_cover(index.sides, input_sides, other, self.time_limit, greedy=result)
        probs = logits.float().softmax(1)
        out = []
        for i in range(logits.shape[0]):
            chosen = result.boundaries(i)
            out.append(
                Interpretation(
                    predicted_class=int(predicted[i]),
                    score=float(probs[i, predicted[i]]),
                    boundaries=chosen,
                    covered=result.covered[i].nonzero().flatten(),
                    delta=int(result.delta[i]),
                    conflicts=int(result.conflicts[i]),
                    projections=proj[i],
                    channel_weights=(
                        channel_weights(index.boundaries.select(chosen), input_sides[i, chosen])
                        if len(chosen)
                        else proj.new_zeros(0, index.feature_shape[0])
                    ),
                    n_reference=len(index),
                    interpreter=self,
                    solver=solver,
                    features=None if features is None else features[i],
                    **(_exact_fields(result, i) if isinstance(result, ExactCoverResult) else {}),
                )
            )
        return out

    def regions(self, n_regions: int | None = None, seed: int = 0) -> RegionSet:
        """k-means regions over the reference set (see :class:`repinterp.regions.RegionSet`);
        needs ``fit(..., keep_features=True)``."""
        return RegionSet.build(self, n_regions=n_regions, seed=seed)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        """Save the index to the folder ``path`` (replaced atomically if it exists), with the
        model's fingerprint so that ``load`` can refuse other weights."""
        index = self.fitted_index
        index.meta["model_fingerprint"] = model_fingerprint(self.model)
        index.save(path, extra_files=index.files)
        index.files = {name: Path(path) / name for name in index.files}

    @classmethod
    def load(
        cls,
        path: str | Path,
        model: nn.Module,
        device: str | torch.device | None = None,
        **kwargs: Any,
    ) -> RepresentativeInterpreter:
        """Load a saved index for ``model``.

        Raises:
            IndexLoadError: the folder is damaged, or was made with other weights or at a layer
                this model does not have; the message says which.
        """
        index = ReferenceIndex.load(path)
        meta = index.meta
        layer = meta.get("target_layer")
        if layer not in dict(model.named_modules()):
            raise IndexLoadError(f"{path} was made at layer {layer!r}, which the model lacks")
        ri = cls(
            model,
            layer,
            n_boundaries=meta.get("requested_boundaries", len(index.boundaries)),
            seed=meta.get("seed", 0),
            device=device,
            **kwargs,
        )
        fingerprint = model_fingerprint(ri.model)
        if meta.get("model_fingerprint") != fingerprint:
            raise IndexLoadError(
                f"{path} was made with other weights (model fingerprint "
                f"{str(meta.get('model_fingerprint'))[:12]}…, this model's {fingerprint[:12]}…)"
            )
        ri.index = index.to(ri.device)
        return ri
