"""``repinterp evaluate``: its options, what they mean (`add_arguments`) and the setup,
`Options` and reproducing command line they give (`prepare`), and the command (`run`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from .inputs import inputs_of
from .options import common, image_folder_options, overwrite

# The choices below are written out, not imported: this module (and so ``repinterp --help``)
# imports no torch. tests/evaluation/test_protocols.py checks them against
# evaluation.options.PROTOCOLS, core.boundaries.SAMPLINGS and scoring.METRICS.
PROTOCOLS = ("unseen", "coverage", "reference", "q-sweep", "similar", "sanity", "shortcut")
SAMPLINGS = ("uniform", "balanced", "pairs")
METRICS = ("AD", "ROAD", "deletion", "insertion")
DATASETS = (
    "mnist5k, mnist-super, digits, shapes, shapes:SIZE, shapes-mix:P, mnist-mark:F, "
    "shapes-mark:F, mnist-markrand:F, shapes-markrand:F or imagefolder:PATH"
)
MODELS = (
    "mnist_cnn, digits_cnn, shapes_cnn, a torchvision name (vgg16, resnet50, densenet121, ...; "
    "a wrong name lists them all) or timm:NAME"
)

MAX_MODEL_SEEDS = 100  # each is a model trained, and a run

if TYPE_CHECKING:
    from ..evaluation.options import Options
    from ..evaluation.setup import Setup

__all__ = ["METRICS", "PROTOCOLS", "SAMPLINGS", "add_arguments", "prepare", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``repinterp evaluate``."""
    add = parser.add_argument
    add("--dataset", required=True, help=f"data set: {DATASETS}")
    add(
        "--protocol",
        required=True,
        help="unseen (Table 1), coverage (Table 2), reference (App. C), q-sweep (App. E), "
        "similar (case studies: purity and reuse of the similar images), sanity (Adebayo et "
        "al. 2018 through Quantus, RI and the CAMs: Spearman correlation of the maps with the "
        "trained model's as layers are randomised from the top down, and random logit's SSIM "
        "of the maps of the predicted and another class, 1 for RI by construction), shortcut (on "
        "the *-mark:F / *-markrand:F data sets: how well each grouping isolates the marked "
        "images, F1 and AMI, and how much of each heat map lies on the mark's box)",
    )
    add(
        "--runs", type=int, help="seeded runs, mean ± std (5; 2 with --quick; N with --model-seeds)"
    )
    add(
        "--quick",
        action="store_true",
        help="600 reference / 200 unseen images of the fixed split, 30 inputs, 10 images for the "
        "perturbation metrics (reference: the top 10 of 2 inputs), 8 for the sanity checks",
    )
    add("--inputs", type=int, help="reference inputs of reference/similar (200; 30)")
    add(
        "--methods",
        help="comma-separated: RI, its variants RI+exact, RI+balanced, RI+pairs, RI+score, "
        "RI+euclidean, RI+cosine, RI+strategy (granularity strategy: a polytope per strategy "
        "of a class; coverage and similar add its regions and ranking, q-sweep sweeps it) (and "
        "combinations such as RI+pairs+score), "
        "Grad-CAM, Grad-CAM++, Score-CAM (each also +cluster or +class: weights averaged over a "
        "k-means "
        "cluster's or the predicted class's images, controls for RI+score), ACE; or "
        "'all' for the paper's (RI,Grad-CAM,Grad-CAM++,"
        "Score-CAM,ACE); default: those but ACE",
    )
    add(
        "--metrics",
        help=f"besides AD/AI, comma-separated of {', '.join(METRICS[1:])}, or 'none' (all; ROAD "
        "is the expensive one)",
    )
    add(
        "--fixed-split",
        action="store_true",
        help="every run uses the same images (the split the bundled weights were trained on); "
        "default without --quick: each run draws 75%% of the reference and 80%% of the unseen "
        "images, stratified by class",
    )
    add("--ks", help="K of reference, comma-separated (1,5,10,20,50)")
    add("--q-values", help="|Q| of q-sweep, comma-separated (1,5,10,30,50,70,100)")
    add("--samplings", help=f"Q's samplings q-sweep compares, of {', '.join(SAMPLINGS)} (uniform)")
    add("--boundaries", type=int, help="|Q| of RI (50)")
    add(
        "--curve-images",
        type=int,
        help="unseen images per run ROAD/deletion/insertion score (200; 10)",
    )
    add("--sanity-images", type=int, help="unseen images per run of sanity (100; 8)")
    add(
        "--score-images",
        type=int,
        help="images whose Score-CAM weights RI+score and the +class/+cluster controls average "
        "(16); each costs a forward pass per channel of the layer",
    )
    add("--regions", type=int, help="k-means regions |V| of unseen/coverage (10 x classes)")
    add("--time-limit", type=float, help="seconds per input of RI+exact's solver (5)")
    add("--out", help="output folder (evaluation/DATASET-PROTOCOL)")
    add("--model", help=f"architecture (default: the data set's bundled one): {MODELS}")
    add("--weights", help="local weights file of --model")
    add("--layer", help="target layer name (default: as fit's, maps of at least 7 x 7)")
    add(
        "--model-seeds",
        type=int,
        metavar="N",
        help="train N models (mnist5k, mnist-super, shapes, shapes-mix:P, digits: the recipe "
        "of the bundled weights; shapes:64: a VGG-11-BN, 4 epochs of SGD; seeds 0..N-1, on the "
        "data-seed-0 reference part) and run each "
        "run on its own model: run r on model r, so --runs defaults to N; cached in "
        "--model-cache",
    )
    add(
        "--model-seed-start",
        type=int,
        metavar="S",
        help="seed of the first model of --model-seeds: seeds S..S+N-1 (0)",
    )
    add(
        "--model-cache",
        metavar="DIR",
        help="folder of the trained models of --model-seeds, named by the SHA-256 of recipe, "
        "seed and data (~/.cache/repinterp/models)",
    )
    image_folder_options(parser)
    overwrite(parser)
    common(parser)


