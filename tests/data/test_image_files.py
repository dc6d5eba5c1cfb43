"""Image files decoded right: float and 32-bit integer TIFFs by their range, JPEGs and TIFFs
upright."""

from functools import partial

import numpy as np
import pytest
import torch
from PIL import Image

from repinterp.data import datasets as data
from repinterp.data.image_files import image_tensor, read_image
from repinterp.data.inputs import as_input

RAMP = np.linspace(0, 255, 8 * 12, dtype=np.float32).reshape(8, 12)  # 8 rows, 12 columns


def _read(path, channels: int = 1, fast: bool = False) -> torch.Tensor:
    return image_tensor(read_image(path, channels, fast=fast), channels)


@pytest.mark.parametrize(
    ("values", "scale"),
    [
        (RAMP, 255),  # float, 0-255: was clipped to 1, nearly all white
        (RAMP / 255, 1),  # float in [0, 1]: as it is
        (RAMP.astype(np.int32), 255),  # 32-bit integer, 0-255: was divided by 65,535
        (RAMP.astype(np.int32) * 200, 65535),  # 32-bit integer, 0-51,000
    ],
)
def test_float_and_32_bit_tiffs_are_read_by_their_range(tmp_path, values, scale) -> None:
    path = tmp_path / "deep.tif"
    Image.fromarray(values).save(path)
    with Image.open(path) as image:
        assert image.mode == ("F" if values.dtype == np.float32 else "I")
    expected = torch.from_numpy(values.astype(np.float32) / scale)
    grey = _read(path)
    assert grey.shape == (1, 8, 12) and torch.allclose(grey[0], expected, atol=1e-6)
    assert torch.allclose(_read(path, 3), expected.expand(3, -1, -1), atol=1e-6)


@pytest.mark.parametrize("high", [1.0001, 1.0019, 1.0 + 2**-23])
def test_float_pixels_just_above_1_are_rounding_not_255ths(tmp_path, high: float) -> None:
    values = RAMP / 255
    values[0, 0], values[0, 1] = high, -1e-4  # rounding on both sides of [0, 1]
    path = tmp_path / "rounded.tif"
    Image.fromarray(values.astype(np.float32)).save(path)
    grey = _read(path)[0]
    assert float(grey.max()) == 1.0 and float(grey.min()) == 0.0  # clipped, not divided
    assert torch.allclose(grey[1:], torch.from_numpy(values[1:]), atol=1e-6)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (RAMP / 255 * 1.5, "float pixels run up to 1.5: above 1 by more than rounding"),
        (RAMP - 1, "float pixels run from -1 to 254, outside 0 to 65,535"),
        (RAMP.astype(np.int32) * 300, "32-bit integer pixels run from 0 to 76500, outside"),
        (np.full((8, 12), np.nan, np.float32), "float pixels are not all finite"),
    ],
)
def test_deep_tiffs_out_of_any_range_are_refused_on_one_line(tmp_path, values, message) -> None:
    path = tmp_path / "odd.tif"
    Image.fromarray(values).save(path)
    with pytest.raises(ValueError, match=f"^cannot read {path} as an image: its {message}"):
        read_image(path, 1)


def _turned_jpeg(path) -> None:
    """A 40 x 20 JPEG, red above and blue below, whose EXIF says: turn 90° clockwise to view
    (orientation 6), so that it shows 20 x 40, blue on the left and red on the right."""
    pixels = np.zeros((20, 40, 3), np.uint8)
    pixels[:10] = (255, 0, 0)
    pixels[10:] = (0, 0, 255)
    image = Image.fromarray(pixels)
    exif = image.getexif()
    exif[0x0112] = 6
    image.save(path, exif=exif.tobytes(), quality=95)


def test_a_pil_image_to_explain_is_turned_upright_as_its_file_is(tmp_path) -> None:
    _turned_jpeg(tmp_path / "turned.jpg")
    from_file = _read(tmp_path / "turned.jpg", 3)  # as `repinterp explain FILE` reads it
    with Image.open(tmp_path / "turned.jpg") as picture:
        given = as_input(picture, partial(image_tensor, channels=3))
    assert from_file.shape == (3, 40, 20) and torch.equal(given, from_file)


def test_a_jpeg_is_read_upright_by_its_exif_orientation(tmp_path) -> None:
    _turned_jpeg(tmp_path / "turned.jpg")
    pixels = _read(tmp_path / "turned.jpg", 3)
    assert pixels.shape == (3, 40, 20)  # was 3 x 20 x 40, as stored
    left, right = pixels[:, :, :8].mean((1, 2)), pixels[:, :, -8:].mean((1, 2))
    assert left[2] > 0.9 and left[0] < 0.1  # blue
    assert right[0] > 0.9 and right[2] < 0.1  # red
    assert _read(tmp_path / "turned.jpg", 3, fast=True).shape[1:] == (5, 3)  # 1/8, upright


@pytest.mark.parametrize(
    ("orientation", "shape", "top_left"),
    [(1, (20, 40), "red"), (3, (20, 40), "blue"), (6, (40, 20), "blue"), (8, (40, 20), "red")],
)
def test_a_tiff_is_read_upright_by_its_orientation_tag(
    tmp_path, orientation: int, shape: tuple[int, int], top_left: str
) -> None:
    """The same 40 x 20 picture as `_turned_jpeg`, as a TIFF whose tag 274 says how to turn it
    (3: half a turn, 6: 90° clockwise, 8: 90° anticlockwise), read upright and turned once."""
    from PIL import TiffImagePlugin

    pixels = np.zeros((20, 40, 3), np.uint8)
    pixels[:10] = (255, 0, 0)
    pixels[10:] = (0, 0, 255)
    tags = TiffImagePlugin.ImageFileDirectory_v2()
    tags[274] = orientation
    Image.fromarray(pixels).save(tmp_path / "turned.tif", tiffinfo=tags)
    read = _read(tmp_path / "turned.tif", 3)
    assert read.shape == (3, *shape)
    red, blue = read[0, 0, 0] > 0.9, read[2, 0, 0] > 0.9
    assert (red, blue) == ((True, False) if top_left == "red" else (False, True))


def test_an_image_folder_reads_its_images_upright_and_by_their_range(tmp_path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _turned_jpeg(tmp_path / "a" / "turned.jpg")
    Image.fromarray(RAMP).save(tmp_path / "b" / "float.tif")
    folder = data.imagefolder(tmp_path, size=20)
    turned = folder.pixels(0)  # 20 x 40 resized to 20 x 40, cropped to its middle 20 rows
    assert turned[2, :, :8].mean() > 0.9 and turned[0, :, -8:].mean() > 0.9
    ramp = folder.pixels(1)
    assert 0.9 < ramp.max() <= 1 and ramp.mean() < 0.7  # not clipped to white
