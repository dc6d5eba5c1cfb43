"""The index folder: a [`ReferenceIndex`][repinterp.core.reference_index.ReferenceIndex] on disk.

The folder holds ``manifest.json`` and ``index.safetensors`` (and ``features.npy`` when the
feature maps are kept, with ``regions.safetensors``, the viewer's k-means regions, see
`regions_file`), every file with its checksum. This module owns the format
(the tensors, the manifest, the checksums, saving, adding a file and loading);
[`index_build`][repinterp.store.index_build] builds an index, [`shards`][repinterp.store.shards]
keeps a build resumable.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import reprlib
import secrets
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any, BinaryIO

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_bytes
from safetensors.torch import save as save_bytes
from torch import Tensor

from ..core.boundaries import Boundaries
from ..core.granularities import load_granularity, removed
from ..core.granularity import STATE_PREFIX
from ..core.reference_index import FEATURE_FILE, ReferenceIndex
from ..core.regions import REGIONS_FILE
from ..data.image_files import MAX_SIDE
from ..runtime.checksums import file_sha256
from ..runtime.version import VERSION
from .files import replace_file, write_file
from .outputs import OutputError, claim, listed, record, remove_listed

__all__ = [
    "FORMAT_VERSION",
    "MAX_CHANNELS",
    "MAX_CLASSES",
    "MAX_INPUT_VALUES",
    "IndexLoadError",
    "add_file",
    "load_index",
    "manifest_sha256",
    "read_manifest",
    "save_index",
]

FORMAT_VERSION = 2
"""2: the manifest holds the SHA-256 of its own content (``manifest_sha256``). Version 1
manifests lack it and are refused: accepting them would let any edit pass as version 1."""
MAX_CLASSES = 100_000
"""Most classes an index (and the model a recipe builds) may have."""
MAX_CHANNELS = 1024
"""Most channels of an index's input images."""
MAX_INPUT_VALUES = 1 << 28
"""Most values (C x H x W) in one input image: 1 GiB in float32."""
_MAX_COUNT = (1 << 31) - 1
_TENSOR_FILE = "index.safetensors"
_MANIFEST = "manifest.json"
_SELF_SHA = "manifest_sha256"
_BLOCK = 1 << 20
_RESERVED = {"input_shape", "feature_shape", "n_reference", "n_boundaries", "n_classes"}
_RESERVED |= {"has_labels", "sha256", "files", "format_version", _SELF_SHA}
_TENSORS = ("boundary_weight", "boundary_bias", "boundary_classes", "sources", "projections")
_TENSORS += ("predictions", "logits")


class IndexLoadError(ValueError):
    """A saved index that is damaged or does not match the model it is loaded with."""


def save_index(
    index: ReferenceIndex,
    path: str | Path,
    extra_files: dict[str, Path] | None = None,
    overwrite: bool = False,
) -> None:
    """Write the index folder so that a crash at any point leaves the old index or the new
    one at ``path``, never neither, and no stray files once a save has succeeded.

    The data files are written under names the current manifest does not use, then the
    manifest is replaced in one atomic rename (the commit); only then are the files of the
    old index removed. Checksums are those of the bytes as they were written; the manifest
    holds its own too (``manifest_sha256``, see
    [`manifest_sha256`][repinterp.store.index_folder.manifest_sha256]).

    Args:
        path: the folder: new, empty, or a repinterp index (which is replaced); its
            lock is held meanwhile (see `claim`).
        extra_files: files copied into the folder under the given names, with checksums
            (default: ``index.files``); a file with a known checksum (``index.checksums``)
            that differs is refused.
        overwrite: accept a folder of other files too, as the command line's ``--overwrite``
            (the index's files are written there, nothing else is touched).

    Raises:
        OutputError: ``path`` holds other files, or a file of the name of one the index
            writes (``features.npy``) that neither its marker nor its manifest lists (without
            ``overwrite``; the message names this Python argument, ``overwrite=True``), or the
            shards of a fit, or another process is writing to it.
        IndexLoadError: an extra file changed while it was being copied.
        ValueError: a manifest that loading would refuse (more than ``MAX_CLASSES``
            classes, an input larger than ``MAX_INPUT_VALUES``, ...); nothing is saved.
    """
    path = Path(path)
    with ExitStack() as claimed:
        try:
            claimed.enter_context(claim(path, "index", overwrite))
            _Save(path, index, index.files if extra_files is None else extra_files, overwrite).run()
        except OutputError as exc:  # the messages name the command line's option
            raise OutputError(str(exc).replace("--overwrite", "overwrite=True")) from None


