"""Algorithm 1 of the paper: a greedy solution of the submodular-cost submodular-cover problem.

Everything here works on *sides*: ``sign(<W_h, t> + b_h)`` in {-1, 0, 1} for every reference
image and boundary. A reference image is covered by ``P`` when it has the input's side on every
boundary of ``P``; it is *separated* by ``h`` when its side on ``h`` differs from the input's.
"""

from __future__ import annotations

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

    The structures are built on first use, for the path that needs them:

    - incremental path (host): per boundary ``h`` and side value ``v``, the bit set of the
      images whose side on ``h`` is not ``v`` and their count, and every image's fields (its side
      is +1, its side is 0, 1) packed two bits each, for summing rows with an embedding bag;
    - masked path (the sides' device): the same fields as an int8 matrix, and the sides
      transposed (one boundary's sides contiguous).

    Args:
        reference_sides: |R| x |Q| int8 sides of the reference images (see :func:`sides`).
    """

    def __init__(self, reference_sides: Tensor) -> None:
        if reference_sides.ndim != 2:
            raise ValueError(
                f"reference_sides must be |R| x |Q|, got {tuple(reference_sides.shape)}"
            )
        self.sides = reference_sides
        self.has_zero = bool((reference_sides == 0).any())
        self._bits: _BitIndex | None = None
        self._dense: tuple[Tensor, Tensor] | None = None

    @property
    def shape(self) -> torch.Size:
        """``(|R|, |Q|)``."""
        return self.sides.shape

    @property
    def device(self) -> torch.device:
        """The device of the sides (and of the masked path's structures)."""
        return self.sides.device

    @property
    def n_fields(self) -> int:
        """Per image: |Q| fields "side is +1", |Q| fields "side is 0" if any side is 0, and 1."""
        return self.shape[1] * (2 if self.has_zero else 1) + 1

    def fields(self, rows: Tensor) -> Tensor:
        """The 0/1 fields of some reference images (n x :attr:`n_fields`, uint8)."""
        parts = [rows > 0] + ([rows == 0] if self.has_zero else [])
        parts.append(torch.ones(rows.shape[0], 1, dtype=torch.bool, device=rows.device))
        return torch.cat(parts, 1).to(torch.uint8)

    def bits(self) -> _BitIndex:
        """The incremental path's host structures (built on first call)."""
        if self._bits is None:
            self._bits = _BitIndex.build(self)
        return self._bits

    def dense(self) -> tuple[Tensor, Tensor]:
        """The masked path's structures on :attr:`device` (built on first call): the fields as
        an int8 ``F x |R|'`` matrix (|R| and F rounded up to multiples of 8 with zeros, as
        ``torch._int_mm`` needs) and the sides transposed with a row of zeros appended
        (``|Q| + 1`` x |R|; the zero row is a boundary no image is separated by)."""
        if self._dense is None:
            n_ref = self.shape[0]
            fields = torch.zeros(
                _round_up(self.n_fields, 8),
                _round_up(max(n_ref, 1), 8),
                dtype=torch.int8,
                device=self.device,
            )
            for start in range(0, n_ref, _ROWS_PER_BUILD):
                rows = self.sides[start : start + _ROWS_PER_BUILD]
                fields[: self.n_fields, start : start + rows.shape[0]] = self.fields(rows).T
            columns = torch.cat([self.sides.T, self.sides.new_zeros(1, n_ref)])
            self._dense = fields, columns.contiguous()
        return self._dense


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

    Two implementations, with the same results:

    - ``"incremental"``, one input at a time on the host: the counts start from the index's
      per-boundary counts and are then updated with only the images each step removes (or
      recounted on those it keeps, when fewer), found on bit sets; each image is counted about
      once, so one input costs O(|R| |Q| / 64 per step + |R| + |Q| per step).
    - ``"masked"``, all inputs at once on the index's device: every step recounts with one int8
      matrix product, inputs that are done are masked, and the host waits on the device once per
      8 steps only.

    ``"auto"`` takes the incremental path on the host for single inputs and small batches, and
    the masked one for large batches and on CUDA (see :func:`_auto_method`).

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
        result = _greedy_incremental(index, input_sides, other_class)
        return CoverResult(*(t.to(index.device) for t in vars(result).values()))
    if method == "masked":
        return _greedy_masked(index, input_sides, other_class, max_elements)
    raise ValueError(f"method must be 'auto', 'incremental' or 'masked', got {method!r}")


def _auto_method(index: CoverIndex, n_inputs: int) -> str:
    """The faster path for ``n_inputs`` inputs against ``index`` (measured by
    ``benchmarks/bench_cover.py``)."""
    n_ref = index.shape[0]
    if index.device.type == "cpu":
        return "masked" if n_inputs * 2048 > n_ref * 64 else "incremental"
    return "masked"


def _check_shapes(shape: torch.Size, input_sides: Tensor, other_class: Tensor) -> None:
    n_ref, n_q = shape
    if input_sides.ndim != 2 or input_sides.shape[1] != n_q:
        raise ValueError(f"input_sides must be B x {n_q}, got {tuple(input_sides.shape)}")
    if other_class.shape != (input_sides.shape[0], n_ref):
        raise ValueError(
            f"other_class must be {input_sides.shape[0]} x {n_ref}, got {tuple(other_class.shape)}"
        )


_ROWS_PER_BUILD = 1 << 16
_FLOAT32_EXACT = 1 << 24  # float32 sums of 0/1 values are exact below this


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


@functools.cache
def _row_sum_op() -> Callable[..., Tensor] | None:
    """``torch.ops.quantized.embedding_bag_2bit_rowwise_offsets`` if this build has it."""
    try:
        return torch.ops.quantized.embedding_bag_2bit_rowwise_offsets
    except (AttributeError, RuntimeError):
        return None


@dataclass
class _BitIndex:
    """The incremental path's host structures for |R| images and |Q| boundaries, W words.

    Attributes:
        separated: 3 x |Q| x W uint64; bit r of ``separated[v + 1, h]`` is set when image r's
            side on h is not v (bits past |R| are clear).
        count: 3 x |Q| int64, the images with side v on h.
        valid: W uint64, the bits of the |R| images.
        table: |R| rows of the fields packed 2 bits each, then float16 scale 1 and bias 0 (the
            layout of ``embedding_bag_2bit_rowwise_offsets``); None without that operator.
        sides: |R| x |Q| int8, to sum the fields without the operator; None with it.
    """

    separated: np.ndarray
    count: np.ndarray
    valid: np.ndarray
    table: Tensor | None
    sides: np.ndarray | None
    n_fields: int
    has_zero: bool

    @classmethod
    def build(cls, index: CoverIndex) -> _BitIndex:
        host = index.sides.cpu()
        s = host.numpy()
        n_ref, n_q = s.shape
        n_words = -(-n_ref // _WORD)
        separated = np.zeros((3, n_q, n_words), dtype=np.uint64)
        columns = np.ascontiguousarray(s.T)
        for v in (-1, 0, 1):
            packed = np.packbits(columns != v, axis=1, bitorder="little")
            separated[v + 1].view(np.uint8)[:, : packed.shape[1]] = packed
        count = n_ref - np.bitwise_count(separated).sum(2, dtype=np.int64)
        valid = _pack(np.ones(n_ref, dtype=bool))
        table = None
        if _row_sum_op() is not None:
            width = _round_up(index.n_fields, 4) // 4
            table = torch.zeros(n_ref, width + 4, dtype=torch.uint8)
            table[:, width : width + 2] = torch.frombuffer(
                bytearray(np.float16(1).tobytes()), dtype=torch.uint8
            )
            for start in range(0, n_ref, _ROWS_PER_BUILD):
                f = index.fields(host[start : start + _ROWS_PER_BUILD])
                f = torch.nn.functional.pad(f, (0, 4 * width - f.shape[1])).view(-1, width, 4)
                table[start : start + f.shape[0], :width] = (
                    f[..., 0] | f[..., 1] << 2 | f[..., 2] << 4 | f[..., 3] << 6
                )
        return cls(
            separated=separated,
            count=count,
            valid=valid,
            table=table,
            sides=None if table is not None else s,
            n_fields=index.n_fields,
            has_zero=index.has_zero,
        )

    def field_sums(self, rows: np.ndarray, split: int) -> np.ndarray:
        """2 x F float64: the sums of the fields of ``rows[:split]`` and of ``rows[split:]``."""
        if self.table is None:
            assert self.sides is not None
            out = np.zeros((2, self.n_fields))
            for i, part in enumerate((rows[:split], rows[split:])):
                s = self.sides[part]
                n_q = s.shape[1]
                out[i, :n_q] = np.count_nonzero(s > 0, axis=0)
                if self.has_zero:
                    out[i, n_q : 2 * n_q] = np.count_nonzero(s == 0, axis=0)
                out[i, -1] = len(part)
            return out
        op = _row_sum_op()
        assert op is not None
        out = np.zeros((2, self.n_fields))
        if len(rows) < _FLOAT32_EXACT:
            parts = [(torch.from_numpy(rows), torch.tensor([0, split]))]
        else:  # one bag per chunk, summed here in float64
            parts = []
            for i, part in enumerate((rows[:split], rows[split:])):
                for start in range(0, len(part), _FLOAT32_EXACT - 1):
                    chunk = torch.from_numpy(part[start : start + _FLOAT32_EXACT - 1])
                    offsets = torch.tensor([0, 0] if i else [0, len(chunk)])
                    parts.append((chunk, offsets))
        for idx, offsets in parts:
            sums = op(self.table, idx, offsets, False, 0, False, None, None, False)
            out += sums[:, : self.n_fields].numpy()
        return out


_WORD = 64


def _pack(mask: np.ndarray) -> np.ndarray:
    """A bool vector as little-endian bits in uint64 words (the last one padded with zeros)."""
    words = np.zeros(-(-len(mask) // _WORD), dtype=np.uint64)
    packed = np.packbits(mask, bitorder="little")
    words.view(np.uint8)[: len(packed)] = packed
    return words


def _bit_indices(words: np.ndarray) -> np.ndarray:
    """Positions of the set bits of uint64 words, ascending (cost: words / 8 + set bits)."""
    octets = words.view(np.uint8)
    nonzero = np.flatnonzero(octets)
    bits = np.flatnonzero(np.unpackbits(octets[nonzero], bitorder="little"))
    out = nonzero[bits >> 3]
    out <<= 3
    out |= bits & 7
    return out


def _separation_weights(x_sides: np.ndarray, n_fields: int, has_zero: bool) -> np.ndarray:
    """F x |Q| float64 ``M`` such that ``field sums @ M`` counts, per boundary, the summed
    images it separates from x (side +1: 1 - [+1]; side -1: [+1] + [0]; side 0: 1 - [0])."""
    n_q = len(x_sides)
    m = np.zeros((n_fields, n_q))
    h = np.arange(n_q)
    m[h, h] = -x_sides
    if has_zero:
        m[n_q + h, h] = (x_sides < 0).astype(np.float64) - (x_sides == 0)
    m[-1] = x_sides >= 0
    return m


def _greedy_one(
    bits: _BitIndex, x_sides: np.ndarray, other: np.ndarray
) -> tuple[list[int], np.ndarray, int]:
    """Algorithm 1 for one input with incremental counts on bit sets.

    Returns:
        The chosen boundaries in order, the covered images as bits (W uint64), and delta.
    """
    n_q = len(x_sides)
    n_ref = len(other)
    n_words = bits.valid.shape[0]
    # planes[h]: the images h separates from x
    planes = bits.separated[x_sides.astype(np.intp) + 1, np.arange(n_q)]
    d = _pack(other)
    # tau(x): the images of D that no boundary separates from x.
    delta = int(np.bitwise_count(d & ~np.bitwise_or.reduce(planes, axis=0)).sum())
    conflicts = int(np.bitwise_count(d).sum())
    num = (n_ref - bits.count[x_sides.astype(np.intp) + 1, np.arange(n_q)]).astype(np.float64)
    den = np.bitwise_count(planes & d).sum(1).astype(np.float64)
    weights = _separation_weights(x_sides, bits.n_fields, bits.has_zero)
    covered = bits.valid.copy()
    n_covered = n_ref
    order: list[int] = []
    with np.errstate(divide="ignore", invalid="ignore"):
        while conflicts > delta:
            # min num/den (den = 0 gives inf or nan, sorted last), then max den, then min h
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
            # subtract what the removed images counted, or recount what stays: the smaller
            recount = n_covered < n_removed
            rows, n_other = (covered, conflicts) if recount else (removed, n_removed_other)
            rows_other = rows & d
            where = _bit_indices(np.concatenate((rows_other, rows ^ rows_other)))
            where[n_other:] -= n_words * _WORD
            sums = bits.field_sums(where, n_other) @ weights  # 2 x |Q|: D, not D
            if recount:
                den = sums[0]
                num = den + sums[1]
            else:
                den -= sums[0]
                num -= sums[0] + sums[1]
    return order, covered, delta


def _greedy_incremental(index: CoverIndex, input_sides: Tensor, other_class: Tensor) -> CoverResult:
    """:func:`greedy_cover` one input at a time on the host (see :func:`_greedy_one`)."""
    bits = index.bits()
    n_ref, n_q = index.shape
    x_all = input_sides.cpu().numpy()
    other_all = other_class.cpu().numpy().astype(bool, copy=False)
    n_in = x_all.shape[0]
    order = np.full((n_in, n_q), -1, dtype=np.int64)
    covered = np.empty((n_in, n_ref), dtype=bool)
    delta = np.empty(n_in, dtype=np.int64)
    for b in range(n_in):
        chosen, words, delta[b] = _greedy_one(bits, x_all[b], other_all[b])
        order[b, : len(chosen)] = chosen
        covered[b] = np.unpackbits(words.view(np.uint8), count=n_ref, bitorder="little")
    device = input_sides.device
    return CoverResult(
        order=torch.from_numpy(order).to(device),
        covered=torch.from_numpy(covered).to(device),
        delta=torch.from_numpy(delta).to(device),
        conflicts=torch.from_numpy(delta.copy()).to(device),
    )


def _greedy_masked(
    index: CoverIndex,
    input_sides: Tensor,
    other_class: Tensor,
    max_elements: int,
    block: int = 8,
) -> CoverResult:
    """:func:`greedy_cover` for B inputs at once on :attr:`CoverIndex.device`, every count
    recomputed at every step by one int8 matrix product, with no host synchronisation but one
    per ``block`` steps (to stop when every input is done)."""
    n_ref, _ = index.shape
    device = index.device
    chunk = max(1, max_elements // max(1, n_ref * 4))
    parts = [
        _masked_chunk(
            index,
            input_sides[i : i + chunk].to(device),
            other_class[i : i + chunk].to(device),
            block,
        )
        for i in range(0, input_sides.shape[0], chunk)
    ]
    return CoverResult(*(torch.cat(field) for field in zip(*parts, strict=True)))


def _masked_chunk(
    index: CoverIndex, x_sides: Tensor, other: Tensor, block: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    fields, columns = index.dense()
    n_ref, n_q = index.shape
    n_fields = index.n_fields
    n_in = x_sides.shape[0]
    device = fields.device
    # rows 2b and 2b + 1: input b's covered images, and those of D (torch._int_mm on CUDA wants
    # more than 16 rows); the columns past |R| stay 0.
    a = torch.zeros(max(17, 2 * n_in), fields.shape[1], dtype=torch.int8, device=device)
    covered, covered_other = a[0 : 2 * n_in : 2, :n_ref], a[1 : 2 * n_in : 2, :n_ref]
    covered.fill_(1)
    other8 = other.to(torch.int8)
    weights = _separation_weights_batch(x_sides, n_fields, index.has_zero)
    x_ext = torch.cat([x_sides, x_sides.new_zeros(n_in, 1)], 1)  # boundary |Q|: none separated
    # among equal ratios: the larger den, then the lower h
    tie_key = torch.arange(n_q, 0, -1, dtype=torch.float64, device=device)
    order = torch.full((n_in, n_q), n_q, dtype=torch.long, device=device)
    for start in range(0, n_q, block):
        for step in range(start, min(start + block, n_q)):
            torch.bitwise_and(covered, other8, out=covered_other)
            counts = torch._int_mm(a, fields.T)[: 2 * n_in, :n_fields]
            sep = torch.bmm(counts.view(n_in, 2, n_fields).double(), weights)
            num, den = sep[:, 0], sep[:, 1]
            ratio = torch.where(den > 0, num / den, torch.inf)
            best = ratio.min(1, keepdim=True).values
            key = torch.where(ratio == best, den * (n_q + 1) + tie_key, -1)
            h = torch.where(best.squeeze(1) < torch.inf, key.argmax(1), n_q)
            order[:, step] = h
            covered &= columns[h] == x_ext.gather(1, h.unsqueeze(1))
        if not bool((h < n_q).any()):
            break
    order.masked_fill_(order == n_q, -1)
    delta = other8.logical_and(covered).sum(1)
    return order, covered.bool(), delta, delta.clone()


def _separation_weights_batch(x_sides: Tensor, n_fields: int, has_zero: bool) -> Tensor:
    """B x F x |Q| float64: :func:`_separation_weights` of each input."""
    n_in, n_q = x_sides.shape
    m = x_sides.new_zeros(n_in, n_fields, n_q, dtype=torch.float64)
    h = torch.arange(n_q, device=x_sides.device)
    x = x_sides.double()
    m[:, h, h] = -x
    if has_zero:
        m[:, n_q + h, h] = (x < 0).double() - (x == 0).double()
    m[:, -1] = (x >= 0).double()
    return m


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
    reference_sides: Tensor,
    input_sides: Tensor,
    other_class: Tensor,
    time_limit: float = 5.0,
    greedy: CoverResult | None = None,
    reduce: bool = True,
) -> ExactCoverResult:
    """Eq. 4 solved to optimality (or to a certified gap) by a MILP, one input at a time.

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
        reference_sides: |R| x |Q| int8 sides of the reference images (see :func:`sides`).
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
    sep: np.ndarray, other: np.ndarray, time_limit: float, reduce: bool
) -> tuple[np.ndarray | None, float]:
    """One input's MILP (see :func:`exact_cover`).

    Args:
        sep: |R| x |Q| bool, whether each boundary separates each reference image from x.
        other: |R| bool, ``D(x)``.

    Returns:
        The chosen boundaries (ascending; None without an incumbent) and an upper bound on the
        representativeness (inf without one).
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
    res = milp(
        np.concatenate([np.zeros(n_y), -weight]),
        integrality=np.concatenate([np.ones(n_y), np.zeros(len(cover))]),
        bounds=Bounds(0, 1),
        constraints=LinearConstraint(
            a,
            np.concatenate(
                [np.full(len(h), -np.inf), np.ones(len(hit)), np.full(len(delta), -np.inf)]
            ),
            np.concatenate([np.ones(len(h)), np.full(len(hit), np.inf), delta]),
        ),
        options={"time_limit": time_limit, "mip_rel_gap": 0.0},
    )
    dual = res.mip_dual_bound
    bound = (
        math.inf if dual is None or not math.isfinite(dual) else math.floor(constant - dual + 1e-6)
    )
    return (None if res.x is None else columns[res.x[:n_y] > 0.5]), bound


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
