"""Images in and out of the viewer, without HTTP: uploads decoded with their limits checked,
pixels and heat maps encoded as sharp PNGs, and the viewer's two errors."""

from __future__ import annotations

import io
import math
import warnings

import numpy as np
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from ..workspace import load_image_file

__all__ = [
    "MAX_UPLOAD_BYTES",
    "MAX_UPLOAD_PIXELS",
    "MIN_SIDE",
    "BadRequest",
    "NotFound",
    "decode_upload",
    "encode_png",
]

MAX_UPLOAD_BYTES = 5 * 1024 * 1024
MAX_UPLOAD_PIXELS = 4096 * 4096
UPLOAD_FORMATS = ("PNG", "JPEG")
MIN_SIDE = 112


class NotFound(LookupError):
    """No such image, explanation or heat map (HTTP 404)."""


class BadRequest(ValueError):
    """A request the viewer cannot serve as asked: a broken upload, a bad page (HTTP 400)."""


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

    Raises:
        BadRequest: too many bytes or pixels, another format, or a broken file.
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
