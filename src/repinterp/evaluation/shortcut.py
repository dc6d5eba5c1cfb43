"""The ``shortcut`` protocol: does a grouping isolate, and a heat map point at, a planted mark?

On the ``*-mark:F`` data sets (`repinterp.data.datasets.with_mark`) a share of one class's
images carries a mark and is filed under another class, the *target*; a model fits them by the
mark. The protocol looks at the unseen images the model predicts the target class (every class
on a ``*-markrand:F`` control, whose mark says nothing of the class) and scores, against their
``marked`` flag (which no method reads):

- every grouping of `GROUPINGS` (fitted on the reference images of the same predicted
  classes, without labels): `f1_marked`, the F1 of the group holding most marked images, and
  the within-class AMI with its shuffle null and k-means ceiling (`grouping_scores`);
- every heat map of `MAPS`: `mass_in_box`, the share of its positive relevance on the mark's
  box, against the box's area (what a uniform map gets).

Adding a grouping or a map is one entry in `GROUPINGS` or `MAPS`: a function of the
`ShortcutImages` of a run.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..core.audit import audit_strategies, causal_checks
from ..core.logic import logic_vectors
from ..core.model_strategies import polytope_fidelity
from ..data.datasets import MARKS
from ..interpreter import RepresentativeInterpreter
from .baselines import ReusableCAM
from .groupings import ami, ami_ceiling, ami_null
from .methods import CAMMethod, method
from .metrics import energy_in_mask
from .run import Run
from .subclass import (
    kmeans_groups,
    matched_k,
    pcx_groups,
    polytope_grouping,
    spray_groups,
)

__all__ = [
    "GROUPINGS",
    "MAPS",
    "ShortcutImages",
    "f1_marked",
    "grouping_scores",
    "mass_in_box",
    "shortcut",
    "target_class",
]


def f1_marked(groups: Sequence[Hashable] | np.ndarray, marked: Sequence[bool] | Tensor) -> float:
    """How well one group isolates the marked images: the F1 of the group holding most of them
    (ties: the one of highest F1) against the marked set, ``2 |G & M| / (|G| + |M|)``.

    Args:
        groups: N group labels (any hashable).
        marked: N booleans.

    Returns:
        F1 in [0, 1]: 1 when a group is exactly the marked images; NaN when none is marked.
    """
    flags = np.asarray(marked, dtype=bool)
    if len(flags) != len(groups):
        raise ValueError(f"{len(groups)} group labels for {len(flags)} marked flags")
    if not flags.any():
        return float("nan")
    ids = {key: i for i, key in enumerate(dict.fromkeys(groups))}
    group = np.array([ids[key] for key in groups])
    sizes = np.bincount(group)
    hits = np.bincount(group[flags], minlength=len(sizes))
    f1 = 2 * hits / (sizes + flags.sum())
    best = np.flatnonzero(hits == hits.max())
    return float(f1[best].max())


def mass_in_box(maps: Tensor, box: tuple[int, int, int, int]) -> tuple[Tensor, float]:
    """The share of each heat map's positive relevance on a box, and the box's share of the
    image (what a uniform map puts there).

    Args:
        maps: N x H x W heat maps (negative values count as 0).
        box: ``(x0, y0, x1, y1)`` in pixels of the maps (x1, y1 exclusive).

    Returns:
        ((N,) shares in [0, 1], NaN for a map without positive relevance; the box's area
        share in (0, 1]).

    Raises:
        ValueError: the box is empty or not inside the maps.
    """
    x0, y0, x1, y1 = box
    height, width = maps.shape[-2:]
    if not (0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height) or maps.dim() != 3:
        raise ValueError(f"the box {tuple(box)} is not inside N x {height} x {width} maps")
    inside = torch.zeros(maps.shape, dtype=torch.bool)
    inside[:, y0:y1, x0:x1] = True
    shares = energy_in_mask(maps.detach().float().cpu().clamp(min=0), inside)
    return shares, (x1 - x0) * (y1 - y0) / (height * width)


def grouping_scores(
    groups: Sequence[Hashable] | np.ndarray,
    marked: Sequence[bool] | Tensor,
    classes: Sequence[int] | Tensor,
    features: Tensor,
    seed: int = 0,
) -> dict[str, float]:
    """A grouping's isolation of the marked images, within each class.

    Args:
        groups: N group labels (a group holds images of one class).
        marked: N marked flags, the truth.
        classes: N (predicted) classes.
        features: N x ... feature maps, for the k-means ceiling.
        seed: of the null's shuffles and the ceiling's k-means.

    Returns:
        ``f1_marked`` (`f1_marked`), ``ami`` (`repinterp.evaluation.groupings.ami` of the
        groups and the flag, within each class holding marked and unmarked images), ``ami_null`` and
        ``ami_null_p95`` (the mean and 95th percentile with the flag shuffled within each
        class, `ami_null`), ``ami_ceiling`` (k-means with k = 2 on the features of each such
        class, `ami_ceiling`) and ``groups`` (how many groups); the AMIs are NaN where no class
        holds both.
    """
    flags = torch.as_tensor(np.asarray(marked, dtype=bool)).long()
    keys = [(int(c), g) for c, g in zip(np.asarray(classes), groups, strict=True)]
    null, p95 = ami_null(keys, flags, classes, seed=seed)
    return {
        "f1_marked": f1_marked(keys, marked),
        "ami": ami(keys, flags, classes),
        "ami_null": null,
        "ami_null_p95": p95,
        "ami_ceiling": ami_ceiling(features, flags, classes, seed),
        "groups": len(set(keys)),
    }


def target_class(dataset: str) -> int | None:
    """The class a ``*-mark:F`` data set files its marked images under; None for the
    ``*-markrand:F`` controls (every class holds marked images).

    Raises:
        ValueError: ``dataset`` is not one of them.
    """
    name = dataset.partition(":")[0]
    family, _, kind = name.partition("-")
    if family not in MARKS or kind not in ("mark", "markrand"):
        raise ValueError(
            f"the shortcut protocol runs on mnist-mark:F, shapes-mark:F, mnist-markrand:F or "
            f"shapes-markrand:F, not {dataset!r}"
        )
    return MARKS[family].target if kind == "mark" else None


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

    def logic(self, part: str) -> Tensor:
        """A part's logic vectors (`repinterp.core.logic.logic_vectors`), N x K (CPU)."""
        ri = self.run.interpreter
        shaped = ri.features(self.inputs(part))
        return logic_vectors(ri.split.head, shaped).cpu()

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
        ``RI+logic``), on its index in the run (cached)."""
        ri = self.interpreter(name)

        def make() -> list[Any]:
            return ri.explain_batch(self.inputs("unseen"))

        return self.run.cached(("shortcut-polytopes", name, len(self.unseen)), make)

    @cached_property
    def logits(self) -> Tensor:
        """The unseen images' logits (N x classes, CPU)."""
        return self.run.interpreter.forward(self.inputs("unseen"))[0].cpu()


