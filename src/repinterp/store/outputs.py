"""Where the project writes: output folders, their marker and their lock.

The rule: a command writes only into a folder that does not exist, is empty, or is the
project's own output of the same kind (an index, a partial fit, an explain / report / demo /
evaluation folder); any other folder is refused with `OutputError`, which names it,
unless the caller says ``overwrite`` (and even then nothing but the files the command writes
is touched). An index folder is never the output folder of another kind, ``overwrite`` or not,
and no output folder holds one of the command's inputs or lies inside a folder of them
(`refuse_inputs`).

The project's own folders are known by their marker file alone, ``.repinterp-output.json``:
it records their kind and the files the project wrote there (`listed`), and only those
are ever removed (`remove_listed`). A command lists each file before it writes it (`record`;
`write_outputs` does both), so that what a killed command leaves is known too, and a file that
someone else saves into the folder meanwhile is never taken for the project's. A command that
writes into another kind's folder (``overwrite``) takes over none of its files: they are kept as
a user's are. A folder that the project did not make never gets a marker, ``overwrite`` or not;
an index saved before markers existed (repinterp 0.2) is recognised by its manifest, whose
checksums of its files must hold. A command that fails before it wrote a new file leaves the
marker as it found it, and removes the folders it made. A folder is claimed under a lock
(`lock`): a second writer fails at once.

Imports from repinterp only `files` and the runtime's checksums.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import filelock

from ..runtime.checksums import file_sha256
from .files import (
    MAX_NAME,
    fits_name,
    replace_file,
    replace_files,
    temporary_of,
    temporary_stems,
)

__all__ = [
    "KINDS",
    "LOCK_FILE",
    "MARKER_FILE",
    "OutputError",
    "check_file",
    "check_folder",
    "claim",
    "discard",
    "distinct_names",
    "folder_kind",
    "listed",
    "lock",
    "record",
    "refuse_inputs",
    "remove_listed",
    "write_outputs",
]

MARKER_FILE = ".repinterp-output.json"
LOCK_FILE = ".repinterp.lock"
KINDS = ("index", "partial", "explain", "report", "demo", "evaluation", "audit")
_MANIFEST = "manifest.json"  # an index's (see repinterp.store.index_folder)
_PARTIAL = ".partial"  # the partial folder of a fit, inside its index folder
_HELD = threading.local()


def _bookkeeping(name: str) -> bool:
    """This module's own files: the marker (and its temporary files) and the lock."""
    return name in (MARKER_FILE, LOCK_FILE) or temporary_of(name) == MARKER_FILE


class OutputError(ValueError):
    """An output folder that a command must not write into (or that another one is using)."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _entries(folder: Path) -> set[str]:
    """The names in ``folder`` but this module's bookkeeping."""
    return {p.name for p in folder.iterdir() if not _bookkeeping(p.name)}


def _marker(folder: Path) -> dict[str, Any] | None:
    """The folder's marker, ``{"kind": KIND, "files": [NAME, ...]}``, or None (no marker, or
    not one of this version: earlier ones did not list their files)."""
    return _as_marker(_read_json(folder / MARKER_FILE))


def _as_marker(marker: Any) -> dict[str, Any] | None:
    if not (isinstance(marker, dict) and marker.get("kind") in KINDS):
        return None
    files = marker.get("files")
    if not (isinstance(files, list) and all(isinstance(name, str) for name in files)):
        return None
    return marker


def _marker_bytes(kind: str, files: Iterable[str]) -> bytes:
    return json.dumps({"kind": kind, "files": sorted(files)}).encode()


def listed(folder: str | Path) -> set[str]:
    """The names of the files that the project wrote in ``folder``, as its marker lists them
    (none for a folder without a marker)."""
    marker = _marker(Path(folder))
    return set(marker["files"]) if marker else set()


