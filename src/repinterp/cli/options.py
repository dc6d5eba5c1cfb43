"""The options several subcommands share, and the parsers of their values (whole numbers in a
range, ports, seeds); each subcommand's own flags stand beside its code."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = [
    "MAX_IMAGE_SIZE",
    "SEED",
    "SHARD_SIZE",
    "at_least",
    "common",
    "image_folder_options",
    "index_options",
    "overwrite",
    "port",
]

SHARD_SIZE = 1024  # repinterp.store.shards.DEFAULT_SHARD_SIZE, without importing torch for --help
# The side of the largest square image that is read (data.image_files.MAX_PIXELS, 8,192 x 8,192)
MAX_IMAGE_SIZE = 8192


def port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0 to 65535)")
    return port


def at_least(low: int, high: int | None = None, why: str = "") -> Any:
    """A whole number from ``low`` to ``high`` (no bound: None), ``why`` saying why the
    bound."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}{why}")
        return value

    return parse


# Seeds are 32-bit: NumPy's generators take no more (and torch's no more than 64 bits).
SEED = at_least(0, 2**32 - 1, " (seeds are 32-bit)")


def common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=SEED, default=0, help="seed of everything random (0)")
    parser.add_argument(
        "--device", default="auto", help="torch device: auto (CUDA when available), cpu, cuda..."
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars or chatter")


def overwrite(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="write into an existing folder that is not this command's output (only the files "
        "it writes are replaced; an index folder is still refused)",
    )


def image_folder_options(parser: argparse.ArgumentParser) -> None:
    side = at_least(
        1, MAX_IMAGE_SIZE, f" (the largest square image read is {MAX_IMAGE_SIZE} pixels a side)"
    )
    parser.add_argument(
        "--image-size", type=side, help="imagefolder: side of the square images (224)"
    )
    parser.add_argument(
        "--mean", type=float, nargs=3, metavar="M", help="imagefolder: R G B mean (ImageNet's)"
    )
    parser.add_argument(
        "--std", type=float, nargs=3, metavar="S", help="imagefolder: R G B std (ImageNet's)"
    )


def index_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", required=True, help="index folder written by 'repinterp fit'")
    parser.add_argument(
        "--weights",
        help="the model's weights file, if it is no longer where the index says (a moved "
        "index); other weights are refused",
    )
