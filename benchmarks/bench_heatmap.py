"""Heat maps of unseen images from one fitted region set against pytorch-grad-cam.

Once fitted, a covered image needs only a forward pass to the target layer for its heat map
(``RegionSet.heatmap``: psi, the region lookup, the weighted sum); Grad-CAM and Grad-CAM++
need a forward and a backward pass, Score-CAM one forward pass per channel. All on the same
images, model, target layer and batch size, timed in turns with a plain forward pass of the
whole model, on ``--device``. Model: a torchvision VGG (``--vgg``, default VGG-11; random
weights, last bias balanced so that it predicts every class), ``--size`` px inputs, target
layer its last ReLU (VGG-11 ``features.19``, VGG-19 ``features.35``); regions: k-means
on ``--n-reference`` random reference images. Score-CAM runs on ``--n-score-cam`` images only
(it is slow) and is reported per image. Goal (issue 16): RI / Grad-CAM <= 0.25. ``psi``,
the forward pass to the target layer alone, is RI's floor: a heat map needs the feature map.

RI computes in full float32 (``repinterp.exact_float32``: no TF32), so that its maps are the
same on every device; pytorch-grad-cam and the forward pass run with the user's settings
(PyTorch's defaults: TF32 convolutions on CUDA). On CUDA the script therefore also times
Grad-CAM and the forward pass in full float32 (``gradcam_fp32``, ``forward_fp32``), the
like-for-like peers (keys ``fp32_*``); on the CPU there is no TF32 and they would be the same.

Usage: python benchmarks/bench_heatmap.py [--n-unseen 1000] [--size 64] [--threads 1]
       python benchmarks/bench_heatmap.py --device cuda --vgg vgg19 --size 224
"""

from __future__ import annotations

import time

import torch
from common import (
    VGG_LAYERS,
    RandomImages,
    balance,
    interleaved,
    parser,
    ratios,
    synchronize,
    table,
    vgg,
    write,
)
from pytorch_grad_cam import GradCAM, GradCAMPlusPlus, ScoreCAM

from repinterp import RepresentativeInterpreter
from repinterp.runtime.precision import exact_float32

GOAL = 0.25


def main() -> None:
    p = parser(__doc__, "heatmap")
    p.add_argument("--n-unseen", type=int, default=1000, help="images given heat maps (1000)")
    p.add_argument("--n-reference", type=int, default=1000, help="|R| (1000)")
    p.add_argument("--n-score-cam", type=int, default=4, help="images for Score-CAM (4)")
    p.add_argument("--regions", type=int, default=100, help="k-means regions (100)")
    p.add_argument("--vgg", default="vgg11", help=f"the VGG: {', '.join(VGG_LAYERS)} (vgg11)")
    p.add_argument("--size", type=int, default=64, help="input side, px (64)")
    p.add_argument("--batch-size", type=int, default=64, help="images per pass, all methods (64)")
    p.add_argument("--repeats", type=int, default=1, help="rounds (1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shape, batch = (3, args.size, args.size), args.batch_size
    device, layer_name = torch.device(args.device), VGG_LAYERS[args.vgg]

    reference = RandomImages(args.n_reference, shape, seed=0)
    unseen_set = RandomImages(args.n_unseen, shape, seed=1)
    unseen = torch.stack([unseen_set[i] for i in range(len(unseen_set))]).to(device)
    sample = torch.stack([reference[i] for i in range(min(256, len(reference)))]).to(device)
    model = balance(vgg(args.vgg).to(device), sample)
    start = time.perf_counter()
    ri = RepresentativeInterpreter(
        model, layer_name, n_boundaries=50, batch_size=batch, progress=False, device=device
    )
    ri.fit(reference, keep_features=True)
    regions = ri.regions(n_regions=args.regions, seed=0)
    setup_s = time.perf_counter() - start
    layer = [model.get_submodule(layer_name)]

    def cam_maps(method: type) -> None:
        with method(model=model, target_layers=layer) as cam:
            for i in range(0, len(unseen), batch):
                cam(input_tensor=unseen[i : i + batch], targets=None)

    @torch.inference_mode()
    def forward() -> None:
        for i in range(0, len(unseen), batch):
            model(unseen[i : i + batch])

    @exact_float32()
    @torch.inference_mode()
    def psi() -> None:  # the forward pass to the target layer: the floor of RI's heat maps
        for i in range(0, len(unseen), batch):
            ri.split.psi(unseen[i : i + batch])

    timed = {
        "forward": forward,
        "psi": psi,
        "ri": lambda: regions.heatmap(unseen),
        "gradcam": lambda: cam_maps(GradCAM),
        "gradcampp": lambda: cam_maps(GradCAMPlusPlus),
    }
    if device.type == "cuda":
        timed["forward_fp32"] = exact_float32()(forward)
        timed["gradcam_fp32"] = exact_float32()(lambda: cam_maps(GradCAM))
    times, cpu = interleaved(timed, args.repeats, device)
    r = ratios(times, "gradcam") | ratios(cpu, "gradcam", "cpu_")
    if device.type == "cuda":
        r |= ratios(times, "gradcam_fp32", "fp32_")
    with ScoreCAM(model=model, target_layers=layer) as cam:
        cam.batch_size = batch
        synchronize(device)
        start = time.perf_counter()
        cam(input_tensor=unseen[: args.n_score_cam], targets=None)
        synchronize(device)
        score_cam_per_image = (time.perf_counter() - start) / args.n_score_cam

    per_image = {k: 1000 * min(v) / len(unseen) for k, v in times.items()}
    per_image["scorecam"] = 1000 * score_cam_per_image
    table(
        ["method", "ms per image", "/ Grad-CAM", "/ forward"],
        [
            [
                name,
                per_image[key],
                per_image[key] / per_image["gradcam"],
                per_image[key] / per_image["forward"],
            ]
            for name, key in [
                ("forward pass of the model (no heat map)", "forward"),
                ("psi: forward to the target layer, full float32 (RI's floor)", "psi"),
                ("RI (RegionSet.heatmap)", "ri"),
                ("Grad-CAM", "gradcam"),
                ("Grad-CAM++", "gradcampp"),
                (f"Score-CAM ({args.n_score_cam} images)", "scorecam"),
                ("forward pass, full float32", "forward_fp32"),
                ("Grad-CAM, full float32", "gradcam_fp32"),
            ]
            if key in per_image
        ],
    )
    print(
        f"RI / Grad-CAM = {r['ri_ratio']:.3f} (paired {r['ri_paired_ratio']:.3f}); goal <= {GOAL}"
    )
    print(f"RI / psi = {per_image['ri'] / per_image['psi']:.3f} (1: RI costs its forward pass)")
    if "fp32_ri_ratio" in r:
        print(f"RI / Grad-CAM in full float32 = {r['fp32_ri_ratio']:.3f}")
    write(
        {
            "goal": GOAL,
            "model": f"{args.vgg}, random weights, {args.size} px, layer {layer_name}",
            "device": str(device),
            "n_unseen": args.n_unseen,
            "n_reference": args.n_reference,
            "n_regions": len(regions),
            "n_score_cam": args.n_score_cam,
            "batch_size": batch,
            "threads": args.threads,
            "repeats": args.repeats,
            "fit_and_regions_s": setup_s,
            "ms_per_image": per_image,
            **r,
        },
        args,
    )


if __name__ == "__main__":
    main()
