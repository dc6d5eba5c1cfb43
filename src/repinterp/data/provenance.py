"""Where an index's reference data came from: how the split was made, and a fingerprint of the
images that tells, when the index is opened again, whether they changed since ``fit``."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from typing import Any

from .datasets import IMAGEFOLDER_SHARE, ImageFolderSet, Split

__all__ = ["describe_split", "fingerprint", "fingerprint_change"]


def describe_split(data: Split, spec: str, seed: int) -> str:
    """How the images of a data set went to its reference and unseen parts, per class."""
    ref, unseen = data.reference, data.unseen
    total = len(ref) + len(unseen)
    counts = [
        f"{name} {int((ref.labels == c).sum())}/{int((unseen.labels == c).sum())}"
        for c, name in enumerate(ref.class_names)
    ]
    why = (
        f"{IMAGEFOLDER_SHARE:.0%} of the readable images"
        if isinstance(ref, ImageFolderSet)
        else "the set's fixed sizes"
    )
    text = (
        f"{spec}: {total} images in {len(ref.class_names)} classes: {len(ref)} reference and "
        f"{len(unseen)} unseen ({why}, drawn with data seed {seed}); reference/unseen per class: "
        f"{', '.join(counts)}"
    )
    if isinstance(ref, ImageFolderSet) and ref.skipped:
        text += f"; {len(ref.skipped)} file(s) skipped (see the warning above)"
    return text


def fingerprint(data: Split, spec: str, seed: int) -> dict[str, Any]:
    """What identifies the images behind a data set's split, to tell a changed one later.

    Returns:
        ``dataset``, ``seed``, the sizes of both parts, ``classes`` (the class names in label
        order: an image folder's class folders), and ``files`` (path relative to the folder:
        ``[size in bytes, SHA-256]``) for an image folder or ``sha256`` (of the pixels and
        labels of both parts, in order) for a bundled set.
    """
    out: dict[str, Any] = {
        "dataset": spec,
        "seed": seed,
        "n_reference": len(data.reference),
        "n_unseen": len(data.unseen),
        "classes": list(data.reference.class_names),
    }
    if isinstance(data.reference, ImageFolderSet):
        out["image_size"] = data.reference.size
        out["files"] = {name: list(value) for name, value in sorted(data.reference.files.items())}
        return out
    digest = hashlib.sha256()
    for part in data:
        digest.update(part.images.numpy().tobytes())
        digest.update(part.labels.numpy().tobytes())
    out["sha256"] = digest.hexdigest()
    return out


def fingerprint_change(recorded: dict[str, Any], current: dict[str, Any]) -> str | None:
    """What differs between two `fingerprint` s, in words; None if nothing. The classes
    are compared where ``recorded`` has them (fingerprints made before 0.2 do not)."""
    changes = [
        f"{key} {recorded.get(key)!r} then, {current.get(key)!r} now"
        for key in ("dataset", "seed", "image_size", "n_reference", "n_unseen")
        if recorded.get(key) != current.get(key)
    ]
    if "classes" in recorded and recorded["classes"] != current.get("classes"):
        before, after = recorded["classes"], current.get("classes") or []
        changes += _differences("class(es)", before, after) or ["the classes' order changed"]
    before, after = recorded.get("files") or {}, current.get("files") or {}
    changed = [n for n in before if n in after and before[n] != after[n]]
    changes += _differences("file(s)", before, after, changed)
    if recorded.get("sha256") != current.get("sha256") and not changes:
        changes.append("the images or labels differ")
    return "; ".join(changes) or None


def _differences(
    what: str, before: Collection[str], after: Collection[str], changed: Sequence[str] = ()
) -> list[str]:
    """``what`` changed, added and removed between two collections of names, in words (the
    first three names of each, then how many more)."""
    out = []
    for how, names in (
        ("changed", changed),
        ("added", [n for n in after if n not in before]),
        ("removed", [n for n in before if n not in after]),
    ):
        if names:
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            out.append(f"{len(names)} {what} {how} ({', '.join(names[:3])}{more})")
    return out
