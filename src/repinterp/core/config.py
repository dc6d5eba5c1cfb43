"""``FitConfig``: the settings of one fit, built once (from the command line or from Python) and
passed whole from [`fit_workspace`][repinterp.workspace.fit_workspace] down to
[`build_index`][repinterp.store.index_build.build_index]."""

from __future__ import annotations

from dataclasses import dataclass, field

from .boundaries import SAMPLINGS
from .granularity import Granularity

__all__ = ["FitConfig"]


@dataclass(frozen=True)
class FitConfig:
    """The settings of one fit: what the index is made of (``n_boundaries``, ``seed``,
    ``sampling``, ``granularity``) and how the reference set is read to make it (``batch_size``,
    ``num_workers``, ``progress``, which change no byte of it).

    What the interpreter does with the index afterwards (the cover's solver and its time limit)
    and how the model is split (``allow_nonlinear_head``) are the interpreter's own settings.

    Attributes:
        n_boundaries: ``|Q|``, the number of sampled boundaries (at most |R| are sampled).
        seed: seeds the sample of ``Q`` (drawn on the CPU: the same ``Q`` on every device).
        sampling: how the sources of ``Q`` are drawn: ``"uniform"`` (the paper), ``"balanced"``
            or ``"pairs"`` (see [`sample_sources`][repinterp.core.boundaries.sample_sources]); other
            than ``"uniform"``, the fit takes one more forward pass over the reference set first.
        batch_size: images per forward pass (at fit, and at explain on the fitted interpreter).
        num_workers: DataLoader worker processes reading a reference Dataset.
        progress: show progress bars.
        granularity: the granularity ([`Granularity`][repinterp.core.granularity.Granularity]):
            the paper's by default; beyond the paper e.g. ``StrategySet`` (see
            [`granularities`][repinterp.core.granularities]).

    Raises:
        ValueError: ``n_boundaries`` or ``batch_size`` below 1, ``num_workers`` below 0, or an
            unknown ``sampling``.
    """

    n_boundaries: int = 50
    seed: int = 0
    sampling: str = "uniform"
    batch_size: int = 64
    num_workers: int = 0
    progress: bool = True
    granularity: Granularity = field(default_factory=Granularity)

    def __post_init__(self) -> None:
        if self.n_boundaries < 1:
            raise ValueError(f"n_boundaries must be >= 1, got {self.n_boundaries}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {self.num_workers}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(
                f"unknown sampling {self.sampling!r}; choose one of {', '.join(SAMPLINGS)}"
            )
