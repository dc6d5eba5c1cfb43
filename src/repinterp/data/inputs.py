"""Images to explain, as they come, made into the model's inputs.

A tensor or a floating NumPy array is taken as the model takes it (normalised); a PIL image or
a NumPy array of integer pixels (``uint8`` H x W x C) is read by a *transform*: any callable
from a PIL image to the normalised C x H x W tensor, a torchvision pipeline such as
``Compose([Resize(256), CenterCrop(224), ToTensor(), Normalize(mean, std)])`` included. A PIL
image is first turned upright by its EXIF orientation, as an image file is
(`repinterp.data.image_files.upright`), so that ``explain(Image.open(path))`` sees
what ``repinterp explain path`` sees. An array of pixels reaches the transform as the PIL
image it is (``Image.fromarray``); it has no orientation left to apply, so that
``np.asarray(Image.open(path))`` of a photo taken on its side is on its side: give the PIL
image, or ``np.asarray(ImageOps.exif_transpose(image))``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from .image_files import upright

__all__ = ["Transform", "as_input", "as_inputs", "channels_first", "check_dense", "one_input"]

Transform = Callable[[Image.Image], Tensor]
"""A PIL image -> its normalised C x H x W float tensor, as the model takes it."""


def check_dense(tensor: Tensor, what: str = "images") -> None:
    """Raise ``ValueError`` unless ``tensor`` holds its values as an ordinary (strided)
    tensor: not sparse, nor on the meta device (which holds no values)."""
    if tensor.is_meta:
        raise ValueError(f"{what} are a tensor on the meta device, which holds no values")
    if tensor.layout != torch.strided:
        raise ValueError(
            f"{what} are a {str(tensor.layout).removeprefix('torch.')} tensor: pass a dense "
            "one (tensor.to_dense())"
        )


def channels_first(images: Tensor) -> Tensor:
    """``images`` as ... x C x H x W: they are that already, or ... x H x W x C when the last
    dimension is 1 or 3 and the third from last is not (a view, never a copy)."""
    if images.ndim >= 3 and images.shape[-1] in (1, 3) and images.shape[-3] not in (1, 3):
        return images.movedim(-1, -3)
    return images


def _pixels(array: np.ndarray) -> Image.Image:
    """An H x W (x 1, 3 or 4) array of integer pixels as the PIL image it is."""
    squeezed = array[..., 0] if array.ndim == 3 and array.shape[-1] == 1 else array
    try:
        return Image.fromarray(squeezed)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"a {array.dtype} NumPy array of shape {array.shape} is not an image of pixels: give "
            "uint8 H x W, H x W x 1, H x W x 3 or H x W x 4 (or a float array, normalised as "
            "the model expects)"
        ) from exc


def _transformed(image: Image.Image, transform: Transform | None, what: str) -> Tensor:
    """``transform(image)``, checked; ``what`` names the image as the caller gave it."""
    if transform is None:
        raise ValueError(
            f"got {what}, but the interpreter has no transform to make it the model's input: "
            "pass transform= (e.g. torchvision's Compose([Resize, CenterCrop, ToTensor, "
            "Normalize]) as in training) to RepresentativeInterpreter, or pass a C x H x W float "
            "tensor normalised as the model expects"
        )
    out = transform(image)
    if not (isinstance(out, Tensor) and out.ndim == 3 and out.is_floating_point()):
        got = (
            f"a {out.dtype} tensor of shape {tuple(out.shape)}"
            if isinstance(out, Tensor)
            else f"a {type(out).__name__}"
        )
        raise ValueError(
            f"transform= must return an image's normalised C x H x W float tensor, got {got}"
        )
    return out


def as_input(image: Any, transform: Transform | None = None) -> Tensor:
    """One image as the model takes it: C x H x W (not checked further here).

    Args:
        image: a C x H x W (or 1 x C x H x W) tensor, as it is; a floating NumPy array
            (C x H x W, or H x W x C by [`channels_first`][repinterp.data.inputs.channels_first]'s
            rule), normalised as the model expects; or a PIL image (turned upright by its EXIF
            orientation) or a NumPy array of integer pixels (H x W, H x W x 1, 3 or 4), read
            by ``transform``.
        transform: see [`Transform`][repinterp.data.inputs.Transform]; None: PIL images and arrays
            of pixels are refused.

    Raises:
        ValueError: anything else (a sparse tensor, one on the meta device too), a PIL image
            or array of pixels with no transform, or a transform that does not return a
            C x H x W float tensor.
    """
    if isinstance(image, Tensor):
        check_dense(image, "an image to explain")
        return image[0] if image.ndim == 4 and image.shape[0] == 1 else image
    if isinstance(image, np.ndarray) and image.dtype.kind == "f":
        tensor = channels_first(torch.tensor(image))
        return tensor[0] if tensor.ndim == 4 and tensor.shape[0] == 1 else tensor
    if isinstance(image, np.ndarray) and image.dtype.kind in "biu":
        return _transformed(_pixels(image), transform, f"a {image.dtype} NumPy array of pixels")
    if isinstance(image, Image.Image):
        return _transformed(upright(image), transform, f"a PIL image ({type(image).__name__})")
    raise ValueError(
        f"an image to explain is a tensor, a NumPy array or a PIL image, got {type(image).__name__}"
    )


def one_input(image: Any, transform: Transform | None = None) -> Tensor:
    """[`as_input`][repinterp.data.inputs.as_input], checked to be one C x H x W image (what
    ``explain`` takes)."""
    image = as_input(image, transform)
    if image.ndim != 3:
        raise ValueError(
            f"explain takes one C x H x W (or 1 x C x H x W) image, got {tuple(image.shape)}"
        )
    return image


def as_inputs(images: Any, transform: Transform | None, shape: Sequence[int]) -> Tensor:
    """N images as the model takes them: N x C x H x W (not checked further here).

    Args:
        images: an N x C x H x W tensor, as it is; a floating NumPy array (N x C x H x W, or
            N x H x W x C by [`channels_first`][repinterp.data.inputs.channels_first]'s rule); a
            NumPy array of N images of integer pixels (N x H x W (x C)); or a list or tuple of
            anything [`as_input`][repinterp.data.inputs.as_input] takes (of one C x H x W each).
        transform: as in [`as_input`][repinterp.data.inputs.as_input].
        shape: the C x H x W of an empty list's 0 x C x H x W.

    Raises:
        ValueError: as [`as_input`][repinterp.data.inputs.as_input]; images of different shapes in a
            list.
    """
    if isinstance(images, Tensor):
        check_dense(images)
        return images
    if isinstance(images, np.ndarray) and images.dtype.kind == "f":
        return channels_first(torch.tensor(images))
    if not isinstance(images, (np.ndarray, list, tuple)):
        raise ValueError(
            "images to explain are an N x C x H x W tensor, a NumPy array or a list of images, "
            f"got {type(images).__name__}"
        )
    if len(images) == 0:
        return torch.empty(0, *shape)
    tensors = [as_input(image, transform) for image in images]
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) > 1:
        raise ValueError(f"the images have different shapes: {sorted(shapes)[:3]}")
    return torch.stack(tensors)
