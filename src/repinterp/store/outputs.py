"""Where the project writes: output folders, their lock, and crash-safe file writes.

The rule: a command writes only into a folder that does not exist, is empty, or is the
project's own output of the same kind (an index, a partial fit, an explain / report / demo /
evaluation folder); any other folder is refused with :class:`OutputError`, which names it,
unless the caller says ``overwrite`` (and even then nothing but the files the command writes
is touched). An index folder is never the output folder of another kind, ``overwrite`` or not.
A folder is claimed under a lock (:func:`lock`): a second writer to the same folder fails at
once. Files are written through :func:`write_file`, which returns the SHA-256 of the bytes as
they were written.

This module imports nothing from repinterp.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

import filelock

__all__ = [
    "LOCK_FILE",
    "MARKER_FILE",
    "OutputError",
    "claim",
    "discard",
    "folder_kind",
    "lock",
    "sync_dir",
    "write_file",
]

MARKER_FILE = ".repinterp-output.json"
LOCK_FILE = ".repinterp.lock"


def _bookkeeping(name: str) -> bool:
    """This module's own files: the marker (and its temporary files) and the lock."""
    return name in (MARKER_FILE, LOCK_FILE) or name.startswith(f"{MARKER_FILE}.tmp-")


KINDS = ("index", "partial", "explain", "report", "demo", "evaluation")


class OutputError(ValueError):
    """An output folder that a command must not write into (or that another one is using)."""


def _write(f: IO[bytes], data: bytes | memoryview) -> None:
    """Every byte the project writes goes through here (the crash tests fail it at will)."""
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
        offset: where in the file to write (for mode ``"r+b"``).

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


def sync_dir(path: str | Path) -> None:
    """Flush a folder's entries (new and renamed files) to the disk, where the system allows."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the data files are synced
    finally:
        os.close(fd)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _is_index(folder: Path) -> bool:
    manifest = _read_json(folder / "manifest.json")
    return isinstance(manifest, dict) and "format_version" in manifest and "sha256" in manifest


def _summaries(folder: Path, names: list[str]) -> bool:
    """Whether ``folder`` holds explanation summaries, and every JSON file in it is one."""
    jsons = [_read_json(folder / n) for n in names if n.endswith(".json")]
    return bool(jsons) and all(isinstance(j, dict) and "representativeness" in j for j in jsons)


# What earlier versions wrote (before the marker existed): every entry matches the pattern,
# and the folder passes the check.
_LEGACY = {
    "index": (r"\.partial", lambda f, n: True),  # a fit killed before it saved
    "demo": (
        r"index\.html|index|unseen-\d+\.(png|json)",
        lambda f, n: _is_index(f / "index") and _summaries(f, n),
    ),
    "report": (r"index\.html|region-\d+-ref-\d+\.(png|json)", _summaries),
    "explain": (r".+\.(png|json)", _summaries),
    "evaluation": (
        r"results\.(json|md)|[\w.-]+\.png",
        lambda f, n: "protocol" in (_read_json(f / "results.json") or {}),
    ),
    "partial": (
        r"partial\.json|shards\.jsonl|boundaries\.safetensors|features\.npy|shard-.*",
        lambda f, n: isinstance(_read_json(f / "partial.json"), dict),
    ),
}


def _legacy_kind(folder: Path, names: list[str]) -> str | None:
    for kind, (pattern, check) in _LEGACY.items():
        if all(re.fullmatch(pattern, n) for n in names) and check(folder, names):
            return kind
    return None


def folder_kind(path: str | Path) -> str | None:
    """What a folder holds, for :func:`claim`.

    Returns:
        None for a folder that does not exist or holds nothing but this module's bookkeeping;
        ``"index"`` for a repinterp index; the kind in its marker file (or the kind whose files
        alone it holds, for output of earlier versions); ``"foreign"`` for anything else.

    Raises:
        OutputError: ``path`` exists and is not a folder.
    """
    folder = Path(path)
    if not folder.exists():
        return None
    if not folder.is_dir():
        raise OutputError(f"{folder} is a file, not a folder: give a folder to write into")
    if _is_index(folder):
        return "index"
    names = sorted(p.name for p in folder.iterdir() if not _bookkeeping(p.name))
    marker = _read_json(folder / MARKER_FILE)
    if isinstance(marker, dict) and marker.get("kind") in KINDS:
        return str(marker["kind"])
    if not names:
        return None
    return _legacy_kind(folder, names) or "foreign"


@contextmanager
def lock(folder: str | Path) -> Iterator[None]:
    """Hold the write lock of ``folder`` (created if missing) for the block.

    The lock is a file in the folder, locked by the operating system: it is let go when this
    process ends, however it ends. It is re-entrant within a thread: a command that holds it
    can save an index into the same folder.

    Raises:
        OutputError: another process (or thread) holds it; raised at once, without waiting.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    held = filelock.FileLock(folder.resolve() / LOCK_FILE, timeout=0, is_singleton=True)
    try:
        held.acquire()
    except filelock.Timeout:
        raise OutputError(
            f"another repinterp command is writing to {folder}: wait for it to finish "
            "(or choose another folder)"
        ) from None
    try:
        yield
    finally:
        held.release()


