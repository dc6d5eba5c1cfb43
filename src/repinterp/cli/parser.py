"""The ``repinterp`` command: train, fit, explain, evaluate, report, demo, serve.

Every subcommand ends a bad input (a missing file, an unknown architecture or layer, weights
that do not fit, an index made for another model, an output folder it must not write into)
with a one-line error and exit status 2. Bad inputs are the errors the package raises for them:
``ValueError`` (``IndexLoadError`` and ``OutputError`` are ones) and ``FileNotFoundError``;
argparse's own complaints are one line too, and so is what the machine refuses (a full disk, a
file name too long, a read-only file system: ``OSError`` of those kinds, naming the file).
Anything else (out of memory, a bug) is not the user's doing and ends with its traceback.

A command writes only into a folder that is new, empty or its own kind of output (see
`outputs`); ``--overwrite`` lets it write into another folder, touching nothing
but its own files, and never into an index.

torch and the engine are imported inside the commands, so that ``--help`` answers at once.
"""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Any, NoReturn

from . import commands
from .evaluate import DATASETS, MODELS
from .evaluate import add_arguments as add_evaluate_arguments

GRANULARITIES = ("class", "logic", "strategy")

__all__ = ["main"]

SHARD_SIZE = 1024  # repinterp.store.shards.DEFAULT_SHARD_SIZE, without importing torch for --help
# The side of the largest square image that is read (data.image_files.MAX_PIXELS, 8,192 x 8,192)
MAX_IMAGE_SIZE = 8192
# The optional packages behind the extras: a missing one is named with its pip command.
EXTRAS = {
    "mlxtend": "pip install 'repinterp[demo]'",
    "starlette": "pip install 'repinterp[web]'",
    "uvicorn": "pip install 'repinterp[web]'",
    "pytorch_grad_cam": "pip install 'repinterp[eval]'",
    "skimage": "pip install 'repinterp[eval]'",
    "timm": "pip install 'repinterp[timm]'",
    # Quantus asks for opencv-python, which clashes with grad-cam's opencv-python-headless
    "quantus": "pip install --no-deps quantus pandas cachetools",
}


# What the machine refuses, not a bug: a full disk or quota, a name too long, a read-only file
# system, a file too large, a folder where a file goes (what was saved before is kept: see
# docs/reliability.md).
_THE_MACHINES = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.ENAMETOOLONG,
    errno.EROFS,
    errno.EFBIG,
    errno.EISDIR,
}


class _Parser(argparse.ArgumentParser):
    """argparse, with its complaints on one line like the commands' own."""

    def error(self, message: str) -> NoReturn:
        print(f"repinterp: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0 to 65535)")
    return port