def _kmeans(images: ShortcutImages) -> np.ndarray:
    """k-means on the feature maps, k = 2 in a class holding marked images (matched to the
    marked / unmarked count; the flag gives the count only), else 1."""
    k = matched_k(images.marked.long(), images.classes("unseen"))
    grouping = kmeans_groups(
        images.reference_features,
        images.classes("reference"),
        images.features,
        images.classes("unseen"),
        k,
        images.run.seed,
    )
    return grouping.unseen


def _spray(images: ShortcutImages) -> np.ndarray:
    """SpRAy on each image's own Grad-CAM, k by the eigengap."""
    grouping = spray_groups(
        images.cam("Grad-CAM", "reference"),
        images.classes("reference"),
        images.cam("Grad-CAM", "unseen"),
        images.classes("unseen"),
        seed=images.run.seed,
    )
    return grouping.unseen


def _pcx(images: ShortcutImages) -> np.ndarray:
    """PCX-like mixture over the logic vectors, k by BIC."""
    grouping = pcx_groups(
        images.logic("reference"),
        images.classes("reference"),
        images.logic("unseen"),
        images.classes("unseen"),
        seed=images.run.seed,
    )
    return grouping.unseen


def _strategies(images: ShortcutImages) -> np.ndarray:
    """RI+strategy's strategies (`repinterp.core.strategy_set`): each unseen image's, the
    nearest centre among its predicted class's (found on the reference set, without labels)."""
    ri = images.interpreter("RI+strategy")
    inputs = images.inputs("unseen")
    features = ri.features(inputs)
    with torch.inference_mode():
        logits = ri.split.head(features)
    columns = ri.index.decisions.columns(ri.split.head, features, logits)
    return columns["strategy"].cpu().numpy()


