"""``FitConfig``: the settings of one fit, built once (from the command line or from Python) and
passed whole from [`fit_workspace`][repinterp.workspace.fit_workspace] down to
[`build_index`][repinterp.store.index_build.build_index]."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .boundaries import SAMPLINGS
from .granularities import PAPERS, granularity
from .granularity import Granularity

__all__ = ["MOVED_KEYWORDS", "FitConfig", "interpreter_config"]


@dataclass(frozen=True)
class FitConfig:
    """The settings of one fit: what the index is made of (``n_boundaries``, ``seed``,
    ``sampling``, ``granularity``), how the reference set is read to make it (``batch_size``,
    ``num_workers``, ``progress``, which change no byte of it), how the model is split to make
    it (``output``, ``allow_nonlinear_head``, ``input_shape``), and how long the exact cover of
    its inputs may take (``time_limit``). The interpreter's other settings (the layer, the
    device, the solver, the transform) are its own keywords.

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
        output: takes the model's output and returns the logits, for outputs other than a
            tensor, ``out["logits"]`` or ``out.logits`` (e.g. ``lambda out: out[0]``); it must
            only select, not compute (it is traced into ``G``).
        allow_nonlinear_head: accept a head ``G`` that is not piecewise linear.
        input_shape: C x H x W of the images, to check the target layer (or find it) when the
            interpreter is made rather than at ``fit``.
        time_limit: seconds the exact solver may spend per input.

    Raises:
        ValueError: ``n_boundaries`` or ``batch_size`` below 1, ``num_workers`` below 0, an
            unknown ``sampling``, or a ``time_limit`` not > 0.
    """

    n_boundaries: int = 50
    seed: int = 0
    sampling: str = "uniform"
    batch_size: int = 64
    num_workers: int = 0
    progress: bool = True
    granularity: Granularity = field(default_factory=Granularity)
    output: Callable[[Any], Any] | None = None
    allow_nonlinear_head: bool = False
    input_shape: tuple[int, int, int] | None = None
    time_limit: float = 5.0

    def __post_init__(self) -> None:
        if self.n_boundaries < 1:
            raise ValueError(f"n_boundaries must be >= 1, got {self.n_boundaries}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {self.num_workers}")
        if not self.time_limit > 0:  # NaN too
            raise ValueError(f"time_limit must be a number of seconds > 0, got {self.time_limit}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(
                f"unknown sampling {self.sampling!r}; choose one of {', '.join(SAMPLINGS)}"
            )


MOVED_KEYWORDS = (
    "num_workers",
    "sampling",
    "output",
    "allow_nonlinear_head",
    "input_shape",
    "time_limit",
)
"""Keywords of ``RepresentativeInterpreter`` before 0.6, fields of `FitConfig` since: still
accepted, with a ``DeprecationWarning``, until 0.7."""


def interpreter_config(
    config: FitConfig | None,
    moved: dict[str, Any],
    n_boundaries: int = 50,
    seed: int = 0,
    batch_size: int = 64,
    progress: bool = True,
    name: str = PAPERS,
) -> FitConfig:
    """The fit's settings of ``RepresentativeInterpreter``: ``config``, or else its fit
    keywords (the granularity by ``name``), with the keywords of before 0.6 that moved into
    `FitConfig` (`MOVED_KEYWORDS`), each warned of with its new spelling.

    Raises:
        ValueError: fit keywords other than the defaults given with ``config``.
        TypeError: a keyword that is neither a constructor's nor a moved one.
    """
    plug = granularity(name)
    given = FitConfig(
        n_boundaries, seed, batch_size=batch_size, progress=progress, granularity=plug
    )
    if config is not None and given != FitConfig():
        raise ValueError("give the fit settings either as keywords or as config=, not both")
    unknown = sorted(set(moved) - set(MOVED_KEYWORDS))
    if unknown:
        raise TypeError(
            f"RepresentativeInterpreter got unexpected keyword arguments: {', '.join(unknown)}"
        )
    if moved:
        names = ", ".join(f"{key}=..." for key in moved)
        warnings.warn(
            f"RepresentativeInterpreter({names}) is deprecated and will be removed in 0.7: "
            f"pass config=FitConfig({names}) (with the fit's other settings)",
            DeprecationWarning,
            stacklevel=3,
        )
    return replace(config if config is not None else given, **moved)
