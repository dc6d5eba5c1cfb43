"""The ``shortcut`` protocol's readings of the causal audit: where it ranks a grouping's group
holding most marked images (`audit_rank`), how RI+strategy's strategies meet the unseen images
(`strategy_polytopes`) and the audit over the whole model against the cued images
(`strategy_audit`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from ....strategies.audit import audit_strategies
from ....strategies.causal_checks import causal_checks
from ....strategies.model import Strategy, polytope_fidelity
from .groupings import assigned_strategies
from .images import ShortcutImages, percent
from .maps import mass_on_cue

__all__ = [
    "audit_rank",
    "model_ranks",
    "strategy_audit",
    "strategy_polytopes",
    "told_shares",
    "why_maps",
]


def audit_rank(groups: np.ndarray, marked: Tensor, images: ShortcutImages) -> dict[str, Any]:
    """Where the audit ([`audit_strategies`][repinterp.strategies.audit.audit_strategies] on
    [`causal_checks`][repinterp.strategies.causal_checks.causal_checks], which read no label)
    ranks the group holding most marked images among the groups of the images looked at (the
    other unseen images are the pastes' recipients).

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
    assigned = torch.as_tensor(assigned_strategies(images))
    inside, others = polytope_fidelity(
        strategies, images.inputs("unseen"), assigned, images.classes("unseen")
    )
    rank = None
    if images.marked.any():
        worst = int(assigned[images.marked].mode().values)
        rank = next((s.audit.model_rank for s in strategies if s.id == worst), None)
    return {
        "polytope_inside": percent(inside),
        "polytope_others": percent(others),
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
    the index's assignment of each to the nearest centre of its predicted class); a strategy
    is *cued* when at least half the unseen images assigned to it are (a cue the discovery
    split over several strategies makes several). Nothing the audit reads knows the cue.

    Returns:
        (the run's numbers: ``strategies`` (how many), ``flagged`` (how many flagged),
        ``flagged_share`` (%), ``any_flagged`` (1 when one is), ``shortcut_model_rank``,
        ``shortcut_flagged`` (1 / 0), ``shortcut_score``, ``told`` (% of all unseen cued images
        assigned to the shortcut strategy), ``first_cued`` (1 when the model-wide first strategy is
        flagged and cued), ``told_flagged`` (% of all unseen cued images assigned to a flagged cued
        strategy), ``told_decided`` (the same over the cued images looked at, those the model
        predicts the cue's class: an image it does not is rightly told its own class's strategy),
        ``told_any`` and ``clean_told`` (`told_shares`: the cued images looked at assigned any
        flagged strategy, and the uncued ones), ``flagged_uncued`` (flagged strategies that are not
        cued: false alarms beside the cue), and on the cued images looked at that it holds, each
        map's mean share on the image's own cue (%): ``why_on_cue`` (`why_maps`), ``gradcam_on_cue``
        (each image's own Grad-CAM) and ``cue_area``; NaN without cued images; the table: one row
        per strategy in model-wide rank order, with ``id``, ``class`` (its name), ``size``,
        ``reasons``, ``score``, ``flagged``, ``rank`` (in its class), ``model_rank``
        (`model_ranks`), ``unseen`` and ``cued`` (unseen images, and cued ones, assigned to it),
        ``cued_strategy`` and ``shortcut``).
    """
    assigned = torch.as_tensor(assigned_strategies(images))
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
            "cued_strategy": _cued(counts.get(s.id, 0), int((assigned == s.id).sum())),
            "shortcut": s.id == shortcut_id,
        }
        for s in sorted(strategies, key=lambda s: ranks[s.id])
    ]
    flagged = sum(s.audit.flagged for s in strategies)
    numbers: dict[str, Any] = {
        "strategies": len(strategies),
        "flagged": flagged,
        "flagged_share": percent(flagged / max(1, len(strategies))),
        "any_flagged": float(flagged > 0),
        "flagged_uncued": sum(r["flagged"] and not r["cued_strategy"] for r in table),
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
    first = table[0] if table else None
    all_cued = int(images.run.setup.unseen.marked.sum())
    told = told_shares(table, int(marked.sum()), all_cued)
    return numbers | told | {
        "first_cued": float(first is not None and first["flagged"] and first["cued_strategy"]),
        "shortcut_model_rank": ranks[shortcut.id],
        "shortcut_flagged": float(shortcut.audit.flagged),
        "shortcut_score": shortcut.audit.score,
        "told": percent(counts[shortcut.id] / all_cued),
        "why_on_cue": percent(float(why.nanmean())),
        "gradcam_on_cue": percent(float(gradcam.nanmean())),
        "cue_area": percent(float(area.mean())),
    }, table


def told_shares(table: list[dict[str, Any]], looked: int, all_cued: int) -> dict[str, float]:
    """What the unseen images looked at (those the model predicts the cue's class; every class
    on a control) are told, from the audit's table (each strategy's ``unseen`` images looked at
    assigned to it, the ``cued`` ones among them, ``flagged``, ``cued_strategy``).

    Args:
        table: `strategy_audit`'s rows.
        looked: the cued images looked at (each assigned a strategy of the table, but for an
            image of a class without strategies, which counts here and in no row).
        all_cued: all the unseen cued images, those the model predicts another class too.

    Returns:
        %: ``told_flagged`` (of all the cued images, those assigned a flagged cued strategy),
        ``told_decided`` (the same of the ``looked`` ones), ``told_any`` (of the ``looked``
        ones, those assigned a flagged strategy, cued or not: what `explain` tells them) and
        ``clean_told`` (of the uncued images looked at, those assigned a flagged strategy:
        the flag's cost on the class's own images); NaN where nothing is counted.
    """

    def share(part: int, whole: int) -> float:
        return percent(part / whole) if whole else float("nan")

    flagged = [row for row in table if row["flagged"]]
    told = sum(row["cued"] for row in flagged if row["cued_strategy"])
    clean = sum(row["unseen"] - row["cued"] for row in table)
    return {
        "told_flagged": share(told, all_cued),
        "told_decided": share(told, looked),
        "told_any": share(sum(row["cued"] for row in flagged), looked),
        "clean_told": share(sum(row["unseen"] - row["cued"] for row in flagged), clean),
    }


def _cued(cued: int, assigned: int) -> bool:
    """Whether a strategy is cued: at least half of the ``assigned`` unseen images are."""
    return assigned > 0 and 2 * cued >= assigned


_SHORTCUT_KEYS = (
    "first_cued",
    "told_flagged",
    "told_decided",
    "told_any",
    "clean_told",
    "shortcut_model_rank",
    "shortcut_flagged",
    "shortcut_score",
    "told",
    "why_on_cue",
    "gradcam_on_cue",
    "cue_area",
)