def record(folder: str | Path, names: Iterable[str]) -> None:
    """List ``names`` in the marker of ``folder`` before they are written there, so that they
    are known as the project's even if the command is killed; a folder without a marker (a
    user's, written into with ``overwrite``) gets none. Call it while holding the folder's
    claim."""
    folder, names = Path(folder), set(names)
    marker = _marker(folder)
    if marker is not None and not names <= set(marker["files"]):
        data = _marker_bytes(marker["kind"], {*marker["files"], *names})
        replace_file(folder / MARKER_FILE, data)


def write_outputs(contents: dict[Path, bytes]) -> None:
    """Write a command's output files (path: bytes) into the folders it claimed: each is
    listed in its folder's marker first (`record`), then all are written beside their files and
    renamed over them (`replace_files`). A file is replaced, never written into: a hard-linked
    backup of the folder, or the file outside it that a symbolic link there points to, keeps
    its bytes (the link itself is replaced). A failure while writing (a full disk) leaves every
    earlier file as it was.

    Raises:
        OSError: a file could not be written (naming it).
    """
    folders: dict[Path, list[str]] = {}
    for path in contents:
        folders.setdefault(path.parent, []).append(path.name)
    for folder, names in folders.items():
        record(folder, names)
    replace_files(contents)


def distinct_names(names: list[str], files: Callable[[str], list[str]]) -> list[str]:
    """``names`` made distinct as the names of output files: no two names' files
    (``files(name)``, e.g. ``NAME.png`` and ``NAME.json``) share a file, and each fits
    `MAX_NAME` bytes. A name keeps its place in order: it is kept if it can be, else cut to
    fit and numbered (``NAME-2``, ``NAME-3``, ...) past the files of the names before it.

    Args:
        names: the wanted names, in order.
        files: the file names that a name gives, each made of the name and what follows it.
    """
    taken: set[str] = set()
    out = []
    for name in names:
        longest = max(len(file.encode()) for file in files(name)) - len(name.encode())
        cut = name.encode()[: MAX_NAME - longest - len("-99999")].decode(errors="ignore")
        candidate = name if len(name.encode()) + longest <= MAX_NAME else cut
        n = 1
        while taken & set(files(candidate)):
            n += 1
            candidate = f"{cut}-{n}"
        taken |= set(files(candidate))
        out.append(candidate)
    return out


def remove_listed(folder: str | Path, keep: Iterable[str]) -> None:
    """Remove from ``folder`` the files that its marker lists but ``keep`` does not name, and
    the temporary files of the files it lists (see `replace_file`):
    what the project wrote there and no longer uses. Nothing else is ever removed."""
    folder, keep = Path(folder), set(keep)
    ours = listed(folder)
    for entry in folder.iterdir():
        of = temporary_of(entry.name)
        unused = of in temporary_stems(ours) if of is not None else entry.name in ours - keep
        if unused and entry.is_file() and not entry.is_symlink():
            with suppress(OSError):
                entry.unlink()


def _holds_index(folder: Path) -> bool:
    """Whether ``folder`` looks like an index (a manifest with a format and checksums), which
    no other kind of output may write into, checksums verified or not."""
    manifest = _read_json(folder / _MANIFEST)
    return isinstance(manifest, dict) and "format_version" in manifest and "sha256" in manifest


def _unmarked_index(folder: Path, names: set[str]) -> bool:
    """Whether ``folder`` is an index saved without a marker (by repinterp 0.2) and nothing
    else: its manifest gives the SHA-256 of ``index.safetensors`` and of every other file it
    lists, each holds, and the folder holds nothing but those files, the manifest and the
    partial folder of a fit."""
    manifest = _read_json(folder / _MANIFEST)
    checksums = manifest.get("sha256") if isinstance(manifest, dict) else None
    moved = manifest.get("files", {}) if isinstance(manifest, dict) else None
    if not (isinstance(checksums, dict) and "index.safetensors" in checksums):
        return False
    if not isinstance(moved, dict):
        return False
    own = {_MANIFEST, _PARTIAL}
    for name, digest in checksums.items():
        other = moved.get(name)  # the name a file has while a save settles
        file = other if isinstance(other, str) and (folder / other).is_file() else name
        if not (isinstance(file, str) and Path(file).name == file and (folder / file).is_file()):
            return False
        if file_sha256(folder / file) != digest:
            return False
        own.add(file)
    return names <= own


