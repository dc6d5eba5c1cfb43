"""Algorithm 1 of the paper: a greedy solution of the submodular-cost submodular-cover problem.

Everything here works on *sides*: ``sign(<W_h, t> + b_h)`` in {-1, 0, 1} for every reference
image and boundary. A reference image is covered by ``P`` when it has the input's side on every
boundary of ``P``; it is *separated* by ``h`` when its side on ``h`` differs from the input's.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp
from torch import Tensor

__all__ = [
    "CoverIndex",
    "CoverResult",
    "ExactCoverResult",
    "exact_cover",
    "fewest_boundaries",
    "greedy_cover",
    "sides",
]


def sides(projections: Tensor) -> Tensor:
    """``sign`` of signed projections, as int8 (same shape)."""
    return torch.sign(projections).to(torch.int8)


@dataclass
class CoverResult:
    """Greedy covers of B inputs against |R| reference images and |Q| boundaries.

    Attributes:
        order: B x |Q| long, the chosen boundaries in the order they were added, padded with -1.
        covered: B x |R| bool, reference images covered by each ``P(x)``.
        delta: B long, ``tau(x)``: images of ``D(x)`` covered by all of ``Q``.
        conflicts: B long, ``|P(x) ∩ D(x)|`` at the end (``<= delta``).
    """

    order: Tensor
    covered: Tensor
    delta: Tensor
    conflicts: Tensor

    def boundaries(self, i: int) -> Tensor:
        """Indices into ``Q`` of ``P(x_i)``, in the order they were chosen."""
        row = self.order[i]
        return row[row >= 0]


class CoverIndex:
    """Reference sides prepared once for :func:`greedy_cover`; build one per index and reuse it.

    What the two paths of :func:`greedy_cover` need is built on first use:

    - ``"incremental"`` (host): per boundary ``h`` and side value ``v``, the bit set of the
      images whose side on ``h`` is not ``v`` and its size, and every image's *fields* ("side is
      +1" per boundary, and 1) packed two bits each, whose sums over a set of images an embedding
      bag computes in one call;
    - ``"masked"`` (the sides' device): the fields as a matrix (int8 on the host, float16 on
      CUDA), the sides transposed, and on CUDA the captured CUDA graphs of the last few batch
      sizes (with their buffers: ~4 |R| bytes per input).

    Memory per image at |Q| = 50: ~36 bytes for the incremental path, ~110 (host) or ~170
    (CUDA) for the masked one, next to the sides' 50. Images with a side 0 (rare: a projection
    exactly 0) are listed apart, and their sides 0 are counted apart. Not thread-safe on CUDA
    (the graphs' buffers are shared).

    Args:
        reference_sides: |R| x |Q| int8 sides of the reference images (see :func:`sides`).
    """

    def __init__(self, reference_sides: Tensor) -> None:
        if reference_sides.ndim != 2:
            raise ValueError(
                f"reference_sides must be |R| x |Q|, got {tuple(reference_sides.shape)}"
            )
        self.sides = reference_sides
        self.zero_rows = (reference_sides == 0).any(1).nonzero().squeeze(1)
        self._bits: _BitIndex | None = None
        self._dense: _DenseIndex | None = None
        self._states: dict[tuple[int, int], _MaskedState] = {}

    @property
    def shape(self) -> torch.Size:
        """``(|R|, |Q|)``."""
        return self.sides.shape

    @property
    def device(self) -> torch.device:
        """The device of the sides (where the masked path runs and results are returned)."""
        return self.sides.device

    def bits(self) -> _BitIndex:
        """The incremental path's host structures (built on first call)."""
        if self._bits is None:
            self._bits = _BitIndex.build(self.sides.cpu(), self.zero_rows.cpu())
        return self._bits

    def dense(self) -> _DenseIndex:
        """The masked path's structures on :attr:`device` (built on first call)."""
        if self._dense is None:
            self._dense = _DenseIndex.build(self.sides, self.zero_rows)
        return self._dense

    def masked_state(self, n_inputs: int, block: int) -> _MaskedState:
        """Buffers for the masked path; on CUDA, with their steps captured as a CUDA graph
        and kept for the next calls with as many inputs (the last few sizes)."""
        if self.device.type != "cuda":
            return _MaskedState(self.dense(), n_inputs, block)
        key = (n_inputs, block)
        state = self._states.pop(key, None)
        if state is None:
            state = _MaskedState(self.dense(), n_inputs, block)
            state.capture()
        self._states[key] = state  # most recently used last
        while len(self._states) > _KEPT_GRAPHS:
            del self._states[next(iter(self._states))]
        return state


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
      counts of the index and are then updated with only the images a step removes, or recounted
      on those it keeps when fewer; the images are found on bit sets (|R| / 64 words a step) and
      their fields summed by an embedding bag, so each image is counted about once: one input
      costs O(|R| |Q| + steps x |R| / 64) plus a Python step's overhead (~30-60 us).
    - ``"masked"``, all inputs at once on the index's device: every step recounts with one
      matrix product (int8 on the host, float16 with float32 sums on CUDA), inputs that are done
      choose a sentinel that changes nothing, and the host waits on the device only once per 4
      steps (CUDA; the steps in between are one CUDA graph, captured on first use).

    ``"auto"``: on the host, incremental for single inputs and the masked path for batches of 8
    or more against |R| <= 10,000; on CUDA, the masked path but for up to 4 inputs against
    |R| <= 16,384 (see :func:`_auto_method`).

    Args:
        reference_sides: |R| x |Q| int8 sides of the reference images (see :func:`sides`), or a
            :class:`CoverIndex` of them (build it once per index: it holds what every call
            would otherwise rebuild).
        input_sides: B x |Q| int8 sides of the inputs.
        other_class: B x |R| bool, ``D(x)``: reference images predicted another class.
        max_elements: the masked path takes inputs in chunks of ``max_elements / (4 |R|)``.
        method: ``"auto"``, ``"incremental"`` or ``"masked"``.

    Returns:
        A :class:`CoverResult` on the reference sides' device.
    """
    index = (
        reference_sides if isinstance(reference_sides, CoverIndex) else CoverIndex(reference_sides)
    )
    _check_shapes(index.shape, input_sides, other_class)
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


def _check_shapes(shape: torch.Size, input_sides: Tensor, other_class: Tensor) -> None:
    n_ref, n_q = shape
    if input_sides.ndim != 2 or input_sides.shape[1] != n_q:
        raise ValueError(f"input_sides must be B x {n_q}, got {tuple(input_sides.shape)}")
    if other_class.shape != (input_sides.shape[0], n_ref):
        raise ValueError(
            f"other_class must be {input_sides.shape[0]} x {n_ref}, got {tuple(other_class.shape)}"
        )


_ROWS_PER_BUILD = 1 << 16
_CUDA_HOST_MAX_INPUTS = 4  # on CUDA, the host's incremental path for so few inputs...
_CUDA_HOST_MAX_REF = 1 << 14  # ... against so few images
_KEPT_GRAPHS = 4
_FLOAT32_EXACT = 1 << 24  # float32 sums of 0/1 values are exact below this
_SENTINEL_RATIO = 1e300  # larger than any num / den, finite
_WORD = 64


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def _fields(rows: Tensor) -> Tensor:
    """n x (|Q| + 1) uint8 fields of n images: side is +1 on each boundary, and 1."""
    ones = torch.ones(rows.shape[0], 1, dtype=torch.bool, device=rows.device)
    return torch.cat([rows > 0, ones], 1).to(torch.uint8)


def _separation_weights(x_sides: Tensor) -> tuple[Tensor, Tensor]:
    """What turns field sums into separation counts, for B inputs (B x |Q| sides).

    Returns:
        ``(m, z)``: B x (|Q| + 1) x |Q| and B x |Q| float64 such that, over a set of images,
        ``field sums @ m[b] + (sides 0 per boundary) * z[b]`` counts per boundary the images it
        separates from input b (x side +1: 1 - [+1]; -1: [+1] + [0]; 0: 1 - [0]).
    """
    n_in, n_q = x_sides.shape
    x = x_sides.double()
    m = x.new_zeros(n_in, n_q + 1, n_q)
    h = torch.arange(n_q, device=x.device)
    m[:, h, h] = -x
    m[:, n_q] = (x >= 0).double()
    return m, (x < 0).double() - (x == 0).double()


@functools.cache
def _row_sum_op() -> Callable[..., Tensor] | None:
    """``torch.ops.quantized.embedding_bag_2bit_rowwise_offsets`` if this build has it."""
    try:
        return torch.ops.quantized.embedding_bag_2bit_rowwise_offsets
    except (AttributeError, RuntimeError):
        return None


@functools.cache
def _product_kind(device: torch.device) -> str:
    """How the masked path multiplies 0/1 matrices exactly on ``device``: ``"half"`` (CUDA:
    float16 with float32 results; cuBLAS's int8 product is slow for so few rows), ``"int8"``
    (host: ``torch._int_mm``), else ``"float"`` (float32, for older torch)."""
    try:
        if device.type == "cuda":
            x = torch.zeros(17, 8, dtype=torch.float16, device=device)
            torch.mm(x, x.T[:, :8], out_dtype=torch.float32)
            return "half"
        torch._int_mm(torch.zeros(17, 8, dtype=torch.int8), torch.zeros(8, 8, dtype=torch.int8))
        return "int8"
    except (TypeError, RuntimeError, NotImplementedError):
        return "float"


_PRODUCT_DTYPES = {"half": torch.float16, "int8": torch.int8, "float": torch.float32}


@dataclass
class _DenseIndex:
    """The masked path's structures, on the sides' device.

    Attributes:
        kind: how products are computed (see :func:`_product_kind`).
        fields: F' x |R|' 0/1 in the dtype of ``kind``, the fields (|R| and F = |Q| + 1 rounded
            up to multiples of 8 with zeros: float16 products are twice as fast so aligned).
        columns: (|Q| + 1) x |R| int8, the sides transposed and a row of zeros (a boundary that
            separates nothing from an input given side 0 on it).
        zero_rows: the images with a side 0, and ``zero_sides``, theirs == 0 (float64).
    """

    kind: str
    fields: Tensor
    columns: Tensor
    zero_rows: Tensor
    zero_sides: Tensor

    @classmethod
    def build(cls, sides: Tensor, zero_rows: Tensor) -> _DenseIndex:
        n_ref, n_q = sides.shape
        kind = _product_kind(sides.device)
        fields = sides.new_zeros(
            _round_up(n_q + 1, 8), _round_up(max(n_ref, 1), 8), dtype=_PRODUCT_DTYPES[kind]
        )
        for start in range(0, n_ref, _ROWS_PER_BUILD):
            rows = sides[start : start + _ROWS_PER_BUILD]
            fields[: n_q + 1, start : start + rows.shape[0]] = _fields(rows).T
        columns = torch.cat([sides.T, sides.new_zeros(1, n_ref)]).contiguous()
        return cls(kind, fields, columns, zero_rows, (sides[zero_rows] == 0).double())

    def product(self, a: Tensor) -> Tensor:
        """``a @ fields.T`` (float64; exact: float32 sums are split below 2**24 images)."""
        if self.kind == "int8":
            return torch._int_mm(a, self.fields.T).double()
        k = self.fields.shape[1]
        parts = [
            torch.mm(
                a[:, i : i + _FLOAT32_EXACT],
                self.fields[:, i : i + _FLOAT32_EXACT].T,
                **({"out_dtype": torch.float32} if self.kind == "half" else {}),
            ).double()
            for i in range(0, k, _FLOAT32_EXACT)
        ]
        return parts[0] if len(parts) == 1 else torch.stack(parts).sum(0)


@dataclass
class _BitIndex:
    """The incremental path's host structures, for |R| images in W 64-bit words.

    Attributes:
        separated: 3 x |Q| x W uint64; bit r of ``separated[v + 1, h]`` is set when image r's
            side on h is not v (bits past |R| are clear).
        count: 3 x |Q| int64, the images with side v on h.
        valid: W uint64, the bits of the |R| images.
        table: |R| rows of the fields packed 2 bits each, then float16 scale 1 and bias 0 (the
            layout of ``embedding_bag_2bit_rowwise_offsets``); None without that operator, and
            ``sides`` (|R| x |Q| int8) instead.
        zero_bits: 2W uint64, the images with a side 0, twice (None if none); ``zero_rows``,
            their indices; ``zero_shifts`` their bits' places in a word, twice (uint64);
            ``zero_sides``, their sides == 0 (float64).
    """

    separated: np.ndarray
    count: np.ndarray
    valid: np.ndarray
    table: Tensor | None
    sides: np.ndarray | None
    zero_bits: np.ndarray | None
    zero_rows: np.ndarray
    zero_shifts: np.ndarray
    zero_sides: np.ndarray

    @classmethod
    def build(cls, sides: Tensor, zero_rows: Tensor) -> _BitIndex:
        s = sides.numpy()
        n_ref, n_q = s.shape
        n_words = -(-n_ref // _WORD)
        separated = np.zeros((3, n_q, n_words), dtype=np.uint64)
        columns = np.ascontiguousarray(s.T)
        for v in (-1, 0, 1):
            packed = np.packbits(columns != v, axis=1, bitorder="little")
            separated[v + 1].view(np.uint8)[:, : packed.shape[1]] = packed
        table = None
        if _row_sum_op() is not None:
            width = _round_up(n_q + 1, 4) // 4
            table = torch.zeros(n_ref, width + 4, dtype=torch.uint8)
            table[:, width : width + 2] = torch.frombuffer(
                bytearray(np.float16(1).tobytes()), dtype=torch.uint8
            )
            for start in range(0, n_ref, _ROWS_PER_BUILD):
                f = _fields(sides[start : start + _ROWS_PER_BUILD])
                f = torch.nn.functional.pad(f, (0, 4 * width - f.shape[1])).view(-1, width, 4)
                table[start : start + f.shape[0], :width] = (
                    f[..., 0] | f[..., 1] << 2 | f[..., 2] << 4 | f[..., 3] << 6
                )
        zero_rows_np = zero_rows.numpy()
        zero_mask = np.zeros(n_ref, dtype=bool)
        zero_mask[zero_rows_np] = True
        return cls(
            separated=separated,
            count=n_ref - _popcount(separated),
            valid=_pack(np.ones(n_ref, dtype=bool)),
            table=table,
            sides=None if table is not None else s,
            zero_bits=np.tile(_pack(zero_mask), 2) if len(zero_rows_np) else None,
            zero_rows=zero_rows_np,
            zero_shifts=np.tile(zero_rows_np & 63, 2).astype(np.uint64),
            zero_sides=(s[zero_rows_np] == 0).astype(np.float64),
        )

    def field_sums(self, rows: np.ndarray, split: int) -> np.ndarray:
        """2 x (|Q| + 1): the field sums of ``rows[:split]`` and of ``rows[split:]``."""
        n_q = self.count.shape[1]
        op = _row_sum_op()
        if self.table is None or op is None:
            assert self.sides is not None
            parts = (self.sides[rows[:split]], self.sides[rows[split:]])
            return np.array([[*np.count_nonzero(p > 0, axis=0), len(p)] for p in parts], float)
        if len(rows) < _FLOAT32_EXACT:
            offsets = torch.from_numpy(np.array((0, split)))
            out = op(
                self.table, torch.from_numpy(rows), offsets, False, 0, False, None, None, False
            )
            return out.numpy()[:, : n_q + 1]
        # bags of fewer than 2**24 images, summed in float64
        step = _FLOAT32_EXACT - 1
        bags = [(rows[i : min(i + step, split)], step) for i in range(0, split, step)]
        bags += [(rows[i : i + step], 0) for i in range(split, len(rows), step)]
        total = np.zeros((2, n_q + 1))
        for part, end in bags:
            offsets = torch.from_numpy(np.array((0, min(end, len(part)))))
            out = op(
                self.table, torch.from_numpy(part), offsets, False, 0, False, None, None, False
            )
            total += out.numpy()[:, : n_q + 1]
        return total

    def zero_counts(self, words: np.ndarray) -> np.ndarray | None:
        """2 x |Q|: per boundary, the sides 0 of the images in the first and in the second half
        of ``words`` (2W words); None if no image has a side 0."""
        n_zero = len(self.zero_rows)
        if n_zero == 0:
            return None
        n_words = len(self.valid)
        if n_zero * 4 <= n_words:  # few: test their bits
            word = self.zero_rows >> 6
            hits = (words[np.concatenate((word, word + n_words))] >> self.zero_shifts) & 1
            return hits.reshape(2, n_zero) @ self.zero_sides
        hits = words & self.zero_bits
        if not hits.any():
            return None
        rows = _bit_indices(hits)
        split = np.searchsorted(rows, n_words * _WORD)
        rows[split:] -= n_words * _WORD
        zeros = self.zero_sides[np.searchsorted(self.zero_rows, rows)]
        out = np.empty((2, zeros.shape[1]))
        np.sum(zeros[:split], axis=0, out=out[0])
        np.sum(zeros[split:], axis=0, out=out[1])
        return out


_BYTE_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def _popcount(words: np.ndarray) -> np.ndarray:
    """The set bits of uint64 words, summed over the last axis (int64)."""
    if hasattr(np, "bitwise_count"):  # numpy >= 2
        return np.bitwise_count(words).sum(-1, dtype=np.int64)
    return _BYTE_POPCOUNT[words.view(np.uint8)].sum(-1, dtype=np.int64)


def _pack(mask: np.ndarray) -> np.ndarray:
    """A bool vector as little-endian bits in uint64 words (the last one padded with zeros)."""
    words = np.zeros(-(-len(mask) // _WORD), dtype=np.uint64)
    packed = np.packbits(mask, bitorder="little")
    words.view(np.uint8)[: len(packed)] = packed
    return words


def _bit_indices(words: np.ndarray) -> np.ndarray:
    """Positions of the set bits of uint64 words, ascending (cost: words / 8 + set bits)."""
    octets = words.view(np.uint8)
    nonzero = np.flatnonzero(octets != 0)  # np.flatnonzero is several times faster on bools
    bits = np.flatnonzero(np.unpackbits(octets[nonzero], bitorder="little").view(bool))
    out = nonzero[bits >> 3]
    out <<= 3
    out |= bits & 7
    return out


def _greedy_one(
    bits: _BitIndex, x_sides: np.ndarray, other: np.ndarray, weights: np.ndarray, zero: np.ndarray
) -> tuple[list[int], np.ndarray, int]:
    """Algorithm 1 for one input, with incremental counts on bit sets.

    Args:
        weights, zero: the input's :func:`_separation_weights`.

    Returns:
        The chosen boundaries in order, the covered images as bits (W uint64), and delta.
    """
    n_q = len(x_sides)
    n_ref = len(other)
    n_words = len(bits.valid)
    side = x_sides.astype(np.intp) + 1
    planes = bits.separated[side, np.arange(n_q)]  # planes[h]: the images h separates from x
    d = _pack(other)
    # tau(x): the images of D that no boundary separates from x.
    delta = int(_popcount(d & ~np.bitwise_or.reduce(planes, axis=0)))
    conflicts = int(_popcount(d))
    # counts[0, h]: covered images of D that h separates from x; counts[1, h]: the others
    counts = np.empty((2, n_q))
    counts[0] = _popcount(planes & d)
    counts[1] = n_ref - bits.count[side, np.arange(n_q)] - counts[0]
    covered = bits.valid.copy()
    n_covered = n_ref
    both = np.empty(2 * n_words, dtype=np.uint64)  # images of D, then the others
    order: list[int] = []
    with np.errstate(divide="ignore", invalid="ignore"):
        while conflicts > delta:
            # min num/den (den = 0 gives inf or nan, sorted last), then max den, then min h
            num, den = counts.sum(0), counts[0]
            h = int(np.lexsort((-den, num / den))[0])
            if not den[h] > 0:
                raise RuntimeError("no boundary removes an image of D(x) although |P ∩ D| > delta")
            order.append(h)
            removed = covered & planes[h]
            covered ^= removed
            n_removed, n_removed_other = int(num[h]), int(den[h])
            n_covered -= n_removed
            conflicts -= n_removed_other
            if conflicts <= delta:
                break
            # subtract what the removed images counted, or recount those that stay: the fewer
            recount = n_covered < n_removed
            rows, n_other = (covered, conflicts) if recount else (removed, n_removed_other)
            np.bitwise_and(rows, d, out=both[:n_words])
            np.bitwise_xor(rows, both[:n_words], out=both[n_words:])
            where = _bit_indices(both)
            where[n_other:] -= n_words * _WORD
            sums = bits.field_sums(where, n_other) @ weights
            zeros = bits.zero_counts(both)
            if zeros is not None:
                sums += zeros * zero
            if recount:
                counts = sums
            else:
                counts -= sums
    return order, covered, delta


def _greedy_incremental(index: CoverIndex, input_sides: Tensor, other_class: Tensor) -> CoverResult:
    """:func:`greedy_cover` one input at a time on the host (see :func:`_greedy_one`)."""
    bits = index.bits()
    n_ref, n_q = index.shape
    x_all = input_sides.cpu()
    weights, zero = (w.numpy() for w in _separation_weights(x_all))
    x_all = x_all.numpy()
    other_all = other_class.cpu().numpy().astype(bool, copy=False)
    n_in = len(x_all)
    order = np.full((n_in, n_q), -1, dtype=np.int64)
    covered = np.empty((n_in, n_ref), dtype=bool)
    delta = np.empty(n_in, dtype=np.int64)
    for b in range(n_in):
        chosen, words, delta[b] = _greedy_one(bits, x_all[b], other_all[b], weights[b], zero[b])
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
    """:func:`greedy_cover` for B inputs at once on :attr:`CoverIndex.device`: every count is
    recomputed at every step by one matrix product, inputs that are done are masked, and the
    host waits on the device once per ``block`` steps only (to stop when every input is done;
    default 4 on CUDA, 1 elsewhere). On CUDA the ``block`` steps are one CUDA graph, captured
    once per index, batch size and block."""
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


class _MaskedState:
    """The masked path's buffers for B inputs against one :class:`_DenseIndex`, kept at fixed
    addresses so that a CUDA graph can replay ``block`` steps on them.

    Attributes:
        a: the product's left side (0/1 in the product's dtype): rows 2b and 2b + 1 hold input
            b's covered images and those of D (the columns past |R| stay 0); ``pairs`` views it
            as B x 2 x |R|.
        weights: B x F x (|Q| + 1) and ``zero`` B x 1 x |Q|, the inputs'
            :func:`_separation_weights`, with a last column of zeros: boundary |Q| is a
            sentinel, chosen by inputs that are done.
        h: ``block`` x B, the boundary each step of the last block chose (|Q| when done).
    """

    def __init__(self, dense: _DenseIndex, n_in: int, block: int) -> None:
        n_q1, n_ref = dense.columns.shape
        n_q = n_q1 - 1
        device = dense.fields.device
        self.dense, self.n_in, self.block = dense, n_in, block
        self.a = torch.zeros(
            2 * n_in, dense.fields.shape[1], dtype=dense.fields.dtype, device=device
        )
        self.pairs = self.a.view(n_in, 2, -1)[:, :, :n_ref]
        self.weights = torch.zeros(n_in, n_q1, n_q1, dtype=torch.float64, device=device)
        self.zero = torch.zeros(n_in, 1, n_q, dtype=torch.float64, device=device)
        self.x_sides = torch.zeros(n_in, n_q1, dtype=torch.int8, device=device)  # last: 0
        # among equal ratios the larger den wins, then the lower h, the sentinel before all
        self.tie_key = torch.arange(n_q + 1, dtype=torch.float64, device=device).neg_().add_(n_q)
        self.tie_key[-1] = n_q + 1
        self.h = torch.zeros(block, n_in, dtype=torch.long, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None

    def capture(self) -> None:
        """Record :meth:`run_block`'s steps as a CUDA graph (after a warm-up run)."""
        stream = torch.cuda.Stream(self.a.device)
        stream.wait_stream(torch.cuda.current_stream(self.a.device))
        with torch.cuda.stream(stream):
            self._steps()
        torch.cuda.current_stream(self.a.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._steps()
        self.graph = graph

    def load(self, x_sides: Tensor, other: Tensor) -> None:
        """Start B new inputs: nothing chosen, every image covered."""
        n_q = x_sides.shape[1]
        self.a.zero_()
        self.pairs[:, 0] = 1
        self.pairs[:, 1] = other != 0
        weights, zero = _separation_weights(x_sides)
        self.weights[:, :, :n_q] = weights
        self.zero[:, 0] = zero
        self.x_sides[:, :n_q] = x_sides

    def covered(self) -> tuple[Tensor, Tensor]:
        """B x |R| bool, the images covered, and B long, those of D among them."""
        return self.pairs[:, 0] != 0, (self.pairs[:, 1] != 0).sum(1)

    def run_block(self) -> None:
        """``block`` greedy steps (steps of inputs that are done change nothing)."""
        if self.graph is None:
            self._steps()
        else:
            self.graph.replay()

    def _steps(self) -> None:
        dense, n_in = self.dense, self.n_in
        n_q = dense.columns.shape[0] - 1
        for j in range(self.block):
            counts = dense.product(self.a)[:, : n_q + 1].view(n_in, 2, n_q + 1)
            sep = torch.bmm(counts, self.weights)  # B x 2 x (|Q| + 1): num, den
            if len(dense.zero_rows):
                zeros = self.a[:, dense.zero_rows].double() @ dense.zero_sides
                sep[:, :, :n_q] += zeros.view(n_in, 2, n_q) * self.zero
            num, den = sep[:, 0], sep[:, 1]
            # den = 0: inf, or 0 / 0 = nan made the largest finite ratio (the sentinel's)
            ratio = torch.nan_to_num(num / den, nan=_SENTINEL_RATIO, posinf=math.inf)
            ties = ratio == ratio.amin(1, keepdim=True)
            torch.argmax(torch.add(self.tie_key, den, alpha=n_q + 2).mul_(ties), 1, out=self.h[j])
            keep = dense.columns[self.h[j]] == self.x_sides.gather(1, self.h[j].unsqueeze(1))
            self.pairs.mul_(keep.unsqueeze(1))


@dataclass
class ExactCoverResult(CoverResult):
    """Covers of B inputs by :func:`exact_cover`; ``order`` holds ``P(x)`` in ascending order.

    Attributes (besides :class:`CoverResult`'s):
        optimal: B bool, whether the representativeness is proven maximal.
        bound: B long, a proven upper bound on the optimal representativeness.
        gap: B float64, ``(bound - representativeness) / max(representativeness, 1)``.
        greedy_representativeness: B long, what Algorithm 1 covers.
        from_greedy: B bool, the greedy's ``P`` was kept (the solver found nothing better).
        seconds: B float64, wall time of the exact step (model building and solving).
    """

    optimal: Tensor
    bound: Tensor
    gap: Tensor
    greedy_representativeness: Tensor
    from_greedy: Tensor
    seconds: Tensor


def exact_cover(
    reference_sides: Tensor | CoverIndex,
    input_sides: Tensor,
    other_class: Tensor,
    time_limit: float = 5.0,
    greedy: CoverResult | None = None,
    reduce: bool = True,
) -> ExactCoverResult:
    """Eq. 3 solved to optimality (or to a certified gap) by a MILP, one input at a time.

    Maximise the reference images covered by ``P ⊆ Q`` subject to ``|P ∩ D| <= delta``, with
    ``delta = tau(x)`` as in :func:`greedy_cover`. Variables: a binary ``y_h`` per boundary (in
    ``P`` or not) and ``z_i`` in [0, 1] per reference image (covered or not):

        max sum_i z_i  s.t.  z_i <= 1 - y_h            for every h separating i from x,
                             z_i >= 1 - sum_h y_h      (same h) for i in D(x),
                             sum_{i in D(x)} z_i <= delta.

    For binary ``y`` the constraints force ``z_i`` to exactly "i is covered" on D(x), and the
    maximisation lifts it there elsewhere, so ``z`` needs no integrality. With ``reduce`` (exact,
    see :func:`_reduce`): images no boundary separates are a constant, the images of D(x) become
    covering rows "P meets the separating set of i" kept only for the minimal sets, boundaries
    in no such set are dropped, images outside D(x) that can never (or always) be covered are
    constants, and the rest are merged by separation pattern into one ``z`` weighted by count.

    Algorithm 1 runs first: its ``P`` is kept when the solver's incumbent is absent (time limit),
    infeasible or worse, and the solver is skipped when the greedy already covers every image
    outside D(x) plus delta (the trivial bound). The coverage of the solver's ``P`` is recomputed
    from ``P`` rather than read off ``z``.

    Args:
        reference_sides: |R| x |Q| int8 sides of the reference images (see :func:`sides`), or
            a :class:`CoverIndex` of them.
        input_sides: B x |Q| int8 sides of the inputs.
        other_class: B x |R| bool, ``D(x)``.
        time_limit: seconds for HiGHS per input; past it, the best solution and bound so far.
            HiGHS checks it between its steps, so a large, hard model can overrun it in presolve.
        greedy: :func:`greedy_cover` of the same inputs, if already computed.
        reduce: apply the reductions above (False builds one ``z`` per image, for testing).

    Returns:
        An :class:`ExactCoverResult` on ``reference_sides``'s device.
    """
    _check_shapes(reference_sides.shape, input_sides, other_class)
    if greedy is None:
        greedy = greedy_cover(reference_sides, input_sides, other_class)
    if isinstance(reference_sides, CoverIndex):
        reference_sides = reference_sides.sides
    n_in, n_q = input_sides.shape
    if greedy.covered.shape[0] != n_in:
        raise ValueError(f"greedy covers {greedy.covered.shape[0]} inputs, not {n_in}")
    ref = reference_sides.cpu().numpy()
    inputs = input_sides.cpu().numpy()
    others = other_class.cpu().numpy().astype(bool)
    greedy_covered = greedy.covered.cpu().numpy()
    deltas = greedy.delta.cpu().numpy()

    order = np.full((n_in, n_q), -1, dtype=np.int64)
    covered = np.empty_like(greedy_covered)
    bound = np.empty(n_in, dtype=np.int64)
    from_greedy = np.zeros(n_in, dtype=bool)
    seconds = np.empty(n_in)
    for b in range(n_in):
        start = time.perf_counter()
        sep, other, delta = ref != inputs[b], others[b], int(deltas[b])
        greedy_value = int(greedy_covered[b].sum())
        bound[b] = len(other) - int(other.sum()) + delta
        chosen = None
        if greedy_value < bound[b]:
            chosen, solver_bound = _solve(sep, other, time_limit, reduce)
            bound[b] = min(bound[b], solver_bound)
        if chosen is not None:
            covered[b] = ~sep[:, chosen].any(1)
        if (
            chosen is None
            or int((covered[b] & other).sum()) > delta
            or int(covered[b].sum()) < greedy_value
        ):
            chosen = np.sort(greedy.boundaries(b).cpu().numpy())
            covered[b] = greedy_covered[b]
            from_greedy[b] = True
        order[b, : len(chosen)] = chosen
        seconds[b] = time.perf_counter() - start

    value = covered.sum(1)
    bound = np.maximum(bound, value)  # HiGHS may end a tolerance below a feasible value
    device = reference_sides.device
    return ExactCoverResult(
        *(
            torch.from_numpy(a).to(device)
            for a in (
                order,
                covered,
                deltas,
                (covered & others).sum(1),
                value >= bound,
                bound,
                (bound - value) / np.maximum(value, 1),
                greedy_covered.sum(1),
                from_greedy,
                seconds,
            )
        )
    )


def _solve(
    sep: np.ndarray,
    other: np.ndarray,
    time_limit: float,
    reduce: bool,
    at_least: int | None = None,
) -> tuple[np.ndarray | None, float]:
    """One input's MILP (see :func:`exact_cover`).

    Args:
        sep: |R| x |Q| bool, whether each boundary separates each reference image from x.
        other: |R| bool, ``D(x)``.
        at_least: None: maximise the images covered. A count: cover at least that many and
            minimise ``sum_h (|Q|^2 + 1 + h) y_h`` instead, i.e. the fewest boundaries, then the
            smallest sum of their indices (:func:`fewest_boundaries`).

    Returns:
        The chosen boundaries (ascending; None without an incumbent) and an upper bound on the
        representativeness (inf without one; with ``at_least``, ``at_least`` itself).
    """
    if reduce:
        columns, constant, cover, weight, hit = _reduce(sep, other)
        hit_z = sparse.csr_array((len(hit), len(cover)))
        budget, delta = [], []
    else:
        columns, constant, cover, hit = np.arange(sep.shape[1]), 0, sep, sep[other]
        weight = np.ones(len(sep), dtype=np.int64)
        hit_z = sparse.eye_array(len(sep), format="csr")[np.flatnonzero(other)]
        budget = [[None, sparse.csr_array(other[None].astype(np.float64))]]
        delta = [int((other & ~sep.any(1)).sum())]
    n_y = len(columns)
    g, h = np.nonzero(cover)
    a = sparse.block_array(
        [
            # z_g + y_h <= 1 for every h separating g
            [
                sparse.coo_array((np.ones(len(h)), (np.arange(len(h)), h)), shape=(len(h), n_y)),
                sparse.eye_array(len(cover), format="csr")[g],
            ],
            # (z_i +) the y_h of the h separating i >= 1 for i in D
            [sparse.csr_array(hit.astype(np.float64)), hit_z],
            # sum of z_i over D <= delta
            *budget,
        ],
        format="csr",
        dtype=np.float64,
    )
    lower = np.concatenate(
        [np.full(len(h), -np.inf), np.ones(len(hit)), np.full(len(delta), -np.inf)]
    )
    upper = np.concatenate([np.ones(len(h)), np.full(len(hit), np.inf), delta])
    objective = np.concatenate([np.zeros(n_y), -weight])
    if at_least is not None:
        # sum_g weight_g z_g >= at_least - constant; the cost of P instead of its coverage
        a = sparse.vstack([a, sparse.csr_array(np.concatenate([np.zeros(n_y), weight])[None])])
        lower = np.append(lower, at_least - constant)
        upper = np.append(upper, np.inf)
        objective = np.concatenate([sep.shape[1] ** 2 + 1 + columns, np.zeros(len(cover))])
    res = milp(
        objective,
        integrality=np.concatenate([np.ones(n_y), np.zeros(len(cover))]),
        bounds=Bounds(0, 1),
        constraints=LinearConstraint(a.tocsr(), lower, upper),
        options={"time_limit": time_limit, "mip_rel_gap": 0.0},
    )
    if at_least is not None:
        return (None if res.x is None else columns[res.x[:n_y] > 0.5]), float(at_least)
    dual = res.mip_dual_bound
    bound = (
        math.inf if dual is None or not math.isfinite(dual) else math.floor(constant - dual + 1e-6)
    )
    return (None if res.x is None else columns[res.x[:n_y] > 0.5]), bound


def fewest_boundaries(
    reference_sides: Tensor,
    input_sides: Tensor,
    other_class: Tensor,
    result: ExactCoverResult,
    time_limit: float = 5.0,
) -> ExactCoverResult:
    """:func:`exact_cover`'s ``result`` made canonical: among the ``P`` that cover as many images
    (with ``|P ∩ D| <= delta``), the fewest boundaries, then the smallest sum of their indices
    (a second MILP per input; ``result``'s ``P`` stays where it finds nothing better in
    ``time_limit``). The MILP's optima differ by boundaries that separate nothing more, and
    HiGHS picks one; this fixes ``P``, and the heat map drawn from it, up to equal index sums.
    ``covered`` (same size, maybe another set), ``conflicts`` and ``seconds`` are updated."""
    ref, inputs = reference_sides.cpu().numpy(), input_sides.cpu().numpy()
    others = other_class.cpu().numpy().astype(bool)
    order, covered = result.order.cpu().numpy().copy(), result.covered.cpu().numpy().copy()
    seconds = result.seconds.cpu().numpy().copy()
    for b in range(len(inputs)):
        start, current = time.perf_counter(), order[b][order[b] >= 0]
        sep, value = ref != inputs[b], int(covered[b].sum())
        chosen, _ = _solve(sep, others[b], time_limit, True, at_least=value)
        now = np.zeros_like(covered[b]) if chosen is None else ~sep[:, chosen].any(1)
        cheaper = chosen is not None and (len(chosen), chosen.sum()) < (len(current), current.sum())
        if cheaper and now.sum() >= value and (now & others[b]).sum() <= int(result.delta[b]):
            order[b], covered[b] = -1, now
            order[b, : len(chosen)] = np.sort(chosen)
        seconds[b] += time.perf_counter() - start
    as_tensor = lambda a: torch.from_numpy(a).to(reference_sides.device)  # noqa: E731
    return dataclasses.replace(
        result,
        order=as_tensor(order),
        covered=as_tensor(covered),
        conflicts=as_tensor((covered & others).sum(1)),
        seconds=as_tensor(seconds),
    )


def _reduce(
    sep: np.ndarray, other: np.ndarray
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray]:
    """The reduced model of one input, exact because ``delta = tau(x)``.

    Every image of D(x) that some boundary separates must be separated by P, so P must hit the
    minimal separation patterns of D(x) (rows ``hit``); boundaries in none of them never help (P
    keeps to ``columns``). An image outside D(x) is always covered when no kept boundary
    separates it, never when its pattern contains one of ``hit``; the others, merged by pattern
    (rows ``cover``, with counts ``weight``), are what the MILP decides. ``constant`` counts the
    always-covered images, those of D(x) no boundary separates included.
    """
    separated = sep.any(1)
    hit = _minimal(sep[separated & other])
    columns = np.flatnonzero(hit.any(0))
    hit = hit[:, columns]
    rows = sep[~other][:, columns]
    free = ~rows.any(1)
    alive = _count_contained(rows, hit) == 0
    constant = int(free.sum()) + int((other & ~separated).sum())
    cover, weight = np.unique(rows[alive & ~free], axis=0, return_counts=True)
    return columns, constant, cover, weight, hit


def _minimal(patterns: np.ndarray) -> np.ndarray:
    """The distinct rows of a bool matrix that contain no other row (as sets of columns)."""
    rows = np.unique(patterns, axis=0)
    return rows[_count_contained(rows, rows) == 1]


def _count_contained(rows: np.ndarray, sets: np.ndarray, max_cells: int = 1 << 22) -> np.ndarray:
    """How many rows of ``sets`` each row of ``rows`` contains (bool matrices, as sets of
    columns), by matrix products over chunks of at most ``max_cells`` cells."""
    r, s = rows.astype(np.float32), sets.astype(np.float32)  # exact for counts below 2**24
    size = s.sum(1)
    counts = np.zeros(len(r), dtype=np.int64)
    step = max(1, max_cells // max(1, len(s)))
    for i in range(0, len(r), step):
        counts[i : i + step] = (r[i : i + step] @ s.T == size).sum(1)
    return counts