def add_file(
    path: str | Path, name: str, data: bytes, expected: dict[str, str] | None = None
) -> str:
    """Add a data file to a saved index folder, or replace one, with its checksum in the
    manifest, so that a crash at any point leaves the folder with the old file or the new one
    (as [`save_index`][repinterp.store.index_folder.save_index]: written beside, then the manifest
    replaced in one atomic rename). The index's other files are not touched, and the marker lists
    the new one.

    Args:
        path: the index folder; its lock is held meanwhile.
        name: the file's name in the folder (not the manifest's or ``index.safetensors``).
        data: its bytes.
        expected: checksums, by file name, that the folder's manifest must still list: those
            of the files ``data`` was computed from.

    Returns:
        The SHA-256 of ``data``.

    Raises:
        OutputError: ``path`` is not the project's index folder (a user's folder an index was
            saved into with ``overwrite``), another process is writing to it, or it holds a
            file ``name`` that the project did not write.
        IndexLoadError: no index at ``path``, a damaged manifest, or one that no longer lists
            the ``expected`` checksums (another index was saved there since).
        ValueError: a bad ``name``.
    """
    path = Path(path)
    if not _plain(name) or name in (_MANIFEST, _TENSOR_FILE):
        raise ValueError(f"cannot add a file named {name!r} to an index")
    with claim(path, "index"):
        base = read_manifest(path)
        changed = [k for k, v in (expected or {}).items() if base["sha256"].get(k) != v]
        if changed:
            raise IndexLoadError(
                f"the index at {path} is not the one {name} was computed from (its "
                f"{', '.join(changed)} changed): another index was saved there since"
            )
        return _Add(path, name, data, base).run()[name]


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of an index folder, its own checksum and the types and ranges of its
    fields checked.

    Raises:
        IndexLoadError: no manifest, a damaged or edited one (its ``manifest_sha256`` missing
            or not that of its content), an unknown format version, or fields of the wrong
            type or out of range (a file without its checksum, 10**12 classes).
    """
    path = Path(path)
    manifest_path = path / _MANIFEST
    if not manifest_path.is_file():
        raise IndexLoadError(f"{path} is not a repinterp index: {_MANIFEST} is missing")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise IndexLoadError(f"{manifest_path} is damaged: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format_version") != FORMAT_VERSION:
        version = manifest.get("format_version") if isinstance(manifest, dict) else None
        raise IndexLoadError(
            f"{path} has index format {version!r}, this repinterp reads {FORMAT_VERSION}"
            + (": fit it again" if version in range(1, FORMAT_VERSION) else "")
        )
    if manifest.get(_SELF_SHA) != manifest_sha256(manifest):
        why = "differs from its content" if _SELF_SHA in manifest else "is missing"
        raise IndexLoadError(
            f"{manifest_path} is damaged or was edited: its checksum ({_SELF_SHA}) {why}"
        )
    problem = _manifest_problem(manifest)
    if problem:
        raise IndexLoadError(f"{manifest_path} is damaged: {problem}")
    return manifest


def manifest_sha256(manifest: dict[str, Any]) -> str:
    """The SHA-256 (64 hex digits) of a manifest's content without its ``manifest_sha256``:
    of its canonical JSON (sorted keys, no spaces, ASCII), so the file's layout does not
    count, only what it says."""
    content = {k: v for k, v in manifest.items() if k != _SELF_SHA}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def load_index(path: str | Path, device: torch.device | str = "cpu") -> ReferenceIndex:
    """Read an index folder, verifying every file's checksum, the format and the shapes.

    A missing or damaged regions file (``regions.safetensors``, the k-means result kept for
    the viewer, see `regions_file`) does not refuse the index: it is left
    out of the index's files, with a warning, and the regions are computed again. The feature
    file is memory-mapped from the handle its checksum was computed on, so that the index
    reads the features it was checked with even if a new fit replaces the file later.

    Raises:
        IndexLoadError: missing files, a damaged file, an unknown format version, tensors
            that do not fit together or the manifest, or a granularity since removed.
    """
    path = Path(path)
    manifest = read_manifest(path)
    why = removed(manifest.get("granularity"))
    if why is not None:
        raise IndexLoadError(f"{path} {why}")
    files = _resolve(path, manifest)
    feature_file = files.get(FEATURE_FILE)
    with ExitStack() as stack:
        opened = None
        if feature_file is not None and feature_file.is_file():
            try:
                opened = stack.enter_context(open(feature_file, "rb"))
            except OSError as exc:
                raise IndexLoadError(f"cannot read {feature_file}: {exc.strerror}") from exc
        index = _load(path, manifest, files, opened, device)
        index.map_features(opened)  # the file checked, whatever replaces it later
    return index


def _load(
    path: Path,
    manifest: dict[str, Any],
    files: dict[str, Path],
    features: BinaryIO | None,
    device: torch.device | str,
) -> ReferenceIndex:
    """`load_index` on the folder's manifest and files; ``features``: the feature file,
    opened, which is checked from this very handle."""
    tensor_bytes = b""
    for name, file in list(files.items()):
        problem = None
        if not file.is_file():
            problem = f"{path / name} is missing"
        else:
            if name == _TENSOR_FILE:
                tensor_bytes = file.read_bytes()
                digest = hashlib.sha256(tensor_bytes).hexdigest()
            else:
                digest = file_sha256(features if name == FEATURE_FILE else file)
            if digest != manifest["sha256"][name]:
                problem = f"{file} is damaged: its checksum differs from the manifest"
        if problem is not None:
            if name != REGIONS_FILE:
                raise IndexLoadError(problem)
            warnings.warn(
                f"{problem}: it is not used (the regions are computed again)", stacklevel=3
            )
            del files[name]
    try:
        t = {k: v.to(device) for k, v in load_bytes(tensor_bytes).items()}
    except (SafetensorError, OSError) as exc:
        raise IndexLoadError(f"{files[_TENSOR_FILE]} is damaged: {exc}") from exc
    problem = _tensor_problem(t, manifest)
    if problem:
        raise IndexLoadError(f"{path} is damaged: {problem}")
    try:
        fitted = load_granularity(manifest, t)
    except ValueError as exc:
        raise IndexLoadError(f"{path} is damaged: {exc}") from None
    own = {*_TENSORS, "labels"}
    columns = {k: v for k, v in t.items() if k not in own and not k.startswith(STATE_PREFIX)}
    return ReferenceIndex(
        boundaries=Boundaries(t["boundary_weight"], t["boundary_bias"], t["boundary_classes"]),
        sources=t["sources"],
        projections=t["projections"],
        predictions=t["predictions"],
        logits=t["logits"],
        labels=t.get("labels"),
        columns=columns,
        granularity=fitted,
        input_shape=tuple(manifest["input_shape"]),
        meta={k: v for k, v in manifest.items() if k not in _RESERVED},
        files={name: file for name, file in files.items() if name != _TENSOR_FILE},
        checksums={k: manifest["sha256"][k] for k in files if k != _TENSOR_FILE},
    )


def _plain(name: Any) -> bool:
    """A file name inside the folder: no separator, not hidden, not '.' or '..'."""
    return isinstance(name, str) and bool(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name))


def _manifest_problem(m: dict[str, Any]) -> str | None:
    """What is wrong with the types of a manifest's fields, or None."""
    sha = m.get("sha256")
    if not isinstance(sha, dict) or _TENSOR_FILE not in sha:
        return f"it lists no checksum of {_TENSOR_FILE}"
    for name, digest in sha.items():
        if not _plain(name) or not (
            isinstance(digest, str) and re.fullmatch("[0-9a-f]{64}", digest)
        ):
            return f"the checksum of {name!r} is not a SHA-256"
    files = m.get("files", {})
    if not isinstance(files, dict) or not all(k in sha and _plain(v) for k, v in files.items()):
        return "its 'files' are not names of its checksummed files"
    shape = m.get("input_shape")
    if not (
        isinstance(shape, list)
        and len(shape) == 3
        and _count(shape[0], MAX_CHANNELS)
        and all(_count(v, MAX_SIDE) for v in shape[1:])
        and math.prod(shape) <= MAX_INPUT_VALUES
    ):
        return (
            f"input_shape {reprlib.repr(shape)} is not C x H x W with C <= {MAX_CHANNELS}, "
            f"H and W <= {MAX_SIDE}, C x H x W <= {MAX_INPUT_VALUES}"
        )
    features = m.get("feature_shape")
    if not (isinstance(features, list) and all(_count(v, _MAX_COUNT) for v in features)):
        return f"feature_shape {reprlib.repr(features)} is not a list of sizes <= {_MAX_COUNT}"
    names = m.get("class_names")
    if names is not None and not (
        isinstance(names, list) and all(isinstance(n, str) for n in names)
    ):
        return "class_names is not a list of names"
    limits = {"n_reference": _MAX_COUNT, "n_boundaries": _MAX_COUNT, "n_classes": MAX_CLASSES}
    for key, high in limits.items():
        if not _count(m.get(key), high):
            return f"{key} is {reprlib.repr(m.get(key))}, not a count from 1 to {high}"
    if "recipe" in m and not isinstance(m["recipe"], dict):
        return f"its recipe is a {type(m['recipe']).__name__}, not a mapping"
    if not isinstance(m.get("repinterp_version", ""), str):
        return "repinterp_version is not a version"
    if not isinstance(m.get("target_layer", ""), str):
        return "target_layer is not a name"
    return None


