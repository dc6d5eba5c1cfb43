"""``CoverIndex``: the reference sides prepared once per index for the greedy's two paths."""

from __future__ import annotations

import torch
from torch import Tensor

from .incremental import BitIndex
from .masked import DenseIndex, MaskedState

_KEPT_GRAPHS = 4


class CoverIndex:
    """Reference sides prepared once for [`greedy_cover`][repinterp.core.cover.greedy_cover]; build
    one per index and reuse it.

    What the two paths of [`greedy_cover`][repinterp.core.cover.greedy_cover] need is built on first
    use:

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
        reference_sides: |R| x |Q| int8 sides of the reference images (see
            [`sides`][repinterp.core.cover.sides]).
    """

    def __init__(self, reference_sides: Tensor) -> None:
        if reference_sides.ndim != 2:
            raise ValueError(
                f"reference_sides must be |R| x |Q|, got {tuple(reference_sides.shape)}"
            )
        self.sides = reference_sides
        self.zero_rows = (reference_sides == 0).any(1).nonzero().squeeze(1)
        self._bits: BitIndex | None = None
        self._dense: DenseIndex | None = None
        self._states: dict[tuple[int, int], MaskedState] = {}

    @property
    def shape(self) -> torch.Size:
        """``(|R|, |Q|)``."""
        return self.sides.shape

    @property
    def device(self) -> torch.device:
        """The device of the sides (where the masked path runs and results are returned)."""
        return self.sides.device

    def bits(self) -> BitIndex:
        """The incremental path's host structures (built on first call)."""
        if self._bits is None:
            self._bits = BitIndex.build(self.sides.cpu(), self.zero_rows.cpu())
        return self._bits

    def dense(self) -> DenseIndex:
        """The masked path's structures on [`device`][repinterp.core.cover.CoverIndex.device] (built
        on first call)."""
        if self._dense is None:
            self._dense = DenseIndex.build(self.sides, self.zero_rows)
        return self._dense

    def masked_state(self, n_inputs: int, block: int) -> MaskedState:
        """Buffers for the masked path; on CUDA, with their steps captured as a CUDA graph
        and kept for the next calls with as many inputs (the last few sizes)."""
        if self.device.type != "cuda":
            return MaskedState(self.dense(), n_inputs, block)
        key = (n_inputs, block)
        state = self._states.pop(key, None)
        if state is None:
            state = MaskedState(self.dense(), n_inputs, block)
            state.capture()
        self._states[key] = state  # most recently used last
        while len(self._states) > _KEPT_GRAPHS:
            del self._states[next(iter(self._states))]
        return state
