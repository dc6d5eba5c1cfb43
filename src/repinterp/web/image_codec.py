"""Images in and out of the viewer, without HTTP: uploads decoded (PNG or JPEG, their limits
checked and the memory of decoding bounded) and pixels or heat maps encoded as sharp PNGs."""

from __future__ import annotations

import io
import math
import warnings

import numpy as np
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from ..data.image_files import load_image_file
from .limits import ByteBudget
from .parameters import BadRequest

__all__ = [
    "DECODE_BYTES_PER_PIXEL",
    "DECODING",
    "MAX_UPLOAD_BYTES",
    "MAX_UPLOAD_PIXELS",
    "MIN_SIDE",
    "decode_upload",
    "encode_png",
]

MAX_UPLOAD_BYTES = 5 * 1024 * 1024
MAX_UPLOAD_PIXELS = 4096 * 4096
UPLOAD_FORMATS = ("PNG", "JPEG")
MIN_SIDE = 112
# Memory that decoding takes per pixel of the upload, at most: a 16-bit grey PNG (the costliest
# mode: 16-bit samples, then float32 copies) of 4096 x 4096 pixels peaks at 160 MB.
DECODE_BYTES_PER_PIXEL = 10
# Bytes of uploads being decoded at once, in the process: two of the largest.
DECODING = ByteBudget(2 * MAX_UPLOAD_PIXELS * DECODE_BYTES_PER_PIXEL)


def encode_png(image: np.ndarray) -> bytes:
    """An H x W (grey) or H x W x 3 array in [0, 1] as a PNG, upscaled by a whole factor with
    nearest neighbours so that its shorter side has at least ``MIN_SIDE`` pixels."""
    array = np.clip(np.rint(image * 255), 0, 255).astype(np.uint8)
    factor = max(1, math.ceil(MIN_SIDE / min(array.shape[:2])))
    picture = Image.fromarray(array)
    picture = picture.resize((picture.width * factor, picture.height * factor), Image.NEAREST)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def decode_upload(data: bytes, shape: tuple[int, int, int]) -> Tensor:
    """An uploaded PNG or JPEG as C x H x W pixels in [0, 1], fitted to the index's input size.

    The decoding holds ``DECODE_BYTES_PER_PIXEL`` bytes per pixel of `DECODING` (it waits
    while other uploads hold them).

    Raises:
        BadRequest: too many bytes or pixels, another format, or a broken file.
        Busy: other uploads held the decoding budget too long (see
            `ByteBudget`).
    """
    if not data:
        raise BadRequest("the upload is empty")
    if len(data) > MAX_UPLOAD_BYTES:
        raise BadRequest(f"the upload has {len(data)} bytes; at most {MAX_UPLOAD_BYTES} accepted")
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data), formats=UPLOAD_FORMATS) as image:
                width, height = image.size
            if width * height <= MAX_UPLOAD_PIXELS:
                with DECODING.hold(width * height * DECODE_BYTES_PER_PIXEL):
                    return load_image_file(io.BytesIO(data), shape)
        except UnidentifiedImageError:
            raise BadRequest("the upload is not a PNG or JPEG image") from None
        except (OSError, Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise BadRequest(f"the image cannot be decoded: {exc}") from None
        except ValueError as exc:  # load_image_file's, for a file that breaks off mid-image
            raise BadRequest(f"the image cannot be decoded: {exc.__cause__ or exc}") from None
    raise BadRequest(
        f"the image has {width} x {height} pixels; at most {MAX_UPLOAD_PIXELS} are accepted"
    )
