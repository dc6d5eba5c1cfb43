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

The package, by what each part is: `images` (what the protocol looks at: `ShortcutImages`,
`target_class` and the cue's box), `groupings` (`GROUPINGS` and their scores), `maps` (`MAPS`
and their share on the cue), `audit` (the causal audit's readings: `audit_rank`,
`strategy_polytopes`, `strategy_audit`, `told_shares`, `model_ranks`, `why_maps`), `protocol`
(`shortcut`, the run) and `tables` (its Markdown: `shortcut_markdown`, `strategy_markdown`,
`TOLD_KEYS`). Each name is exported here.
"""

from .audit import (
    audit_rank,
    model_ranks,
    strategy_audit,
    strategy_polytopes,
    told_shares,
    why_maps,
)
from .groupings import GROUPINGS, f1_marked, grouping_scores
from .images import ShortcutImages, target_class
from .maps import MAPS, mass_in_box, mass_on_cue
from .protocol import shortcut
from .tables import SHOWN_STRATEGIES, TOLD_KEYS, shortcut_markdown, strategy_markdown

__all__ = [
    "GROUPINGS",
    "MAPS",
    "SHOWN_STRATEGIES",
    "TOLD_KEYS",
    "ShortcutImages",
    "audit_rank",
    "f1_marked",
    "grouping_scores",
    "mass_in_box",
    "mass_on_cue",
    "model_ranks",
    "shortcut",
    "shortcut_markdown",
    "strategy_audit",
    "strategy_markdown",
    "strategy_polytopes",
    "target_class",
    "told_shares",
    "why_maps",
]
