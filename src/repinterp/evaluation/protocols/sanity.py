"""The ``sanity`` protocol (Adebayo et al., 2018) and its tables (`sanity_markdown`): RI,
RI+logic and each CAM through Quantus on ``sanity_images`` unseen images, with the checks of
`repinterp.evaluation.sanity`: cascading model-parameter randomisation from the top layer down
and from the bottom up (the mean Spearman correlation of the maps with the trained model's, per
randomised layer), eMPRT, data randomisation, and random logit (SSIM of the maps for the
predicted and a random other class; 1 for RI by construction: its map does not depend on the
target); for the methods that draw something at random, the floor of their maps with it drawn
anew.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
from torch import nn

from ...integrations import QuantusExplainer
from ...integrations.quantus import refit
from ...interpreter import RepresentativeInterpreter
from ...runtime.devices import model_device
from ..run import Run
from ..sanity import (
    RANDOM_METHODS,
    RESEED_OFFSET,
    SANITY_METHODS,
    CAMExplainer,
    Cascade,
    ExplainFunc,
    can_shuffle,
    cascade,
    draw_maps,
    efficient_mprt,
    map_similarity,
    no_map,
    random_logit,
    shuffled_label_model,
)
from .cells import cell, markdown_table, with_runs

__all__ = ["sanity", "sanity_markdown"]


def _mean(values: np.ndarray) -> float:
    """The mean of the finite values (NaN when there is none)."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if len(finite) else float("nan")


def _undefined(values: np.ndarray) -> float:
    """The share (%) of NaN values."""
    return 100 * float(np.isnan(values).mean())


def _explainer(run: Run, name: str) -> ExplainFunc:
    """The run's ``explain_func`` of a method: RI's or RI+logic's interpreter (fitted anew for
    a randomised model), or a CAM."""
    if name in RANDOM_METHODS:
        return QuantusExplainer(_interpreter(run, name), other_targets="predicted")
    return CAMExplainer(name, run.setup.target_layer)


def _interpreter(run: Run, name: str) -> RepresentativeInterpreter:
    """The run's interpreter of ``RI`` or ``RI+logic``."""
    if name == "RI":
        return run.interpreter
    return run.interpreter_for(run.fit_config("uniform", "logic"))


def _reseeded(run: Run, name: str) -> ExplainFunc:
    """A method's ``explain_func`` with its randomness drawn anew (`RANDOM_METHODS`): RI's (or
    RI+logic's) index fitted on the same reference set with ``Q`` sampled with ``run.seed +
    RESEED_OFFSET``."""
    if name not in RANDOM_METHODS:
        raise ValueError(f"{name} draws nothing at random: there is nothing to reseed")
    reseeded = refit(_interpreter(run, name), seed=run.seed + RESEED_OFFSET)
    return QuantusExplainer(reseeded, other_targets="predicted")


def _scored(key: str, values: np.ndarray, missing: np.ndarray) -> dict[str, float]:
    """A metric's numbers under ``key``, the images without a map left out: the mean (NaN
    when every image lacks one), the share without a score (``_undefined``, %) and the number
    without a map (``_no_map``)."""
    values = np.where(missing, np.nan, values)
    return {
        key: _mean(values),
        f"{key}_undefined": _undefined(values),
        f"{key}_no_map": float(missing.sum()),
    }


def _cascade_block(steps: Cascade, key: str) -> dict[str, Any]:
    """A cascade's numbers under ``key``: the mean Spearman correlation per step, the share of
    images without one (``_undefined``, %) and the number without a map (``_no_map``)."""
    return {
        key: {step: _mean(v) for step, v in steps.scores.items()},
        f"{key}_undefined": {step: _undefined(v) for step, v in steps.scores.items()},
        f"{key}_no_map": {step: float(v.sum()) for step, v in steps.no_map.items()},
    }


def _similarity_block(similarity: dict[str, np.ndarray]) -> dict[str, float]:
    """`map_similarity`'s means, the share of images without a score (%) and the number of
    images without a map on either side (not scored)."""
    return {
        "Spearman": _mean(similarity["Spearman"]),
        "SSIM": _mean(similarity["SSIM"]),
        "undefined": _undefined(similarity["Spearman"]),
        "no_map": float(similarity["no_map"].sum()),
    }