def _at_least(low: int, high: int | None = None, why: str = "") -> Any:
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
_SEED = _at_least(0, 2**32 - 1, " (seeds are 32-bit)")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=_SEED, default=0, help="seed of everything random (0)")
    parser.add_argument(
        "--device", default="auto", help="torch device: auto (CUDA when available), cpu, cuda..."
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars or chatter")


def _overwrite(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="write into an existing folder that is not this command's output (only the files "
        "it writes are replaced; an index folder is still refused)",
    )


def _image_folder_options(parser: argparse.ArgumentParser) -> None:
    side = _at_least(
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


def _index_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", required=True, help="index folder written by 'repinterp fit'")
    parser.add_argument(
        "--weights",
        help="the model's weights file, if it is no longer where the index says (a moved "
        "index); other weights are refused",
    )


# ----------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="repinterp",
        description="Representative interpretations of CNNs (Lam, Chu et al., ICCV 2021).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train a model on a data set's reference part")
    p.add_argument("--dataset", required=True, help=f"data set: {DATASETS}")
    p.add_argument("--model", help=f"architecture: {MODELS}")
    p.add_argument("--arch", help=argparse.SUPPRESS)  # the old name of --model, still accepted
    p.add_argument("--epochs", type=_at_least(1), default=5, help="passes over the data (5)")
    p.add_argument("--lr", type=float, default=1e-3, help="base learning rate (1e-3)")
    p.add_argument(
        "--batch-size",
        type=_at_least(1),
        default=64,
        help="images per step (64); each epoch leaves out its last incomplete batch when the "
        "set holds more than one batch (batch norm needs two images)",
    )
    p.add_argument("--weights", help="start from these weights (fine-tuning; last layer reset)")
    p.add_argument("--data-seed", type=_SEED, default=0, help="seed of the data split (0)")
    p.add_argument("--out", required=True, help="weights file to write (.safetensors)")
    p.add_argument("--optimizer", default="adam", help="adam, adamw or sgd (adam)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (0.9)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="weight decay (0)")
    p.add_argument("--schedule", default="constant", help="lr: constant or cosine (constant)")
    p.add_argument("--warmup-epochs", type=float, default=0.0, help="linear lr warm-up (0)")
    p.add_argument("--label-smoothing", type=float, default=0.0, help="of the loss (0)")
    p.add_argument("--hflip", action="store_true", help="mirror a random half of each batch")
    p.add_argument("--dropout", type=float, help="dropout while training (the model's own)")
    _image_folder_options(p)
    _overwrite(p)
    _common(p)
    p.set_defaults(func=commands._train)

    p = sub.add_parser("fit", help="build and save the reference index of a model")
    p.add_argument("--model", required=True, help=f"architecture: {MODELS}")
    p.add_argument(
        "--weights", help="local weights file of the model (default: its bundled weights, if any)"
    )
    p.add_argument(
        "--layer",
        help="target layer name (default: the arch's own, e.g. VGG's last conv ReLU or a "
        "ResNet's layer4, where its maps are at least 7 x 7 at the image size, else the last "
        "layer whose maps are, e.g. a ResNet's layer2 at 64 px)",
    )
    p.add_argument("--reference", required=True, help=f"reference data: {DATASETS}")
    p.add_argument(
        "--boundaries", type=_at_least(1), default=50, help="|Q|, sampled boundaries (50)"
    )
    p.add_argument(
        "--batch-size", type=_at_least(1), default=64, help="images per forward pass (64)"
    )
    p.add_argument("--data-seed", type=_SEED, default=0, help="seed of the data split (0)")
    p.add_argument(
        "--granularity",
        choices=GRANULARITIES,  # repinterp.core.granularities's, named here without torch
        default="class",
        help="class: the paper's RI (default); logic: polytopes of one decision logic below the "
        "class (beyond the paper, docs/method.md)",
    )
    p.add_argument("--out", required=True, help="index folder to write (new, empty or an index)")
    p.add_argument(
        "--shards",
        metavar="DIR",
        help="folder the index is written to shard by shard as fit goes, removed once the index "
        "is saved (OUT/.partial)",
    )
    p.add_argument(
        "--shard-size",
        type=_at_least(1),
        default=SHARD_SIZE,
        help=f"images per shard, rounded down to a multiple of --batch-size ({SHARD_SIZE})",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="go on from the complete shards of an interrupted fit run with the same options "
        "(without it, fit starts over)",
    )
    p.add_argument(
        "--workers", type=_at_least(0), default=0, help="DataLoader processes reading the images"
    )
    p.add_argument(
        "--no-features",
        action="store_true",
        help="do not keep the reference feature maps (|R| x feature size on disk; 'report' and "
        "regions need them)",
    )
    _image_folder_options(p)
    _overwrite(p)
    _common(p)
    p.set_defaults(func=commands._fit)

    p = sub.add_parser("explain", help="explain images with a saved index")
    p.add_argument(
        "images", nargs="+", metavar="IMAGE", help="image files, or reference:I / unseen:I"
    )
    _index_options(p)
    p.add_argument("--out", required=True, help="folder for the figures and JSON files")
    p.add_argument("--top-k", type=_at_least(0), default=8, help="similar images shown (8)")
    p.add_argument(
        "--contrast",
        metavar="CLASS",
        help="beyond the paper: also draw, for each image predicted another class, the "
        "contrastive map of why the model says its class rather than CLASS (a class's name, "
        "else its index): the heat map of the boundary between the two classes at the image "
        "(Eq. 2's weights)",
    )
    _overwrite(p)
    _common(p)
    p.set_defaults(func=commands._explain)

    p = sub.add_parser("report", help="a static HTML report of k-means regions of an index")
    _index_options(p)
    p.add_argument("--out", required=True, help="folder for the report")
    p.add_argument(
        "--regions",
        type=_at_least(1),
        help="number of regions (10 x classes), shared among the classes the model predicts on "
        "the reference set: one each (so at least as many as those classes), the rest in "
        "proportion to their images; k-means within each class",
    )
    p.add_argument("--top-k", type=_at_least(0), default=6, help="similar images per region (6)")
    _overwrite(p)
    _common(p)
    p.set_defaults(func=commands._report)

    p = sub.add_parser(
        "audit",
        help="the strategies of an index fitted with --granularity strategy, the one to look at "
        "first, first",
    )
    _index_options(p)
    p.add_argument("--out", required=True, help="folder for audit.json and index.html")
    p.add_argument("--members", type=_at_least(0), default=8, help="members shown per strategy (8)")
    _overwrite(p)
    _common(p)
    p.set_defaults(func=commands._audit)

    p = sub.add_parser("demo", help="the whole method on bundled MNIST digits, in one command")
    p.add_argument("--out", default="repinterp-demo", help="output folder (repinterp-demo)")
    p.add_argument("--top-k", type=_at_least(0), default=8, help="similar images shown (8)")
    p.add_argument("--serve", action="store_true", help="then open the web viewer")
    p.add_argument("--port", type=_port, default=8000, help="port of the viewer (8000)")
    _overwrite(p)
    _common(p)
    p.set_defaults(func=commands._demo)

    p = sub.add_parser("serve", help="a local web page to explore the interpretations of an index")
    _index_options(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=_port, default=8000, help="port; 0 picks a free one (8000)")
    p.add_argument("--regions", type=_at_least(1), default=20, help="regions in the gallery (20)")
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="another name the viewer may be reached by (Host header); repeatable; always "
        "accepted: --host, localhost, 127.0.0.1, [::1]",
    )
    _common(p)
    p.set_defaults(func=commands._serve)

    p = sub.add_parser("evaluate", help="the paper's evaluation protocols, over seeded runs")
    add_evaluate_arguments(p)
    _image_folder_options(p)
    _overwrite(p)
    _common(p)
    p.set_defaults(func=commands._evaluate)
    return parser


def _one_line_warning(message: Warning | str, *_: Any, **__: Any) -> str:
    return f"repinterp: warning: {message}\n"


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``repinterp`` command."""
    args = build_parser().parse_args(argv)
    import warnings

    formatwarning, warnings.formatwarning = warnings.formatwarning, _one_line_warning
    try:
        import torch

        from ..runtime.devices import resolve_device

        torch.manual_seed(args.seed)
        args.device = str(resolve_device(args.device, what="--device"))
        args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"repinterp: error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as exc:
        if exc.errno not in _THE_MACHINES:
            raise
        where = f": {exc.filename}" if exc.filename else ""
        print(f"repinterp: error: {exc.strerror}{where}", file=sys.stderr)
        raise SystemExit(2) from None
    except ModuleNotFoundError as exc:
        install = EXTRAS.get((exc.name or "").split(".")[0])
        if install is None:
            raise
        print(
            f"repinterp: error: {args.command} needs {exc.name}, which is not installed: {install}",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    finally:
        warnings.formatwarning = formatwarning
