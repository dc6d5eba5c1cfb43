"""A plain, seeded training loop: cross-entropy with Adam or SGD, then held-out accuracy.

Data sets are anything that yields ``(image C x H x W, int label)`` — `data.ImageSet` and
`data.ImageFolderSet` (which fine-tunes a torchvision model the same way) alike.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

OPTIMIZERS = ("adam", "sgd")


@dataclass
class TrainResult:
    """What `train` measured.

    Attributes:
        losses: mean training cross-entropy (nats per image) of each epoch, in order.
        held_out_accuracy: fraction of held-out images classified correctly, in [0, 1]; NaN
            when there was no held-out set.
    """

    losses: list[float]
    held_out_accuracy: float


def _device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


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
    device = _device(device)
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


def train(
    model: nn.Module,
    train_set: Dataset,
    held_out_set: Dataset | None,
    epochs: int = 5,
    lr: float = 1e-3,
    batch_size: int = 64,
    seed: int = 0,
    device: str | torch.device | None = None,
    progress: bool = True,
    optimizer: str = "adam",
    weight_decay: float = 0.0,
    num_workers: int = 0,
) -> TrainResult:
    """Train `model` in place with cross-entropy on `train_set`, then measure held-out accuracy.

    Shuffling uses its own generator seeded with `seed`, and dropout draws from the global torch
    RNG seeded with `seed` inside a fork (the caller's CPU RNG state is restored), so the same
    model, data and seed give bit-identical weights on CPU. When `train_set` is larger than
    `batch_size`, each epoch drops its last incomplete batch (batch norm needs two images).

    Args:
        model: maps N x C x H x W inputs to N x classes logits; moved to `device`, left there in
            eval mode.
        train_set: yields ``(input image, int label)``.
        held_out_set: same, for the final accuracy; None to skip it.
        epochs: passes over `train_set`.
        lr: learning rate.
        batch_size: images per step.
        seed: seed of shuffling and dropout.
        device: where to train; None picks CUDA when available, else CPU.
        progress: show a tqdm bar of steps with the running loss.
        optimizer: ``"adam"``, or ``"sgd"`` (momentum 0.9).
        weight_decay: L2 penalty passed to the optimizer.
        num_workers: DataLoader worker processes for loading images.

    Returns:
        `TrainResult`.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of: {', '.join(OPTIMIZERS)}")
    device = _device(device)
    model.to(device)
    parameters = [p for p in model.parameters() if p.requires_grad]
    if optimizer == "adam":
        step = torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay)
    else:
        step = torch.optim.SGD(parameters, lr=lr, momentum=0.9, weight_decay=weight_decay)
    loader = DataLoader(
        train_set,
        batch_size=batch_size,
        shuffle=True,
        drop_last=len(train_set) > batch_size,
        generator=torch.Generator().manual_seed(seed),
        num_workers=num_workers,
    )
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    with (
        torch.random.fork_rng(devices=[]),
        tqdm(total=epochs * len(loader), desc="train", unit="batch", disable=not progress) as bar,
    ):
        torch.manual_seed(seed)
        for epoch in range(epochs):
            model.train()
            total = count = 0.0
            for images, labels in loader:
                images, labels = images.to(device), labels.to(device)
                loss = loss_fn(model(images), labels)
                step.zero_grad()
                loss.backward()
                step.step()
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
    return TrainResult(losses=losses, held_out_accuracy=held_out)
