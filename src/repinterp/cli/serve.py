"""``repinterp serve``: a local web page to explore an index's interpretations; its flags beside
it."""

from __future__ import annotations

import argparse

from .options import at_least, common, index_options, port

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``repinterp serve``."""
    index_options(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=port, default=8000, help="port; 0 picks a free one (8000)")
    p.add_argument("--regions", type=at_least(1), default=20, help="regions in the gallery (20)")
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="another name the viewer may be reached by (Host header); repeatable; always "
        "accepted: --host, localhost, 127.0.0.1, [::1]",
    )
    common(p)


def run(args: argparse.Namespace) -> None:
    """Run ``repinterp serve`` with its parsed arguments."""
    from ..web import serve

    serve(
        args.index,
        host=args.host,
        port=args.port,
        quiet=args.quiet,
        n_regions=args.regions,
        seed=args.seed,
        device=args.device,
        weights=args.weights,
        allowed_hosts=args.allowed_host,
    )
