"""How the evaluation's methods are named in tables and plots: RI's ``+score`` variants under
their own name, apart from the paper's RI."""

from __future__ import annotations

__all__ = ["POLYTOPE_SCORE_CAM", "method_label"]

POLYTOPE_SCORE_CAM = "polytope-averaged Score-CAM"


def method_label(name: str) -> str:
    """A method's name for people: RI's ``+score`` variants (RI's polytopes, Score-CAM's
    weights averaged over images of each) are ``polytope-averaged Score-CAM (RI+score)``, apart
    from the paper's RI; every other name as it is."""
    head, *knobs = name.split("+")
    return f"{POLYTOPE_SCORE_CAM} ({name})" if head == "RI" and "score" in knobs else name
