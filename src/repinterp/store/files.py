"""Crash-safe file writes: what the project's indexes, shards, markers and weights are written
with.

`write_file` writes and flushes a file (or a part of one); `replace_file` replaces
a whole file in one atomic rename, so that a crash leaves the old file or the new one, never a
mix (`replace_files` several, all written before any is renamed). Both return the SHA-256 of
the bytes as they were written. The temporary file of a replacement is named ``.STEM.tmp-TOKEN``
beside ``NAME``, ``STEM`` being ``NAME`` or, where that would pass the 255 bytes a file name may
have, the start of ``NAME`` and a hash of all of it (`temporary_of` tells one, `temporary_stems`
the stems of names).

This module imports nothing from repinterp.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path
from typing import IO

__all__ = [
    "MAX_NAME",
    "fits_name",
    "refuse_folders",
    "replace_file",
    "replace_files",
    "sync_dir",
    "temporary_of",
    "temporary_stems",
    "write_file",
]

MAX_NAME = 255  # bytes of a file name (Linux's file systems, macOS's, Windows' in UTF-16 units)
_TEMPORARY = re.compile(r"\.(.+)\.tmp-[0-9a-f]{8}")
_ADDED = len(".") + len(".tmp-") + 8  # what a temporary name adds to its stem, in bytes
_HASHED = 17  # "~" and 16 hexadecimal digits of the name's SHA-256


def fits_name(name: str) -> bool:
    """Whether ``name`` is short enough for a file name (at most `MAX_NAME` bytes in UTF-8)."""
    return len(name.encode()) <= MAX_NAME


def _stem(name: str) -> str:
    """What the temporary files of ``name`` are named after: ``name``, or where the temporary
    name would not fit `MAX_NAME` bytes, its start and ``~`` and a hash of it."""
    if len(name.encode()) + _ADDED <= MAX_NAME:
        return name
    start = name.encode()[: MAX_NAME - _ADDED - _HASHED].decode(errors="ignore")
    return f"{start}~{hashlib.sha256(name.encode()).hexdigest()[:16]}"


def temporary_stems(names: Iterable[str]) -> set[str]:
    """The stems of ``names``' temporary files, which `temporary_of` gives back for them."""
    return {_stem(name) for name in names}


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
    """Write ``data`` as the file ``path`` (new or replaced) in one atomic rename (see
    `replace_files`).

    Returns:
        The SHA-256 of ``data`` as it was written.

    Raises:
        OSError: the file could not be written or renamed (``path`` unchanged).
    """
    return replace_files({Path(path): data})[Path(path)]


def replace_files(contents: dict[Path, bytes]) -> dict[Path, str]:
    """Write each file of ``contents`` (path: its bytes), new or replaced, by an atomic rename.

    The bytes of each go to a temporary file beside it (``.NAME.tmp-TOKEN``), flushed to the
    disk; once all are written, each is renamed over its file (the old file is replaced, never
    written into: a hard link to it, or the target of a symbolic link in its place, keeps the
    old bytes) and the folders' entries are flushed. A failure while writing (a full disk)
    leaves every file as it was; a crash leaves each file old or new; a failure also removes the
    temporary files.

    Returns:
        The SHA-256 of each file's bytes as they were written, by path.

    Raises:
        IsADirectoryError: a folder is where a file is to go (before anything is written).
        OSError: a file could not be written (all unchanged) or renamed; it names the file.
    """
    refuse_folders(contents)
    temporaries = {
        path: path.with_name(f".{_stem(path.name)}.tmp-{secrets.token_hex(4)}") for path in contents
    }
    digests, path = {}, None
    try:
        for path, data in contents.items():
            digests[path] = write_file(temporaries[path], [data])
        for path, temporary in temporaries.items():
            os.replace(temporary, path)
    except OSError as exc:
        if exc.filename in (None, str(temporaries.get(path))):  # name the file, not its temporary
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    finally:
        for temporary in temporaries.values():
            with suppress(OSError):
                temporary.unlink(missing_ok=True)
    for folder in {path.parent for path in contents}:
        sync_dir(folder)
    return digests


def refuse_folders(paths: Iterable[Path]) -> None:
    """Refuse to write files where folders are (a link to a folder is replaced, as any link).

    Raises:
        IsADirectoryError: naming the first such path.
    """
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            raise IsADirectoryError(errno.EISDIR, "a folder is where this file goes", str(path))


def temporary_of(name: str) -> str | None:
    """The stem of the file that ``name`` is a temporary file of (see `replace_file`): the
    file's name where it is short (`temporary_stems` for others), or None if it is not one."""
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
