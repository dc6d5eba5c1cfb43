"""The greedy's host path: one input at a time, with counts updated incrementally on bit sets
of the reference images and field sums by an embedding bag."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .common import FLOAT32_EXACT, ROWS_PER_BUILD, round_up, separation_terms, side_fields

_WORD = 64
# A step's counts by one pass over the |Q| x W planes cost about as much as field sums over
# 1 / 10 image per plane word, less the field sums' fixed cost per step (~2,000 images); timed
# on single inputs, random sides and a small CNN's index, |Q| = 50, |R| = 1k to 1M.
_ROWS_PER_PLANE_WORD = 0.1
_ROWS_PER_STEP = 2_000


@functools.cache
def _row_sum_op() -> Callable[..., Tensor] | None:
    """``torch.ops.quantized.embedding_bag_2bit_rowwise_offsets`` if this build has it."""
    try:
        return torch.ops.quantized.embedding_bag_2bit_rowwise_offsets
    except (AttributeError, RuntimeError):
        return None


@dataclass
class BitIndex:
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
    def build(cls, sides: Tensor, zero_rows: Tensor) -> BitIndex:
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
            width = round_up(n_q + 1, 4) // 4
            table = torch.zeros(n_ref, width + 4, dtype=torch.uint8)
            table[:, width : width + 2] = torch.frombuffer(
                bytearray(np.float16(1).tobytes()), dtype=torch.uint8
            )
            for start in range(0, n_ref, ROWS_PER_BUILD):
                f = side_fields(sides[start : start + ROWS_PER_BUILD])
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
        if len(rows) < FLOAT32_EXACT:
            offsets = torch.from_numpy(np.array((0, split)))
            out = op(
                self.table, torch.from_numpy(rows), offsets, False, 0, False, None, None, False
            )
            return out.numpy()[:, : n_q + 1]
        # bags of fewer than 2**24 images, summed in float64
        step = FLOAT32_EXACT - 1
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
    # summing into 32 bits is faster, and exact below 2**32 bits per row
    dtype = np.uint32 if words.shape[-1] < 1 << 26 else np.uint64
    if hasattr(np, "bitwise_count"):  # numpy >= 2
        return np.bitwise_count(words).sum(-1, dtype=dtype).astype(np.int64)
    return _BYTE_POPCOUNT[words.view(np.uint8)].sum(-1, dtype=dtype).astype(np.int64)


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


def greedy_one(
    bits: BitIndex, x_sides: np.ndarray, other: np.ndarray
) -> tuple[list[int], np.ndarray, int]:
    """Algorithm 1 for one input, with counts on bit sets.

    After each step the counts are either recounted by one pass over the planes (popcounts of
    |Q| x W words, whatever the step removed) or updated on the images the step removed (or
    recounted on those it keeps, when fewer) by field sums: whichever costs less, by
    `_ROWS_PER_PLANE_WORD`. Both give the same integers.

    Args:
        bits: the index's structures.
        x_sides: |Q| int8, the input's sides.
        other: |R| bool, ``D(x)``.

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
    both = np.empty((2, n_words), dtype=np.uint64)  # images of D, then the others
    pass_rows = _ROWS_PER_PLANE_WORD * n_q * n_words - _ROWS_PER_STEP
    per_plane: np.ndarray | None = None
    weights: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    order: list[int] = []
    while conflicts > delta:
        # min num/den over den > 0, then max den, then min h
        den = counts[0]
        num = den + counts[1]
        ratio = np.divide(num, den, out=np.full(n_q, np.inf), where=den > 0)
        best = ratio.min()
        if best == np.inf:
            raise RuntimeError("no boundary removes an image of D(x) although |P ∩ D| > delta")
        h = int(np.argmax(np.where(ratio == best, den, -1.0)))
        order.append(h)
        removed = covered & planes[h]
        covered ^= removed
        n_removed, n_removed_other = int(num[h]), int(den[h])
        n_covered -= n_removed
        conflicts -= n_removed_other
        if conflicts <= delta:
            break
        recount = n_covered < n_removed
        if min(n_covered, n_removed) > pass_rows:  # one pass over the planes is cheaper
            np.bitwise_and(covered, d, out=both[0])
            np.bitwise_xor(covered, both[0], out=both[1])
            if per_plane is None:
                per_plane = np.empty((n_q, 2, n_words), dtype=np.uint64)
            np.bitwise_and(planes[:, None], both, out=per_plane)
            counts = _popcount(per_plane).T.astype(np.float64)
            continue
        # subtract what the removed images counted, or recount those that stay: the fewer
        rows, n_other = (covered, conflicts) if recount else (removed, n_removed_other)
        np.bitwise_and(rows, d, out=both[0])
        np.bitwise_xor(rows, both[0], out=both[1])
        flat = both.reshape(-1)
        where = _bit_indices(flat)
        where[n_other:] -= n_words * _WORD
        if weights is None:
            terms = separation_terms(torch.from_numpy(x_sides))
            weights = tuple(t.numpy() for t in terms)
        fields = bits.field_sums(where, n_other)
        sums = fields[:, :n_q] * weights[0]
        sums += fields[:, n_q:] * weights[1]
        zeros = bits.zero_counts(flat)
        if zeros is not None:
            sums += zeros * weights[2]
        if recount:
            counts = sums
        else:
            counts -= sums
    return order, covered, delta
