"""What the ``shortcut`` protocol looks at: the target class of a planted cue's data set, the
unseen images predicted it (`ShortcutImages`, with what several groupings and maps share of
them) and the cue's box as a mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
from torch import Tensor

from ....data.cues import CUE_KINDS, MARKS
from ....interpreter import RepresentativeInterpreter
from ....strategies.channel_relevance import channel_relevance
from ...baselines import ReusableCAM
from ...methods import method
from ...run import Run

__all__ = ["ShortcutImages", "box_masks", "percent", "target_class"]


def target_class(dataset: str) -> int | None:
    """The class a planted cue's data set (`repinterp.data.cues`) leads to: the class its
    cued images are filed under (``mark``, ``move``, ``texture``) or whose own images carry it
    (``majority``); None for the ``markrand`` controls (every class holds cued images).

    Raises:
        ValueError: ``dataset`` is not one of them.
    """
    name = dataset.partition(":")[0]
    family, _, kind = name.partition("-")
    if family not in MARKS or kind not in CUE_KINDS:
        kinds = ", ".join(f"FAMILY-{k}:F" for k in CUE_KINDS)
        raise ValueError(
            f"the shortcut protocol runs on a planted cue ({kinds}; FAMILY mnist or shapes), "
            f"not {dataset!r}"
        )
    return None if kind == "markrand" else MARKS[family].target


@dataclass
class ShortcutImages:
    """What the groupings and maps of one run look at: the images predicted the target class
    (all classes on a control), and what several methods share of them.

    Attributes:
        run: the run (its interpreter fitted on all the reference images).
        reference: reference indices of the images looked at (CPU long).
        unseen: unseen indices of the images looked at (CPU long).
    """

    run: Run
    reference: Tensor
    unseen: Tensor

    @classmethod
    def of(cls, run: Run, target: int | None) -> ShortcutImages:
        """The images of ``run`` the model predicts ``target`` (None: all)."""
        predicted = run.setup.predictions
        rows = [
            torch.arange(len(predicted[part]))
            if target is None
            else (predicted[part] == target).nonzero().flatten()
            for part in ("reference", "unseen")
        ]
        return cls(run, *rows)

    def classes(self, part: str) -> Tensor:
        """The predicted classes of a part's images looked at."""
        return self.run.setup.predictions[part][getattr(self, part)]

    @property
    def marked(self) -> Tensor:
        """The unseen images' marked flags (the truth; no method reads it)."""
        return self.run.setup.unseen.marked[self.unseen]

    @property
    def cue(self) -> Tensor:
        """The unseen images' cue masks, N x H x W bool (the truth; no method reads it)."""
        unseen = self.run.setup.unseen
        if unseen.cue_masks is None:
            box = box_masks(unseen.mark_box, unseen.images.shape[-2:])
            return box.expand(len(self.unseen), *box.shape[-2:])
        return unseen.cue_masks[self.unseen]

    def inputs(self, part: str) -> Tensor:
        """A part's images looked at, as model inputs on the device."""
        return self.run.setup.inputs(part, getattr(self, part))

    @cached_property
    def reference_features(self) -> Tensor:
        """The reference images' flattened feature maps at the run's layer (CPU)."""
        return self.run.features[self.reference]

    @cached_property
    def features(self) -> Tensor:
        """The unseen images' flattened feature maps at the run's layer (CPU)."""
        ri = self.run.interpreter
        return ri.features(self.inputs("unseen")).flatten(1).cpu()

    def relevance(self, part: str) -> Tensor:
        """A part's channel relevances
        ([`channel_relevance`][repinterp.strategies.channel_relevance.channel_relevance]), N x K
        (CPU)."""
        ri = self.run.interpreter
        shaped = ri.features(self.inputs(part))
        return channel_relevance(ri.split.head, shaped).cpu()

    def cam(self, name: str, part: str) -> Tensor:
        """Each image's own CAM ``name`` (its own weights), N x H x W (cached)."""

        def make() -> Tensor:
            cam = ReusableCAM(name, self.run.setup.model, self.run.setup.target_layer)
            inputs = self.inputs(part)
            cam.fit(inputs)
            return cam.heatmaps(inputs, torch.arange(len(inputs))).cpu()

        return self.run.cached(("shortcut-cam", name, part, len(getattr(self, part))), make)

    def interpreter(self, name: str) -> RepresentativeInterpreter:
        """The run's interpreter of RI variant ``name`` (e.g. ``RI``, ``RI+strategy``)."""
        return self.run.interpreter_for(method(name).fit_configs(self.run)[0])

    def polytopes(self, name: str) -> list[Any]:
        """The unseen images' own ``P(x)`` by RI variant ``name`` (e.g. ``RI``,
        ``RI+strategy``), on its index in the run (cached)."""
        ri = self.interpreter(name)

        def make() -> list[Any]:
            return ri.explain_batch(self.inputs("unseen"))

        return self.run.cached(("shortcut-polytopes", name, len(self.unseen)), make)

    @cached_property
    def logits(self) -> Tensor:
        """The unseen images' logits (N x classes, CPU)."""
        return self.run.interpreter.logits_and_projections(self.inputs("unseen"))[0].cpu()


def box_masks(box: tuple[int, int, int, int], shape: Sequence[int]) -> Tensor:
    """One box ``(x0, y0, x1, y1)`` as a 1 x H x W bool mask."""
    x0, y0, x1, y1 = box
    mask = torch.zeros(1, *shape, dtype=torch.bool)
    mask[:, y0:y1, x0:x1] = True
    return mask


def percent(value: float) -> float:
    """A share in [0, 1] as the protocol reports it, in %."""
    return 100 * value
