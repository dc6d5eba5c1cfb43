"""Train a torchvision VGG from scratch on ``shapes`` drawn at 224 px, then run the ``coverage``
and ``unseen`` protocols on it: one time-bounded run for a lent GPU (issue 15 §4b), or, with
``TRAIN_SECONDS=`` (empty), a fixed number of epochs for any ``SEED`` (issue 23: the CPU runs of
``docs/results/shapes64-vgg11bn-seeds``).

The paper's VGG-19 has a 14 x 14 x 512 target map; our bundled CNNs have 7 x 7 or less. This
trains ``MODEL`` (VGG-16-BN: 14 x 14 x 512 at 224 px) on the reference part of
``shapes:SIZE`` (4,000 of 5,000 images, data seed 0, as ``repinterp train`` and ``repinterp
evaluate --dataset shapes:SIZE`` cut it) with the recipe below, measures its accuracy on the
unseen part, and evaluates it with the protocols in the same process (the images are drawn
once; each ``repinterp evaluate`` call would draw them again). The number of epochs is
``EPOCHS`` when ``TRAIN_SECONDS`` is empty; otherwise what fits in the training budget, from a
timed probe of a few batches, at most ``EPOCHS``: the budget is ``TRAIN_SECONDS``, or less
where the whole run would last over ``TOTAL_SECONDS`` with ``EVAL_SECONDS`` left for the
protocols (at least one epoch is trained).

Recipe (the defaults; most are environment variables): ``RECIPES["shapes:64"]``
(`repinterp.evaluation.setup`) with the architecture ``MODEL``, at most 8 epochs and a warm-up
of 2: SGD with momentum 0.9, lr 0.01, batch 32, weight decay 5e-4, linear warm-up then cosine
decay per step, label smoothing 0.1, random left-right mirroring, and no dropout while training
(the head's two Dropout(0.5) add noise to every logit; the trained model keeps them, inactive in
eval mode); on CUDA also bf16 autocast, channels-last and cuDNN autotuning for training. On CPU,
VGG-11-BN trained so (warm-up 1 epoch) on the first 2,400 reference images for 4 epochs (300
steps) reached 91.8 % accuracy on the 1,000 unseen images of ``shapes:64`` (epoch losses 1.13,
0.90, 0.63, 0.44) and 73.9 % on ``shapes:32`` (1.17, 1.03, 0.84, 0.68). On an H100, VGG-16-BN at
224 px reached 100 % (21 epochs at 1,566 images/s, 55 s; the loss flat from epoch 4 at 0.29,
label smoothing's floor), hence at most 8 epochs by default. A first try here (VGG-16-BN, AdamW
3e-4, batch 64, 12 epochs of 1,600 images at 224 px, dropout on) stayed at chance.

Environment (default):
- OUT (required): the output folder;
- MODEL (vgg16_bn), SHAPES_SIZE (224), DEVICE (cuda if available, else cpu);
- SEED (0): the seed of the model's initial weights and of training's batch order and mirroring
  (the data, its split and the protocols' runs keep seed 0);
- N_TRAIN (4000: all), N_UNSEEN (1000: all): the first images of each part;
- EVAL_REFERENCE (1000): the reference images the protocols get (stratified by class, seed
  0; each run draws 75 % of them): k-means of the regions runs in scikit-learn on the CPU over
  the 100,352-dimensional feature maps, and its k-means++ start alone grows with their number
  (the CLI has no such option: ``repinterp evaluate`` gives all 4,000);
- TOTAL_SECONDS (240), EVAL_SECONDS (90), TRAIN_SECONDS (120; empty: no budget, exactly
  EPOCHS): the time budget;
- EPOCHS (8: at most), BATCH (32), OPTIMIZER (sgd), LR (0.01), WEIGHT_DECAY (5e-4),
  WARMUP_EPOCHS (2), LABEL_SMOOTHING (0.1), DROPOUT (0: while training);
- PROTOCOLS (coverage,unseen), METHODS (RI,Grad-CAM,Grad-CAM++,Score-CAM), RUNS (1),
  N_REGIONS (0: 10 x classes), METRICS (deletion,insertion: besides AD/AI; ROAD costs a
  sparse solve per image, percentile and order on the CPU, minutes at 224 px; "none"),
  CURVE_IMAGES (100: unseen images per run the deletion/insertion curves score),
  SCORE_IMAGES (16: the images whose Score-CAM weights ``RI+score`` and the ``+class`` and
  ``+cluster`` controls average; each costs one forward pass per channel of the layer);
- WEIGHTS_DIR (a new folder /tmp/gpu_vgg_shapes-*): an empty folder outside OUT for the
  weights (VGG-16's are over 500 MB).

Writes to OUT: ``summary.json`` (the data, the recipe, epochs, per-epoch losses, unseen
accuracy, the weights' SHA-256 and size, each phase's seconds, what was skipped or failed and
why; written again after every phase) and, per protocol, ``PROTOCOL/results.json``,
``results.md`` and its plot. The CAM baselines need pytorch-grad-cam and ttach, which the
protocols import: without them the protocols are skipped, and summary.json says so.

Usage: OUT=/tmp/out PYTHONPATH=src python benchmarks/gpu_vgg_shapes.py
(``bash benchmarks/gpu_vgg_shapes.sh`` installs carried wheels first and keeps a log.)
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import math
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import TensorDataset

from repinterp.data.datasets import ImageSet, load_dataset
from repinterp.evaluation.setup import RECIPES
from repinterp.models.train import Recipe, train
from repinterp.models.zoo import build_model, default_target_layer, save_weights
from repinterp.runtime.checksums import file_sha256

START = time.perf_counter()
PAPER = "RI,Grad-CAM,Grad-CAM++,Score-CAM"


def env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def elapsed() -> float:
    return round(time.perf_counter() - START, 1)


def say(message: str) -> None:
    print(f"[{elapsed():7.1f} s] {message}", flush=True)


class Summary(dict):
    """What the run measured so far, rewritten to OUT/summary.json on every `save`."""

    def __init__(self, out: Path) -> None:
        super().__init__()
        self.path = out / "summary.json"

    def save(self) -> None:
        self["elapsed_s"] = elapsed()
        self.path.write_text(json.dumps(self, indent=2) + "\n")


def on_device(part: ImageSet, device: torch.device) -> TensorDataset:
    """The part's model inputs on `device` (indexing them costs no copy), labels on CPU."""
    return TensorDataset(part.inputs().to(device), part.labels)


