"""Data: what the engine reads, before any model.

Owns the in-memory image sets with their normalisation (``containers``), image folders
(``image_folder``), the data sets by name and their splits (``datasets``, whose names this
package exports), the ``shapes`` benchmark's drawing (``shape_drawing``), reading
image files within checked limits (``image_files``), reference sets and checked image batches
in every form the engine accepts (``reference``), images to explain as they come, read by a
transform (``inputs``), and how a data set was split and fingerprinted (``provenance``). May
import
``runtime`` only.
"""

from .datasets import (
    DATASET_CHOICES,
    IMAGENET_NORMALIZATION,
    ImageFolderSet,
    ImageFormat,
    Images,
    ImageSet,
    Normalization,
    Split,
    digits,
    imagefolder,
    load_dataset,
    mnist5k,
    mnist_super,
    shapes,
    split,
)

__all__ = [
    "DATASET_CHOICES",
    "IMAGENET_NORMALIZATION",
    "ImageFolderSet",
    "ImageFormat",
    "ImageSet",
    "Images",
    "Normalization",
    "Split",
    "digits",
    "imagefolder",
    "load_dataset",
    "mnist5k",
    "mnist_super",
    "shapes",
    "split",
]