def audit_rank(groups: np.ndarray, marked: Tensor, images: ShortcutImages) -> dict[str, Any]:
    """Where the audit ([`audit_strategies`][repinterp.core.audit.audit_strategies] on
    [`causal_checks`][repinterp.core.audit.causal_checks], which read no label) ranks the group
    holding most marked images among the groups of the images looked at (the other unseen
    images are the pastes' recipients).

    Args:
        groups: N group labels of the images looked at.
        marked: N flags (to find that group only).
        images: the images looked at.

    Returns:
        ``audit_rank`` (1: looked at first; None without marked images), ``audit_flagged``
        and ``audit_score`` of that group, and ``flagged_groups``, how many groups it flags.
    """
    ri, run = images.run.interpreter, images.run
    inputs = run.setup.inputs("unseen")
    predicted = run.setup.predictions["unseen"].cpu()
    looked = images.unseen
    keys = {
        k: i
        for i, k in enumerate(dict.fromkeys(zip(predicted[looked].tolist(), groups, strict=True)))
    }
    ids = torch.full((len(predicted),), -1, dtype=torch.long)
    ids[looked] = torch.tensor(
        [keys[k] for k in zip(predicted[looked].tolist(), groups, strict=True)]
    )
    checks = causal_checks(
        ids,
        predicted,
        lambda rows: inputs[rows.to(inputs.device)],
        lambda x: ri.forward(x)[0],
        lambda x: ri.input_relevance(x)[1],
        seed=run.seed,
    )
    audits = audit_strategies(ids[looked], images.logits, checks)
    flagged = sum(a.flagged for a in audits)
    if not bool(marked.any()):
        return {
            "audit_rank": None,
            "audit_flagged": None,
            "audit_score": None,
            "flagged_groups": flagged,
        }
    worst = int(ids[looked][marked].mode().values)
    own = next(a for a in audits if a.id == worst)
    return {
        "audit_rank": own.model_rank,
        "audit_flagged": own.flagged,
        "audit_score": own.score,
        "flagged_groups": flagged,
    }


def strategy_polytopes(images: ShortcutImages) -> dict[str, Any]:
    """How RI+strategy's polytopes and its audit (`RepresentativeInterpreter.strategies`, on
    the reference set) meet the unseen images looked at.

    Returns:
        ``polytope_inside`` (%: the share of the unseen images of a strategy inside its
        polytope, averaged over the strategies of the classes looked at), ``polytope_others``
        (%: of the unseen images of those classes' other strategies inside it; NaN where a
        class has one strategy), ``strategies`` (how many those classes have),
        ``flagged_strategies`` (how many of them the audit flags), and ``index_audit_rank``
        (the audit's model-wide rank of the strategy holding most marked unseen images; None
        without).
    """
    ri = images.interpreter("RI+strategy")
    looked = set(images.classes("unseen").tolist())
    strategies = [s for s in ri.strategies() if s.predicted_class in looked]
    assigned = torch.as_tensor(_strategies(images))
    inside, others = polytope_fidelity(
        strategies, images.inputs("unseen"), assigned, images.classes("unseen")
    )
    rank = None
    if images.marked.any():
        worst = int(assigned[images.marked].mode().values)
        rank = next((s.audit.model_rank for s in strategies if s.id == worst), None)
    return {
        "polytope_inside": _percent(inside),
        "polytope_others": _percent(others),
        "strategies": len(strategies),
        "flagged_strategies": sum(s.audit.flagged for s in strategies),
        "index_audit_rank": rank,
    }


def _ri_polytopes(name: str) -> Callable[[ShortcutImages], np.ndarray]:
    """The grouping by RI variant ``name``'s polytope of each unseen image."""
    return lambda images: polytope_grouping(images.polytopes(name))


