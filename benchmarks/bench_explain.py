"""explain latency, one input at a time and many at once, against the model's own forward pass.

A small ReLU CNN (1 x 28 x 28, random weights, last bias balanced so that it predicts every
class) is fitted with |Q| = 50 on |R| random images for each |R| of ``--sizes``; then, on
``--device``: ``explain`` of one input per call (median over ``--n-single`` inputs, each call
timed to the end of its device work), ``explain_batch`` of ``--n-inputs`` inputs (per input),
and one plain forward pass of the model on one input (median), the peer that an explanation
cannot beat. Goals (issue 16): one input <= 5 ms + one forward pass on the CPU at |R| = 10k;
<= 2 ms at |R| = 1M on a GPU.

Usage: python benchmarks/bench_explain.py [--device cuda] [--sizes 10000,100000,1000000]
"""

from __future__ import annotations

import statistics
import time

import torch
from common import balance, parser, small_cnn, synchronize, table, write

from repinterp import RepresentativeInterpreter
from repinterp.runtime.precision import exact_float32

N_BOUNDARIES = 50
CLASSES = 10


def _median_ms(fn, inputs: torch.Tensor, device: torch.device) -> float:
    """Median milliseconds of ``fn(x)`` over the inputs, each call timed to its device's end."""
    times = []
    for x in inputs:
        synchronize(device)
        start = time.perf_counter()
        fn(x)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def explain_times(n_ref: int, n_single: int, n_batch: int, device: torch.device) -> dict:
    """Milliseconds: one input per ``explain`` call (median), per input of ``explain_batch``,
    one forward pass of the model on one input (median), and the fit's seconds."""
    generator = torch.Generator(device).manual_seed(0)
    reference = torch.randn(n_ref, 1, 28, 28, generator=generator, device=device)
    inputs = torch.randn(max(n_single, n_batch), 1, 28, 28, generator=generator, device=device)
    model = balance(small_cnn(CLASSES).to(device), reference[:2000])
    ri = RepresentativeInterpreter(
        model, "relu2", N_BOUNDARIES, batch_size=1024, progress=False, device=device
    )
    start = time.perf_counter()
    ri.fit(reference)
    synchronize(device)
    fit_s = time.perf_counter() - start
    ri.explain_batch(inputs[:8])  # warm-up: builds the cover index's parts
    for x in inputs[:3]:
        ri.explain(x)

    @torch.inference_mode()
    @exact_float32()  # the peer at the engine's precision
    def forward(x: torch.Tensor) -> None:
        model(x.unsqueeze(0))

    for x in inputs[:3]:
        forward(x)
    single = _median_ms(ri.explain, inputs[:n_single], device)
    plain = _median_ms(forward, inputs[:n_single], device)
    synchronize(device)
    start = time.perf_counter()
    ri.explain_batch(inputs[:n_batch])
    synchronize(device)
    batch = 1000 * (time.perf_counter() - start) / n_batch
    return {
        "fit_s": fit_s,
        "single_ms": single,
        "forward_ms": plain,
        "single_minus_forward_ms": single - plain,
        "batch_ms_per_input": batch,
    }


def main() -> None:
    p = parser(__doc__, "explain")
    p.add_argument("--sizes", default="10000", help="|R| values, comma-separated (10000)")
    p.add_argument("--n-single", type=int, default=50, help="inputs timed one per call (50)")
    p.add_argument("--n-inputs", type=int, default=1000, help="inputs of the batch call (1000)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cases = {}
    for n in map(int, args.sizes.split(",")):
        cases[str(n)] = explain_times(n, args.n_single, args.n_inputs, device)
        print(n, cases[str(n)], flush=True)
    print(f"\nexplain, small CNN 28 px, |Q| = {N_BOUNDARIES}, device {device}:")
    table(
        [
            "|R|",
            "one input (ms)",
            "forward of one input (ms)",
            "difference (ms)",
            "batch (ms/input)",
        ],
        [
            [
                int(n),
                c["single_ms"],
                c["forward_ms"],
                c["single_minus_forward_ms"],
                c["batch_ms_per_input"],
            ]
            for n, c in cases.items()
        ],
    )
    write(
        {
            "n_boundaries": N_BOUNDARIES,
            "threads": args.threads,
            "n_single": args.n_single,
            "n_batch": args.n_inputs,
            "cases": cases,
        },
        args,
    )


if __name__ == "__main__":
    main()
