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

from . import audit, demo, evaluate, explain, fit, report, serve, train
from .inputs import inputs_of
from .options import GRANULARITIES, MAX_IMAGE_SIZE

__all__ = ["COMMANDS", "GRANULARITIES", "MAX_IMAGE_SIZE", "build_parser", "main"]

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


def _audit(args: argparse.Namespace) -> None:
    """``repinterp audit`` (`audit.audit_command`), given what it reads."""
    audit.audit_command(args, inputs_of(args.weights))


# Each subcommand: its name, its help, the function adding its flags and the one running it,
# both in the subcommand's module.
COMMANDS = (
    ("train", "train a model on a data set's reference part", train.add_arguments, train.run),
    ("fit", "build and save the reference index of a model", fit.add_arguments, fit.run),
    ("explain", "explain images with a saved index", explain.add_arguments, explain.run),
    (
        "report",
        "a static HTML report of k-means regions of an index",
        report.add_arguments,
        report.run,
    ),
    (
        "audit",
        "the strategies of an index fitted with --granularity strategy, the one to look at "
        "first, first",
        audit.add_arguments,
        _audit,
    ),
    (
        "demo",
        "the whole method on bundled MNIST digits, in one command",
        demo.add_arguments,
        demo.run,
    ),
    (
        "serve",
        "a local web page to explore an index's interpretations",
        serve.add_arguments,
        serve.run,
    ),
    (
        "evaluate",
        "the paper's evaluation protocols, over seeded runs",
        evaluate.add_arguments,
        evaluate.run,
    ),
)


class _Parser(argparse.ArgumentParser):
    """argparse, with its complaints on one line like the commands' own."""

    def error(self, message: str) -> NoReturn:
        print(f"repinterp: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="repinterp",
        description="Representative interpretations of CNNs (Lam, Chu et al., ICCV 2021).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for name, text, add, run in COMMANDS:
        p = sub.add_parser(name, help=text)
        add(p)
        p.set_defaults(func=run)
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