def sanity(run: Run) -> dict[str, Any]:
    """The sanity checks of one run, on ``options.sanity_images`` unseen images drawn with the
    run's seed (`Run.unseen_rows`), Quantus seeded with it too.

    Returns:
        ``{"methods": {name: block}, "shuffled_model": ...}``. A block holds ``MPRT`` (per step
        of the top-down `cascade`: the mean Spearman correlation over the images),
        ``MPRT_undefined`` (per step: % of images without a correlation), ``MPRT_no_map``
        (per step: images the step's model draws no map for), the same three for the
        bottom-up cascade (``MPRT_bottom_up...``), ``eMPRT`` (`efficient_mprt`'s mean),
        ``eMPRT_undefined`` (%) and ``eMPRT_no_map`` (images without a map on the trained or
        the randomised model), ``RandomLogit`` (mean SSIM), ``RandomLogit_undefined`` (%) and
        ``RandomLogit_no_map`` (images whose map of the trained model is constant: not
        scored),
        ``data_randomisation`` (the maps of the model trained on permuted labels,
        `shuffled_label_model`, against the trained model's: `_similarity_block`; where
        `can_shuffle`), for the
        methods with randomness (`RANDOM_METHODS`) ``reseeded`` (the maps with the randomness
        drawn anew against the run's, on the trained model: the floor a randomisation must
        fall below), and ``time_s`` (all checks, RI's refits included). ``shuffled_model``:
        what `shuffled_label_model` measured (absent where the model cannot be trained anew:
        `can_shuffle`).

    Raises:
        ValueError: a method other than `SANITY_METHODS`.
    """
    setup, options = run.setup, run.options
    names = list(options.resolve_methods())
    other = [name for name in names if name not in SANITY_METHODS]
    if other:
        raise ValueError(
            f"the sanity protocol checks {', '.join(SANITY_METHODS)}, not {', '.join(other)}"
        )
    rows = run.unseen_rows(options.sanity_images)
    if len(rows) < 2:
        raise ValueError(f"the sanity checks need at least 2 unseen images, got {len(rows)}")
    batch_size = setup.batch_size if len(rows) % setup.batch_size != 1 else len(rows)
    x = setup.inputs("unseen", rows).cpu().numpy()
    y = setup.predictions["unseen"][rows].numpy()
    device = str(setup.device)
    shuffled, trained_on_shuffled = None, None
    if can_shuffle(setup):
        shuffled, trained_on_shuffled = shuffled_label_model(
            setup, run.seed, options.shuffled_epochs
        )
    methods = {}
    for name in names:
        start = time.perf_counter()
        explain = _explainer(run, name)
        block: dict[str, Any] = {}
        for order, key in (("top_down", "MPRT"), ("bottom_up", "MPRT_bottom_up")):
            steps = cascade(setup.model, x, y, explain, run.seed, device, batch_size, order)
            block |= _cascade_block(steps, key)
        rises, missing = efficient_mprt(setup.model, x, y, explain, run.seed, device, batch_size)
        block |= _scored("eMPRT", rises, missing)
        maps = draw_maps(explain, setup.model, x, y, batch_size)
        logit = random_logit(
            setup.model, x, y, explain, setup.n_classes, run.seed, device, batch_size
        )
        block |= _scored("RandomLogit", logit, no_map(maps))
        if shuffled is not None:
            # The model trained on permuted labels predicts other classes: each map is its
            # own prediction's (RI's always is; the CAMs are asked for it).
            other = draw_maps(explain, shuffled, x, _predicted(shuffled, x), batch_size)
            block["data_randomisation"] = _similarity_block(map_similarity(maps, other))
        if name in RANDOM_METHODS:
            again = draw_maps(_reseeded(run, name), setup.model, x, y, batch_size)
            block["reseeded"] = _similarity_block(map_similarity(maps, again))
        methods[name] = block | {"time_s": time.perf_counter() - start}
    out: dict[str, Any] = {"methods": methods}
    return out if trained_on_shuffled is None else out | {"shuffled_model": trained_on_shuffled}


def _predicted(model: nn.Module, x: np.ndarray) -> np.ndarray:
    """N classes: the model's predictions on N x C x H x W inputs."""
    with torch.no_grad():
        inputs = torch.as_tensor(x, device=model_device(model))
        return model(inputs).argmax(1).cpu().numpy()