def _count(value: Any, high: int) -> bool:
    """``value`` is a whole number from 1 to ``high``."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= high


def _tensor_problem(t: dict[str, Tensor], m: dict[str, Any]) -> str | None:
    """What does not fit together among the tensors and the manifest, or None."""
    missing = [name for name in _TENSORS if name not in t]
    if missing:
        return f"{_TENSOR_FILE} lacks {', '.join(missing)}"
    n, q, classes = m["n_reference"], m["n_boundaries"], m["n_classes"]
    expected = {
        "projections": (n, q),
        "predictions": (n,),
        "logits": (n, classes),
        "labels": (n,),
        "sources": (q,),
        "boundary_bias": (q,),
        "boundary_classes": (q, 2),
        "boundary_weight": (q, *m["feature_shape"]),
    }
    for name, shape in expected.items():
        if name in t and tuple(t[name].shape) != tuple(shape):
            return f"{name} has shape {tuple(t[name].shape)}, the manifest says {tuple(shape)}"
    for name, value in t.items():  # the granularity's columns: one row per image
        if name not in expected and not name.startswith(STATE_PREFIX):
            if value.ndim == 0 or value.shape[0] != n:
                return f"column {name} has shape {tuple(value.shape)}, not {n} rows"
    names = m.get("class_names")
    if names is not None and len(names) != classes:
        return f"class_names lists {len(names)} names for {classes} classes"
    return None


# ----------------------------------------------------------------------------- the folder
def _variant(name: str, token: str) -> str:
    """``index.safetensors`` -> ``index.<token>.safetensors``: a name beside the live one."""
    stem, dot, suffix = name.partition(".")
    return f"{stem}.{token}.{suffix}" if dot else f"{name}.{token}"


def _resolve(path: Path, manifest: dict[str, Any]) -> dict[str, Path]:
    """Each checksummed file's path: the name ``files`` gives it while a save settles, or its
    own name (which the checksum then vouches for)."""
    mapping = manifest.get("files", {})
    out = {}
    for name in manifest["sha256"]:
        other = path / mapping[name] if name in mapping else None
        out[name] = other if other is not None and other.is_file() else path / name
    return out


def _sweep(path: Path) -> None:
    """Remove what saves leave when they fail or are killed: the files that the project wrote
    in the folder (its marker lists them, see `record`: earlier
    indexes, data files under their variant names, temporary manifests) and that the committed
    manifest does not use. No other file is ever removed, whatever its name."""
    try:
        manifest = read_manifest(path)
    except IndexLoadError:
        return
    remove_listed(path, keep={_MANIFEST, *(f.name for f in _resolve(path, manifest).values())})


class _Commit:
    """One commit of data files into the index folder ``path``: each is written under its own
    name, or beside the live one when that exists; then the manifest that lists them replaces
    the old one in one atomic rename (the commit); only then do the files take their own names
    (and the manifest says so), and what earlier saves left is swept. A failure before the
    commit removes what it wrote; after it, the folder holds the new files."""

    replacing = "remove or rename it first"  # what the refusal of a user's file says

    def __init__(self, path: Path, names: list[str], overwrite: bool = False) -> None:
        self.path, self.names, self.overwrite = path, names, overwrite
        self.token = secrets.token_hex(4)
        self.committed = False

    def _refuse_others(self) -> None:
        """Refuse, unless ``overwrite``, to replace a file of the folder that the project did
        not write: one that neither the marker nor the committed manifest lists (a user's
        ``features.npy`` beside an index fitted without one)."""
        if self.overwrite:
            return
        try:
            own = listed(self.path) | set(read_manifest(self.path)["sha256"])
        except IndexLoadError:
            own = listed(self.path)
        for name in self.names:
            if os.path.lexists(self.path / name) and name not in own:
                raise OutputError(
                    f"{self.path / name} was not written by repinterp: {self.replacing}"
                )

    def _contents(self) -> Iterator[tuple[str, Iterator[bytes]]]:
        """``(name, its bytes)`` of each data file, in ``names``' order."""
        raise NotImplementedError

    def _check(self, name: str, checksum: str) -> None:
        """Called once ``name`` is written with ``checksum``: raise to abandon the commit."""

    def _manifest(self, checksums: dict[str, str], names: dict[str, str]) -> dict[str, Any]:
        """The manifest (without its own checksum) that lists the files written
        (``checksums``), ``names`` mapping those written beside a live file to their names."""
        raise NotImplementedError

    def _sealed(self, checksums: dict[str, str], names: dict[str, str]) -> bytes:
        manifest = self._manifest(checksums, names)
        problem = _manifest_problem(manifest)
        if problem:  # what loading would refuse is not saved
            raise ValueError(f"cannot save the index to {self.path}: {problem}")
        manifest[_SELF_SHA] = manifest_sha256(json.loads(json.dumps(manifest)))  # as read back
        return (json.dumps(manifest, indent=2) + "\n").encode()

    def _commit(self, manifest: bytes) -> None:
        replace_file(self.path / _MANIFEST, manifest)
        self.committed = True

    def run(self) -> dict[str, str]:
        """Commit the files; their checksums, by name."""
        path, written = self.path, []
        checksums, moved = {}, {}
        self._refuse_others()
        targets = {  # each data file under its own name, or beside the live one
            name: path / (_variant(name, self.token) if (path / name).exists() else name)
            for name in self.names
        }
        record(path, [_MANIFEST, *(t.name for t in targets.values() if _plain(t.name))])
        try:
            for name, blocks in self._contents():
                target = targets[name]
                written.append(target)
                checksums[name] = write_file(target, blocks)
                self._check(name, checksums[name])
                if target.name != name:
                    moved[name] = target.name
            self._commit(self._sealed(checksums, moved))
        except BaseException:
            if not self.committed:
                for file in written:
                    with suppress(OSError):
                        file.unlink(missing_ok=True)
            raise
        try:
            if moved:  # settle: the data files take their own names, then the manifest says so
                for name, variant in moved.items():
                    os.replace(path / variant, path / name)
                self._commit(self._sealed(checksums, {}))
        finally:
            _sweep(path)
        return checksums


