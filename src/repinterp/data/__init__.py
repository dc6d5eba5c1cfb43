"""Data: what the engine reads, before any model.

Owns the in-memory image sets with their normalisation (``containers``), image folders
(``image_folder``), the data sets by name and their splits (``datasets``, whose names this
package exports), the ``shapes`` benchmark's drawing (``shape_drawing``), planted cues
(``cues``), reading image files within checked limits (``image_files``), reference sets and
checked image batches in every form the engine accepts (``reference``), images to explain as
they come, read by a transform (``inputs``), and how a data set was split and fingerprinted
(``provenance``). May import ``runtime`` only.
"""

from .datasets import (
    DATASET_CHOICES,
    IMAGENET_NORMALIZATION,
    MARKS,
    ImageFolderSet,
    ImageFormat,
    Images,
    ImageSet,
    Mark,
    Normalization,
    Split,
    digits,
    imagefolder,
    load_dataset,
    marked_split,
    mnist5k,
    mnist_super,
    shapes,
    split,
    with_cue,
    with_mark,
)

__all__ = [
    "DATASET_CHOICES",
    "IMAGENET_NORMALIZATION",
    "MARKS",
    "ImageFolderSet",
    "ImageFormat",
    "ImageSet",
    "Images",
    "Mark",
    "Normalization",
    "Split",
    "digits",
    "imagefolder",
    "load_dataset",
    "marked_split",
    "mnist5k",
    "mnist_super",
    "shapes",
    "split",
    "with_cue",
    "with_mark",
]
