"""``RepresentativeInterpreter``: fit on a reference set, then explain inputs.

It returns [`Interpretation`][repinterp.core.interpretation.Interpretation] objects (re-exported
here) and builds region sets ([`RegionSet`][repinterp.core.regions.RegionSet]).
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from . import display  # noqa: F401  (importing it registers the views of core.views)
from .core.boundaries import Boundaries, compute_boundaries
from .core.config import FitConfig
from .core.granularities import PAPERS
from .core.granularities import granularity as make_granularity
from .core.interpretation import Interpretation, check_solver
from .core.reference_index import FEATURE_FILE, ReferenceIndex, index_rows
from .core.regions import RegionSet
from .core.representative import interpret
from .data.inputs import Transform, as_input, as_inputs
from .data.reference import (
    Reference,
    ReferenceSet,
    as_batch,
    as_reference,
    check_finite_rows,
)
from .maps.contrastive import contrast_pairs, contrastive_heatmaps
from .models.fixed_mode import CHECKED_IMAGES, check_image_function
from .models.split import (
    LayerSpec,
    OutputFn,
    SplitModel,
    check_feature_map,
    locate_split,
    split_model,
)
from .runtime.devices import model_device, resolve_device
from .runtime.precision import engine_dtype, exact_float32
from .store.index_build import build_index
from .store.index_folder import load_index, save_index
from .store.index_model import (
    check_model,
    check_opening,
    record_model,
    restore_granularity,
    saved_transform,
)
from .store.shards import Shards
from .strategies.granularity import StrategyDecisions
from .strategies.model import (
    Strategy,
    model_strategies,
    strategies_from_state,
    strategies_state,
)

__all__ = ["FEATURE_FILE", "Interpretation", "RepresentativeInterpreter"]


class RepresentativeInterpreter:
    """Finds representative interpretations of a CNN classifier (Lam, Chu et al., ICCV 2021).

    ``fit`` samples ``|Q|`` linear boundaries of the head ``G`` from the reference set and indexes
    every reference image's side of them; ``explain`` solves the cover problem (Eq. 3) for an input
    and returns its polytope ``P(x)`` as an
    [`Interpretation`][repinterp.core.interpretation.Interpretation].

    Everything it computes (feature maps, ``G``, Eq. 2's gradients, projections, heat maps) runs
    in full float32 precision, also on GPUs that would use TF32, and the user's precision
    settings are restored afterwards ([`exact_float32`][repinterp.runtime.precision.exact_float32]);
    images of any floating dtype are converted to the model's, and inputs on another device are
    moved to ``device``.

    Args:
        model: a classifier in eval mode, float32 (or float64), N x C x H x W -> N x classes
            logits, or a dict with ``"logits"``, or a dataclass or ``SimpleNamespace`` with
            ``.logits``.
        target_layer: where ``psi`` ends: a name from ``model.named_modules()``, the module, or
            a list of one module (``[model.layer4]``, as in pytorch-grad-cam). None: the last
            layer with N x K x h x w output (h x w > 1) from which the logits follow through a
            piecewise-linear head (see [`locate_split`][repinterp.models.split.locate_split]), found
            with one zero image of ``input_shape``, or of the first reference image's shape at
            ``fit``; `target_layer` then names it.
        n_boundaries: a setting of the fit (see [`FitConfig`][repinterp.core.config.FitConfig]).
        seed: a setting of the fit (see ``FitConfig``).
        batch_size: a setting of the fit (see ``FitConfig``).
        progress: a setting of the fit (see ``FitConfig``).
        num_workers: a setting of the fit (see ``FitConfig``).
        sampling: a setting of the fit (see ``FitConfig``).
        device: where to compute; None means the model's device. Another device **moves the
            user's model** there (``model.to(device)``, in place).
        allow_nonlinear_head: accept a head that is not piecewise linear.
        solver: ``"greedy"`` (Algorithm 1) or ``"exact"`` (a MILP, see
            [`exact_cover`][repinterp.core.cover.exact_cover], made canonical by
            [`fewest_boundaries`][repinterp.core.cover.fewest_boundaries]); ``explain`` can override
            it.
        time_limit: seconds the exact solver may spend per input.
        output: takes the model's output and returns the logits, for outputs other than a
            tensor, ``out["logits"]`` or ``out.logits`` (e.g. ``lambda out: out[0]``); it must
            only select, not compute (it is traced into ``G``).
        input_shape: C x H x W of the images, to check the target layer (or find it, when
            ``target_layer`` is None) here rather than at ``fit``.
        config: the fit's settings as one [`FitConfig`][repinterp.core.config.FitConfig], instead of
            the six keywords above and ``granularity`` (which must then be left at their
            defaults); read them back as ``config``'s fields.
        transform: how ``explain`` reads an image given as it comes (a PIL image, a NumPy
            array of ``uint8`` pixels): a callable from a PIL image to its normalised
            C x H x W tensor, e.g. the torchvision pipeline of training (see
            [`inputs`][repinterp.data.inputs]); None: only tensors and float arrays are explained.
            An index made by the command line records its reading
            ([`ImageTransform`][repinterp.workspace.ImageTransform]), and `load` (also through
            [`open_index`][repinterp.workspace.open_index]) gives it back.
        granularity: the fit's granularity by name (see
            [`granularities`][repinterp.core.granularities]): ``"class"``, the paper's RI (the
            default), or beyond the paper ``"strategy"`` (a polytope per strategy of a class,
            see [`StrategySet`][repinterp.strategies.granularity.StrategySet]).

    Raises:
        ValueError: a model in training mode or in half precision, a bad target layer or
            head (see [`split_model`][repinterp.models.split.split_model]), a device that is not
            available, bad numbers, or fit settings given both as keywords and as ``config``.
    """

    def __init__(
        self,
        model: nn.Module,
        target_layer: LayerSpec | None = None,
        n_boundaries: int = 50,
        seed: int = 0,
        device: str | torch.device | None = None,
        batch_size: int = 64,
        allow_nonlinear_head: bool = False,
        progress: bool = True,
        num_workers: int = 0,
        solver: str = "greedy",
        time_limit: float = 5.0,
        output: OutputFn | None = None,
        input_shape: tuple[int, int, int] | None = None,
        sampling: str = "uniform",
        config: FitConfig | None = None,
        transform: Transform | None = None,
        granularity: str = PAPERS,
    ) -> None:
        if model.training:
            raise ValueError("the model is in training mode: call model.eval() first")
        keywords = FitConfig(
            n_boundaries=n_boundaries,
            seed=seed,
            sampling=sampling,
            batch_size=batch_size,
            num_workers=num_workers,
            progress=progress,
            granularity=make_granularity(granularity),
        )
        if config is not None and keywords != FitConfig():
            raise ValueError("give the fit settings either as keywords or as config=, not both")
        self.config = config if config is not None else keywords
        if not time_limit > 0:  # NaN too
            raise ValueError(f"time_limit must be a number of seconds > 0, got {time_limit}")
        self.solver = check_solver(solver)
        self.time_limit = time_limit
        self.dtype = engine_dtype(model)
        self.device = resolve_device(device) if device is not None else model_device(model)
        self.model = model.to(self.device)
        self.output = output
        self.transform = transform
        self._split: SplitModel | None = None
        if target_layer is not None:
            self._split = split_model(model, target_layer, allow_nonlinear_head, output)
            if input_shape is not None:
                self._probe(input_shape)
        elif input_shape is not None:
            self._split = locate_split(model, input_shape, allow_nonlinear_head, output)
        self.target_layer: str | None = self._split.layer if self._split is not None else None
        self.allow_nonlinear_head = allow_nonlinear_head
        self._index: ReferenceIndex | None = None
        # the reference set of the last fit (wrapped, as as_reference gives it), to draw its
        # images; None after load: set it to the set the index was fitted on to draw them again
        self.reference: Reference | ReferenceSet | None = None
        self._feature_dir: tempfile.TemporaryDirectory | None = None

    def __repr__(self) -> str:
        layer = repr(self.target_layer) if self.target_layer else "a layer chosen at fit"
        fitted = (
            f"|Q| = {len(self._index.boundaries)}, |R| = {len(self._index)}"
            if self._index is not None
            else f"|Q| = {self.config.n_boundaries}, not fitted"
        )
        beyond = f", {self.granularity_text}" if self.config.granularity.beyond_paper else ""
        return (
            f"RepresentativeInterpreter({type(self.model).__name__} at {layer}, {fitted}, "
            f"seed {self.config.seed}, device {self.device}, solver {self.solver!r}{beyond})"
        )

    @property
    def granularity(self) -> str:
        """The granularity's name (``"class"``: the paper's)."""
        return self.config.granularity.name

    @property
    def granularity_text(self) -> str:
        """The granularity as every view names it (``print``, the viewer, the report, the
        notebook): ``granularity class (the paper's RI)`` or e.g. ``granularity strategy (...,
        beyond the paper)`` with the settings in use (the fitted granularity's, once fitted)."""
        if self._index is not None:
            return self._index.granularity.describe()
        return self.config.granularity.describe()

    @property
    def split(self) -> SplitModel:
        """The model split at the target layer, ``psi`` and ``G``.

        Raises:
            RuntimeError: ``target_layer=None`` and the layer is not chosen yet (it is at
                ``fit``, or at construction with ``input_shape``).
        """
        if self._split is None:
            raise RuntimeError(
                "target_layer=None: the layer is chosen at fit (or pass input_shape=)"
            )
        return self._split

    @exact_float32()
    @torch.inference_mode()
    def _probe(self, input_shape: tuple[int, ...]) -> None:
        """Run one zero image through ``psi`` to check the target layer's output."""
        probe = torch.zeros(1, *input_shape, device=self.device, dtype=self.dtype)
        check_feature_map(self.split.psi(probe), self.split.layer)

    # ------------------------------------------------------------------ fitting
    @exact_float32()
    def fit(
        self,
        reference: Reference | ReferenceSet,
        class_names: list[str] | None = None,
        keep_features: bool = False,
        shards: Shards | None = None,
    ) -> RepresentativeInterpreter:
        """Sample ``Q`` and index the reference set.

        Args:
            reference: the reference images, normalised as the model expects: an N x C x H x W
                tensor, a NumPy array (N x C x H x W, or N x H x W x C when the last dimension
                is 1 or 3 and the second is not), a list of images, a Dataset or a DataLoader
                (of images, ``(image, label)`` tuples or dicts with the image under
                ``"image"``, ``"pixel_values"``, ``"img"``, ``"input"`` or ``"inputs"``); a
                DataLoader must not shuffle, and one over an IterableDataset is read into
                memory once. See [`as_reference`][repinterp.data.reference.as_reference] for the
                rules.
            class_names: optional names of the classes, kept in the index.
            keep_features: also keep the reference feature maps, in a memory-mapped file on
                disk (needed by
                [`regions`][repinterp.interpreter.RepresentativeInterpreter.regions] and the
                evaluation protocols).
            shards: write the index in shards to ``shards.directory`` as it goes (the feature
                maps too), so that a killed fit resumes (see
                [`Shards`][repinterp.store.shards.Shards]).

        Returns:
            self, which keeps ``reference`` to draw its images (as its attribute
            ``reference``: wrapped once where it entered, a
            [`ReferenceSet`][repinterp.data.reference.ReferenceSet] whose ``source`` is
            ``reference``, not a copy)
            ([`reference_images`][repinterp.interpreter.RepresentativeInterpreter.reference_images],
            ``Interpretation.show``).

        Raises:
            ValueError: an empty or unreadable reference set, bad images, a target layer
                without N x K x h x w output, or non-finite logits or projections (saying for
                how many images); the previous fit, if any, is kept.
        """
        reference = as_reference(reference)
        if self._split is None:
            self._locate(reference)
        if len(reference) > 0:  # a few images: the same twice, and alone as in a batch
            few = reference.gather(torch.arange(min(CHECKED_IMAGES, len(reference))))
            check_image_function(
                self.split.psi,
                self.split.head,
                self.split.layer,
                as_batch(few, self.dtype, self.device),
            )
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
            self.config,
            self.device,
            feature_file=feature_file,
            shards=shards,
            dtype=self.dtype,
        )
        self._feature_dir = feature_dir
        if len(index.boundaries) < self.config.n_boundaries:
            warnings.warn(
                f"n_boundaries={self.config.n_boundaries} > |R|={len(index)}: Q has "
                f"{len(index.boundaries)} boundaries, one per reference image",
                stacklevel=2,
            )
        predicted = index.predictions.unique()
        if len(predicted) == 1 and index.n_classes > 1:
            warnings.warn(
                f"the model predicts class {int(predicted[0])} for all {len(index)} reference "
                "images: every other class is empty, so no explanation has a boundary to draw "
                "(is the normalisation the one the model was trained with?)",
                stacklevel=2,
            )
        if class_names is not None and len(class_names) != index.n_classes:
            raise ValueError(
                f"{len(class_names)} class names given for a model with {index.n_classes} classes"
            )
        index.meta = {
            "target_layer": self.target_layer,
            "seed": self.config.seed,
            "requested_boundaries": self.config.n_boundaries,
            "model_class": type(self.model).__name__,
            "class_names": class_names,
        }
        if self.config.sampling != "uniform":  # the paper's sampling is the default, left unsaid
            index.meta["sampling"] = self.config.sampling
        index.meta.update(index.granularity.state()[0])  # the paper's granularity: nothing
        self._index = index
        self.reference = reference
        return self

    def _locate(self, reference: ReferenceSet) -> None:
        """Choose the target layer with the first reference image's shape."""
        if len(reference) == 0:
            raise ValueError("the reference set is empty")
        first = reference.gather(torch.zeros(1, dtype=torch.long))
        first = as_batch(first, self.dtype, self.device, what="reference images")
        self._split = locate_split(
            self.model, tuple(first.shape[1:]), self.allow_nonlinear_head, self.output
        )
        self.target_layer = self._split.layer

    @property
    def index(self) -> ReferenceIndex:
        """The reference index (``Q``, the projections, classes and logits of ``R``).

        Raises:
            RuntimeError: ``fit`` (or ``load``) has not been called.
        """
        if self._index is None:
            raise RuntimeError("the interpreter is not fitted: call fit(reference) first")
        return self._index

    @property
    def is_fitted(self) -> bool:
        """Whether ``fit`` (or ``load``) has given it an index."""
        return self._index is not None

    @property
    def fitted_index(self) -> ReferenceIndex:
        """Deprecated (0.6; removed in 0.7): the index's other name; use ``index``."""
        warnings.warn(
            "RepresentativeInterpreter.fitted_index is deprecated and will be removed in 0.7: "
            "use index",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.index

    @property
    def boundary_sources(self) -> Tensor:
        """Reference indices of the images behind ``Q``, in ``Q``'s order."""
        return self.index.sources

    @property
    def class_names(self) -> list[str] | None:
        return self.index.meta.get("class_names")

    @property
    def reference_features(self) -> Tensor:
        """|R| x (K h w) flattened reference feature maps, memory-mapped from disk (CPU); see
        [`features`][repinterp.core.reference_index.ReferenceIndex.features].

        Raises:
            ValueError: the interpreter was fitted without ``keep_features=True``.
        """
        return self.index.features

    def reference_images(
        self, indices: Tensor | list[int], reference: Reference | None = None
    ) -> Tensor | None:
        """Reference images by index, to draw them (``Interpretation.show``).

        Args:
            indices: N reference indices.
            reference: the reference set the index was fitted on (anything `fit` takes);
                None: the one of the last `fit` (the attribute ``reference``), if any.

        Returns:
            N x C x H x W, as the model takes them (the set's device), or None when no
            reference set is known (the interpreter was loaded).

        Raises:
            ValueError: ``reference`` holds another number of images than the index.
        """
        if reference is None and self.reference is None:
            return None
        source = as_reference(self.reference if reference is None else reference)
        n = len(source)
        if n != len(self.index):
            raise ValueError(
                f"the reference set holds {n} images; the index was fitted on {len(self.index)}"
            )
        return source.gather(torch.as_tensor(indices, dtype=torch.long))

    # ------------------------------------------------------------------ features
    def _batches(self, images: Tensor) -> list[Tensor]:
        """``images`` checked, in the model's dtype, in batches on the device."""
        images = as_batch(images, self.dtype, shape=self.index.input_shape)
        return [part.to(self.device) for part in images.split(self.config.batch_size)]

    @exact_float32()
    @torch.inference_mode()
    def features(self, images: Tensor) -> Tensor:
        """``psi(images)``: N x C x H x W (any device, any floating dtype) -> N x K x h x w,
        in batches, on the device.

        Raises:
            ValueError: bad images, or images whose feature maps are not finite.
        """
        parts = [self.split.psi(part) for part in self._batches(images)]
        if not parts:
            shape = self.index.feature_shape
            return torch.empty(0, *shape, device=self.device, dtype=self.dtype)
        features = torch.cat(parts)
        check_finite_rows("feature maps", features)
        return features

    def logits_and_projections(
        self, images: Tensor, index: ReferenceIndex | None = None
    ) -> tuple[Tensor, Tensor]:
        """The model's logits and the projections on ``Q`` of N images, in batches.

        Args:
            images: N x C x H x W, normalised as the model expects (any device, any floating
                dtype).
            index: whose ``Q`` (an earlier fit's, as an ``Interpretation`` keeps it); None:
                the interpreter's.

        Returns:
            Logits (N x classes) and projections ``<W_h, psi(x)> + b_h`` (N x |Q|), on the
            device.

        Raises:
            RuntimeError: the interpreter is not fitted.
            ValueError: the images are not a finite float batch of the index's C x H x W, or
                give non-finite logits or projections.
        """
        return self._forward(images, index=index)

    def forward(self, images: Tensor, index: ReferenceIndex | None = None) -> tuple[Tensor, Tensor]:
        """Deprecated (0.6; removed in 0.7): the name of
        [`logits_and_projections`][repinterp.interpreter.RepresentativeInterpreter.logits_and_projections],
        which is not a module's ``forward``."""
        warnings.warn(
            "RepresentativeInterpreter.forward is deprecated and will be removed in 0.7: call "
            "logits_and_projections",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.logits_and_projections(images, index)

    @exact_float32()
    def input_relevance(
        self, images: Tensor, contrast: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Each image's logits and its gradient x input map of its predicted class's logit
        (minus class ``contrast``'s, where given), summed over the input's channels, ReLU; in
        batches.

        Args:
            images: N x C x H x W, as the model takes them.
            contrast: N classes whose logit is subtracted (what sets the prediction apart from
                them); None: none.

        Returns:
            Logits (N x classes) and maps (N x H x W, not scaled), on the CPU.
        """
        logits, maps = [], []
        others = None if contrast is None else contrast.cpu().long().split(self.config.batch_size)
        for j, part in enumerate(self._batches(images)):
            with torch.enable_grad():
                x = part.detach().clone().requires_grad_(True)
                out = self.split.head(self.split.psi(x))
                top = out.gather(1, out.argmax(1, keepdim=True))
                if others is not None:
                    top = top - out.gather(1, others[j][:, None].to(out.device))
                (grad,) = torch.autograd.grad(top.sum(), x)
            logits.append(out.detach().float().cpu())
            maps.append((grad * x.detach()).sum(1).clamp(min=0).float().cpu())
        if not logits:
            side = self.index.input_shape[-2:]
            return torch.empty(0, self.index.n_classes), torch.empty(0, *side)
        return torch.cat(logits), torch.cat(maps)

    @exact_float32()
    def _forward(
        self,
        images: Tensor,
        features: list[Tensor] | None = None,
        columns: list[dict[str, Tensor]] | None = None,
        index: ReferenceIndex | None = None,
    ) -> tuple[Tensor, Tensor]:
        """[`logits_and_projections`][repinterp.interpreter.RepresentativeInterpreter.logits_and_projections];
        each batch's
        flattened feature maps (on the CPU) are also appended to ``features`` when it is given,
        and its columns of the index's granularity
        ([`FittedGranularity.columns`][repinterp.core.granularity.FittedGranularity.columns]) to
        ``columns``."""
        index = self.index if index is None else index
        logits = [torch.empty(0, index.n_classes, device=self.device, dtype=self.dtype)]
        proj = [torch.empty(0, len(index.boundaries), device=self.device, dtype=self.dtype)]
        for part in self._batches(images):
            with torch.inference_mode():
                t = self.split.psi(part)
            rows = index_rows(self.split.head, t, index.boundaries, index.granularity)
            logits.append(rows.pop("logits"))
            proj.append(rows.pop("projections"))
            del rows["predictions"]
            if features is not None:
                features.append(t.flatten(1).float().cpu())
            if columns is not None:
                columns.append(rows)
        logits, proj = torch.cat(logits), torch.cat(proj)
        check_finite_rows("logits or projections", logits, proj)
        return logits, proj

    def _interpret(
        self,
        logits: Tensor,
        projections: Tensor,
        solver: str | None,
        features: Tensor | None,
        columns: dict[str, Tensor],
    ) -> list[Interpretation]:
        """[`interpret`][repinterp.core.representative.interpret] with the interpreter's solver,
        time limit and the inputs' columns of the granularity."""
        return interpret(
            self, logits, projections, self._solver(solver), self.time_limit, features, columns
        )

    # ------------------------------------------------------------------ explaining
    def explain(self, image: Any, solver: str | None = None) -> Interpretation:
        """Interpret one image.

        Args:
            image: C x H x W or 1 x C x H x W, normalised as the model expects: a tensor (on
                any device) or a float NumPy array (also H x W x C); or, with a
                `transform`, a PIL image or a NumPy array of ``uint8`` pixels (H x W or
                H x W x C), which the transform reads (see
                [`as_input`][repinterp.data.inputs.as_input]).
            solver: ``"greedy"`` or ``"exact"``; None means the interpreter's.

        Raises:
            ValueError: not one image, or a PIL image or array of pixels and no transform.
        """
        image = as_input(image, self.transform)
        if image.ndim != 3:
            raise ValueError(
                f"explain takes one C x H x W (or 1 x C x H x W) image, got {tuple(image.shape)}"
            )
        return self.explain_batch(image.unsqueeze(0), solver)[0]

    def _solver(self, solver: str | None) -> str:
        return self.solver if solver is None else check_solver(solver)

    @exact_float32()
    def explain_batch(self, images: Any, solver: str | None = None) -> list[Interpretation]:
        """Interpret N images at once; the covers are solved together. No image gives an empty
        list.

        Args:
            images: N x C x H x W, normalised as the model expects (a tensor on any device, or
                a float NumPy array, also N x H x W x C), or a list of what
                [`explain`][repinterp.interpreter.RepresentativeInterpreter.explain] takes (see
                [`as_inputs`][repinterp.data.inputs.as_inputs]).
            solver: ``"greedy"`` or ``"exact"``; None means the interpreter's.
        """
        index = self.index
        images = as_inputs(images, self.transform, index.input_shape)
        features = [] if FEATURE_FILE in index.files else None
        parts: list[dict[str, Tensor]] = []
        logits, proj = self._forward(images, features, parts)
        features = torch.cat(features) if features else None
        columns = {name: torch.cat([p[name] for p in parts]) for name in parts[0]} if parts else {}
        out = self._interpret(logits, proj, solver, features, columns)
        for e, image in zip(out, images, strict=True):
            e.image = image
        return out

    @exact_float32()
    def explain_reference(
        self, indices: Tensor | list[int], solver: str | None = None
    ) -> list[Interpretation]:
        """Interpret reference images from the index alone, with no forward pass.

        Args:
            solver: ``"greedy"`` or ``"exact"``; None means the interpreter's.
        """
        index = self.index
        rows = torch.as_tensor(indices, dtype=torch.long, device=index.projections.device)
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= len(index)):
            raise IndexError(f"reference indices must lie in [0, {len(index)})")
        features = None
        if FEATURE_FILE in index.files:
            features = self.reference_features[rows.cpu()]
        logits, proj = index.logits[rows], index.projections[rows]
        columns = {name: value[rows] for name, value in index.columns.items()}
        return self._interpret(logits, proj, solver, features, columns)

    # ------------------------------------------------------------------ beyond the paper
    @exact_float32()
    def contrastive_boundaries(
        self, images: Any, contrast: int | Sequence[int] | Tensor
    ) -> Boundaries:
        """Beyond the paper: for each image ``x``, predicted class ``c``, and a class ``c'``
        asked for, the linear boundary between ``c`` and ``c'`` at ``x``'s own feature map
        ``t = psi(x)``, with Eq. 2's weights: ``W = d(G_c - G_c')/dt`` at ``t`` and
        ``b = (G_c - G_c')(t) - <W, t>``. It equals ``G_c - G_c'`` exactly on ``t``'s linear
        region of ``G``, and ``x`` lies on its positive side (``c`` wins at ``x``).

        Args:
            images: N images (anything
                [`explain_batch`][repinterp.interpreter.RepresentativeInterpreter.explain_batch]
                takes).
            contrast: ``c'``: one class for every image, or one per image.

        Returns:
            N boundaries; ``top_classes`` holds each ``(c, c')``.

        Raises:
            ValueError: a class out of range, a number of classes other than of images, or
                ``c' = c`` for some image (its map is its interpretation's own,
                ``explain(x).heatmap``).
        """
        index = self.index
        images = as_inputs(images, self.transform, index.input_shape)
        features = self.features(images)
        with torch.inference_mode():
            predicted = self.split.head(features).argmax(1).cpu()
        classes = contrast_pairs(predicted, contrast, index.n_classes)
        return compute_boundaries(self.split.head, features, classes)

    @exact_float32()
    def contrastive_heatmap(self, images: Any, contrast: int | Sequence[int] | Tensor) -> Tensor:
        """Beyond the paper: the contrastive map of each image ``x``, why the model says its
        predicted class ``c`` rather than ``c'``: the heat map (§5.1's drawing of a boundary:
        ``ReLU(sum_k alpha_k t_k)``, upsampled, min-max) of
        [`contrastive_boundaries`][repinterp.interpreter.RepresentativeInterpreter.contrastive_boundaries],
        whose channel weights ``alpha_k`` are ``W``'s mean over channel ``k``'s positions.

        Args:
            images: N images (anything ``explain_batch`` takes).
            contrast: ``c'``: one class for every image, or one per image.

        Returns:
            N x H x W in [0, 1] on the device.

        Raises:
            ValueError: see ``contrastive_boundaries``.
        """
        images = as_inputs(images, self.transform, self.index.input_shape)
        boundaries = self.contrastive_boundaries(images, contrast)
        return contrastive_heatmaps(self.features(images), boundaries, tuple(images.shape[-2:]))

    def strategies(self, reference: Reference | None = None) -> list[Strategy]:
        """Beyond the paper: the model's strategies, for an index fitted with
        ``granularity="strategy"``: per class (ascending), the groups of reference images it
        treats alike, found without labels, each with its polytope, members, mean heat map and
        audit, the one a user should look at first, first (see
        [`model_strategies`][repinterp.strategies.model.model_strategies]).

        They are found once per fit and kept (``save`` writes them with the index, ``load``
        reads them back): later calls solve only each strategy's polytope again.

        Args:
            reference: the reference set the index was fitted on; None: the one held (the last
                ``fit``'s). Not needed once they are kept.

        Raises:
            ValueError: another granularity, or no reference set known.
        """
        decisions = self.index.granularity
        if isinstance(decisions, StrategyDecisions) and decisions.summary is not None:
            try:
                return strategies_from_state(self, *decisions.summary)
            except ValueError:  # kept by another version: found again
                decisions.summary = None
        found = model_strategies(self, reference, self.config.batch_size)
        decisions.summary = strategies_state(found)
        return found

    @exact_float32()
    def regions(self, n_regions: int | None = None, seed: int = 0) -> RegionSet:
        """k-means regions over the reference set (see
        [`RegionSet`][repinterp.core.regions.RegionSet]); needs ``fit(..., keep_features=True)``."""
        return RegionSet.build(self, n_regions=n_regions, seed=seed)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path, overwrite: bool = False) -> None:
        """Save the index to the folder ``path`` (replaced atomically if it exists), with the
        fingerprints of the model's weights and of its traced graph (module types and
        operations, see [`graph_fingerprint`][repinterp.models.fingerprint.graph_fingerprint]) so
        that ``load`` can refuse another model.

        Args:
            path: a new or empty folder, or an index (which is replaced).
            overwrite: also write into a folder of other files, as the command line's
                ``--overwrite`` does: only the index's own files are written there, nothing
                else is touched (see [`save_index`][repinterp.store.index_folder.save_index]).

        Raises:
            OutputError: ``path`` holds other files (without ``overwrite``), or the shards of a
                fit, or another process is writing to it.
        """
        index = self.index
        record_model(index, self.model, self.split.fingerprint, self.transform)
        save_index(index, path, extra_files=index.files, overwrite=overwrite)
        index.files = {name: Path(path) / name for name in index.files}

    @classmethod
    def load(
        cls,
        path: str | Path,
        model: nn.Module,
        device: str | torch.device | None = None,
        granularity: str | None = None,
        **kwargs: Any,
    ) -> RepresentativeInterpreter:
        """Load a saved index for ``model``.

        An index saved before its manifest recorded the model's graph
        (``graph_fingerprint``, before repinterp 0.4) is checked by the weights alone.

        Args:
            path: the index folder.
            model: the model it was made with.
            device: where to compute; None means the model's device.
            granularity: the granularity the index must have (``"class"``, ``"strategy"``);
                None: the index's own.
            kwargs: the other arguments of the constructor (``solver``, ``time_limit``, ...);
                without ``transform``, the one the index records (that of ``repinterp fit``),
                if any.

        Raises:
            IndexLoadError: the folder is damaged, or was made with other weights, another
                graph (a module of another type or setting, another operation: the same
                weights in another architecture), at a layer this model does not have, or at
                another granularity than ``granularity``; the message says which.
        """
        index = load_index(path)
        meta = index.meta
        layer = check_opening(index, path, model, granularity)
        if "transform" not in kwargs:
            transform = saved_transform(index, path)
            if transform is not None:
                kwargs["transform"] = transform
        ri = cls(
            model,
            layer,
            n_boundaries=meta.get("requested_boundaries", len(index.boundaries)),
            seed=meta.get("seed", 0),
            sampling=meta.get("sampling", "uniform"),
            granularity=index.granularity.name,
            device=device,
            **kwargs,
        )
        check_model(index, path, ri.model, ri.split.fingerprint)
        restore_granularity(index, path, ri.config.granularity)
        ri._index = index.to(ri.device)
        return ri
