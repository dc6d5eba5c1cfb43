"""What the subcommands read: the files and folders their output must keep clear of
(`inputs_of`), an image folder's format (`image_format`) and a saved index (`open_workspace`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..data.datasets import ImageFormat
    from ..workspace import Workspace

__all__ = ["image_format", "inputs_of", "open_workspace"]


def image_format(args: argparse.Namespace) -> ImageFormat:
    """An image folder's ``--image-size``, ``--mean`` and ``--std`` as one value."""
    from ..data.datasets import ImageFormat

    return ImageFormat(args.image_size, args.mean, args.std)


def inputs_of(*files: str | None, data: str | None = None) -> list[Path]:
    """What a command reads, which its output must keep clear of (see
    `refuse_inputs`): the ``files`` given (weights, images) and
    the folder of an ``imagefolder:PATH`` data set (the other data sets are bundled)."""
    found = [Path(file) for file in files if file]
    if data and data.startswith("imagefolder:"):
        found.append(Path(data.split(":", 1)[1]))
    return found


def open_workspace(args: argparse.Namespace) -> Workspace:
    from ..workspace import open_index

    return open_index(args.index, device=args.device, progress=not args.quiet, weights=args.weights)
