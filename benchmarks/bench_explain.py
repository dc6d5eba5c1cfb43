"""explain latency: many inputs at once against one by one, and the cover against |R|.

1. ``explain_batch`` of ``--n-inputs`` images against as many ``explain`` calls, on a small CNN
   (random weights, last bias balanced) fitted on |R| = ``--n-ref`` random 28 px images,
   |Q| = 50.
2. ``repinterp.cover.greedy_cover`` alone on synthetic indexes: random +-1 int8 sides
   (|R| x 50) and random classes (10) for the reference images and the inputs, at |R| = 1k,
   10k and 100k; one input per call (median of ``--n-cover`` inputs) and ``--n-cover`` inputs
   in one call. Goals: linear in |R|; < 20 ms per input at |R| = 10k.

Usage: python benchmarks/bench_explain.py [--n-ref 10000] [--n-inputs 1000] [--threads 1]
"""

from __future__ import annotations

import statistics
import time

import torch
from common import RandomImages, balance, interleaved, parser, small_cnn, table, write

from repinterp import RepresentativeInterpreter
from repinterp.cover import greedy_cover

GOAL_MS = 20.0
N_BOUNDARIES = 50
CLASSES = 10


def explain_times(n_ref: int, n_inputs: int, repeats: int) -> dict[str, float]:
    """Milliseconds per input of ``explain_batch`` and of one ``explain`` call per input."""
    images = RandomImages(n_ref + n_inputs, (1, 28, 28))
    stacked = torch.stack([images[i] for i in range(len(images))])
    reference, inputs = stacked[:n_ref], stacked[n_ref:]
    model = balance(small_cnn(CLASSES), reference[:2000])
    ri = RepresentativeInterpreter(model, "relu2", N_BOUNDARIES, batch_size=256, progress=False)
    ri.fit(reference)

    def one_by_one() -> None:
        for image in inputs:
            ri.explain(image)

    ri.explain_batch(inputs[:10])  # warm-up
    fns = {"batch": lambda: ri.explain_batch(inputs), "single": one_by_one}
    times, _ = interleaved(fns, repeats)
    return {f"{name}_ms_per_input": 1000 * min(t) / n_inputs for name, t in times.items()}


def cover_times(n_ref: int, n_inputs: int, seed: int = 0) -> dict[str, float]:
    """Milliseconds per input of the greedy cover on random sides: one input per call
    (median) and ``n_inputs`` per call."""
    g = torch.Generator().manual_seed(seed)
    ref_sides = (torch.randint(0, 2, (n_ref, N_BOUNDARIES), generator=g) * 2 - 1).to(torch.int8)
    in_sides = (torch.randint(0, 2, (n_inputs, N_BOUNDARIES), generator=g) * 2 - 1).to(torch.int8)
    ref_class = torch.randint(0, CLASSES, (n_ref,), generator=g)
    in_class = torch.randint(0, CLASSES, (n_inputs,), generator=g)
    other = ref_class.unsqueeze(0) != in_class.unsqueeze(1)
    greedy_cover(ref_sides, in_sides[:1], other[:1])  # warm-up
    single = []
    for i in range(n_inputs):
        start = time.perf_counter()
        greedy_cover(ref_sides, in_sides[i : i + 1], other[i : i + 1])
        single.append(time.perf_counter() - start)
    start = time.perf_counter()
    result = greedy_cover(ref_sides, in_sides, other)
    batch = time.perf_counter() - start
    return {
        "single_ms": 1000 * statistics.median(single),
        "batch_ms_per_input": 1000 * batch / n_inputs,
        "mean_boundaries": float((result.order >= 0).sum(1).float().mean()),
    }


def main() -> None:
    p = parser(__doc__, "explain")
    p.add_argument("--n-ref", type=int, default=10_000, help="|R| of the fitted index (10000)")
    p.add_argument("--n-inputs", type=int, default=1000, help="inputs explained (1000)")
    p.add_argument("--n-cover", type=int, default=50, help="inputs per cover timing (50)")
    p.add_argument("--sizes", default="1000,10000,100000", help="|R| of the cover timings")
    p.add_argument("--repeats", type=int, default=2, help="rounds (2)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    explain = explain_times(args.n_ref, args.n_inputs, args.repeats)
    print(f"explain, small CNN 28 px, |R| = {args.n_ref}, |Q| = {N_BOUNDARIES}:")
    table(
        ["how", "ms per input"],
        [
            [f"explain_batch of {args.n_inputs}", explain["batch_ms_per_input"]],
            [f"{args.n_inputs} x explain", explain["single_ms_per_input"]],
            [
                "one by one / at once",
                explain["single_ms_per_input"] / explain["batch_ms_per_input"],
            ],
        ],
    )
    cover = {n: cover_times(n, args.n_cover) for n in map(int, args.sizes.split(","))}
    print(f"\ngreedy cover on random sides, |Q| = {N_BOUNDARIES} (goal < {GOAL_MS} ms at 10k):")
    sizes = list(cover)
    table(
        ["|R|", "ms, one input per call", "ms per input, batch", "|P| (mean)", "ms per 1k of |R|"],
        [
            [
                n,
                c["single_ms"],
                c["batch_ms_per_input"],
                c["mean_boundaries"],
                1000 * c["single_ms"] / n,
            ]
            for n, c in cover.items()
        ],
    )
    growth = cover[sizes[-1]]["single_ms"] / cover[sizes[0]]["single_ms"]
    print(f"time grows {growth:.1f}x for |R| x {sizes[-1] / sizes[0]:.0f} (linear: equal factors)")
    write(
        {
            "goal_ms": GOAL_MS,
            "n_boundaries": N_BOUNDARIES,
            "threads": args.threads,
            "explain": {"n_reference": args.n_ref, "n_inputs": args.n_inputs, **explain},
            "cover": {str(n): c for n, c in cover.items()},
        },
        args.out,
    )


if __name__ == "__main__":
    main()