def seconds_per_image(
    model: torch.nn.Module, data: TensorDataset, recipe: Recipe, **options: Any
) -> float:
    """Training seconds per image of the recipe, timed on a copy of `model` over a few batches
    (after as many to warm up: cuDNN autotuning, the allocator); ``options`` go to `train`."""
    probe = copy.deepcopy(model)
    sample = TensorDataset(*(t[: 8 * recipe.batch_size] for t in data.tensors))
    once = dataclasses.replace(recipe, epochs=1)
    train(probe, sample, once, **options)
    start = time.perf_counter()
    train(probe, sample, once, **options)
    del probe
    return (time.perf_counter() - start) / len(sample)


def main() -> None:
    out = Path(os.environ["OUT"])
    out.mkdir(parents=True, exist_ok=True)
    summary = Summary(out)
    device = torch.device(env("DEVICE", "cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    arch, size = env("MODEL", "vgg16_bn"), int(env("SHAPES_SIZE", "224"))
    dataset = f"shapes:{size}"
    folder = Path(os.environ.get("WEIGHTS_DIR") or tempfile.mkdtemp(prefix="gpu_vgg_shapes-"))
    weights = folder / f"{arch}-shapes-{size}.safetensors"
    for path in (summary.path, weights):
        if path.exists():
            raise SystemExit(f"gpu_vgg_shapes: error: {path} exists; give another folder")
    summary["machine"] = {
        "device": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    say(f"{arch} on {dataset}, {summary['machine']}")

    start = time.perf_counter()
    split = load_dataset(dataset, seed=0)
    reference = split.reference.subset(range(min(int(env("N_TRAIN", "4000")), 4000)))
    unseen = split.unseen.subset(range(min(int(env("N_UNSEEN", "1000")), 1000)))
    summary["data"] = {
        "dataset": dataset,
        "n_train": len(reference),
        "n_unseen": len(unseen),
        "seconds": round(time.perf_counter() - start, 1),
        "images_per_s": round(5000 / (time.perf_counter() - start), 1),
    }
    summary.save()
    say(f"data: {summary['data']}")

    seed = int(env("SEED", "0"))
    model = build_model(arch, num_classes=len(reference.class_names), seed=seed).to(device)
    if cuda:
        model = model.to(memory_format=torch.channels_last)
        torch.backends.cudnn.benchmark = True
    train_data, unseen_data = on_device(reference, device), on_device(unseen, device)
    base = RECIPES["shapes:64"]
    recipe = dataclasses.replace(
        base,
        arch=arch,
        epochs=int(env("EPOCHS", "8")),
        batch_size=int(env("BATCH", str(base.batch_size))),
        lr=float(env("LR", str(base.lr))),
        optimizer=env("OPTIMIZER", base.optimizer),
        weight_decay=float(env("WEIGHT_DECAY", str(base.weight_decay))),
        warmup_epochs=float(env("WARMUP_EPOCHS", "2")),
        label_smoothing=float(env("LABEL_SMOOTHING", str(base.label_smoothing))),
        dropout=float(env("DROPOUT", str(base.dropout))),
    )
    options = {
        "seed": seed,
        "device": device,
        "progress": False,
        "autocast": torch.bfloat16 if cuda else None,
    }
    epochs = recipe.epochs
    per_image = None
    if env("TRAIN_SECONDS", "120"):
        per_image = seconds_per_image(model, train_data, recipe, **options)
        total, evaluation = float(env("TOTAL_SECONDS", "240")), float(env("EVAL_SECONDS", "90"))
        budget = min(float(env("TRAIN_SECONDS", "120")), total - evaluation - elapsed())
        epochs = max(1, min(epochs, math.floor(budget / (per_image * len(reference)))))
        say(f"probe: {1 / per_image:.0f} images/s in training; {epochs} epoch(s) fit in {budget} s")

    start = time.perf_counter()
    recipe = dataclasses.replace(recipe, epochs=epochs)
    result = train(model, train_data, recipe, held_out_set=unseen_data, **options)
    train_s = time.perf_counter() - start
    torch.backends.cudnn.benchmark = False
    model = model.to(memory_format=torch.contiguous_format).eval()
    folder.mkdir(parents=True, exist_ok=True)
    save_weights(model, weights)
    summary["training"] = {
        "recipe": recipe.settings()
        | {k: str(v) if k in ("autocast", "device") else v for k, v in options.items()},
        "channels_last": cuda,
        "epochs": epochs,
        "images_per_s_probe": per_image and round(1 / per_image, 1),
        "epochs_fixed": per_image is None,
        "seconds": round(train_s, 1),
        "losses": [round(loss, 4) for loss in result.losses],
        "last_lr": result.learning_rates[-1],
        "unseen_accuracy_percent": round(100 * result.held_out_accuracy, 2),
        "weights": str(weights),
        "weights_bytes": weights.stat().st_size,
        "weights_sha256": file_sha256(weights),
    }
    summary.save()
    say(f"training: {summary['training']}")
    del train_data, unseen_data
    if cuda:
        torch.cuda.empty_cache()
    evaluate_protocols(summary, model, arch, dataset, reference, unseen, device, weights, out)


def evaluate_protocols(
    summary: Summary,
    model: torch.nn.Module,
    arch: str,
    dataset: str,
    reference: ImageSet,
    unseen: ImageSet,
    device: torch.device,
    weights: Path,
    out: Path,
) -> None:
    """Run each protocol of PROTOCOLS on the trained model, writing OUT/PROTOCOL/results.*."""
    n_reference = min(int(env("EVAL_REFERENCE", "1000")), len(reference))
    summary["evaluation_reference"] = n_reference
    missing = [m for m in ("pytorch_grad_cam", "ttach") if importlib.util.find_spec(m) is None]
    if missing:
        summary["skipped"] = (
            f"no protocol ran: {', '.join(missing)} not importable (repinterp.evaluation imports "
            "pytorch-grad-cam for its CAM baselines); carry their wheels"
        )
        summary.save()
        say(summary["skipped"])
        return
    from repinterp.evaluation.options import Options
    from repinterp.evaluation.protocols import evaluate
    from repinterp.evaluation.setup import Setup, stratified
    from repinterp.report import write_results

    setup = Setup(
        dataset=dataset,
        model=model,
        target_layer=default_target_layer(arch),
        reference=reference.subset(stratified(reference.labels, n_reference, seed=0)),
        unseen=unseen,
        device=device,
        arch=arch,
        weights=str(weights),
    )
    methods, metrics = env("METHODS", PAPER), env("METRICS", "deletion,insertion")
    runs, curve_images = int(env("RUNS", "1")), int(env("CURVE_IMAGES", "100"))
    score_images = int(env("SCORE_IMAGES", "16"))
    options = Options(
        runs=runs,
        methods=tuple(methods.split(",")),
        metrics=("AD", *metrics.split(",")) if metrics != "none" else ("AD",),
        curve_images=curve_images,
        score_images=score_images,
        n_regions=int(env("N_REGIONS", "0")) or None,
        progress=False,
    )
    summary["protocols"] = {}
    for protocol in env("PROTOCOLS", "coverage,unseen").split(","):
        start = time.perf_counter()
        try:
            results = evaluate(setup, protocol, options)
        except Exception as error:  # e.g. a model that predicts one class: no region to draw
            message = f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
            summary["protocols"][protocol] = {"error": message}
            summary.save()
            say(f"{protocol} failed: {message}")
            continue
        results["command"] = (
            f"repinterp evaluate --dataset {dataset} --protocol {protocol} --runs {runs} "
            f"--seed 0 --model {arch} --weights {weights.name} --methods {methods} "
            f"--metrics {metrics} --curve-images {curve_images} --score-images {score_images} "
            f"--device {device.type}"
            + (f" --regions {options.n_regions}" if options.n_regions else "")
        )
        results["model_accuracy_unseen_percent"] = summary["training"]["unseen_accuracy_percent"]
        files = write_results(results, out / protocol)
        summary["protocols"][protocol] = {
            "seconds": round(time.perf_counter() - start, 1),
            "files": [str(f.relative_to(out)) for f in files],
        }
        summary.save()
        say(f"{protocol}: {summary['protocols'][protocol]}")
        print((out / protocol / "results.md").read_text(), flush=True)


if __name__ == "__main__":
    main()
