"""Algorithm 1 of the paper: a greedy solution of the submodular-cost submodular-cover problem,
and the choice between its host (incremental) and masked paths."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .common import CoverResult, check_shapes
from .incremental import greedy_one
from .prepared import CoverIndex

_CUDA_HOST_MAX_INPUTS = 4  # on CUDA, the host's incremental path for so few inputs...
_CUDA_HOST_MAX_REF = 1 << 14  # ... against so few images


def greedy_cover(
    reference_sides: Tensor | CoverIndex,
    input_sides: Tensor,
    other_class: Tensor,
    max_elements: int = 1 << 26,
    method: str = "auto",
) -> CoverResult:
    """Algorithm 1 for B inputs at once.

    Starting from ``P = {}``, while ``|P ∩ D| > delta`` add the boundary ``h`` that minimises
    (covered images it removes) / (covered images of ``D`` it removes) among boundaries that
    remove at least one image of ``D``; equal ratios go to the larger denominator (so among zero
    numerators the largest denominator wins), then to the lower index. Ratios are compared as
    float64 quotients of integers below 2**26, which order exactly like the fractions.

    Two implementations, with the same results (``delta`` is found as the conflicts left at
    the end: the images of D on x's side of every boundary are never removed, and while others
    remain some boundary removes one of them):

    - ``"incremental"``, one input at a time on the host. The counts start from per-boundary
      counts of the index; after a step that removed (or kept) many images they are recounted by
      popcounts over the boundaries' bit sets (|Q| |R| / 64 words), else updated with only the
      images the step removes, or recounted on those it keeps when fewer, found on bit sets
      (|R| / 64 words a step) and their fields summed by an embedding bag, so each image is
      counted about once: one input costs O(|R| |Q| + steps x |R| / 64) plus a Python step's
      overhead (~20-60 us).
    - ``"masked"``, all inputs at once on the index's device: every step recounts with one
      matrix product (int8 on the host, float16 with float32 sums on CUDA), inputs that are done
      choose a sentinel that changes nothing, and the host waits on the device only once per 4
      steps (CUDA; the steps in between are one CUDA graph, captured on first use).

    ``"auto"``: on the host, incremental for single inputs and the masked path for batches of 8
    or more against |R| <= 10,000; on CUDA, the masked path but for up to 4 inputs against
    |R| <= 16,384 (see `_auto_method`).

    Args:
        reference_sides: |R| x |Q| int8 sides of the reference images (see
            [`sides`][repinterp.core.cover.sides]), or a
            [`CoverIndex`][repinterp.core.cover.prepared.CoverIndex] of them (build it once per
            index: it holds what every call would otherwise rebuild).
        input_sides: B x |Q| int8 sides of the inputs.
        other_class: B x |R| bool, ``D(x)``: reference images predicted another class.
        max_elements: the masked path takes inputs in chunks of ``max_elements / (4 |R|)``.
        method: ``"auto"``, ``"incremental"`` or ``"masked"``.

    Returns:
        A [`CoverResult`][repinterp.core.cover.common.CoverResult] on the reference sides' device.
    """
    index = (
        reference_sides if isinstance(reference_sides, CoverIndex) else CoverIndex(reference_sides)
    )
    check_shapes(index.shape, input_sides, other_class)
    n_ref, n_q = index.shape
    if input_sides.shape[0] == 0:
        device = index.device
        return CoverResult(
            order=torch.empty(0, n_q, dtype=torch.long, device=device),
            covered=torch.empty(0, n_ref, dtype=torch.bool, device=device),
            delta=torch.empty(0, dtype=torch.long, device=device),
            conflicts=torch.empty(0, dtype=torch.long, device=device),
        )
    if method == "auto":
        method = _auto_method(index, input_sides.shape[0])
    if method == "incremental":
        return _greedy_incremental(index, input_sides, other_class)
    if method == "masked":
        return _greedy_masked(index, input_sides, other_class, max_elements)
    raise ValueError(f"method must be 'auto', 'incremental' or 'masked', got {method!r}")


def _auto_method(index: CoverIndex, n_inputs: int) -> str:
    """The faster path for ``n_inputs`` inputs against ``index``, as ``benchmarks/bench_cover.py``
    measured it (|Q| = 50). Host: the masked path shares each step's Python overhead between the
    inputs, and its matrix products cost |R| per step; on CUDA, a graph step costs ~30 us, about
    what the host's incremental path spends per step on small indexes."""
    n_ref = index.shape[0]
    if index.device.type == "cuda":
        return (
            "incremental"
            if n_inputs <= _CUDA_HOST_MAX_INPUTS and n_ref <= _CUDA_HOST_MAX_REF
            else "masked"
        )
    return "masked" if n_inputs >= 8 and n_ref <= 10_000 else "incremental"


def _greedy_incremental(index: CoverIndex, input_sides: Tensor, other_class: Tensor) -> CoverResult:
    """[`greedy_cover`][repinterp.core.cover.greedy.greedy_cover] one input at a time on the host
    (see `greedy_one`)."""
    bits = index.bits()
    n_ref, n_q = index.shape
    x_all = input_sides.cpu().numpy()
    other_all = other_class.cpu().numpy().astype(bool, copy=False)
    n_in = len(x_all)
    order = np.full((n_in, n_q), -1, dtype=np.int64)
    covered = np.empty((n_in, n_ref), dtype=bool)
    delta = np.empty(n_in, dtype=np.int64)
    for b in range(n_in):
        chosen, words, delta[b] = greedy_one(bits, x_all[b], other_all[b])
        order[b, : len(chosen)] = chosen
        covered[b] = np.unpackbits(words.view(np.uint8), count=n_ref, bitorder="little")
    return CoverResult(
        *(torch.from_numpy(a).to(index.device) for a in (order, covered, delta, delta.copy()))
    )


def _greedy_masked(
    index: CoverIndex,
    input_sides: Tensor,
    other_class: Tensor,
    max_elements: int,
    block: int | None = None,
) -> CoverResult:
    """[`greedy_cover`][repinterp.core.cover.greedy.greedy_cover] for B inputs at once on
    [`CoverIndex.device`][repinterp.core.cover.prepared.CoverIndex.device]: every count is
    recomputed at every step by one matrix product, inputs that are done are masked, and the host
    waits on the device once per ``block`` steps only (to stop when every input is done; default 4
    on CUDA, 1 elsewhere). On CUDA the ``block`` steps are one CUDA graph, captured once per index,
    batch size and block."""
    n_ref, n_q = index.shape
    device = index.device
    if block is None:  # the host sees at no cost when all are done
        block = 4 if device.type == "cuda" else 1
    chunk = max(1, max_elements // max(1, n_ref * 4))
    parts = []
    for i in range(0, input_sides.shape[0], chunk):
        x = input_sides[i : i + chunk].to(device)
        state = index.masked_state(x.shape[0], block)
        state.load(x, other_class[i : i + chunk].to(device))
        order = torch.full(x.shape, -1, dtype=torch.long, device=device)
        for start in range(0, n_q, block):
            state.run_block()
            width = min(block, n_q - start)
            order[:, start : start + width] = state.h[:width].T
            if not bool((state.h[-1] < n_q).any()):
                break
        order.masked_fill_(order == n_q, -1)
        covered, delta = state.covered()
        parts.append((order, covered, delta, delta.clone()))
    if len(parts) == 1:
        return CoverResult(*parts[0])
    return CoverResult(*(torch.cat(field) for field in zip(*parts, strict=True)))