def _check_path(folder: Path) -> None:
    """Refuse a folder that cannot be made: a link to nothing, or a path through a file."""
    for path in (folder, *folder.parents):
        if path.is_symlink() and not path.exists():
            raise OutputError(
                f"{path} is a symbolic link to {os.readlink(path)}, which does not exist: give "
                "a folder that exists, or a new path"
            )
        if path.exists():
            if path != folder and not path.is_dir():
                raise OutputError(f"{folder} cannot be made: {path} is a file, not a folder")
            return


def _check_bookkeeping(folder: Path) -> None:
    """Refuse a folder whose marker or lock is not a plain file (a folder, a link)."""
    for name, what in ((MARKER_FILE, "marker"), (LOCK_FILE, "lock")):
        path = folder / name
        if path.is_symlink() or (path.exists() and not path.is_file()):
            found = "a symbolic link" if path.is_symlink() else "not a plain file"
            raise OutputError(
                f"{path} is {found}, where repinterp keeps its {what} file: remove or rename it"
            )


def folder_kind(path: str | Path) -> str | None:
    """What a folder holds, for `claim`.

    Returns:
        None for a folder that does not exist or holds nothing but this module's bookkeeping;
        the kind its marker records; ``"index"`` for an index saved without a marker whose
        checksums hold and that holds nothing else; ``"foreign"`` for anything else.

    Raises:
        OutputError: ``path`` exists and is not a folder, cannot be made (a link to nothing, a
            path through a file), or holds a marker or lock that is not a plain file.
    """
    folder = Path(path)
    _check_path(folder)
    if not folder.exists():
        return None
    if not folder.is_dir():
        raise OutputError(f"{folder} is a file, not a folder: give a folder to write into")
    _check_bookkeeping(folder)
    marker = _marker(folder)
    if marker is not None:
        return str(marker["kind"])
    names = _entries(folder)
    if not names:
        return None
    return "index" if _unmarked_index(folder, names) else "foreign"


def refuse_inputs(folder: str | Path, inputs: Iterable[str | Path]) -> None:
    """Refuse ``folder`` as the output of a command that reads ``inputs`` (files, and folders
    of files) if it holds one of them or lies inside one: a command never writes over, or
    into, what it reads, ``overwrite`` or not.

    Raises:
        OutputError: naming the input.
    """
    out = Path(folder).resolve()
    for given in inputs:
        source = Path(given).resolve()
        if out in source.parents:
            raise OutputError(
                f"{folder} holds {given}, an input of this command: give another folder (a "
                "command never writes over its inputs, even with --overwrite)"
            )
        if source == out:
            raise OutputError(
                f"{folder} is an input of this command: give another path (a command never "
                "writes over its inputs, even with --overwrite)"
            )
        if source in out.parents:
            raise OutputError(
                f"{folder} is inside {given}, which this command reads: give a path outside it"
            )


def check_file(path: str | Path, inputs: Iterable[str | Path] = ()) -> None:
    """Refuse ``path`` as a file that a command is to write (``train --out``), before the
    command does its work; whether it may replace an existing file is the caller's to say.

    Raises:
        OutputError: ``path`` is one of ``inputs`` or inside a folder of them; its name is too
            long for the file system with the temporary name it is written under; its folder
            is refused by `check_folder`.
    """
    path = Path(path)
    refuse_inputs(path, inputs)
    if not fits_name(path.name):
        raise OutputError(f"{path}: File name too long (at most {MAX_NAME} bytes)")
    check_folder(path.parent, f"the folder of {path.name}")