def _integers(text: str, flag: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"{flag} takes comma-separated integers, got {text!r}") from None


def prepare(args: argparse.Namespace) -> tuple[Setup, Options, str]:
    """The setup and options the parsed arguments ask for, and the command line that
    reproduces the evaluation with the defaults spelled out.

    Raises:
        ValueError: a bad option (the message names it).
    """
    from ..data.datasets import ImageFormat
    from ..evaluation.methods import PAPER
    from ..evaluation.options import FULL, QUICK, Options, check_protocol
    from ..evaluation.setup import load_setup

    check_protocol(args.protocol)
    if args.protocol == "shortcut":
        from ..evaluation.protocols.shortcut import target_class

        target_class(args.dataset)  # before any model is trained
    sizes = QUICK if args.quick else FULL
    if args.model_seeds is not None and not 1 <= args.model_seeds <= MAX_MODEL_SEEDS:
        raise ValueError(
            f"--model-seeds must be from 1 to {MAX_MODEL_SEEDS} (models trained), got "
            f"{args.model_seeds}"
        )
    if args.model_seeds is not None and args.runs not in (None, args.model_seeds):
        raise ValueError(
            f"--runs {args.runs} with --model-seeds {args.model_seeds}: run r uses "
            "model r, so give as many runs as models (or leave --runs out)"
        )
    for flag in ("model_cache", "model_seed_start"):
        if getattr(args, flag) is not None and args.model_seeds is None:
            raise ValueError(f"--{flag.replace('_', '-')} needs --model-seeds")
    if args.model_seeds is not None:  # before the data set is read and the models trained
        from ..store.model_cache import default_cache
        from ..store.outputs import check_folder

        check_folder(args.model_cache or default_cache(), "--model-cache")
    runs = sizes["runs"] if args.model_seeds is None else args.model_seeds
    chosen = {
        "runs": runs if args.runs is None else args.runs,
        "n_inputs": sizes["n_inputs"] if args.inputs is None else args.inputs,
        "curve_inputs": sizes["curve_inputs"],
        "split": "fixed" if args.fixed_split else sizes["split"],
        "curve_images": sizes["curve_images"] if args.curve_images is None else args.curve_images,
        "sanity_images": (
            sizes["sanity_images"] if args.sanity_images is None else args.sanity_images
        ),
        "shuffled_epochs": sizes["shuffled_epochs"],
    }
    if args.methods:
        all_ = (*PAPER, "ACE")
        chosen["methods"] = all_ if args.methods == "all" else tuple(args.methods.split(","))
    if args.metrics:
        chosen["metrics"] = () if args.metrics == "none" else tuple(args.metrics.split(","))
        chosen["metrics"] = ("AD", *chosen["metrics"])
    for flag, key in (("ks", "ks"), ("q_values", "q_values")):
        if getattr(args, flag):
            chosen[key] = _integers(getattr(args, flag), "--" + flag.replace("_", "-"))
    if args.samplings:
        chosen["samplings"] = tuple(args.samplings.split(","))
    if args.boundaries is not None:
        chosen["n_boundaries"] = args.boundaries
    for flag, key in (("time_limit",) * 2, ("score_images",) * 2, ("regions", "n_regions")):
        if getattr(args, flag) is not None:
            chosen[key] = getattr(args, flag)
    options = Options(seed=args.seed, progress=not args.quiet, **chosen)
    setup = load_setup(
        args.dataset,
        args.model,
        args.weights,
        args.layer,
        args.device,
        n_reference=sizes["n_reference"],
        n_unseen=sizes["n_unseen"],
        subset_seed=args.seed,
        image_format=ImageFormat(args.image_size, args.mean, args.std),
        model_seeds=args.model_seeds,
        model_cache=args.model_cache,
        progress=not args.quiet,
        model_seed_start=args.model_seed_start or 0,
    )
    return setup, options, _command(args, options)


