"""ACE (Ghorbani et al., NeurIPS 2019) in PyTorch, as a baseline: the concept discovery with
the model (``discovery``) and its steps that need no model (``steps``)."""

from .discovery import ACE, Concept
from .steps import (
    GREY_FILL,
    Segments,
    assign_to_concepts,
    grey_patch,
    keep_segments,
    passes_spread_test,
    segment,
    tcav_score,
    unique_segments,
)

__all__ = [
    "ACE",
    "GREY_FILL",
    "Concept",
    "Segments",
    "assign_to_concepts",
    "grey_patch",
    "keep_segments",
    "passes_spread_test",
    "segment",
    "tcav_score",
    "unique_segments",
]
