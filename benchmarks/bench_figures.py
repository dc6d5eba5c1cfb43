"""One case-study figure (what ``repinterp explain`` and ``report`` write per image) against the
explanation of the same image.

A figure is :func:`repinterp.report.case_study` (the scores, heat maps and masked scores of the
input and its top-k similar reference images: forward passes of 1 + k images) and
:func:`repinterp.report.save_case_study_figure` (drawing it and writing the PNG). Each is timed
alone (``study``, ``draw``) and together (``figure``), in turns with ``explain``:
``explain_batch`` of the same one image, the command's own work per image. Two input sizes:
28 px (a small ReLU CNN, 1 x 28 x 28, layer ``relu2``) and 96 px (torchvision's ResNet-18,
3 x 96 x 96, layer ``layer4``); 3 classes, random weights with the last bias balanced,
|Q| = 50, fitted on ``--n-reference`` random images; ``--top-k`` similar images (8). Goal
(issue 24): a figure in under 1 s at top-k 8 on 96 px images.

Usage: python benchmarks/bench_figures.py [--repeats 5] [--threads 1] [--out FILE]
"""

from __future__ import annotations

import io
from collections.abc import Callable

import torch
import torchvision
from common import balance, interleaved, parser, ratios, small_cnn, table, write
from torch import Tensor, nn

from repinterp import RepresentativeInterpreter
from repinterp.report import CaseStudy, case_study, save_case_study_figure

GOAL_S = 1.0
N_BOUNDARIES = 50
CLASSES = 3  # as the index of the issue: enough covered images for the top-k


def _normalize(pixels: Tensor) -> Tensor:
    """Pixels in [0, 1] -> model inputs (mean 0.5, std 0.25 on every channel)."""
    return (pixels - 0.5) / 0.25


def _setup(size: int) -> tuple[nn.Module, str]:
    """The model for ``size`` px inputs (random weights, eval mode) and its target layer."""
    if size == 28:
        return small_cnn(CLASSES), "relu2"
    return torchvision.models.resnet18(weights=None, num_classes=CLASSES).eval(), "layer4"


def figure_times(size: int, n_ref: int, top_k: int, repeats: int) -> dict:
    """Best seconds of ``explain``, ``study``, ``draw`` and ``figure`` for one input of
    ``size`` px, and their ratios to ``explain`` (see :func:`common.ratios`)."""
    generator = torch.Generator().manual_seed(0)
    channels = 1 if size == 28 else 3
    reference = torch.rand(n_ref, channels, size, size, generator=generator)
    unseen = torch.rand(32, channels, size, size, generator=generator)
    model, layer = _setup(size)
    model = balance(model, _normalize(reference))
    ri = RepresentativeInterpreter(model, layer, N_BOUNDARIES, progress=False)
    ri.fit(_normalize(reference))
    # the first unseen image with a heat map and top-k covered images
    explanations = ri.explain_batch(_normalize(unseen))
    n, e = next(
        (n, e) for n, e in enumerate(explanations) if e.has_heatmap and len(e.covered) >= top_k
    )
    image = unseen[n : n + 1]
    similar = e.similar(top_k).tolist()
    shown = torch.cat([image, reference[similar]])
    titles = ["input"] + [f"ref {i}" for i in similar]
    study = case_study(e, shown, titles, _normalize, "c", references=similar)

    def make() -> CaseStudy:
        return case_study(e, shown, titles, _normalize, "c", references=similar)

    def draw(s: CaseStudy = study) -> None:
        save_case_study_figure(s, io.BytesIO(), f"unseen-{n}")

    timed: dict[str, Callable[[], object]] = {
        "explain": lambda: ri.explain_batch(_normalize(image)),
        "study": make,
        "draw": draw,
        "figure": lambda: draw(make()),
    }
    for fn in timed.values():  # warm-up: imports, font cache, the cover index's parts
        fn()
    wall, _ = interleaved(timed, repeats)  # CPU times: too coarse (10 ms) for explain
    return ratios(wall, "explain")


def main() -> None:
    p = parser(__doc__, "figures")
    p.add_argument("--n-reference", type=int, default=200, help="|R| (200)")
    p.add_argument("--top-k", type=int, default=8, help="similar images in the figure (8)")
    p.add_argument("--repeats", type=int, default=5, help="rounds (5)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1)")
    args = p.parse_args()
    if args.device != "cpu":
        raise SystemExit("bench_figures.py runs on the CPU: drawing is CPU work")
    torch.set_num_threads(args.threads)
    cases = {}
    for size in (28, 96):
        cases[f"{size}px"] = figure_times(size, args.n_reference, args.top_k, args.repeats)
        print(size, cases[f"{size}px"], flush=True)
    print(f"\none figure at top-k {args.top_k}, best of {args.repeats} interleaved rounds:")
    table(
        ["input", "explain (s)", "study (s)", "draw (s)", "figure (s)", "figure / explain"],
        [
            [
                name,
                c["explain_s"],
                c["study_s"],
                c["draw_s"],
                c["figure_s"],
                c["figure_paired_ratio"],
            ]
            for name, c in cases.items()
        ],
    )
    print(f"goal: a figure in under {GOAL_S} s at 96 px: {cases['96px']['figure_s']:.3f} s")
    write(
        {
            "goal_s": GOAL_S,
            "models": "28px: small ReLU CNN, layer relu2; 96px: ResNet-18, layer layer4; "
            "3 classes, random weights, last bias balanced",
            "n_reference": args.n_reference,
            "n_boundaries": N_BOUNDARIES,
            "top_k": args.top_k,
            "threads": args.threads,
            "repeats": args.repeats,
            "cases": cases,
        },
        args,
    )


if __name__ == "__main__":
    main()