def _ri_map(name: str) -> Callable[[ShortcutImages], Tensor]:
    """Each unseen image's heat map of its own ``P(x)`` by RI variant ``name`` (an image
    without a polytope: NaN)."""

    def maps(images: ShortcutImages) -> Tensor:
        inputs = images.inputs("unseen")
        out = []
        for e, x in zip(images.polytopes(name), inputs, strict=True):
            out.append(
                e.heatmap(x[None])[0].cpu()
                if e.has_heatmap
                else torch.full(x.shape[-2:], torch.nan)
            )
        return torch.stack(out) if out else torch.zeros(0, *inputs.shape[-2:])

    return maps


def _class_cam(images: ShortcutImages) -> Tensor:
    """Grad-CAM with weights averaged over the predicted class's reference images (the
    protocols' ``Grad-CAM+class``)."""
    run = images.run
    return CAMMethod("Grad-CAM", "class").unseen(run, run.setup.unseen_pixels)[images.unseen].cpu()


GROUPINGS: dict[str, Callable[[ShortcutImages], np.ndarray]] = {
    "RI": _ri_polytopes("RI"),
    "RI+logic": _ri_polytopes("RI+logic"),
    "RI+strategy": _strategies,
    "k-means": _kmeans,
    "SpRAy": _spray,
    "PCX-like": _pcx,
}
"""Each grouping: the unseen images looked at -> their group labels (fitted without labels)."""

MAPS: dict[str, Callable[[ShortcutImages], Tensor]] = {
    "RI": _ri_map("RI"),
    "RI+strategy": _ri_map("RI+strategy"),
    "Grad-CAM": lambda images: images.cam("Grad-CAM", "unseen"),
    "Grad-CAM++": lambda images: images.cam("Grad-CAM++", "unseen"),
    "Score-CAM": lambda images: images.cam("Score-CAM", "unseen"),
    "Grad-CAM+class": _class_cam,
}
"""Each heat map: the unseen images looked at -> their N x H x W maps."""


def _percent(value: float) -> float:
    return 100 * value


def shortcut(run: Run) -> dict[str, Any]:
    """The ``shortcut`` protocol on one run (see the module's docstring).

    Returns:
        ``images`` and ``marked`` (the unseen images looked at, and how many are marked),
        ``marked_to_target`` (% of the unseen marked images predicted the target class; NaN
        on a control or without marks), ``box_area`` (%), ``groupings`` (per grouping:
        `grouping_scores` and `audit_rank`: the causal audit of its groups), ``maps`` (per
        map: ``mass_in_box``, the mean share (%) of the marked images' maps on the box,
        ``mass_in_box_group``, the share of their mean map, ``mass_in_box_unmarked``, the
        mean share of the unmarked images', and ``box_area``), and ``units`` (each marked
        image's ``mass_in_box`` per map, for the paired comparisons).
    """
    setup = run.setup
    target = target_class(setup.dataset)
    images = ShortcutImages.of(run, target)
    marked = images.marked
    classes = images.classes("unseen")
    box = setup.unseen.mark_box
    groupings = {}
    for name, grouping in GROUPINGS.items():
        groups = grouping(images)
        scores = grouping_scores(groups, marked, classes, images.features, run.seed)
        groupings[name] = scores | audit_rank(groups, marked, images)
    groupings["RI+strategy"] |= strategy_polytopes(images)
    maps, units = {}, {}
    area = float("nan")
    for name, make in MAPS.items():
        drawn = make(images)
        shares, area = mass_in_box(drawn, box)
        mean_map = drawn[marked].nanmean(0, keepdim=True)
        group_share = mass_in_box(mean_map, box)[0] if marked.any() else torch.tensor([np.nan])
        maps[name] = {
            "mass_in_box": _percent(float(shares[marked].nanmean())),
            "mass_in_box_group": _percent(float(group_share[0])),
            "mass_in_box_unmarked": _percent(float(shares[~marked].nanmean())),
            "box_area": _percent(area),
        }
        units[name] = {"mass_in_box": [round(100 * float(v), 4) for v in shares[marked]]}
    all_marked = setup.unseen.marked
    to_target = float("nan")
    if target is not None and all_marked.any():
        hits = setup.predictions["unseen"][all_marked] == target
        to_target = _percent(float(hits.double().mean()))
    return {
        "images": len(images.unseen),
        "marked": int(marked.sum()),
        "marked_to_target": to_target,
        "box_area": _percent(area),
        "groupings": groupings,
        "maps": maps,
        "units": {"groupings": {}, "maps": units},
    }
