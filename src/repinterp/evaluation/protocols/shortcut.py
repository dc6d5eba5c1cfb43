"""The ``shortcut`` protocol: does a grouping isolate, and a heat map point at, a planted mark?

On the ``*-mark:F`` data sets (`repinterp.data.datasets.with_mark`) a share of one class's
images carries a mark and is filed under another class, the *target*; a model fits them by the
mark. The protocol looks at the unseen images the model predicts the target class (every class
on a ``*-markrand:F`` control, whose mark says nothing of the class) and scores, against their
``marked`` flag (which no method reads):

- every grouping of `GROUPINGS` (fitted on the reference images of the same predicted
  classes, without labels; RI+strategy's is k-means with its own label-free rule for k, shown
  beside k-means at that k, k-means with k by the gap statistic, SpRAy and a Domino-like
  mixture, each choosing at most as many groups per class): `f1_marked`, the F1 of the group
  holding most marked images, and the within-class AMI with its shuffle null and k-means
  ceiling (`grouping_scores`);
- every heat map of `MAPS`: `mass_in_box`, the share of its positive relevance on the mark's
  box, against the box's area (what a uniform map gets).

Adding a grouping or a map is one entry in `GROUPINGS` or `MAPS`: a function of the
`ShortcutImages` of a run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ...data.cues import CUE_KINDS, MARKS
from ...interpreter import RepresentativeInterpreter
from ...strategies.audit import audit_strategies, causal_checks
from ...strategies.channel_relevance import channel_relevance
from ...strategies.model import Strategy, polytope_fidelity
from ..baselines import ReusableCAM
from ..groupings import ami, ami_ceiling, ami_null
from ..methods import CAMMethod, method
from ..metrics import energy_in_mask
from ..run import Run
from ..subclass import (
    Grouping,
    domino_groups,
    gap_groups,
    kmeans_groups,
    matched_k,
    pcx_groups,
    polytope_grouping,
    spray_groups,
)
from .cells import cell, columns_table, comparison_cell, markdown_table, with_runs

__all__ = [
    "GROUPINGS",
    "MAPS",
    "ShortcutImages",
    "f1_marked",
    "grouping_scores",
    "mass_in_box",
    "mass_on_cue",
    "model_ranks",
    "shortcut",
    "shortcut_markdown",
    "strategy_audit",
    "strategy_markdown",
    "target_class",
    "why_maps",
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


def mass_on_cue(maps: Tensor, cue: Tensor) -> tuple[Tensor, Tensor]:
    """The share of each heat map's positive relevance on its image's cue, and the cue's share
    of the image (what a uniform map puts there).

    Args:
        maps: N x H x W heat maps (negative values count as 0).
        cue: N x H x W bool, each image's cue pixels (`repinterp.data.cues.cue_masks`).

    Returns:
        ((N,) shares in [0, 1], NaN for a map without positive relevance; (N,) area shares).

    Raises:
        ValueError: the shapes differ.
    """
    if maps.dim() != 3 or cue.shape != maps.shape:
        raise ValueError(f"cue masks {tuple(cue.shape)} for maps {tuple(maps.shape)}")
    shares = energy_in_mask(maps.detach().float().cpu().clamp(min=0), cue.cpu())
    return shares, cue.double().mean((1, 2)).float()


def mass_in_box(maps: Tensor, box: tuple[int, int, int, int]) -> tuple[Tensor, float]:
    """`mass_on_cue` with one box ``(x0, y0, x1, y1)`` (pixels of the maps, x1, y1 exclusive)
    for every map: ((N,) shares, the box's area share in (0, 1]).

    Raises:
        ValueError: the box is empty or not inside the maps.
    """
    x0, y0, x1, y1 = box
    height, width = maps.shape[-2:]
    if not (0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height) or maps.dim() != 3:
        raise ValueError(f"the box {tuple(box)} is not inside N x {height} x {width} maps")
    inside = _box_masks(box, (height, width)).expand(maps.shape)
    return mass_on_cue(maps, inside)[0], (x1 - x0) * (y1 - y0) / (height * width)


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
            box = _box_masks(unseen.mark_box, unseen.images.shape[-2:])
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
    """PCX-like mixture over the channel relevances, k by BIC."""
    grouping = pcx_groups(
        images.relevance("reference"),
        images.classes("reference"),
        images.relevance("unseen"),
        images.classes("unseen"),
        seed=images.run.seed,
    )
    return grouping.unseen


def _kmeans_rule_k(images: ShortcutImages) -> np.ndarray:
    """k-means on the feature maps at the k RI+strategy's rule chose per class (no label)."""
    k = images.interpreter("RI+strategy").index.granularity.strategies.k
    grouping = kmeans_groups(
        images.reference_features,
        images.classes("reference"),
        images.features,
        images.classes("unseen"),
        k,
        images.run.seed,
    )
    return grouping.unseen


def _label_free(groups: Callable[..., Grouping]) -> Callable[[ShortcutImages], np.ndarray]:
    """A grouping that chooses its own k, on the feature maps (`gap_groups`,
    `domino_groups`)."""

    def unseen(images: ShortcutImages) -> np.ndarray:
        grouping = groups(
            images.reference_features,
            images.classes("reference"),
            images.features,
            images.classes("unseen"),
            seed=images.run.seed,
        )
        return grouping.unseen

    return unseen


def _strategies(images: ShortcutImages) -> np.ndarray:
    """RI+strategy's strategies (`repinterp.strategies.granularity`): each unseen image's, the
    nearest centre among its predicted class's (found on the reference set, without labels)."""
    ri = images.interpreter("RI+strategy")
    inputs = images.inputs("unseen")
    features = ri.features(inputs)
    with torch.inference_mode():
        logits = ri.split.head(features)
    columns = ri.index.granularity.columns(ri.split.head, features, logits)
    return columns["strategy"].cpu().numpy()


def audit_rank(groups: np.ndarray, marked: Tensor, images: ShortcutImages) -> dict[str, Any]:
    """Where the audit ([`audit_strategies`][repinterp.strategies.audit.audit_strategies] on
    [`causal_checks`][repinterp.strategies.audit.causal_checks], which read no label) ranks the
    group holding most marked images among the groups of the images looked at (the other unseen
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
        lambda x: ri.logits_and_projections(x)[0],
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


def strategy_polytopes(images: ShortcutImages, strategies: list[Strategy]) -> dict[str, Any]:
    """How RI+strategy's polytopes and its audit (``strategies``:
    `RepresentativeInterpreter.strategies`, on the reference set) meet the unseen images
    looked at.

    Returns:
        ``polytope_inside`` (%: the share of the unseen images of a strategy inside its
        polytope, averaged over the strategies of the classes looked at), ``polytope_others``
        (%: of the unseen images of those classes' other strategies inside it; NaN where a
        class has one strategy), ``strategies`` (how many those classes have),
        ``flagged_strategies`` (how many of them the audit flags), and ``index_audit_rank``
        (the audit's model-wide rank of the strategy holding most marked unseen images; None
        without).
    """
    looked = set(images.classes("unseen").tolist())
    strategies = [s for s in strategies if s.predicted_class in looked]
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


def model_ranks(strategies: list[Strategy]) -> dict[int, int]:
    """Each strategy's rank across the whole model (1: look at it first): the audit's
    ``model_rank``."""
    return {s.id: s.audit.model_rank for s in strategies}


def why_maps(strategy: Strategy, inputs: Tensor) -> Tensor:
    """The map that shows why ``strategy`` is suspicious, on N model inputs (N x H x W): its
    why map (`Strategy.why_heatmap`: gradient x input of the class against its runner-up)."""
    return strategy.why_heatmap(inputs).cpu()


def strategy_audit(
    images: ShortcutImages, strategies: list[Strategy]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The audit of RI+strategy's strategies over the whole model, against the cued images.

    The *shortcut strategy* is the one holding most of the unseen cued images looked at (by
    the index's assignment of each to the nearest centre of its predicted class). Nothing the
    audit reads knows the cue.

    Returns:
        (the run's numbers: ``strategies`` (how many), ``flagged`` (how many flagged),
        ``flagged_share`` (%), ``any_flagged`` (1 when one is), ``shortcut_model_rank``,
        ``shortcut_flagged`` (1 / 0), ``shortcut_score``, ``told`` (% of all unseen cued
        images assigned to the shortcut strategy), and on the cued images looked at that it
        holds, each map's mean share on the image's own cue (%): ``why_on_cue`` (`why_maps`),
        ``gradcam_on_cue`` (each image's own Grad-CAM) and ``cue_area``; NaN without cued
        images; the table: one row per strategy in model-wide rank order, with ``id``,
        ``class`` (its name), ``size``, ``reasons``, ``score``, ``flagged``, ``rank`` (in its
        class), ``model_rank`` (`model_ranks`), ``unseen`` and ``cued`` (unseen images, and
        cued ones, assigned to it) and ``shortcut``).
    """
    assigned = torch.as_tensor(_strategies(images))
    marked = images.marked
    ids, sizes = assigned[marked].unique(return_counts=True)
    counts = dict(zip(ids.tolist(), sizes.tolist(), strict=True))
    shortcut_id = max(counts, key=lambda s: (counts[s], -s)) if counts else None
    ranks = model_ranks(strategies)
    names = images.run.setup.unseen.class_names
    table = [
        {
            "id": s.id,
            "class": names[s.predicted_class],
            "size": len(s.members),
            "reasons": s.audit.reasons,
            "score": s.audit.score,
            "flagged": s.audit.flagged,
            "rank": s.audit.rank,
            "model_rank": ranks[s.id],
            "unseen": int((assigned == s.id).sum()),
            "cued": counts.get(s.id, 0),
            "shortcut": s.id == shortcut_id,
        }
        for s in sorted(strategies, key=lambda s: ranks[s.id])
    ]
    flagged = sum(s.audit.flagged for s in strategies)
    numbers: dict[str, Any] = {
        "strategies": len(strategies),
        "flagged": flagged,
        "flagged_share": _percent(flagged / max(1, len(strategies))),
        "any_flagged": float(flagged > 0),
    }
    nan = float("nan")
    shortcut = next((s for s in strategies if s.id == shortcut_id), None)
    if shortcut is None:
        return numbers | dict.fromkeys(_SHORTCUT_KEYS, nan), table
    held = marked & (assigned == shortcut.id)
    inputs = images.inputs("unseen")[held]
    cue = images.cue[held]
    why, area = mass_on_cue(why_maps(shortcut, inputs), cue)
    gradcam = mass_on_cue(images.cam("Grad-CAM", "unseen")[held], cue)[0]
    all_cued = int(images.run.setup.unseen.marked.sum())
    return numbers | {
        "shortcut_model_rank": ranks[shortcut.id],
        "shortcut_flagged": float(shortcut.audit.flagged),
        "shortcut_score": shortcut.audit.score,
        "told": _percent(counts[shortcut.id] / all_cued),
        "why_on_cue": _percent(float(why.nanmean())),
        "gradcam_on_cue": _percent(float(gradcam.nanmean())),
        "cue_area": _percent(float(area.mean())),
    }, table


