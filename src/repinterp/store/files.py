"""Crash-safe file writes: what the project's indexes, shards, markers and weights are written
with.

`write_file` writes and flushes a file (or a part of one); `replace_file` replaces
a whole file in one atomic rename, so that a crash leaves the old file or the new one, never a
mix. Both return the SHA-256 of the bytes as they were written. The temporary file of a
replacement is named ``.NAME.tmp-TOKEN`` beside ``NAME`` (`temporary_of` tells one).

This module imports nothing from repinterp.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path
from typing import IO

__all__ = ["replace_file", "sync_dir", "temporary_of", "write_file"]

_TEMPORARY = re.compile(r"\.(.+)\.tmp-[0-9a-f]{8}")


def _write(f: IO[bytes], data: bytes | memoryview) -> None:
    """Every byte written through this module goes through here (the crash tests fail it at
    will)."""
    f.write(data)


def write_file(
    path: str | Path,
    chunks: Iterable[bytes | memoryview],
    mode: str = "xb",
    offset: int | None = None,
) -> str:
    """Write ``chunks`` to ``path`` and flush them to the disk.

    Args:
        path: the file; with the default mode ``"xb"`` it must not exist yet.
        chunks: the bytes, in order.
        mode: ``"xb"`` (a new file), ``"wb"``, ``"ab"`` or ``"r+b"`` (with ``offset``).
        offset: where in the file to write (for mode ``"r+b"``), in bytes.

    Returns:
        The SHA-256 of the bytes written, computed from them as they were written (never re-read
        from the disk, where another process could have changed them).
    """
    digest = hashlib.sha256()
    with open(path, mode) as f:
        if offset is not None:
            f.seek(offset)
        for chunk in chunks:
            _write(f, chunk)
            digest.update(chunk)
        f.flush()
        os.fsync(f.fileno())
    return digest.hexdigest()


def replace_file(path: str | Path, data: bytes) -> str:
    """Write ``data`` as the file ``path`` (new or replaced) in one atomic rename.

    The bytes go to a temporary file beside it (``.NAME.tmp-TOKEN``), flushed to the disk and
    renamed over ``path``; the folder's entries are then flushed too. A crash leaves the old
    file or the new one; a failure also removes the temporary file.

    Returns:
        The SHA-256 of ``data`` as it was written.

    Raises:
        OSError: the file could not be written or renamed (``path`` unchanged).
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    try:
        digest = write_file(temporary, [data])
        os.replace(temporary, path)
    except BaseException:
        with suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise
    sync_dir(path.parent)
    return digest


def temporary_of(name: str) -> str | None:
    """The name of the file that ``name`` is a temporary file of (see `replace_file`),
    or None if it is not one."""
    match = _TEMPORARY.fullmatch(name)
    return match.group(1) if match else None


def sync_dir(path: str | Path) -> None:
    """Flush a folder's entries (new and renamed files) to the disk, where the system allows
    (never raises: the files themselves are flushed)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    with suppress(OSError):  # some systems cannot sync a folder; the data files are synced
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
