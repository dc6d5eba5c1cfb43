"""Resumable builds: the index written shard by shard to a partial folder, with checksums.

[`Shards`][repinterp.store.shards.Shards] is what a caller passes to
[`build_index`][repinterp.store.index_build.build_index]; the rest is the build's bookkeeping: how
|R| is cut into shards of whole batches (``ShardPlan``), the partial
folder (``PartialBuild``: settings, ``Q``, shards and their log) and the feature file written a
block of rows at a time (``FeatureFile``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.torch import load_file
from safetensors.torch import save as save_bytes
from torch import Tensor

from ..core.boundaries import Boundaries
from ..core.reference_index import FEATURE_FILE
from ..runtime.checksums import file_sha256
from ..runtime.version import VERSION
from .files import replace_file, temporary_of, write_file
from .outputs import discard

__all__ = ["DEFAULT_SHARD_SIZE", "Shards", "partial_files"]

DEFAULT_SHARD_SIZE = 1024
_PARTIAL_MANIFEST = "partial.json"
_SHARD_LOG = "shards.jsonl"
_BOUNDARY_FILE = "boundaries.safetensors"


def _shard_name(k: int) -> str:
    return f"shard-{k:06d}.safetensors"


@dataclass(frozen=True)
class Shards:
    """Where [`build_index`][repinterp.store.index_build.build_index] writes the index shard by
    shard, so that a killed build resumes.

    After every ``size`` images, the shard's projections, logits, predictions (and labels) go to
    ``directory`` as a safetensors file, and a line with its SHA-256, that of the images and labels
    it was made from (and that of its rows of the feature file, if one is written) is appended
    to ``shards.jsonl``; ``Q`` and the
    settings of the build are kept in ``boundaries.safetensors`` and ``partial.json``. A resumed
    build reuses ``Q`` and every shard whose checksums hold and whose images are those it was
    made from (they are read again to check), recomputes the others (a warning names each),
    and gives the index of one uninterrupted pass, bit for bit.

    Attributes:
        directory: the partial folder (created if missing).
        size: images per shard, rounded down to a multiple of the batch size (at least one
            batch) so that the batches are those of one pass.
        resume: reuse what ``directory`` holds (refused with ``ValueError`` if it was made with
            another model, data, seed or sizes); otherwise start over.
    """

    directory: Path
    size: int = DEFAULT_SHARD_SIZE
    resume: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory", Path(self.directory))
        if self.size < 1:
            raise ValueError(f"the shard size must be >= 1, got {self.size}")

    def remove(self) -> None:
        """Delete the partial files (the feature file kept there included) and the folder's
        bookkeeping (see `outputs`), and ``directory`` if that empties it: once the index is
        saved they are no longer needed."""
        _clear_partial(self.directory)
        discard(self.directory)


def _clear_partial(directory: Path) -> None:
    """Remove the partial files of ``directory`` (with the temporary files of their
    replacements); nothing else."""
    if not directory.is_dir():
        return
    names = {_PARTIAL_MANIFEST, _SHARD_LOG, _BOUNDARY_FILE, FEATURE_FILE}
    for path in directory.iterdir():
        name = temporary_of(path.name) or path.name
        if name in names or re.fullmatch(r"shard-\d+\.safetensors", name):
            path.unlink(missing_ok=True)


def partial_files(plan: ShardPlan) -> list[str]:
    """The names of the files a build of ``plan`` writes in its partial folder (but the
    feature file)."""
    return [_PARTIAL_MANIFEST, _SHARD_LOG, _BOUNDARY_FILE, *map(_shard_name, range(plan.n_shards))]


@dataclass(frozen=True)
class ShardPlan:
    """|R| images cut into shards of whole batches of ``batch`` images."""

    n: int
    batch: int
    shard: int

    @classmethod
    def make(cls, n: int, batch: int, shard: int) -> ShardPlan:
        return cls(n, batch, max(batch, shard // batch * batch))

    @property
    def n_shards(self) -> int:
        return -(-self.n // self.shard)

    def bounds(self, k: int) -> tuple[int, int]:
        """``(start, stop)`` of shard ``k``."""
        start = k * self.shard
        return start, min(start + self.shard, self.n)

    def batches(self, shards: Sequence[int]) -> list[tuple[int, int]]:
        """``(start, stop)`` of every batch of ``shards``, in order."""
        out = []
        for k in shards:
            start, stop = self.bounds(k)
            out += [(b, min(b + self.batch, stop)) for b in range(start, stop, self.batch)]
        return out


class FeatureFile:
    """Flattened feature maps, an |R| x d float32 ``.npy`` written a block of rows at a time.

    The rows go through plain file writes, so they sit in the page cache, not in this
    process's resident memory as they would through a writable memmap. The checksum of every
    block is kept as it is written (or as it was recorded by an interrupted build), and that of
    the whole file too when it is written in one pass:
    [`file_sha256`][repinterp.store.shards.FeatureFile.file_sha256] refuses a file that another
    process changed meanwhile.
    """

    def __init__(self, path: Path, n_rows: int, dim: int, reuse: bool) -> None:
        self.path, self.n_rows, self.row_bytes = path, n_rows, 4 * dim
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": "<f4", "fortran_order": False, "shape": (n_rows, dim)}
        )
        self.header = header.getvalue()
        self.offset = len(self.header)
        self.blocks: dict[int, tuple[int, str]] = {}  # start row: (stop row, SHA-256)
        self.whole: Any = None  # the running SHA-256 of a file written in one pass
        self.next_row = 0
        if not (reuse and self._fits()):
            path.unlink(missing_ok=True)  # a new file, never one shared with a saved index
            write_file(path, [self.header])
            os.truncate(path, self.offset + n_rows * self.row_bytes)
            self.whole = hashlib.sha256(self.header)

    def _fits(self) -> bool:
        try:
            with open(self.path, "rb") as f:
                header = f.read(self.offset)
        except OSError:
            return False
        size = self.offset + self.n_rows * self.row_bytes
        return header == self.header and self.path.stat().st_size == size

    def write(self, start: int, rows: np.ndarray) -> str:
        """Write ``rows`` (n x d) from row ``start`` on; returns their SHA-256."""
        data = memoryview(np.ascontiguousarray(rows, dtype=np.float32)).cast("B")
        digest = write_file(self.path, [data], "r+b", self.offset + start * self.row_bytes)
        self.record(start, start + len(rows), digest)
        if self.whole is not None and start == self.next_row:
            self.whole.update(data)
            self.next_row = start + len(rows)
        else:
            self.whole = None
        return digest

    def record(self, start: int, stop: int, digest: str) -> None:
        """Rows ``start`` to ``stop`` are in the file with this SHA-256 (verified or written)."""
        self.blocks[start] = (stop, digest)

    def _rows(self, f: io.BufferedReader, start: int, stop: int) -> Iterator[bytes]:
        f.seek(self.offset + start * self.row_bytes)
        remaining = (stop - start) * self.row_bytes
        while remaining > 0 and (block := f.read(min(remaining, 1 << 20))):
            remaining -= len(block)
            yield block

    def sha256(self, start: int, stop: int) -> str:
        """SHA-256 of rows ``start`` to ``stop`` as they are on disk."""
        digest = hashlib.sha256()
        with open(self.path, "rb") as f:
            for block in self._rows(f, start, stop):
                digest.update(block)
        return digest.hexdigest()

    def file_sha256(self) -> str:
        """SHA-256 of the whole file, which must hold exactly the rows recorded.

        Raises:
            ValueError: a row is missing or was changed after it was written (by another
                process writing to the same file).
        """
        if self.whole is not None and self.next_row == self.n_rows:
            return self.whole.hexdigest()
        changed = ValueError(
            f"{self.path} was changed while it was being written (by another process?): "
            "run the command again"
        )
        whole = hashlib.sha256()
        with open(self.path, "rb") as f:
            if f.read(self.offset) != self.header:
                raise changed
            whole.update(self.header)
            row = 0
            for start, (stop, expected) in sorted(self.blocks.items()):
                block = hashlib.sha256()
                for chunk in self._rows(f, start, stop) if start == row else ():
                    block.update(chunk)
                    whole.update(chunk)
                if start != row or block.hexdigest() != expected:
                    raise changed
                row = stop
        if row != self.n_rows:
            raise changed
        return whole.hexdigest()


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 20 else text[:13] + "…"


class PartialBuild:
    """The partial folder of a sharded build; only rank 0 touches it.

    Args:
        shards: the folder and whether to resume from it.
        config: what the build depends on; resuming from a folder made with another config is
            refused.
        implicit: the value of a setting that ``config`` leaves out (e.g. the paper's
            granularity), so that a refusal names it.
    """

    def __init__(
        self, shards: Shards, config: dict[str, Any], implicit: dict[str, Any] | None = None
    ) -> None:
        self.dir = shards.directory
        self.config = config
        previous = self._previous() if shards.resume else None
        if previous is not None:
            old = (implicit or {}) | previous.get("config", {})
            new = (implicit or {}) | config
            changed = [k for k in sorted(new.keys() | old.keys()) if old.get(k) != new.get(k)]
            if changed:
                what = ", ".join(
                    f"{k} {_short(old.get(k))} there, {_short(new.get(k))} here" for k in changed
                )
                raise ValueError(
                    f"cannot resume from {self.dir}: it was made with other settings ({what}); "
                    "start over without resume"
                )
        self.resumed = previous is not None
        self.boundary_sha: str | None = previous.get("boundaries_sha256") if previous else None
        if not self.resumed:
            self._start_over()

    def _previous(self) -> dict[str, Any] | None:
        path = self.dir / _PARTIAL_MANIFEST
        if not path.is_file():
            return None
        try:
            manifest = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            warnings.warn(f"{path} is damaged: starting the build over", stacklevel=4)
            return None
        return manifest if isinstance(manifest, dict) else None

    def _start_over(self) -> None:
        _clear_partial(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.resumed, self.boundary_sha = False, None
        self._write_manifest()

    def _write_manifest(self) -> None:
        manifest = {
            "config": self.config,
            "boundaries_sha256": self.boundary_sha,
            "repinterp_version": VERSION,
        }
        replace_file(self.dir / _PARTIAL_MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())

    def boundaries(self) -> Boundaries | None:
        """The stored ``Q`` if its checksum holds; if it is damaged, the build starts over."""
        path = self.dir / _BOUNDARY_FILE
        if not self.resumed or self.boundary_sha is None:
            return None
        if not path.is_file() or file_sha256(path) != self.boundary_sha:
            warnings.warn(f"{path} is damaged: starting the build over", stacklevel=3)
            self._start_over()
            return None
        t = load_file(str(path))
        return Boundaries(t["weight"], t["bias"], t["top_classes"])

    def save_boundaries(self, q: Boundaries) -> None:
        data = save_bytes(
            {"weight": q.weight, "bias": q.bias, "top_classes": q.top_classes},
        )
        self.boundary_sha = replace_file(self.dir / _BOUNDARY_FILE, data)
        self._write_manifest()

    def complete(
        self,
        plan: ShardPlan,
        features: FeatureFile | None,
        images: Callable[[Sequence[int]], dict[int, str]],
    ) -> dict[int, dict[str, Tensor]]:
        """The shards recorded as complete whose checksums hold, loaded (on the CPU); a damaged
        one, or one made from other images (its recorded SHA-256 of its images and labels
        not ``images``' of them now, by shard), is reported with a warning and left to be
        recomputed."""
        log = self.dir / _SHARD_LOG
        if not self.resumed or not log.is_file():
            return {}
        records = {}
        for line in log.read_text().splitlines():
            try:
                record = json.loads(line)
                records[int(record["shard"])] = record
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue  # a line torn by the kill: its shard is recomputed
        intact = {}
        for k, record in sorted(records.items()):
            if not 0 <= k < plan.n_shards:
                continue
            path, (start, stop) = self.dir / _shard_name(k), plan.bounds(k)
            if not (
                path.is_file()
                and file_sha256(path) == record.get("sha256")
                and (features is None or features.sha256(start, stop) == record.get("features"))
            ):
                warnings.warn(f"shard {k} in {self.dir} is damaged: recomputing it", stacklevel=3)
                continue
            intact[k] = record
        now = images(sorted(intact)) if intact else {}
        done = {}
        for k, record in intact.items():
            if record.get("images") != now[k]:
                start, stop = plan.bounds(k)
                warnings.warn(
                    f"shard {k} in {self.dir} was made from other reference images than images "
                    f"{start}..{stop - 1} are now: recomputing it",
                    stacklevel=3,
                )
                continue
            if features is not None:
                features.record(*plan.bounds(k), record["features"])
            done[k] = load_file(str(self.dir / _shard_name(k)))
        return done

    def save_shard(
        self, k: int, tensors: dict[str, Tensor], features_sha: str | None, images_sha: str
    ) -> None:
        """Write shard ``k`` and record its checksums, that of the images it was made from
        included (the shard file first, then the record)."""
        digest = replace_file(self.dir / _shard_name(k), save_bytes(tensors))
        record = {"shard": k, "sha256": digest, "features": features_sha, "images": images_sha}
        write_file(self.dir / _SHARD_LOG, [(json.dumps(record) + "\n").encode()], mode="ab")