_SHORTCUT_KEYS = (
    "shortcut_model_rank",
    "shortcut_flagged",
    "shortcut_score",
    "told",
    "why_on_cue",
    "gradcam_on_cue",
    "cue_area",
)


def _box_masks(box: tuple[int, int, int, int], shape: Sequence[int]) -> Tensor:
    """One box ``(x0, y0, x1, y1)`` as a 1 x H x W bool mask."""
    x0, y0, x1, y1 = box
    mask = torch.zeros(1, *shape, dtype=torch.bool)
    mask[:, y0:y1, x0:x1] = True
    return mask


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
    "RI+strategy": _strategies,
    "k-means": _kmeans,
    "k-means at the rule's k": _kmeans_rule_k,
    "k-means, gap statistic": _label_free(gap_groups),
    "SpRAy": _spray,
    "PCX-like": _pcx,
    "Domino-like": _label_free(domino_groups),
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
        ``images`` and ``marked`` (the unseen images looked at, and how many carry the cue),
        ``marked_to_target`` (% of the unseen cued images predicted the target class; NaN
        on a control or without cues), ``box_area`` (%: the cue's mean share of the images),
        ``groupings`` (per grouping: `grouping_scores` and `audit_rank`: the causal audit of
        its groups), ``maps`` (per map: ``mass_in_box``, the mean share (%) of the cued
        images' maps on their cue, ``mass_in_box_group``, the share of their mean map (NaN
        where the cue moves), ``mass_in_box_unmarked``, the mean share of the other images'
        on where the cue would be, and ``box_area``), ``strategy_audit`` (the numbers of
        `strategy_audit`), ``strategies`` (`strategy_audit`'s table: every strategy of the
        model, kept per run) and ``units`` (each cued image's ``mass_in_box`` per map, for the
        paired comparisons).
    """
    setup = run.setup
    target = target_class(setup.dataset)
    images = ShortcutImages.of(run, target)
    marked = images.marked
    classes = images.classes("unseen")
    cue = images.cue
    strategies = images.interpreter("RI+strategy").strategies()
    groupings = {}
    for name, grouping in GROUPINGS.items():
        groups = grouping(images)
        scores = grouping_scores(groups, marked, classes, images.features, run.seed)
        groupings[name] = scores | audit_rank(groups, marked, images)
    groupings["RI+strategy"] |= strategy_polytopes(images, strategies)
    numbers, table = strategy_audit(images, strategies)
    maps, units = {}, {}
    area = float(cue.double().mean()) if len(cue) else float("nan")
    fixed = bool(marked.any()) and bool((cue[marked] == cue[marked][:1]).all())
    for name, make in MAPS.items():
        drawn = make(images)
        shares = mass_on_cue(drawn, cue)[0]
        mean_map = drawn[marked].nanmean(0, keepdim=True)
        group_share = mass_on_cue(mean_map, cue[marked][:1])[0] if fixed else [np.nan]
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
        "strategy_audit": numbers,
        "strategies": table,
        "units": {"groupings": {}, "maps": units},
    }


SHOWN_STRATEGIES = 5
"""How many strategies of each model's ranking `strategy_markdown` lists (and the shortcut
strategy's row when it ranks below them)."""


