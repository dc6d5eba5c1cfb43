"""``QuantusExplainer``: RI as Quantus's ``explain_func``.

Quantus's metrics call ``explain_func(model=model, inputs=x, targets=y, **explain_func_kwargs)``
with ``x`` an N x C x H x W float NumPy batch of model inputs and ``y`` N class indices (the
labels given to the metric), and take N x 1 x H x W attributions (one map per image, broadcast
over the channels), as Quantus's own ``explain`` returns them. The randomisation metrics (MPRT,
``ModelParameterRandomisation``) call it with copies of the model whose layers were randomised:
RI's explanation of such a model is that of an interpreter fitted on it anew (`refit`).
Quantus itself is not imported.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from torch import nn

from ..interpreter import RepresentativeInterpreter
from ..models.fingerprint import model_fingerprint
from .maps import check_other_targets, own_heatmaps

__all__ = ["QuantusExplainer", "refit"]


class QuantusExplainer:
    """Representative interpretations as a Quantus ``explain_func``.

    ``metric(model=model, x_batch=x, y_batch=y, explain_func=QuantusExplainer(ri))`` evaluates
    RI's map of each input: the heat map of its own polytope ``P(x)``. Quantus passes the
    labels as targets; RI explains the class the model predicts, so an input whose label is
    another class is refused (``other_targets="refuse"``, the default: give the metric the
    model's predictions as ``y_batch``) or gets its predicted class's map all the same
    (``other_targets="predicted"``, what the randomisation metrics need: a randomised model
    predicts other classes than the labels).

    Args:
        interpreter: a fitted ``RepresentativeInterpreter``. A model other than its own (same
            weights aside) is explained by an interpreter fitted on it with the same settings
            and the same reference set (``interpreter.reference``: the set of the last
            ``fit``; set it after ``load``); the last one fitted is kept for the next calls.
        other_targets: ``"refuse"`` or ``"predicted"`` (see above).

    Raises:
        RuntimeError: the interpreter is not fitted.
        ValueError: an unknown ``other_targets``.
    """

    def __init__(self, interpreter: RepresentativeInterpreter, other_targets: str = "refuse"):
        self.interpreter = interpreter
        self.other_targets = check_other_targets(other_targets)
        interpreter.index  # noqa: B018 (raises if it is not fitted)
        self._fingerprint = model_fingerprint(interpreter.model)
        self._other: tuple[str, RepresentativeInterpreter] | None = None

    def __call__(
        self,
        model: nn.Module,
        inputs: np.ndarray,
        targets: np.ndarray | None,
        device: str | None = None,
        **kwargs: Any,
    ) -> np.ndarray:
        """RI's maps of N inputs, as Quantus calls an ``explain_func``.

        Args:
            model: the model the metric explains (its own, or a randomised copy).
            inputs: N x C x H x W float, normalised as the model expects.
            targets: N class indices (see ``other_targets``), or None (the predicted ones).
            device: Quantus's device, unused: RI computes on the interpreter's device.
            kwargs: must be empty: the settings are the interpreter's.

        Returns:
            N x 1 x H x W float32 in [0, 1], as ``Interpretation.heatmap`` draws them.

        Raises:
            ValueError: keyword arguments, targets other than the predictions (with
                ``"refuse"``), a model of another architecture or an interpreter without its
                reference set (for another model), and the errors of ``explain_batch``.
        """
        if kwargs:
            raise ValueError(
                f"unknown explain_func_kwargs {', '.join(sorted(kwargs))}: RI's explain_func "
                "takes none (its settings are the interpreter's)"
            )
        classes = None if targets is None else np.asarray(targets).reshape(-1).tolist()
        maps = own_heatmaps(self.interpreter_of(model), inputs, classes, self.other_targets)
        return maps[:, None]

    def interpreter_of(self, model: nn.Module) -> RepresentativeInterpreter:
        """The interpreter of ``model``: the given one for its model (or the same weights),
        else one fitted anew on the same reference set with the same settings.

        Raises:
            ValueError: the interpreter holds no reference set (it was loaded), and the errors
                of the interpreter and its fit on ``model``.
        """
        ri = self.interpreter
        if model is ri.model:
            return ri
        fingerprint = model_fingerprint(model)
        if fingerprint == self._fingerprint:
            return ri
        if self._other is None or self._other[0] != fingerprint:
            self._other = (fingerprint, refit(ri, model))
        return self._other[1]


def refit(
    interpreter: RepresentativeInterpreter,
    model: nn.Module | None = None,
    seed: int | None = None,
) -> RepresentativeInterpreter:
    """An interpreter with ``interpreter``'s settings fitted anew on the reference set it holds:
    for ``model`` (None: its own), with ``Q`` sampled with ``seed`` (None: its own seed).

    Raises:
        ValueError: the interpreter holds no reference set (it was loaded), and the errors of
            the interpreter and its fit.
    """
    ri = interpreter
    if ri.reference is None:
        raise ValueError(
            "explaining another model (e.g. MPRT's randomised copies) or another Q fits an index "
            "on the reference set, which the interpreter does not hold (it was loaded): set "
            "interpreter.reference to the set it was fitted on"
        )
    config = ri.config if seed is None else dataclasses.replace(ri.config, seed=seed)
    other = RepresentativeInterpreter(
        ri.model if model is None else model,
        ri.target_layer,
        device=ri.device,
        solver=ri.solver,
        config=config,
    )
    return other.fit(ri.reference)
