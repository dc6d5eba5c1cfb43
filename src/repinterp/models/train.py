"""A plain, seeded training loop: cross-entropy with Adam, AdamW or SGD, then held-out accuracy.

Data sets are anything that yields ``(image C x H x W, int label)`` — `data.ImageSet` and
`data.ImageFolderSet` (which fine-tunes a torchvision model the same way) alike. The defaults
(Adam, constant learning rate, no augmentation) made the bundled weights; AdamW or SGD, a
linear warm-up, cosine decay, label smoothing, mirrored images, another dropout while training
and mixed precision are options, which a torchvision VGG trained from scratch needs
(``benchmarks/gpu_vgg_shapes.py``). A `Recipe` is an architecture and these settings as one
value: what trains a model from scratch with a seed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from ..runtime.devices import resolve_device
from .zoo import DataShape, LabelledImages, check_input_size, model_for

OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("constant", "cosine")


@dataclass
class TrainResult:
    """What `train` measured.

    Attributes:
        losses: mean training cross-entropy (nats per image) of each epoch, in order.
        held_out_accuracy: fraction of held-out images classified correctly, in [0, 1]; NaN
            when there was no held-out set.
        learning_rates: the learning rate of every optimiser step, in order.
    """

    losses: list[float]
    held_out_accuracy: float
    learning_rates: list[float]


@torch.no_grad()
def accuracy(
    model: nn.Module,
    dataset: Dataset,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    num_workers: int = 0,
) -> float:
    """Fraction of `dataset` that `model` (put in eval mode) classifies correctly, in [0, 1];
    NaN for an empty set."""
    device = resolve_device(device)
    model.to(device).eval()
    correct = total = 0
    # Iterating a DataLoader draws a seed from its generator, else from the global RNG.
    loader = DataLoader(
        dataset, batch_size=batch_size, num_workers=num_workers, generator=torch.Generator()
    )
    for images, labels in loader:
        predicted = model(images.to(device)).argmax(1).cpu()
        correct += int((predicted == labels).sum())
        total += len(labels)
    return correct / total if total else math.nan


@contextmanager
def _dropout_set_to(model: nn.Module, p: float | None) -> Iterator[None]:
    """Within the block, every ``nn.Dropout`` of `model` has probability `p` (None: as is)."""
    saved = {m: m.p for m in model.modules() if isinstance(m, nn.Dropout)} if p is not None else {}
    for module in saved:
        module.p = p
    try:
        yield
    finally:
        for module, old in saved.items():
            module.p = old


def learning_rate_factor(step: int, total_steps: int, warmup_steps: int, schedule: str) -> float:
    """The multiplier of the base learning rate at optimiser step `step` (0-based).

    A linear warm-up over the first `warmup_steps` steps (step ``s`` gets ``(s + 1) /
    warmup_steps``), then 1 (``"constant"``) or a cosine from 1 down towards 0 over the
    remaining steps (``"cosine"``: ``(1 + cos(pi * t)) / 2`` with ``t = (step - warmup_steps) /
    (total_steps - warmup_steps)``).

    Raises:
        ValueError: unknown schedule.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of: {', '.join(SCHEDULES)}")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1 + math.cos(math.pi * progress))


