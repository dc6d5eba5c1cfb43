"""Reading image files: sizes checked from the header before decoding, turned upright (EXIF
orientation), read at their bit depth.

Every image file the project reads (image folders, files named on the command line, uploads to
the viewer) goes through `read_image`, so the limits below hold for all of them.

This module imports nothing from repinterp.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError
from torch import Tensor

__all__ = [
    "MAX_ASPECT",
    "MAX_PIXELS",
    "MAX_SIDE",
    "ImageSizeError",
    "check_size",
    "image_tensor",
    "load_image_file",
    "read_image",
    "upright",
]

MAX_SIDE = 16_384
"""Longest accepted side of an image, in pixels."""
MAX_PIXELS = 8192 * 8192
"""Most pixels accepted in one image (width x height)."""
MAX_ASPECT = 32
"""Most accepted ratio of the longer side to the shorter one: an image is resized by its shorter
side, so a 100,000 x 1 image would otherwise become 224 x 22,400,000 pixels."""

_ORIENTATION = 0x0112  # the EXIF tag of how the image is turned
_FULL_SCALES = {"F": (1.0, 255.0, 65535.0), "I": (255.0, 65535.0)}
"""The full scales a float (``F``) or 32-bit integer (``I``) image may be stored at: it is read
as its values divided by the smallest one that holds them all."""
_ROUNDING = 1 / 512
"""How far a float image's pixels may stray out of [0, 1] by rounding (half a step of 8 bits):
they are clipped to it, not read as 0-255."""
_DARKEST_255 = 2.0
"""A float image whose largest pixel lies between 1 + `_ROUNDING` and this is refused: too far
above 1 for rounding, and all but black if it were 0-255."""


class ImageSizeError(ValueError):
    """An image too large (or too elongated) to be read."""


def check_size(width: int, height: int, name: str) -> None:
    """Raise `ImageSizeError` unless a ``width`` x ``height`` image is within the
    limits."""
    if min(width, height) < 1:
        raise ImageSizeError(f"{name} has no pixels ({width} x {height})")
    if max(width, height) > MAX_SIDE or width * height > MAX_PIXELS:
        raise ImageSizeError(
            f"{name} is {width} x {height} pixels; at most {MAX_SIDE} per side and "
            f"{MAX_PIXELS:,} in all are read"
        )
    if max(width, height) > MAX_ASPECT * min(width, height):
        raise ImageSizeError(
            f"{name} is {width} x {height} pixels, longer than {MAX_ASPECT} times the other"
        )


def read_image(
    source: str | Path | BinaryIO | bytes | Image.Image,
    channels: int,
    fast: bool = False,
    name: str | None = None,
) -> Image.Image:
    """Open an image file, check its size from the header, and decode it.

    Args:
        source: a path, an open binary file, the file's bytes, or an image the caller
            opened (``Image.open(path)``), which is checked and converted in the same way.
        channels: 1 for grey, 3 for RGB.
        fast: a JPEG may be decoded at a reduced scale (enough to find a broken file).
        name: what to call the file in messages (its path by default).

    Returns:
        A PIL image, upright (its EXIF orientation applied), in mode ``L`` or ``RGB`` (8 bits
        per channel), or ``F`` with values in [0, 1] for a grey image of more bits per pixel,
        read at its depth (not clipped to 8): 16-bit values divided by 65,535; float or
        32-bit integer values divided by the smallest full scale that holds them all (see
        `_FULL_SCALES`: a float image in [0, 1] as it is, one of 0-255 by 255); float values
        out of [0, 1] by rounding (at most `_ROUNDING`) are clipped to it.

    Raises:
        ValueError: the file is missing, is not an image, is broken or truncated, is too
            large (see `MAX_SIDE`, `MAX_PIXELS`, `MAX_ASPECT`), or is a
            float or 32-bit image with values that are negative, not finite or above 65,535,
            or a float image whose scale is ambiguous (its largest value between 1 +
            `_ROUNDING` and `_DARKEST_255`).
    """
    if isinstance(source, Image.Image):
        name = name or getattr(source, "filename", "") or "the image"
    name = name or (str(source) if isinstance(source, (str, Path)) else "the file")
    if isinstance(source, bytes):
        source = io.BytesIO(source)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            if isinstance(source, Image.Image):
                check_size(*source.size, name)
                return _convert(source, channels)
            with Image.open(source) as image:
                check_size(*image.size, name)
                if fast:
                    image.draft("RGB" if channels == 3 else "L", (1, 1))
                image.load()
                return _convert(image, channels)
    except ImageSizeError:
        raise
    except (FileNotFoundError, IsADirectoryError) as exc:
        raise ValueError(f"image file not found: {name}") from exc
    except UnidentifiedImageError as exc:
        raise ValueError(f"cannot read {name} as an image: not an image file") from exc
    except MemoryError:
        raise
    except Exception as exc:  # a decoder's complaint about a broken file, whatever its type
        raise ValueError(f"cannot read {name} as an image: {exc}") from exc


def upright(image: Image.Image) -> Image.Image:
    """``image`` turned as its EXIF orientation says it is viewed (itself when it says
    nothing): what ``Image.open`` does not do, and ``np.asarray`` of it cannot."""
    if image.getexif().get(_ORIENTATION, 1) != 1:
        return ImageOps.exif_transpose(image)
    return image


def _convert(image: Image.Image, channels: int) -> Image.Image:
    # Pillow before 10 opens a 16-bit grey PNG as "I" (PNG has no 32-bit pixels).
    sixteen = image.mode.startswith("I;16") or (image.mode == "I" and image.format == "PNG")
    image = upright(image)
    if sixteen:
        return Image.fromarray(np.asarray(image, dtype=np.float32) / 65535)
    if image.mode in _FULL_SCALES:
        values = np.asarray(image, dtype=np.float64)
        scaled = np.clip(values / _full_scale(values, image.mode), 0, 1)
        return Image.fromarray(scaled.astype(np.float32))
    return image.convert("L" if channels == 1 else "RGB")


def _full_scale(values: np.ndarray, mode: str) -> float:
    """The smallest of the full scales of ``mode`` (`_FULL_SCALES`) that holds
    ``values``; float values within `_ROUNDING` of [0, 1] are in [0, 1] (the caller clips
    them)."""
    kind = "float" if mode == "F" else "32-bit integer"
    if not np.isfinite(values).all():
        raise ValueError(f"its {kind} pixels are not all finite")
    low, high = float(values.min()), float(values.max())
    if mode == "F" and -_ROUNDING <= low and high <= 1 + _ROUNDING:
        return 1.0
    if mode == "F" and 1 + _ROUNDING < high < _DARKEST_255 and low >= 0:
        raise ValueError(
            f"its float pixels run up to {high:g}: above 1 by more than rounding, and all but "
            "black if they were 0 to 255; scale it to 0-1 or 0-255, or save it at 8 or 16 bits"
        )
    scales = [scale for scale in _FULL_SCALES[mode] if high <= scale]
    if low < 0 or not scales:
        raise ValueError(
            f"its {kind} pixels run from {low:g} to {high:g}, outside 0 to 65,535: convert it "
            "to 8 or 16 bits"
        )
    return scales[0]


def image_tensor(image: Image.Image, channels: int) -> Tensor:
    """A decoded image (see `read_image`) as C x H x W float32 pixels in [0, 1]."""
    array = np.asarray(image)
    pixels = torch.from_numpy(np.array(array, dtype=np.float32 if image.mode == "F" else np.uint8))
    pixels = pixels.float() / 255 if image.mode != "F" else pixels
    pixels = pixels.unsqueeze(0) if pixels.dim() == 2 else pixels.permute(2, 0, 1)
    if pixels.shape[0] != channels:
        pixels = pixels.expand(channels, -1, -1)
    return pixels.contiguous()


def load_image_file(
    path: str | Path | BinaryIO | Image.Image, shape: tuple[int, int, int]
) -> Tensor:
    """Read an image file (or an image opened from one) as C x H x W pixels in [0, 1], resized
    (shorter side) and centre-cropped to the index's input size, grey or RGB as the model
    expects, at its bit depth.

    Raises:
        ValueError: the file is missing, is not a readable image, or is too large (see
            `read_image`).
    """
    channels, height, width = shape
    image = read_image(path, channels)
    scale = max(height / image.height, width / image.width)
    size = (max(width, round(image.width * scale)), max(height, round(image.height * scale)))
    image = image.resize(size, Image.BILINEAR)
    left, top = (size[0] - width) // 2, (size[1] - height) // 2
    return image_tensor(image.crop((left, top, left + width, top + height)), channels)