class _Save(_Commit):
    """One save of ``index`` into ``path`` (see `ReferenceIndex.save`)."""

    replacing = "remove or rename it first, or pass --overwrite to replace it"

    def __init__(
        self, path: Path, index: ReferenceIndex, extra_files: dict[str, Path], overwrite: bool
    ) -> None:
        super().__init__(path, [_TENSOR_FILE, *extra_files], overwrite)
        self.index, self.extra = index, extra_files

    def _contents(self) -> Iterator[tuple[str, Iterator[bytes]]]:
        yield _TENSOR_FILE, iter([save_bytes(self.index.tensors())])
        for name, source in self.extra.items():
            if not _plain(name):
                raise ValueError(f"cannot save a file named {name!r} with the index")
            yield name, _blocks(Path(source))

    def _check(self, name: str, checksum: str) -> None:
        expected = self.index.checksums.get(name) if name in self.extra else None
        if expected is not None and checksum != expected:
            raise IndexLoadError(
                f"{self.extra[name]} changed while the index was being saved (another "
                "process writing to it?): its checksum differs from the one it was "
                "written with"
            )

    def _manifest(self, checksums: dict[str, str], names: dict[str, str]) -> dict[str, Any]:
        index = self.index
        manifest = {
            "format_version": FORMAT_VERSION,
            **{k: v for k, v in index.meta.items() if k not in _RESERVED},
            "repinterp_version": VERSION,
            **index.granularity.state()[0],
            "input_shape": list(index.input_shape),
            "feature_shape": list(index.feature_shape),
            "n_reference": len(index),
            "n_boundaries": len(index.boundaries),
            "n_classes": index.n_classes,
            "has_labels": index.labels is not None,
            "sha256": checksums,
        }
        if names:
            manifest["files"] = names
        return manifest

    def run(self) -> dict[str, str]:
        checksums = super().run()
        self.index.files = {name: self.path / name for name in self.extra}
        self.index.checksums = {k: v for k, v in checksums.items() if k != _TENSOR_FILE}
        return checksums


class _Add(_Commit):
    """One data file added to (or replaced in) the index folder ``path`` whose manifest is
    ``base``: the other files and fields stay as they are."""

    def __init__(self, path: Path, name: str, data: bytes, base: dict[str, Any]) -> None:
        super().__init__(path, [name])
        self.data, self.base = data, base

    def _contents(self) -> Iterator[tuple[str, Iterator[bytes]]]:
        yield self.names[0], iter([self.data])

    def _manifest(self, checksums: dict[str, str], names: dict[str, str]) -> dict[str, Any]:
        manifest = {k: v for k, v in self.base.items() if k not in (_SELF_SHA, "files")}
        manifest["sha256"] = {**self.base["sha256"], **checksums}
        settling = {k: v for k, v in self.base.get("files", {}).items() if k not in checksums}
        if settling or names:  # a save that did not settle still needs its names
            manifest["files"] = {**settling, **names}
        return manifest


def _blocks(source: Path) -> Iterator[bytes]:
    with open(source, "rb") as f:
        while block := f.read(_BLOCK):
            yield block