def make_optimizer(
    parameters: Iterable[nn.Parameter],
    optimizer: str = "adam",
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    momentum: float = 0.9,
) -> torch.optim.Optimizer:
    """``torch.optim.Adam``, ``AdamW`` or ``SGD`` (with `momentum`) over `parameters`.

    Raises:
        ValueError: unknown optimizer.
    """
    if optimizer == "adam":
        return torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay)
    if optimizer == "adamw":
        return torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay)
    if optimizer == "sgd":
        return torch.optim.SGD(parameters, lr=lr, momentum=momentum, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {optimizer!r}; choose one of: {', '.join(OPTIMIZERS)}")


def check_settings(
    optimizer: str = "adam",
    schedule: str = "constant",
    lr: float = 1e-3,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    warmup_epochs: float = 0.0,
    label_smoothing: float = 0.0,
    dropout: float | None = None,
) -> None:
    """Refuse settings of a `Recipe` that cannot train a model (before any work is done): each
    number must be finite, the learning rate, momentum, weight decay and warm-up at least 0,
    label smoothing in [0, 1) and dropout in [0, 1].

    Raises:
        ValueError: naming the setting (as its ``train`` option) and its value.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of: {', '.join(OPTIMIZERS)}")
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of: {', '.join(SCHEDULES)}")
    ranges = {
        "lr": (lr, "at least 0"),
        "momentum": (momentum, "at least 0"),
        "weight-decay": (weight_decay, "at least 0"),
        "warmup-epochs": (warmup_epochs, "at least 0"),
        "label-smoothing": (label_smoothing, "in [0, 1)"),
        "dropout": (0.0 if dropout is None else dropout, "in [0, 1]"),
    }
    for name, (value, allowed) in ranges.items():
        below_one = {"in [0, 1)": value < 1, "in [0, 1]": value <= 1}.get(allowed, True)
        if not (math.isfinite(value) and value >= 0 and below_one):
            raise ValueError(f"--{name} {value}: must be a finite number {allowed}")


def train(
    model: nn.Module,
    train_set: Dataset,
    recipe: Recipe,
    seed: int = 0,
    *,
    held_out_set: Dataset | None = None,
    device: str | torch.device | None = None,
    progress: bool = True,
    num_workers: int = 0,
    autocast: torch.dtype | None = None,
) -> TrainResult:
    """Train `model` in place with cross-entropy on `train_set` by ``recipe``'s settings, then
    measure held-out accuracy.

    Shuffling uses its own generator seeded with `seed`, mirroring another one seeded with
    `seed`, and dropout draws from the global torch RNG seeded with `seed` inside a fork (the
    caller's CPU RNG state is restored), so the same model, data and seed give bit-identical
    weights on CPU. When `train_set` is larger than the batch size, each epoch drops its last
    incomplete batch (batch norm needs two images).

    Args:
        model: maps N x C x H x W inputs to N x classes logits; moved to `device`, left there in
            eval mode.
        train_set: yields ``(input image, int label)``.
        recipe: the training settings (`Recipe`: epochs, optimizer, schedule, augmentation);
            its ``arch`` is not read, the model is given.
        seed: seed of shuffling, mirroring and dropout.
        held_out_set: same as `train_set`, for the final accuracy; None to skip it.
        device: where to train; None picks CUDA when available, else CPU.
        progress: show a tqdm bar of steps with the running loss.
        num_workers: DataLoader worker processes for loading images.
        autocast: run the forward pass under ``torch.autocast`` with this dtype (e.g.
            ``torch.bfloat16``); the loss is computed in float32. None: full precision.

    Returns:
        `TrainResult`.
    """
    device = resolve_device(device)
    model.to(device)
    step = make_optimizer(
        (p for p in model.parameters() if p.requires_grad),
        recipe.optimizer,
        recipe.lr,
        recipe.weight_decay,
        recipe.momentum,
    )
    loader = DataLoader(
        train_set,
        batch_size=recipe.batch_size,
        shuffle=True,
        drop_last=len(train_set) > recipe.batch_size,
        generator=torch.Generator().manual_seed(seed),
        num_workers=num_workers,
    )
    total_steps = recipe.epochs * len(loader)
    warmup_steps = round(recipe.warmup_epochs * len(loader))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        step, lambda s: learning_rate_factor(s, total_steps, warmup_steps, recipe.schedule)
    )
    mirror = torch.Generator().manual_seed(seed)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=recipe.label_smoothing)
    losses, learning_rates = [], []
    with (
        torch.random.fork_rng(devices=[]),
        _dropout_set_to(model, recipe.dropout),
        tqdm(total=total_steps, desc="train", unit="batch", disable=not progress) as bar,
    ):
        torch.manual_seed(seed)
        for epoch in range(recipe.epochs):
            model.train()
            total = count = 0.0
            for images, labels in loader:
                images, labels = images.to(device), labels.to(device)
                if recipe.hflip:
                    flip = (torch.rand(len(images), generator=mirror) < 0.5).to(device)
                    images = torch.where(flip.view(-1, 1, 1, 1), images.flip(-1), images)
                with torch.autocast(device.type, autocast) if autocast else nullcontext():
                    logits = model(images)
                loss = loss_fn(logits.float(), labels)
                learning_rates.append(step.param_groups[0]["lr"])
                step.zero_grad()
                loss.backward()
                step.step()
                scheduler.step()
                total += loss.item() * len(labels)
                count += len(labels)
                bar.update()
                bar.set_postfix(epoch=epoch + 1, loss=f"{total / count:.4f}")
            losses.append(total / count)
    model.eval()
    held_out = (
        math.nan
        if held_out_set is None
        else accuracy(model, held_out_set, device=device, num_workers=num_workers)
    )
    return TrainResult(losses=losses, held_out_accuracy=held_out, learning_rates=learning_rates)


@dataclass(frozen=True)
class Recipe:
    """A seeded way to train a model from scratch: an architecture of the zoo and the settings
    `train` reads. Only the seed is left out: the same recipe trained with seeds 0, 1, ... gives
    that many models.

    Attributes:
        arch: the architecture ([`zoo`][repinterp.models.zoo]); `Recipe.train` builds it,
            `train` trains a given model and does not read it.
        epochs: passes over the training set.
        lr: base learning rate.
        batch_size: images per step.
        optimizer: ``"adam"``, ``"adamw"`` (decoupled weight decay) or ``"sgd"``.
        weight_decay: L2 penalty (Adam, SGD) or decoupled decay (AdamW) of the optimizer.
        momentum: SGD's momentum (ignored by Adam and AdamW).
        schedule: ``"constant"`` or ``"cosine"`` learning rate after the warm-up, stepped
            every batch (`learning_rate_factor`).
        warmup_epochs: epochs (may be fractional; rounded to whole steps) of linear warm-up.
        label_smoothing: of the cross-entropy, in [0, 1); the reported losses include it.
        hflip: mirror a random half of every batch left-right, for classes that a mirror
            image keeps (``shapes``; not digits).
        dropout: the probability of every ``nn.Dropout`` of the model while training (restored
            afterwards, so the trained model is the same architecture); None keeps the model's.

    Raises:
        ValueError: a setting that cannot train a model (`check_settings`: an unknown
            optimizer or schedule, a number not finite or out of its range).
    """

    arch: str
    epochs: int
    lr: float = 1e-3
    batch_size: int = 64
    optimizer: str = "adam"
    weight_decay: float = 0.0
    momentum: float = 0.9
    schedule: str = "constant"
    warmup_epochs: float = 0.0
    label_smoothing: float = 0.0
    hflip: bool = False
    dropout: float | None = None

    def __post_init__(self) -> None:
        check_settings(
            self.optimizer,
            self.schedule,
            self.lr,
            self.momentum,
            self.weight_decay,
            self.warmup_epochs,
            self.label_smoothing,
            self.dropout,
        )

    def settings(self) -> dict[str, Any]:
        """Every setting, by name (JSON-ready)."""
        return dataclasses.asdict(self)

    def train(
        self,
        train_set: LabelledImages,
        held_out_set: Dataset | None,
        seed: int,
        device: str | torch.device | None = None,
        progress: bool = True,
    ) -> tuple[nn.Module, TrainResult]:
        """A model of ``arch`` for ``train_set``'s classes and channels, initialised with
        ``seed`` and trained on ``train_set`` with it (`train`), in eval mode on ``device``."""
        check_input_size(self.arch, train_set[0][0].shape)
        model = model_for(self.arch, DataShape.of(train_set), seed=seed)
        result = train(
            model,
            train_set,
            self,
            seed,
            held_out_set=held_out_set,
            device=device,
            progress=progress,
        )
        return model, result