def _number(value: Any, digits: int = 1) -> str:
    """A table cell: ``n/a`` for None or NaN."""
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "n/a"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def strategy_markdown(results: dict[str, Any]) -> list[str]:
    """The audit over the whole model, for a report: one summary row per model (per run),
    then each model's `SHOWN_STRATEGIES` first strategies of the model-wide ranking.

    Args:
        results: `repinterp.evaluation.protocols.evaluate`'s ``shortcut`` results.
    """
    runs = [r for r in results.get("per_run", []) if "strategies" in r]
    if not runs:
        return []
    header = ["Model", "strategies", "flagged", "flagged (%)", "shortcut: model rank"]
    header += ["flagged", "score", "told (%)", "why map on cue (%)", "Grad-CAM on cue (%)"]
    header += ["cue area (%)"]
    rows = []
    for run in runs:
        audit = run["strategy_audit"]
        flagged = audit["shortcut_flagged"]
        rows.append(
            [
                _number(run["model"].get("seed")),
                _number(audit["strategies"]),
                _number(audit["flagged"]),
                _number(audit["flagged_share"]),
                _number(audit["shortcut_model_rank"], 0),
                "n/a" if not np.isfinite(flagged) else "yes" if flagged else "no",
                _number(audit["shortcut_score"], 3),
                *(_number(audit[key]) for key in ("told", "why_on_cue", "gradcam_on_cue")),
                _number(audit["cue_area"]),
            ]
        )
    lines = [
        "",
        "The audit over the whole model (RI+strategy's strategies, found on the reference "
        "images without labels; one ranking across all classes by the audit's score). The "
        "shortcut strategy holds most of the unseen cued images; *told*: the share of all "
        "unseen cued images assigned to it; the maps' share on each image's own cue, over the "
        "cued images it holds:",
        "",
        *markdown_table(header, rows),
    ]
    for run in runs:
        table = run["strategies"]
        shown = [row for row in table if row["model_rank"] <= SHOWN_STRATEGIES or row["shortcut"]]
        lines += [
            "",
            f"Model {_number(run['model'].get('seed'))}: the first {SHOWN_STRATEGIES} of "
            f"{len(table)} strategies (and the shortcut strategy):",
            "",
            *markdown_table(
                ["Rank", "class", "id", "size", "score", "flagged", "cued", "reasons"],
                [
                    [
                        str(row["model_rank"]) + (" (shortcut)" if row["shortcut"] else ""),
                        row["class"],
                        str(row["id"]),
                        str(row["size"]),
                        f"{row['score']:.3f}",
                        "yes" if row["flagged"] else "no",
                        str(row["cued"]),
                        ", ".join(f"{k} {v:.2f}" for k, v in row["reasons"].items()),
                    ]
                    for row in shown
                ],
            ),
        ]
    return lines