_WHAT = {
    "index": "an index",
    "partial": "the shards of a fit (--shards)",
    "explain": "explanations",
    "report": "a report",
    "demo": "the demo",
    "evaluation": "evaluation results",
}


def _refusal(folder: Path, kind: str, found: str) -> str:
    if found == "index":
        return (
            f"{folder} is a repinterp index: {_WHAT[kind]} need a folder of their own (an index "
            "is never the output of another command, even with --overwrite)"
        )
    held = "files that repinterp did not write" if found == "foreign" else _WHAT[found]
    if kind == "partial":
        return f"{folder} holds {held}: give --shards a new or empty folder"
    return (
        f"{folder} holds {held}: give a new or empty folder, or pass --overwrite to write "
        f"{_WHAT[kind]} into it anyway (nothing else in it is touched)"
    )


@contextmanager
def claim(folder: str | Path, kind: str, overwrite: bool = False) -> Iterator[Path]:
    """Make ``folder`` the output of a command of ``kind``, and hold its lock for the block.

    The folder is accepted if it does not exist, is empty or is already of ``kind``; one of
    another kind, or with other files in it, only with ``overwrite``; an index only by
    ``kind="index"``. The marker file then records ``kind``. If the block fails and the
    folder was made here and holds nothing else, it is removed again.

    Args:
        folder: the output folder.
        kind: one of ``index``, ``partial``, ``explain``, ``report``, ``demo``, ``evaluation``.
        overwrite: accept a folder of another kind or with other files (not an index).

    Yields:
        ``folder`` as a Path.

    Raises:
        OutputError: the folder is refused, is a file, or another command holds its lock.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}; one of {', '.join(KINDS)}")
    folder = Path(folder)

    def check() -> None:
        found = folder_kind(folder)
        if found is None or found == kind:
            return
        if found == "index" or "partial" in (kind, found) or not overwrite:
            raise OutputError(_refusal(folder, kind, found))

    check()
    created = not folder.exists()
    try:
        with lock(folder):
            check()  # again under the lock: another command may have written meanwhile
            for stale in folder.glob(f"{MARKER_FILE}.tmp-*"):  # left by a killed command
                stale.unlink(missing_ok=True)
            if _read_json(folder / MARKER_FILE) != {"kind": kind}:
                marker = folder / f"{MARKER_FILE}.tmp-{os.getpid()}"
                write_file(marker, [json.dumps({"kind": kind}).encode()], mode="wb")
                os.replace(marker, folder / MARKER_FILE)
            yield folder
    finally:
        if created and folder.is_dir() and all(_bookkeeping(p.name) for p in folder.iterdir()):
            discard(folder)


def discard(folder: str | Path) -> None:
    """Remove this module's bookkeeping files from ``folder``, and the folder if that empties
    it (for a folder that is no longer needed, e.g. the partial folder of a finished fit)."""
    folder = Path(folder)
    for entry in folder.iterdir() if folder.is_dir() else ():
        if _bookkeeping(entry.name):
            with suppress(OSError):
                entry.unlink()
    with suppress(OSError):
        folder.rmdir()