def check_folder(folder: str | Path, what: str) -> None:
    """Refuse ``folder`` as one that a command writes files of its own into, outside the
    output kinds of `claim` (the folder of ``train --out``, ``evaluate --model-cache``),
    before the command does its work.

    Args:
        folder: the folder, which may not exist yet.
        what: how the error names it (e.g. ``"--model-cache"``).

    Raises:
        OutputError: ``folder`` is a file, cannot be made (a link to nothing, a path through a
            file) or written, or is an index, inside one, or the partial folder of a fit (never
            another command's output).
    """
    folder = Path(folder)
    try:
        found = folder_kind(folder)
    except OutputError as exc:
        raise OutputError(f"{what}: {exc}") from None
    if found in ("index", "partial") or (folder.is_dir() and _holds_index(folder)):
        held = "index" if found != "partial" else "partial folder"
        raise OutputError(
            f"{what}: {folder} is a repinterp {held}: give another folder (an index is never "
            "the output of another command, even with --overwrite)"
        )
    index = next((p for p in folder.parents if p.is_dir() and _holds_index(p)), None)
    if index is not None:
        raise OutputError(
            f"{what}: {folder} is inside the repinterp index {index}: give a folder outside it"
        )
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"{what}: cannot write to {folder}: permission denied")


@contextmanager
def lock(folder: str | Path) -> Iterator[None]:
    """Hold the write lock of ``folder`` (created if missing) for the block.

    The lock is a file in the folder, locked by the operating system: it is let go when this
    process ends, however it ends. It is re-entrant within a thread: a command that holds it
    can save an index into the same folder.

    Raises:
        OutputError: another process (or thread) holds it (raised at once, without waiting),
            or the folder or its lock file cannot be made.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _check_bookkeeping(folder)
        held = filelock.FileLock(folder.resolve() / LOCK_FILE, timeout=0, is_singleton=True)
        held.acquire()
    except filelock.Timeout:
        raise OutputError(
            f"another repinterp command is writing to {folder}: wait for it to finish "
            "(or choose another folder)"
        ) from None
    except OSError as exc:
        raise OutputError(f"cannot write to {folder}: {exc.strerror or exc}") from None
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
    "audit": "audits of strategies",
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


def _check(folder: Path, kind: str, overwrite: bool) -> str | None:
    """What ``folder`` holds (see `folder_kind`), if a command of ``kind`` may write
    there; raises `OutputError` otherwise."""
    found = folder_kind(folder)
    if kind != "index" and found not in (None, "index") and _holds_index(folder):
        found = "index"  # what looks like an index is one, to every other kind
    if found is None or found == kind:
        return found
    if found == "index" or "partial" in (kind, found) or not overwrite:
        raise OutputError(_refusal(folder, kind, found))
    return found


def _first_missing(folder: Path) -> Path | None:
    """The outermost folder of the path to ``folder`` that does not exist yet, or None."""
    missing = None
    for path in (folder, *folder.parents):
        if path.exists():
            break
        missing = path
    return missing


@contextmanager
def claim(
    folder: str | Path, kind: str, overwrite: bool = False, inputs: Iterable[str | Path] = ()
) -> Iterator[Path]:
    """Make ``folder`` the output of a command of ``kind``, and hold its lock for the block.

    The folder is accepted if it does not exist, is empty or is already of ``kind``; one of
    another kind, or with other files in it, only with ``overwrite``; an index only by
    ``kind="index"``; never one that holds an input or lies inside a folder of inputs. Its
    marker then records ``kind`` and, once the block ends, the files the block wrote (a folder
    of other files gets no marker). If the block wrote nothing (it failed, say), the marker is
    left as it was, and the folders made here are removed. A claim inside a claim of the same
    folder and kind by this thread (``fit`` saving its index) is the outer one's.

    Args:
        folder: the output folder.
        kind: one of ``index``, ``partial``, ``explain``, ``report``, ``demo``, ``evaluation``.
        overwrite: accept a folder of another kind or with other files (not an index).
        inputs: the files and folders the command reads (see `refuse_inputs`).

    Yields:
        ``folder`` as a Path.

    Raises:
        OutputError: the folder is refused, cannot be made or written, or another command
            holds its lock.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}; one of {', '.join(KINDS)}")
    folder = Path(folder)
    key, held = folder.resolve(), _held()
    outer = held.get(key)
    if outer == kind:
        yield folder
        return
    refuse_inputs(folder, inputs)
    _check(folder, kind, overwrite)
    made = _first_missing(folder)
    if made is not None and made.parent.resolve() in held:  # a folder of the project's, in one
        record(made.parent, [made.name])  # this thread holds (fit's OUT/.partial, demo's index)
    try:
        with lock(folder):
            found = _check(folder, kind, overwrite)  # again: another command may have written
            marked = found != "foreign"  # a user's folder is never made the project's
            before, earlier = _entries(folder), _marker(folder)
            previous = _read_bytes(folder / MARKER_FILE)
            files: set[str] = set()
            if marked:
                if earlier is None and found is not None:  # 0.2's index: its files are ours
                    files = before
                elif earlier is not None and earlier["kind"] == kind:
                    files = set(earlier["files"])  # another kind's files are kept, as a user's
                _remove_temporaries(folder, {MARKER_FILE, *listed(folder), *files})
                if previous != (data := _marker_bytes(kind, files)):
                    replace_file(folder / MARKER_FILE, data)
            held[key], failed = kind, True
            try:
                yield folder
                failed = False
            finally:
                if outer is None:
                    del held[key]
                else:
                    held[key] = outer
                if marked:
                    ended = (earlier, previous) if failed else None
                    _settle(folder, kind, before, files, ended)
    finally:
        if made is not None:
            _remove_made(folder, made)


