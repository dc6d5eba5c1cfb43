"""The interface of an interpretation method compared by the protocols."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from torch import Tensor

if TYPE_CHECKING:
    from ...core.config import FitConfig
    from ...core.interpretation import Interpretation
    from ...core.regions import RegionSet
    from ..run import Run

__all__ = ["Method"]


class Method(ABC):
    """An interpretation method compared by the protocols.

    An explanation of N images is an N x H x W tensor: a heat map (float; AD/AI keep its 20%
    hottest pixels) or the kept pixels themselves (bool, e.g. ACE's segments).

    Built-in methods are in `METHODS`; another one is given
    to the protocols as an instance in ``Options.methods``.
    """

    name: str

    @abstractmethod
    def unseen(self, run: Run, images01: Tensor) -> Tensor:
        """Explanations of the unseen images (N x C x H x W in [0, 1]) by ``|V|`` reused
        interpretations (§6.4)."""

    @abstractmethod
    def reference(self, run: Run, index: int, k: int) -> tuple[Tensor, Tensor]:
        """The interpretation of reference image ``index`` reused on its top-``k`` similar
        reference images (Appendix C).

        Returns:
            (the similar images' reference indices, ``index`` first; their explanations).
        """

    def reuse(self, run: Run, index: int, images: Tensor) -> Tensor | None:
        """The interpretation of reference image ``index`` reused on the given reference
        images, as ``reference`` reuses it on its own similar images (the ``reference``
        protocol's common reading: every method on one set).

        Args:
            run: the run.
            index: the input's reference index.
            images: (N,) reference indices (CPU long), ``index`` first.

        Returns:
            Their explanations (N x H x W); None (the default): the method cannot explain
            images it did not choose itself.
        """
        return None

    def groups(self, run: Run) -> Tensor:
        """(N,) the interpretation explaining each unseen image, for the average per
        interpretation: by default its nearest k-means centre (CPU long)."""
        return run.unseen_centre

    def regions(self, run: Run) -> RegionSet | None:
        """The regions whose coverage of the unseen images is reported, if any; ``groups``
        then gives each unseen image's region, whose polytopes are counted
        (`repinterp.evaluation.groupings.region_groups`)."""
        return None

    def reference_polytopes(self, run: Run, indices: list[int]) -> list[Interpretation] | None:
        """The polytopes ``P(x)`` the method finds for the reference images ``indices`` in
        ``reference``, which are counted
        ([`polytope_groups`][repinterp.evaluation.groupings.polytope_groups]);
        None (the default): the method finds none."""
        return None

    def fit_configs(self, run: Run) -> tuple[FitConfig, ...]:
        """The settings of the indexes the method uses (see ``Run.interpreter_for``): fitted
        once per run before the clocks start (their time is reported apart); none by default."""
        return ()
