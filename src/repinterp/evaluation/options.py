"""How the protocols run (`Options`), the protocols' names, and the sizes of a full and a quick
evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.boundaries import SAMPLINGS
from .methods import PAPER, Method, method
from .scoring import METRICS

__all__ = ["FULL", "PROTOCOLS", "QUICK", "SPLITS", "Options", "check_protocol"]

PROTOCOLS = ("unseen", "coverage", "reference", "q-sweep", "similar", "sanity", "shortcut")
SPLITS = ("per-run", "fixed")


@dataclass(frozen=True)
class Options:
    """How a protocol runs.

    Attributes:
        runs: number of seeded runs (seeds ``seed``, ``seed + 1``, ...).
        seed: the first run's seed.
        methods: the methods compared by ``unseen``, ``reference``, ``similar`` (the
            pointing game) and ``sanity`` (RI and the CAMs only): names
            (`methods.METHODS`, or any RI variant, see
            [`methods.method`][repinterp.evaluation.methods.method]), or `Method` instances of one's
            own (reported under their ``name``).
        metrics: what scores the explanations besides AD / AI (always): any of
            `scoring.METRICS` (``ROAD``, ``deletion``, ``insertion``).
        split: ``"per-run"``: each run draws its own stratified reference and unseen images
            (``draw``) from the setup's parts (`setup.Setup.draw`); ``"fixed"``: every
            run uses the setup's images.
        draw: the shares of the setup's reference and unseen images a run draws.
        n_boundaries: ``|Q|``.
        n_regions: ``|V|``; None: 10 x classes.
        n_inputs: random reference inputs of ``reference`` and ``similar`` (the paper: 1,000).
        ks: the K of ``reference`` (top-K similar images).
        q_values: the ``|Q|`` of ``q-sweep``.
        samplings: the ways of drawing ``Q`` that ``q-sweep`` compares.
        purity_ks: the k of purity@k in ``similar``.
        curve_images: unseen images (drawn per run) the perturbation metrics score.
        curve_inputs: reference inputs of ``reference`` (the first ones) they score...
        curve_k: ... on their top-``curve_k`` similar images (reported for K <= curve_k).
        sanity_images: unseen images (drawn per run) the sanity checks explain.
        shuffled_epochs: epochs the sanity checks' model on permuted labels trains (the data
            randomisation test; 8, as the bundled ``mnist_cnn``).
        score_images: images whose weights are averaged: by polytope-averaged Score-CAM
            (``RI+score``: the input and covered images) and by the CAM controls
            (``+cluster``, ``+class``).
        time_limit: seconds the exact cover may take per input (``+exact``).
        ace_images: most discovery images of one ACE fit (the reference images nearest the
            k-means centre in ``unseen``; the input and its nearest neighbours in
            ``reference``, as the paper's 50).
        progress: show progress bars.
    """

    runs: int = 5
    seed: int = 0
    methods: tuple[str | Method, ...] = PAPER
    metrics: tuple[str, ...] = METRICS
    split: str = "per-run"
    draw: tuple[float, float] = (0.75, 0.8)
    n_boundaries: int = 50
    n_regions: int | None = None
    n_inputs: int = 200
    ks: tuple[int, ...] = (1, 5, 10, 20, 50)
    q_values: tuple[int, ...] = (1, 5, 10, 30, 50, 70, 100)
    samplings: tuple[str, ...] = ("uniform",)
    purity_ks: tuple[int, ...] = (5, 10, 20)
    curve_images: int = 200
    curve_inputs: int = 40
    curve_k: int = 10
    sanity_images: int = 100
    shuffled_epochs: int = 8
    score_images: int = 16
    time_limit: float = 5.0
    ace_images: int = 50
    progress: bool = True

    def __post_init__(self) -> None:
        counts = {"runs": self.runs, "n_boundaries": self.n_boundaries, "n_inputs": self.n_inputs}
        counts |= {"ace_images": self.ace_images, "n_regions": self.n_regions}
        counts |= {"score_images": self.score_images, "curve_k": self.curve_k}
        counts |= {"sanity_images": self.sanity_images, "shuffled_epochs": self.shuffled_epochs}
        for name, value in counts.items():
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.curve_images < 0 or self.curve_inputs < 0:
            raise ValueError("curve_images and curve_inputs must be >= 0")
        for name in ("ks", "q_values", "purity_ks"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                raise ValueError(f"{name} must be a non-empty list of integers >= 1")
        for name, values, choices in (
            ("metric", self.metrics, METRICS),
            ("sampling", self.samplings, SAMPLINGS),
        ):
            unknown = [v for v in values if v not in choices]
            if unknown or not values:
                raise ValueError(
                    f"unknown {name}(s) {', '.join(unknown) or '(none given)'}; "
                    f"choose from {', '.join(choices)}"
                )
        if self.split not in SPLITS:
            raise ValueError(f"unknown split {self.split!r}; choose one of {', '.join(SPLITS)}")
        if not all(0 < share <= 1 for share in self.draw) or len(self.draw) != 2:
            raise ValueError(f"draw must be two shares in (0, 1], got {self.draw}")
        if not self.time_limit > 0:  # NaN too
            raise ValueError(f"time_limit must be a number of seconds > 0, got {self.time_limit}")
        if not self.methods:
            raise ValueError("unknown method(s) (none given)")
        self.resolve_methods()

    def resolve_methods(self) -> dict[str, Method]:
        """The methods to compare, by name, in order."""
        resolved = [m if isinstance(m, Method) else method(m) for m in self.methods]
        return {m.name: m for m in resolved}

    def describe(self) -> dict[str, Any]:
        """What the report says about the options (JSON-ready; methods by name)."""
        described = {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in self.__dict__.items()
            if key != "progress"
        }
        described["methods"] = list(self.resolve_methods())
        return described


def check_protocol(protocol: str) -> None:
    """Raise ValueError for a name not in `PROTOCOLS`."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")


# Sizes of a full and a quick (``--quick``) evaluation. The quick one keeps the fixed split
# (the one the bundled weights were trained on), cut to 600 reference / 200 unseen images, and
# scores 10 images a run with the perturbation metrics (ROAD's sparse solves and the deletion /
# insertion curves took half of a quick run of a ResNet-18 at 64 px with 20; issue 31); in
# ``reference``, the top 10 similar images of 2 inputs (of all 30, they took most of its time).
FULL = {"n_reference": None, "n_unseen": 1000, "runs": 5, "n_inputs": 200, "split": "per-run"}
FULL["curve_images"] = 200
FULL["curve_inputs"] = 40
FULL["sanity_images"] = 100
FULL["shuffled_epochs"] = 8
QUICK = {"n_reference": 600, "n_unseen": 200, "runs": 2, "n_inputs": 30, "split": "fixed"}
QUICK["curve_images"] = 10
QUICK["curve_inputs"] = 2
QUICK["sanity_images"] = 8
QUICK["shuffled_epochs"] = 2