def _sanity_cell(results: dict[str, Any], name: str, key: str, step: str | None) -> str:
    """A sanity score of a method (``methods[name][key][step]``; ``[key]`` when ``step`` is
    None) as `cell` shows it, over the runs that have one; ``no map`` where no run has one
    because the model draws no map (``KEY_no_map``, or, when ``step`` is None and there is no
    ``KEY_no_map``, ``no_map``), never a score; the runs without a value named."""
    runs = results.get("per_run") or [results]
    blocks = [run["methods"][name] for run in runs]
    values = [block[key] if step is None else block[key][step] for block in blocks]
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        no_maps = [
            b.get(f"{key}_no_map", b.get("no_map")) if step is None else b[f"{key}_no_map"][step]
            for b in blocks
        ]
        return "no map" if any(no_maps) else "n/a"
    mean = sum(finite) / len(finite)
    spread = sum((v - mean) ** 2 for v in finite) / max(1, len(finite) - 1)
    text = cell({"v": mean, "v_std": math.sqrt(spread), "_runs": len(finite)}, "v")
    if len(finite) < len(values):
        text += f" in {len(finite)} runs, no map in {len(values) - len(finite)}"
    return text


def _inner(results: dict[str, Any], name: str, key: str) -> dict[str, Any]:
    """``results`` whose runs hold only method ``name``'s block ``key`` (e.g. ``reseeded``) as
    its block, for `_sanity_cell`."""
    runs = results.get("per_run") or [results]
    return {"per_run": [{"methods": {name: run["methods"][name][key]}} for run in runs]}


def _no_map_cell(results: dict[str, Any], name: str, key: str, step: str | None) -> str:
    """Images without a map (``methods[name][key][step]``, or ``[key]``), mean over the runs,
    as ``"k of n"``."""
    runs = results.get("per_run") or [results]
    blocks = [run["methods"][name] for run in runs]
    mean = sum(b[key] if step is None else b[key][step] for b in blocks) / len(blocks)
    return f"{mean:g} of {results['options']['sanity_images']}"


def _floor_row(results: dict[str, Any], name: str, key: str, steps: list[str]) -> list[str]:
    """A method's reseeded floor under ``original``: its mean over the runs and each run's
    (model's) own; under each randomised step, in how many runs the step's score falls below
    that run's floor (the runs with a score; ``no map`` without any)."""
    runs = results.get("per_run") or [results]
    floors = [run["methods"][name]["reseeded"]["Spearman"] for run in runs]
    floor = _sanity_cell(_inner(results, name, "reseeded"), name, "Spearman", None)
    if len(runs) > 1:
        floor += " (" + ", ".join("n/a" if f is None else f"{f:.3f}" for f in floors) + ")"
    below = []
    for step in steps[1:]:
        pairs = [(run["methods"][name][key][step], f) for run, f in zip(runs, floors, strict=True)]
        scored = [(v, f) for v, f in pairs if v is not None and f is not None and math.isfinite(v)]
        below.append(f"{sum(v < f for v, f in scored)}/{len(scored)} below" if scored else "no map")
    return [f"{name} (Q reseeded)", floor, *below, "—"]


def _sanity_cascade(results: dict[str, Any], key: str, order: str) -> list[str]:
    """The cascade of ``order`` (under ``key``: ``MPRT`` or ``MPRT_bottom_up``): the mean
    Spearman correlation per step with the reseeded floor under ``original``, then the images
    without a map per step."""
    names = list(results["methods"])
    steps = [s for s in results["methods"][names[0]][key] if not s.endswith("_std")]
    n = results["options"]["sanity_images"]
    header = ["Method", *[f"`{s}`" for s in steps]]
    rows = []
    for name in names:
        block = results["methods"][name]
        scores = [_sanity_cell(results, name, key, s) for s in steps]
        rows.append([name, *scores, f"{block['time_s']:.1f}"])
        if "reseeded" in block:
            rows.append(_floor_row(results, name, key, steps))
    no_maps = [
        [name, *[_no_map_cell(results, name, f"{key}_no_map", s) for s in steps]] for name in names
    ]
    direction = "output down" if order == "top-down" else "input up"
    return [
        f"Cascading model-parameter randomisation (Quantus `MPRT`, {order}): the mean Spearman "
        f"rank correlation of each method's maps of {n} unseen images per run with its maps of "
        f"the trained model, once every layer from the {direction} to the one named is "
        "re-initialised (lower: the maps depend on the weights, as a sanity check expects; "
        "`no map`: the model draws no map, so nothing is tested). `(Q reseeded)`: the method "
        "on the trained model with its random draw made anew (RI: another seed of Q), "
        "against its maps: the floor a randomisation must fall below to show more than the "
        "method's own noise; in brackets each run's (model's) floor, and under each step the "
        "runs whose score falls below their own floor. The time covers all the checks of a "
        "method, RI's indexes of the "
        "randomised models included:",
        "",
        *markdown_table([*header, "time (s)"], rows),
        "",
        f"Images whose map is constant, i.e. no map (left out of the means above; mean over "
        f"the runs), {order}:",
        "",
        *markdown_table(header, no_maps),
    ]


