"""``repinterp train``: train a model on a data set's reference part; its flags beside it."""

from __future__ import annotations

import argparse
from pathlib import Path

from .evaluate import DATASETS, MODELS
from .inputs import image_format, inputs_of
from .options import SEED, at_least, common, image_folder_options, overwrite

__all__ = ["add_arguments", "run"]


def _say(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        print(message, flush=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``repinterp train``."""
    p.add_argument("--dataset", required=True, help=f"data set: {DATASETS}")
    p.add_argument("--model", help=f"architecture: {MODELS}")
    p.add_argument("--arch", help=argparse.SUPPRESS)  # the old name of --model, still accepted
    p.add_argument("--epochs", type=at_least(1), default=5, help="passes over the data (5)")
    p.add_argument("--lr", type=float, default=1e-3, help="base learning rate (1e-3)")
    p.add_argument(
        "--batch-size",
        type=at_least(1),
        default=64,
        help="images per step (64); each epoch leaves out its last incomplete batch when the "
        "set holds more than one batch (batch norm needs two images)",
    )
    p.add_argument("--weights", help="start from these weights (fine-tuning; last layer reset)")
    p.add_argument("--data-seed", type=SEED, default=0, help="seed of the data split (0)")
    p.add_argument("--out", required=True, help="weights file to write (.safetensors)")
    p.add_argument("--optimizer", default="adam", help="adam, adamw or sgd (adam)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (0.9)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="weight decay (0)")
    p.add_argument("--schedule", default="constant", help="lr: constant or cosine (constant)")
    p.add_argument("--warmup-epochs", type=float, default=0.0, help="linear lr warm-up (0)")
    p.add_argument("--label-smoothing", type=float, default=0.0, help="of the loss (0)")
    p.add_argument("--hflip", action="store_true", help="mirror a random half of each batch")
    p.add_argument("--dropout", type=float, help="dropout while training (the model's own)")
    image_folder_options(p)
    overwrite(p)
    common(p)


def run(args: argparse.Namespace) -> None:
    """Run ``repinterp train`` with its parsed arguments."""
    from ..data.datasets import load_dataset
    from ..data.provenance import describe_split
    from ..models.train import Recipe, train
    from ..models.zoo import DataShape, check_input_size, check_model, model_for, weights_bytes
    from ..store.files import replace_file
    from ..store.outputs import check_file

    arch = args.model or args.arch
    if arch is None:
        raise ValueError("train needs --model, the architecture to train")
    out = Path(args.out)
    if out.is_dir() or (out.exists() and not args.overwrite):
        what = "a folder" if out.is_dir() else "a file that exists (pass --overwrite to replace it)"
        raise ValueError(f"--out {out} is {what}: give a new weights file")
    check_file(out, inputs_of(args.weights, data=args.dataset))  # before training, not after
    check_model(arch, args.weights)  # before the data set is read: an image folder takes long
    recipe = Recipe(
        arch,
        epochs=args.epochs,
        lr=args.lr,
        batch_size=args.batch_size,
        optimizer=args.optimizer,
        weight_decay=args.weight_decay,
        momentum=args.momentum,
        schedule=args.schedule,
        warmup_epochs=args.warmup_epochs,
        label_smoothing=args.label_smoothing,
        hflip=args.hflip,
        dropout=args.dropout,
    )
    data = load_dataset(args.dataset, seed=args.data_seed, image_format=image_format(args))
    _say(args, describe_split(data, args.dataset, args.data_seed))
    check_input_size(arch, data.reference[0][0].shape)
    model = model_for(
        arch,
        DataShape.of(data.reference),
        args.weights,
        reset_head=args.weights is not None,
        seed=args.seed,
    )
    result = train(
        model,
        data.reference,
        recipe,
        args.seed,
        held_out_set=data.unseen,
        device=args.device,
        progress=not args.quiet,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    recorded = {
        "held_out_accuracy": f"{100 * result.held_out_accuracy:.2f}",
        "dataset": args.dataset,
        "image_size": str(data.reference[0][0].shape[-1]),
    }
    replace_file(out, weights_bytes(model, recorded))
    losses = ", ".join(f"{loss:.4f}" for loss in result.losses)
    print(f"epoch losses: {losses}")
    print(f"held-out accuracy: {100 * result.held_out_accuracy:.2f}% on {len(data.unseen)} images")
    print(f"weights written to {out}")