def _remove_temporaries(folder: Path, names: set[str]) -> None:
    """Remove the temporary files of the files ``names`` (see `replace_files`) that a killed
    command left in ``folder``: under the folder's lock, no other command is writing them."""
    stems = temporary_stems(names)
    for entry in folder.iterdir():
        if temporary_of(entry.name) in stems and entry.is_file() and not entry.is_symlink():
            with suppress(OSError):
                entry.unlink()


def _held() -> dict[Path, str]:
    """The folders this thread holds claims on, with their kinds."""
    if not hasattr(_HELD, "claims"):
        _HELD.claims = {}
    return _HELD.claims


def _settle(
    folder: Path,
    kind: str,
    before: set[str],
    base: set[str],
    failed: tuple[dict[str, Any] | None, bytes | None] | None,
) -> None:
    """Leave the marker of ``folder`` listing what the project wrote there once a command of
    ``kind`` ends: the files it listed when it claimed the folder (``base``) and those the
    command listed before writing them (`record`), as far as they exist; a file that someone
    else saved there meanwhile is not the project's. One that ``failed`` having written no new
    file leaves the marker as it was before: ``failed`` is then that marker and its bytes (None,
    None: there was none)."""
    if not folder.is_dir():  # the command removed it (a partial folder once the index is saved)
        return
    now = _entries(folder)
    ours = listed(folder) & now
    path = folder / MARKER_FILE
    if failed is not None and not (ours - base) - before:
        earlier, previous = failed
        if earlier is None:  # no marker of this version before: none is left
            if previous is None:
                path.unlink(missing_ok=True)
            elif _read_bytes(path) != previous:
                replace_file(path, previous)
            return
        kind, ours = str(earlier["kind"]), (set(earlier["files"]) | ours) & now
    data = _marker_bytes(kind, ours)
    if _read_bytes(path) != data:
        replace_file(path, data)


def _remove_made(folder: Path, made: Path) -> None:
    """Remove ``folder`` and its parents up to ``made``, the folders a claim made, if they
    hold nothing but bookkeeping (``folder`` itself may never have been made: a name too
    long)."""
    with suppress(OSError):
        if folder.is_dir() and _entries(folder):
            return
        discard(folder)
    path = folder
    while path != made:
        path = path.parent
        with suppress(OSError):
            path.rmdir()  # only if empty


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
