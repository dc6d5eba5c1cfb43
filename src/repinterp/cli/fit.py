"""``repinterp fit``: build and save the reference index of a model (with its default regions,
`keep_regions`), and warn when the model's accuracy on the reference images looks wrong; its
flags beside it."""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from .evaluate import DATASETS, MODELS
from .inputs import image_format, inputs_of
from .options import (
    GRANULARITIES,
    SEED,
    SHARD_SIZE,
    at_least,
    common,
    image_folder_options,
    overwrite,
)

if TYPE_CHECKING:
    from ..workspace import Workspace

__all__ = ["FAR_BELOW", "NEAR_CHANCE", "add_arguments", "keep_regions", "run"]


def keep_regions(workspace: Workspace) -> None:
    """Compute the viewer's default k-means regions of a saved index and keep them in its
    folder (`regions_file`), so that ``serve`` shows them at once; an
    index without feature maps has none."""
    from ..core.reference_index import FEATURE_FILE
    from ..store.regions_file import DEFAULT_REGIONS, DEFAULT_SEED, save_regions

    index = workspace.interpreter.fitted_index
    if FEATURE_FILE in index.files and workspace.folder is not None:
        k = min(DEFAULT_REGIONS, len(index))
        regions = workspace.interpreter.regions(n_regions=k, seed=DEFAULT_SEED)
        save_regions(regions, workspace.folder, DEFAULT_SEED)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``repinterp fit``."""
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
        "--boundaries", type=at_least(1), default=50, help="|Q|, sampled boundaries (50)"
    )
    p.add_argument(
        "--batch-size", type=at_least(1), default=64, help="images per forward pass (64)"
    )
    p.add_argument("--data-seed", type=SEED, default=0, help="seed of the data split (0)")
    p.add_argument(
        "--granularity",
        choices=GRANULARITIES,  # repinterp.core.granularities's, named here without torch
        default="class",
        help="class: the paper's RI (default); beyond the paper (docs/method.md, 6.5, 6.2): "
        "strategy, each class's strategies found without labels, each a polytope (then: "
        "repinterp audit); logic (retired, removed in 0.6), polytopes of one decision logic",
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
        type=at_least(1),
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
        "--workers", type=at_least(0), default=0, help="DataLoader processes reading the images"
    )
    p.add_argument(
        "--no-features",
        action="store_true",
        help="do not keep the reference feature maps (|R| x feature size on disk; 'report' and "
        "regions need them)",
    )
    image_folder_options(p)
    overwrite(p)
    common(p)


def run(args: argparse.Namespace) -> None:
    """Run ``repinterp fit`` with its parsed arguments."""
    from ..core.config import FitConfig
    from ..core.granularities import decision_set
    from ..runtime.distributed import broadcast, init_from_env, rank_and_world, shutdown
    from ..store.outputs import claim
    from ..store.shards import Shards
    from ..workspace import fit_workspace

    start = time.perf_counter()
    out = Path(args.out)
    directory = Path(args.shards) if args.shards else out / ".partial"
    if args.shards and directory.resolve() == out.resolve():
        raise ValueError(
            f"--shards {args.shards} is the --out folder: the shards need a folder of their own "
            "(by default OUT/.partial)"
        )
    shards = Shards(directory, args.shard_size, args.resume)
    config = FitConfig(
        n_boundaries=args.boundaries,
        seed=args.seed,
        batch_size=args.batch_size,
        num_workers=args.workers,
        progress=not args.quiet,
        decisions=decision_set(args.granularity),
    )
    with ExitStack() as claims:
        try:
            device = init_from_env(args.device)  # torchrun: join its process group
            rank, world = rank_and_world()
            refusal = None
            if rank == 0:  # the one process that writes
                inputs = inputs_of(args.weights, data=args.reference)
                try:
                    claims.enter_context(claim(out, "index", args.overwrite, inputs))
                    claims.enter_context(claim(directory, "partial", inputs=inputs))
                except ValueError as exc:
                    refusal = str(exc)
            refusal = broadcast(refusal)
            if refusal is not None:
                raise ValueError(refusal)
            ws = fit_workspace(
                args.model,
                args.weights,
                args.reference,
                layer=args.layer,
                config=config,
                data_seed=args.data_seed,
                device=device,
                keep_features=not args.no_features,
                shards=shards,
                image_format=image_format(args),
                say=None if args.quiet or rank != 0 else print,
            )
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
        ws.save(out, args.overwrite)
        shards.remove()
        keep_regions(ws)
    index = ws.interpreter.fitted_index
    print(
        f"indexed {len(index)} reference images on {len(index.boundaries)} boundaries at layer "
        f"{ws.interpreter.target_layer!r} with {world} process(es) in "
        f"{time.perf_counter() - start:.1f} s -> {out}"
    )
    if index.labels is not None and len(index):
        right, n = int((index.predictions == index.labels).sum()), len(index)
        print(f"the model's accuracy on them: {100 * right / n:.1f}% ({right} of {n})")
        _warn_accuracy(100 * right / n, index.n_classes, args.weights)
    if ws.interpreter.granularity == "strategy":
        print(
            f"{ws.interpreter.granularity_text}: found at layer {ws.interpreter.target_layer!r}, "
            f"where the maps are drawn; repinterp audit --index {out} --out DIR ranks them"
        )


# An accuracy on the reference set below 1.5 x chance, or this many points below the one
# recorded when the model was trained, is worth a warning (a wrong --image-size, say).
NEAR_CHANCE, FAR_BELOW = 1.5, 15.0


def _warn_accuracy(accuracy: float, n_classes: int, weights: str | None) -> None:
    """Warn (one line, on stderr) when the model's accuracy on the reference images (%) is
    near chance, or far below what ``repinterp train`` recorded in its weights file (None:
    the bundled weights, which record none)."""
    import warnings

    from ..models.zoo import recorded_training

    chance = 100 / n_classes
    recorded = recorded_training(weights) if weights else {}
    try:
        then = float(recorded["held_out_accuracy"])
    except (KeyError, ValueError):
        then = None
    if then is not None and accuracy < then - FAR_BELOW:
        trained = f"on {recorded.get('dataset')} at {recorded.get('image_size')} px"
        warnings.warn(
            f"the model's accuracy on the reference images, {accuracy:.1f}%, is far below the "
            f"{then:.1f}% recorded when it was trained ({trained}): check --image-size, --mean, "
            "--std and the weights",
            stacklevel=2,
        )
    elif accuracy < NEAR_CHANCE * chance:
        warnings.warn(
            f"the model's accuracy on the reference images, {accuracy:.1f}%, is near chance "
            f"({chance:.1f}% for {n_classes} classes): check --image-size, --mean, --std and "
            "the weights",
            stacklevel=2,
        )
