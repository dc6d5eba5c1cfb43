"""The k-means regions kept in an index folder, so that the viewer's gallery is ready at once.

Building a [`RegionSet`][repinterp.core.regions.RegionSet] is mostly k-means. What k-means finds,
the ``k`` centres and their inputs (the reference images nearest them), is kept in the index folder
as ``regions.safetensors`` (checksummed in the manifest like the other files), with the k-means
settings and the SHA-256 of the feature maps it ran on; the regions' interpretations are
recomputed from the index ([`from_centres`][repinterp.core.regions.RegionSet.from_centres]). The
command line's ``fit`` and ``demo`` keep the viewer's default regions; the viewer keeps those it had
to compute. A file made with other settings is not used; one made from other feature maps, or
changed since the index was loaded, is refused.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_bytes
from safetensors.torch import save as save_bytes

from ..core.interpretation import Explainer
from ..core.reference_index import FEATURE_FILE
from ..core.regions import REGIONS_FILE, RegionSet
from .index_folder import add_file

__all__ = [
    "DEFAULT_REGIONS",
    "DEFAULT_SEED",
    "REGIONS_FILE",
    "load_regions",
    "regions_bytes",
    "save_regions",
]

DEFAULT_REGIONS = 20
"""k-means regions behind the viewer's gallery by default (``repinterp serve --regions``), at
most ``|R|``: those ``fit`` keeps."""
DEFAULT_SEED = 0
"""The seed of the viewer's k-means by default (``repinterp serve --seed``)."""
_FORMAT = "1"


def regions_bytes(regions: RegionSet, seed: int) -> bytes:
    """The regions file of ``regions`` (k-means with ``seed``): safetensors holding
    ``centres`` (k x (K h w) float32), ``inputs`` (k int64) and ``settings``, the UTF-8 bytes
    of a JSON object: ``format``, ``n_regions``, ``seed``, ``features_sha256`` (a tensor, not
    the header's metadata, whose order safetensors does not fix: the same regions give the
    same bytes).

    Raises:
        ValueError: the interpreter's index has no feature maps with a known checksum.
    """
    features = regions.interpreter.index.checksums.get(FEATURE_FILE)
    if features is None:
        raise ValueError(
            f"regions are kept with the feature maps they come from: no {FEATURE_FILE}"
        )
    settings = {
        "format": _FORMAT,
        "n_regions": len(regions),
        "seed": seed,
        "features_sha256": features,
    }
    text = json.dumps(settings, sort_keys=True).encode()
    tensors = {
        "centres": regions.centres.float().contiguous(),
        "inputs": regions.inputs.long().contiguous(),
        "settings": torch.frombuffer(bytearray(text), dtype=torch.uint8),
    }
    return save_bytes(tensors)


def save_regions(regions: RegionSet, folder: str | Path, seed: int) -> None:
    """Keep ``regions`` (k-means with ``seed``) in the index folder ``folder``, replacing any
    regions file there ([`add_file`][repinterp.store.index_folder.add_file]); the interpreter's
    index then lists the file with its checksum.

    Raises:
        OutputError: the folder cannot be written, is not the project's, or another process
            is writing to it.
        IndexLoadError: the folder holds no index, or another one than the regions' (other
            feature maps).
        ValueError: the index has no feature maps.
    """
    index = regions.interpreter.index
    data = regions_bytes(regions, seed)
    digest = add_file(folder, REGIONS_FILE, data, {FEATURE_FILE: index.checksums[FEATURE_FILE]})
    index.files[REGIONS_FILE] = Path(folder) / REGIONS_FILE
    index.checksums[REGIONS_FILE] = digest


def load_regions(interpreter: Explainer, n_regions: int, seed: int) -> RegionSet | None:
    """The regions kept with the interpreter's index, if they are ``n_regions`` k-means regions
    with ``seed``, rebuilt without k-means.

    Returns:
        The region set, or None when the index keeps no regions, or regions of other settings.

    Raises:
        ValueError: a regions file that changed since the index was loaded, was computed from
            other feature maps, or is damaged (the message names it).
    """
    index = interpreter.index
    file = index.files.get(REGIONS_FILE)
    if file is None:
        return None
    try:
        data = Path(file).read_bytes()
    except OSError as exc:
        raise ValueError(f"{file} cannot be read: {exc.strerror or exc}") from None
    if hashlib.sha256(data).hexdigest() != index.checksums.get(REGIONS_FILE):
        raise ValueError(f"{file} changed since the index was loaded: its checksum differs")
    try:
        tensors = load_bytes(data)
        settings = json.loads(tensors["settings"].numpy().tobytes())
    except (SafetensorError, KeyError, ValueError) as exc:
        raise ValueError(f"{file} is damaged: {exc!r}") from None
    if not isinstance(settings, dict) or settings.get("format") != _FORMAT:
        raise ValueError(f"{file} is not a regions file of format {_FORMAT}")
    if settings.get("features_sha256") != index.checksums.get(FEATURE_FILE):
        raise ValueError(f"{file} was computed from other feature maps than the index's")
    if (settings.get("n_regions"), settings.get("seed")) != (n_regions, seed):
        return None
    centres, inputs = tensors.get("centres"), tensors.get("inputs")
    if centres is None or inputs is None or len(centres) != n_regions:
        raise ValueError(f"{file} is damaged: it does not hold {n_regions} centres and inputs")
    try:
        return RegionSet.from_centres(interpreter, centres, inputs)
    except ValueError as exc:
        raise ValueError(f"{file} is damaged: {exc}") from None
