"""The greedy's masked path: all inputs at once on the sides' device, every count recomputed
by one matrix product per step, inputs that are done masked, and on CUDA the steps captured as
a CUDA graph."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .common import FLOAT32_EXACT, ROWS_PER_BUILD, round_up, separation_weights, side_fields

_SENTINEL_RATIO = 1e300  # larger than any num / den, finite


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
class DenseIndex:
    """The masked path's structures, on the sides' device.

    Attributes:
        kind: how products are computed (see `_product_kind`).
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
    def build(cls, sides: Tensor, zero_rows: Tensor) -> DenseIndex:
        n_ref, n_q = sides.shape
        kind = _product_kind(sides.device)
        fields = sides.new_zeros(
            round_up(n_q + 1, 8), round_up(max(n_ref, 1), 8), dtype=_PRODUCT_DTYPES[kind]
        )
        for start in range(0, n_ref, ROWS_PER_BUILD):
            rows = sides[start : start + ROWS_PER_BUILD]
            fields[: n_q + 1, start : start + rows.shape[0]] = side_fields(rows).T
        columns = torch.cat([sides.T, sides.new_zeros(1, n_ref)]).contiguous()
        return cls(kind, fields, columns, zero_rows, (sides[zero_rows] == 0).double())

    def product(self, a: Tensor) -> Tensor:
        """``a @ fields.T`` (float64; exact: float32 sums are split below 2**24 images)."""
        if self.kind == "int8":
            return torch._int_mm(a, self.fields.T).double()
        k = self.fields.shape[1]
        parts = [
            torch.mm(
                a[:, i : i + FLOAT32_EXACT],
                self.fields[:, i : i + FLOAT32_EXACT].T,
                **({"out_dtype": torch.float32} if self.kind == "half" else {}),
            ).double()
            for i in range(0, k, FLOAT32_EXACT)
        ]
        return parts[0] if len(parts) == 1 else torch.stack(parts).sum(0)


class MaskedState:
    """The masked path's buffers for B inputs against one `DenseIndex`, kept at fixed
    addresses so that a CUDA graph can replay ``block`` steps on them.

    Attributes:
        a: the product's left side (0/1 in the product's dtype): rows 2b and 2b + 1 hold input
            b's covered images and those of D (the columns past |R| stay 0); ``pairs`` views it
            as B x 2 x |R|.
        weights: B x F x (|Q| + 1) and ``zero`` B x 1 x |Q|, the inputs'
            `separation_weights`, with a last column of zeros: boundary |Q| is a
            sentinel, chosen by inputs that are done.
        h: ``block`` x B, the boundary each step of the last block chose (|Q| when done).
    """

    def __init__(self, dense: DenseIndex, n_in: int, block: int) -> None:
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
        """Record `run_block`'s steps as a CUDA graph (after a warm-up run)."""
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
        weights, zero = separation_weights(x_sides)
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