def _data_randomisation(results: dict[str, Any]) -> list[str]:
    """The data-randomisation table (each method, then its reseeded floor) under its
    sentence, or why it was not run."""
    if "shuffled_model" not in results:
        return [
            "Data randomisation not run: it trains the model's architecture anew on the "
            "reference images held in memory (a zoo model on a bundled data set)."
        ]
    rows = []
    for name in results["methods"]:
        data = _inner(results, name, "data_randomisation") | {"options": results["options"]}
        similarity = [_sanity_cell(data, name, key, None) for key in ("Spearman", "SSIM")]
        rows.append([name, *similarity, _no_map_cell(data, name, "no_map", None)])
        if "reseeded" in results["methods"][name]:
            reseeded = _inner(results, name, "reseeded")
            floor = [_sanity_cell(reseeded, name, key, None) for key in ("Spearman", "SSIM")]
            rows.append([f"{name} (Q reseeded)", *floor, "—"])
    shuffled = with_runs(results, {"s": results["shuffled_model"]})["s"]
    epochs = results["options"]["shuffled_epochs"]
    return [
        f"Data randomisation (Adebayo et al. 2018): the same architecture trained for {epochs} "
        "epochs on the reference images with their labels "
        f"permuted (it fits {cell(shuffled, 'train_accuracy')}% of the permuted labels and "
        f"{cell(shuffled, 'unseen_accuracy')}% of the unseen images' true ones); each "
        "method's maps of that model's predictions against its maps of the trained model "
        "(Spearman, SSIM; lower: the maps depend on what the model learnt). `no map`: the "
        "model on permuted labels draws none (RI, when it predicts one class for every "
        "reference image: no boundary). `(Q reseeded)`: the floor, as above:",
        "",
        *markdown_table(["Method", "Spearman", "SSIM", "images with no map"], rows),
    ]


def sanity_markdown(results: dict[str, Any]) -> list[str]:
    """Both cascades with their floors and no-map counts, eMPRT, data randomisation and random
    logit."""
    emprt, logit = [], []
    for name, block in results["methods"].items():
        for key, rows in (("eMPRT", emprt), ("RandomLogit", logit)):
            counted = f"{key}_no_map" in block
            no_maps = _no_map_cell(results, name, f"{key}_no_map", None) if counted else "n/a"
            rows.append([name, _sanity_cell(results, name, key, None), no_maps])
    return [
        *_sanity_cascade(results, "MPRT", "top-down"),
        "",
        *_sanity_cascade(results, "MPRT_bottom_up", "bottom-up"),
        "",
        "eMPRT (Quantus `EfficientMPRT`, bottom-up): the mean relative rise in the maps' "
        "complexity (discrete entropy) from the trained model to the one with every layer "
        "re-initialised (higher: the maps lose their structure with the weights), over the "
        "images with a map on both models (a constant map's entropy is 0: no map, never a "
        "score), and the images without one (mean over the runs). sMPRT is not "
        "run: the installed Quantus's `SmoothMPRT` draws its noisy maps with "
        "`quantus.explain` (captum's methods), not with the methods' `explain_func`.",
        "",
        *markdown_table(["Method", "eMPRT rise", "images with no map"], emprt),
        "",
        *_data_randomisation(results),
        "",
        "Random logit (Quantus `RandomLogit`): the mean SSIM of each image's map for its "
        "predicted class and for a random other class (lower: the map depends on the class "
        "explained). RI's map is that of the predicted class's polytope P(x) whatever the class "
        "asked for, so its SSIM is 1 by construction: this measures the dependence on the "
        "target, not on the model. Images whose map of the predicted class is constant are not "
        "scored.",
        "",
        *markdown_table(["Method", "SSIM", "images with no map"], logit),
    ]
