"""The ``shortcut`` protocol on one run: every grouping, map and audit reading together."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...run import Run
from .audit import audit_rank, strategy_audit, strategy_polytopes
from .groupings import GROUPINGS, grouping_scores
from .images import ShortcutImages, percent, target_class
from .maps import MAPS, mass_on_cue

__all__ = ["shortcut"]


def shortcut(run: Run) -> dict[str, Any]:
    """The ``shortcut`` protocol on one run (see the package's docstring).

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
            "mass_in_box": percent(float(shares[marked].nanmean())),
            "mass_in_box_group": percent(float(group_share[0])),
            "mass_in_box_unmarked": percent(float(shares[~marked].nanmean())),
            "box_area": percent(area),
        }
        units[name] = {"mass_in_box": [round(100 * float(v), 4) for v in shares[marked]]}
    all_marked = setup.unseen.marked
    to_target = float("nan")
    if target is not None and all_marked.any():
        hits = setup.predictions["unseen"][all_marked] == target
        to_target = percent(float(hits.double().mean()))
    return {
        "images": len(images.unseen),
        "marked": int(marked.sum()),
        "marked_to_target": to_target,
        "box_area": percent(area),
        "groupings": groupings,
        "maps": maps,
        "strategy_audit": numbers,
        "strategies": table,
        "units": {"groupings": {}, "maps": units},
    }