def _command(args: argparse.Namespace, options: Options) -> str:
    """The command line that reproduces this evaluation, with the defaults spelled out."""
    parts = ["repinterp evaluate", f"--dataset {args.dataset}", f"--protocol {args.protocol}"]
    parts += [f"--runs {options.runs}", f"--seed {options.seed}"]
    parts += [f"--inputs {options.n_inputs}"] if args.protocol in ("reference", "similar") else []
    parts += ["--quick"] if args.quick else []
    parts += ["--fixed-split"] if args.fixed_split else []
    for flag in ("model", "weights", "layer", "methods", "metrics", "ks", "q_values", "samplings"):
        if getattr(args, flag):
            parts.append(f"--{flag.replace('_', '-')} {getattr(args, flag)}")
    flags = ("boundaries", "curve_images", "sanity_images", "score_images", "regions")
    flags += ("model_seeds", "model_seed_start", "model_cache")
    for flag in (*flags, "time_limit", "image_size"):
        if getattr(args, flag) is not None:
            parts.append(f"--{flag.replace('_', '-')} {getattr(args, flag)}")
    for flag in ("mean", "std"):
        if getattr(args, flag) is not None:
            parts.append(f"--{flag} {' '.join(map(str, getattr(args, flag)))}")
    return " ".join(parts)


def run(args: argparse.Namespace) -> None:
    """Run ``repinterp evaluate`` with its parsed arguments."""
    from ..evaluation.protocols import evaluate
    from ..report import write_results
    from ..store.files import refuse_folders
    from ..store.outputs import claim

    name = args.dataset.replace(":", "-").replace("/", "_")
    out = Path(args.out or f"evaluation/{name}-{args.protocol}")
    with claim(out, "evaluation", args.overwrite, inputs_of(args.weights, data=args.dataset)):
        refuse_folders(out / name for name in ("results.json", "units.json", "results.md"))
        setup, options, command = prepare(args)
        results = evaluate(setup, args.protocol, options)
        results["command"] = command
        files = write_results(results, out)
    if not args.quiet:
        print((out / "results.md").read_text())
    print(f"{args.protocol} on {args.dataset}: {', '.join(f.name for f in files)} in {out}")
