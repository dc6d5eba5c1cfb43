"""The web viewer's gallery of regions: one card per distinct polytope of the k-means regions on
the reference feature maps and, for an index of ``granularity="strategy"``, its strategies in
the audit's order.

The regions are read from the index folder when it keeps them for these settings (see
`regions_file`), else computed once and kept there; either in a background thread. Until they
are ready the gallery says so.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from typing import Any

from ..core.model_strategies import Strategy
from ..core.regions import Polytope, RegionSet, distinct_polytopes
from ..evaluation.groupings import region_groups
from ..store.regions_file import REGIONS_FILE, load_regions, save_regions
from .images import Entry, Images

__all__ = ["COVERED_SHOWN", "Gallery"]

logger = logging.getLogger(__name__)
COVERED_SHOWN = 4

# Galleries whose regions thread may still run: stopped and joined when the interpreter exits,
# as a daemon thread killed inside torch's native code aborts the process (exit 134).
_RUNNING: weakref.WeakSet[Gallery] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for gallery in list(_RUNNING):
        gallery.stop()


class Gallery:
    """The regions of one workspace's index, built in a background thread started here; `stop`
    ends the thread early (at exit it is called for you).

    Args:
        images: the viewer's images (their workspace, cards' items).
        lock: the viewer's lock, held while the cards are drawn.
        n_regions: k-means regions (at most ``|R|``).
        seed: seed of the k-means.
    """

    def __init__(self, images: Images, lock: threading.RLock, n_regions: int, seed: int) -> None:
        self.images = images
        self.workspace = images.workspace
        self.interpreter = images.interpreter
        self.index = images.index
        self.class_names = [str(c) for c in self.workspace.reference.class_names]
        self._lock = lock
        self._gallery: dict[str, Any] | None = None
        self._gallery_error: str | None = None
        self.n_regions = min(n_regions, len(self.index))
        self.folder = self.workspace.folder  # where computed regions are kept, as it is now
        self._computing = f"computing {self.n_regions} regions (k-means on the reference features)"
        kept = f"reading the {self.n_regions} regions kept with the index"
        self._progress = kept if REGIONS_FILE in self.index.files else self._computing
        self._stopping = threading.Event()
        self._regions_thread = threading.Thread(
            target=self._build_gallery, args=(seed,), name="repinterp-regions", daemon=True
        )
        _RUNNING.add(self)
        self._regions_thread.start()

    def _card(self, polytope: Polytope) -> dict[str, Any]:
        ref, e = polytope.inputs[0], polytope.explanation
        entry = Entry.of(f"r{ref}", self.images.reference_pixels(ref), e, own=ref)
        return {
            **self.images.item(ref, entry),
            "regions": polytope.regions,
            "inputs": polytope.inputs,
            "input_names": [self.workspace.reference_name(ref) for ref in polytope.inputs],
            "class_name": self.class_names[e.predicted_class],
            "representativeness": e.representativeness,
            "interpreted": polytope.interpreted,
            "sub_labels": self.workspace.composition(polytope.members),
            "delta": e.delta,
            "boundaries": sorted(e.boundaries.tolist()),
            "covered": self.images.similar(entry, 0, COVERED_SHOWN),
        }

    def _strategy_card(self, strategy: Strategy) -> dict[str, Any]:
        """A strategy of a ``granularity="strategy"`` index as the page's panel shows it: its
        input (the member nearest its centre) under its polytope's heat map, its audit, and
        the next members under the same map."""
        ref = strategy.input
        pixels = self.images.reference_pixels(ref)
        entry = Entry.of(f"r{ref}", pixels, strategy.interpretation, own=ref)
        audit = strategy.audit
        members = [int(m) for m in strategy.members[1 : COVERED_SHOWN + 1]]
        return {
            **self.images.item(ref, entry),
            "strategy": strategy.id,
            "class_name": self.class_names[strategy.predicted_class],
            "size": len(strategy.members),
            "rank": audit.rank,
            "score": audit.score,
            "flagged": audit.flagged,
            "main": audit.main,
            "reasons": audit.reasons,
            "inside": strategy.inside,
            "others_inside": strategy.others_inside,
            "sub_labels": self.workspace.composition(strategy.members.tolist()),
            "members": [self.images.item(m, entry) for m in members],
        }

    def _regions(self, seed: int) -> RegionSet:
        """The regions kept in the index folder for these settings, else k-means (then kept
        there, when the folder can be written)."""
        try:
            regions = load_regions(self.interpreter, self.n_regions, seed)
        except ValueError as exc:  # never used: computed again, and replaced
            logger.warning("%s: the regions are computed again", exc)
            regions = None
        if regions is not None:
            return regions
        self._progress = self._computing
        regions = self.interpreter.regions(n_regions=self.n_regions, seed=seed)
        if self.folder is not None:
            try:
                save_regions(regions, self.folder, seed)
            except (OSError, ValueError) as exc:  # OutputError, IndexLoadError among them
                logger.warning("the regions are not kept in %s: %s", self.folder, exc)
        return regions

    def _build_gallery(self, seed: int) -> None:
        try:
            regions = self._regions(seed)
            polytopes = distinct_polytopes(regions)
            finds = region_groups(regions).sentence()
            strategies = []
            if self.interpreter.granularity == "strategy":
                strategies = self.interpreter.strategies(self.workspace.reference)
        except Exception as exc:  # whatever it is, the page must hear of it
            self._gallery_error = f"no regions: {exc}"
            return
        with self._lock:
            cards = []
            for polytope in polytopes:
                if self._stopping.is_set():
                    self._gallery_error = "no regions: the viewer stopped"
                    return
                cards.append(self._card(polytope))
            panel = [self._strategy_card(strategy) for strategy in strategies]
            self._gallery = {"cards": cards, "finds": finds, "strategies": panel}

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the thread computing the regions at its next step (the k-means itself runs to
        its end) and wait for it; False on timeout."""
        self._stopping.set()
        return self.wait_for_regions(timeout)

    def wait_for_regions(self, timeout: float | None = None) -> bool:
        """Block until the thread computing the regions has ended; False on timeout."""
        self._regions_thread.join(timeout)
        return not self._regions_thread.is_alive()

    def regions(self) -> dict[str, Any]:
        """The gallery: ``status`` is ``computing``, ``ready`` or ``unavailable``; one card per
        distinct polytope (see `repinterp.core.regions.distinct_polytopes`); when ready,
        ``finds`` says in one sentence what RI finds over the reference set
        (`repinterp.evaluation.groupings.GroupStats.sentence`) and, for an index of
        ``granularity="strategy"``, ``strategies`` lists its strategies in the audit's order
        (`repinterp.core.model_strategies`; empty otherwise)."""
        done = {"n_regions": self.n_regions, "n_reference": len(self.index)}
        if self._gallery_error is not None:
            return {"status": "unavailable", "message": self._gallery_error, **done, "regions": []}
        if self._gallery is None:
            return {"status": "computing", "message": self._progress, **done, "regions": []}
        gallery = self._gallery
        return {
            "status": "ready",
            "message": None,
            **done,
            "regions": gallery["cards"],
            "finds": gallery["finds"],
            "strategies": gallery["strategies"],
        }