_SHORTCUT_GROUPINGS: list[tuple[str, str, bool | None]] = [
    ("f1_marked", "F1 marked", True),
    ("ami", "AMI", True),
    ("ami_null_p95", "AMI null p95", None),
    ("ami_ceiling", "AMI k-means ceiling", None),
    ("groups", "groups", None),
    ("audit_rank", "audit rank", False),
]


_SHORTCUT_MAPS: list[tuple[str, str, bool | None]] = [
    ("mass_in_box", "on the box, marked (%)", True),
    ("mass_in_box_group", "mean map on the box (%)", True),
    ("mass_in_box_unmarked", "on the box, unmarked (%)", None),
]


def _shortcut_pairs(results: dict[str, Any], reading: str, key: str) -> list[str]:
    """The first grouping or map against each other one on ``key`` (`comparison_cell`)."""
    pairs = results.get("paired", {}).get(reading)
    if not pairs:
        return []
    first = next(iter(pairs))
    rows = [
        [f"{first} − {b}", comparison_cell(scores.get(key))] for b, scores in pairs[first].items()
    ]
    return ["", *markdown_table(["Pair", f"paired difference of {key}"], rows)]


def shortcut_markdown(results: dict[str, Any]) -> list[str]:
    """Isolation of the marked images by each grouping, mass of each map on the mark's box."""
    to_target = results.get("marked_to_target")
    looked_at = (
        f"{results['images']:.0f} predicted the class the mark leads to, "
        f"{results['marked']:.0f} of them marked; the model calls "
        f"{cell(results, 'marked_to_target')}% of the unseen marked images by the mark"
        if to_target is not None and math.isfinite(to_target)
        else f"{results['images']:.0f}, {results['marked']:.0f} of them marked (a control: "
        "every class on `*-markrand:F`, where the mark leads to no class; the class it would "
        "lead to on `*-mark:0`, where no image is marked)"
    )
    return [
        f"Unseen images looked at: {looked_at}. Groupings (fitted on the reference images of "
        "the same predicted classes, without labels) against the marked flag: F1 of the group "
        "holding most marked images, within-class AMI with its shuffle null (95th percentile) "
        "and k-means ceiling (k = 2):",
        "",
        *columns_table(with_runs(results, results["groupings"]), _SHORTCUT_GROUPINGS, "Grouping"),
        *_shortcut_pairs(results, "groupings", "f1_marked"),
        "",
        "Share of each heat map's positive relevance on the mark's box (a uniform map puts "
        f"{results['box_area']:.1f}% there): mean over the marked images, of their mean map, "
        "and over the unmarked images:",
        "",
        *columns_table(with_runs(results, results["maps"]), _SHORTCUT_MAPS, "Map"),
        *_shortcut_pairs(results, "maps", "mass_in_box"),
        *strategy_markdown(results),
    ]
