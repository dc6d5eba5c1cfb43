"""Models: small ReLU CNNs of our own, torchvision models and timm models by name, with local
weights.

Nothing here downloads: torchvision constructors get ``weights=None``, timm's
``pretrained=False``, and trained weights come from a local file (``.safetensors``, or a
PyTorch state dict read with ``weights_only=True``). timm is optional (``pip install
repinterp[timm]``); its models are named ``timm:NAME`` (``timm:resnet50``,
``timm:efficientnet_b0``, any name ``timm.list_models()`` gives).
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Protocol

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save
from torch import Tensor, nn
from torchvision import models

from .split import locate_split, resolve_module


class SmallCNN(nn.Sequential):
    """A VGG-style ReLU CNN: ``features`` (conv 3x3 + ReLU blocks and 2x2 max-pools) then a
    piecewise-linear ``classifier`` (adaptive average pool, flatten, Linear, ReLU, Dropout,
    Linear).

    Args:
        in_channels: channels of the input images.
        num_classes: number of outputs (logits).
        config: conv output channels in order, ``"M"`` for a max-pool.
        pooled: side of the feature map fed to the head (adaptive average pooling makes the
            model accept any input size that survives the max-pools).
        hidden: width of the hidden Linear layer.

    Input N x in_channels x H x W (normalised); output N x num_classes logits. The last ReLU of
    ``features`` is the default target layer (`target_layer`).
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        config: Sequence[int | str],
        pooled: int,
        hidden: int,
    ) -> None:
        layers: list[nn.Module] = []
        channels = in_channels
        for item in config:
            if item == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(channels, int(item), 3, padding=1), nn.ReLU()]
                channels = int(item)
        head = [
            nn.AdaptiveAvgPool2d(pooled),
            nn.Flatten(),
            nn.Linear(channels * pooled * pooled, hidden),
            nn.ReLU(),
            nn.Dropout(0.25),
            nn.Linear(hidden, num_classes),
        ]
        super().__init__(
            OrderedDict(features=nn.Sequential(*layers), classifier=nn.Sequential(*head))
        )
        last_relu = max(i for i, layer in enumerate(layers) if isinstance(layer, nn.ReLU))
        self.target_layer = f"features.{last_relu}"


# Our archs: (constructor config, pooled side, hidden width, natural input channels).
_SMALL = {
    # 1 x 28 x 28 (MNIST): 28 → 14 → 7; 32 x 7 x 7 features.
    "mnist_cnn": ([16, "M", 32, "M", 32], 7, 128, 1),
    # 3 x 48..64 (shapes): 56 → 28 → 14 → 7; 64 x 7 x 7 features.
    "shapes_cnn": ([16, "M", 32, "M", 64, "M", 64], 7, 64, 3),
    # 1 x 8 x 8 (sklearn digits): 8 → 4; 32 x 4 x 4 features.
    "digits_cnn": ([16, 32, "M", 32], 4, 64, 1),
    # mnist_cnn's architecture, named apart for mnist-super's own bundled weights.
    "mnist_super_cnn": ([16, "M", 32, "M", 32], 7, 128, 1),
}

# torchvision archs and their target layers: the ReLU after the last convolution for VGG and
# AlexNet, the last block (which ends in a ReLU) for ResNet and MobileNetV2, and the final
# batch norm for DenseNet (its ReLU is functional and so part of the head).
_TORCHVISION = {
    "alexnet": "features.11",
    "vgg11": "features.19",
    "vgg11_bn": "features.27",
    "vgg13": "features.23",
    "vgg13_bn": "features.33",
    "vgg16": "features.29",
    "vgg16_bn": "features.42",
    "vgg19": "features.35",
    "vgg19_bn": "features.51",
    "resnet18": "layer4",
    "resnet34": "layer4",
    "resnet50": "layer4",
    "resnet101": "layer4",
    "resnet152": "layer4",
    "densenet121": "features",
    "densenet161": "features",
    "densenet169": "features",
    "densenet201": "features",
    "mobilenet_v2": "features.18",
}

ARCHS = (*_SMALL, *_TORCHVISION)
TIMM_PREFIX = "timm:"
# The image size at which a timm model's target layer is found (its usual input).
_TIMM_PROBE = (224, 224)


def _timm() -> ModuleType:
    try:
        import timm
    except ImportError as error:
        raise ValueError(
            "timm models need the timm package: pip install timm (or repinterp[timm])"
        ) from error
    return timm


def _check_arch(arch: str) -> None:
    if arch.startswith(TIMM_PREFIX):
        name = arch.removeprefix(TIMM_PREFIX)
        if not _timm().is_model(name):
            raise ValueError(f"unknown timm model {name!r} (timm.list_models() lists them)")
        return
    if arch not in ARCHS:
        raise ValueError(
            f"unknown arch {arch!r}; choose one of: {', '.join(ARCHS)}, or {TIMM_PREFIX}NAME"
        )


def default_target_layer(arch: str) -> str:
    """The module name whose output is the feature map to interpret: the ReLU output of the
    last convolution (or the nearest module that gives it); for a timm model, the last spatial
    layer from which the logits follow ([`locate_split`][repinterp.models.split.locate_split], found
    at 224 px without computing: the model is built on the meta device).

    Raises:
        ValueError: unknown arch; a timm model whose head is not piecewise linear (naming the
            layer that is not).
    """
    _check_arch(arch)
    if arch in _TORCHVISION:
        return _TORCHVISION[arch]
    with torch.device("meta"):
        model = _construct(arch, 2, None).eval()  # split_model refuses a model in training mode
    if arch.startswith(TIMM_PREFIX):
        channels = model.pretrained_cfg.get("input_size", (3,))[0]
        return locate_split(model, (channels, *_TIMM_PROBE)).layer
    return model.target_layer


# The side (pixels) of the feature maps the command line's default layer gives at least, where
# the images allow: the paper's VGG-19 at 224 px has 14 x 14, a ResNet at 224 px 7 x 7.
MIN_MAP_SIDE = 7


def _map_size(model: nn.Module, name: str, input_shape: Sequence[int]) -> tuple[int, ...]:
    """The h x w of layer ``name``'s output for one image of ``input_shape`` (empty: not an
    N x K x h x w tensor); ``model`` is on the meta device."""
    shapes: list[tuple[int, ...]] = []
    handle = model.get_submodule(name).register_forward_hook(
        lambda _, __, out: shapes.append(tuple(out.shape) if isinstance(out, Tensor) else ())
    )
    try:
        with torch.inference_mode():
            model(torch.zeros(1, *input_shape, device="meta"))
    finally:
        handle.remove()
    return shapes[-1][2:] if shapes and len(shapes[-1]) == 4 else ()


def check_input_size(arch: str, input_shape: Sequence[int]) -> None:
    """Refuse images of ``input_shape`` (C x H x W) that ``arch`` cannot take, its maps
    shrinking to nothing (found without computing: the model is built on the meta device).

    Raises:
        ValueError: naming the size and ``--image-size``, with what torch said.
    """
    with torch.device("meta"):
        model = _construct(arch, 2, int(input_shape[0])).eval()
    _check_forward(model, arch, input_shape)


def _check_forward(model: nn.Module, arch: str, input_shape: Sequence[int]) -> None:
    """`check_input_size` of ``model`` (``arch``, on the meta device)."""
    try:
        with torch.inference_mode():
            model(torch.zeros(1, *input_shape, device="meta"))
    except NotImplementedError:
        return  # an operation without a meta kernel: nothing to tell before computing
    except RuntimeError as exc:
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"images of {input_shape[-2]} x {input_shape[-1]} pixels are too small for {arch} "
            f"({said}): give a larger --image-size"
        ) from None


def target_layer_for(arch: str, input_shape: Sequence[int], layer: str | None = None) -> str:
    """The layer to interpret for images of ``input_shape``, such that heat maps show
    something: its feature maps have at least ``s x s`` pixels, ``s`` = `MIN_MAP_SIDE` or half
    the image's shorter side on smaller images (found without computing: the model is built on
    the meta device).

    Args:
        arch: a name from `ARCHS` or ``timm:NAME``.
        input_shape: C x H x W of the model's inputs.
        layer: the layer asked for, kept (with a one-line warning naming the default where its
            maps are coarser than ``s x s``); None:
            [`default_target_layer`][repinterp.models.zoo.default_target_layer] where its maps
            have ``s x s`` pixels at this size, else the last layer whose maps do, as
            ``target_layer=None`` finds layers
            ([`locate_split`][repinterp.models.split.locate_split]), e.g. ``layer2`` (8 x 8) of
            a ResNet at 64 px, where ``layer4`` is 2 x 2; where no layer reaches ``s x s``, the
            one with the finest maps, with a warning that says so.

    Returns:
        The layer's name.

    Raises:
        ValueError: unknown arch or layer; images too small for ``arch``
            (`check_input_size`); a ``layer`` given whose maps are 1 x 1 at this size
            (every heat map would be constant: the message names the layer to use instead).
    """
    default = default_target_layer(arch)
    with torch.device("meta"):
        model = _construct(arch, 2, int(input_shape[0])).eval()
    _check_forward(model, arch, input_shape)
    name, _ = resolve_module(model, layer or default)
    side = max(2, min(MIN_MAP_SIDE, -(-min(input_shape[-2:]) // 2)))
    size = f"{input_shape[-2]} x {input_shape[-1]}"
    found = _map_size(model, name, input_shape)
    if not found or min(found) >= side:
        return name  # fine enough, or not a feature map at all (refused where the model is split)
    if layer is None or found[0] * found[1] > 1:
        try:
            finer = locate_split(model, input_shape, min_side=side).layer
        except ValueError:
            return name  # no other layer splits: the split says why
        finer_map = _map_size(model, finer, input_shape)
        finer_size = " x ".join(map(str, finer_map))
        if layer is None:
            if min(finer_map) < side:
                warnings.warn(
                    f"no layer of {arch} gives feature maps of {side} x {side} pixels for {size} "
                    f"px images: using {finer!r}, the finest ({finer_size})",
                    stacklevel=2,
                )
            return finer
        if finer == name:  # the finest there is
            return name
        warnings.warn(
            f"layer {name!r} of {arch} gives {found[0]} x {found[1]} feature maps for {size} px "
            f"images: its heat maps are coarse ({finer!r}, the default there, gives {finer_size})",
            stacklevel=2,
        )
        return name
    try:
        instead = f"use {locate_split(model, input_shape).layer!r}, the last layer with more"
    except ValueError:
        instead = "no layer has more"
    raise ValueError(
        f"layer {name!r} of {arch} gives 1 x 1 feature maps for {size} px images, so every heat "
        f"map would be constant: {instead} than one pixel there (or larger images)"
    )


def check_model(arch: str, weights: str | Path | None = None) -> None:
    """Check a model's name and its weights file before anything else is read (a command
    checks its arguments before it scans an image folder).

    Raises:
        ValueError: unknown arch, or timm missing for a timm model.
        FileNotFoundError: ``weights`` is given and is not a file.
    """
    _check_arch(arch)
    if weights is not None:
        _weights_file(weights)


def _weights_file(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file not found: {path}")
    return path


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def _last_linear(model: nn.Module) -> str:
    return [name for name, m in model.named_modules() if isinstance(m, nn.Linear)][-1]


def _construct(arch: str, num_classes: int, in_channels: int | None) -> nn.Module:
    if arch.startswith(TIMM_PREFIX):
        channels = {} if in_channels is None else {"in_chans": in_channels}
        name = arch.removeprefix(TIMM_PREFIX)
        return _timm().create_model(name, pretrained=False, num_classes=num_classes, **channels)
    if arch in _SMALL:
        config, pooled, hidden, channels = _SMALL[arch]
        channels = channels if in_channels is None else in_channels
        return SmallCNN(channels, num_classes, config, pooled, hidden)
    model = getattr(models, arch)(weights=None)
    head = _last_linear(model)
    old = model.get_submodule(head)
    _replace(model, head, nn.Linear(old.in_features, num_classes))
    if in_channels is not None and in_channels != 3:
        name, conv = next((n, m) for n, m in model.named_modules() if isinstance(m, nn.Conv2d))
        _replace(
            model,
            name,
            nn.Conv2d(
                in_channels,
                conv.out_channels,
                conv.kernel_size,
                conv.stride,
                conv.padding,
                bias=conv.bias is not None,
            ),
        )
    return model


def build_model(
    arch: str,
    num_classes: int,
    in_channels: int | None = None,
    weights: str | Path | None = None,
    *,
    reset_head: bool = False,
    seed: int | None = 0,
) -> nn.Module:
    """Build a model by name, optionally with weights from a local file; returned in eval mode.

    Args:
        arch: one of `ARCHS`: ``mnist_cnn`` (1 x 28 x 28; ``mnist_super_cnn`` is the same,
            named apart for its own bundled weights), ``shapes_cnn`` (3 x 48..64),
            ``digits_cnn`` (1 x 8 x 8), or a torchvision model name (``vgg16``, ``resnet50``,
            ...), built with ``weights=None`` and its last Linear layer replaced; or
            ``timm:NAME``, built by timm with ``pretrained=False`` and ``num_classes``.
        num_classes: number of outputs.
        in_channels: input channels; None for the arch's own (1 for the digit CNNs, 3 else).
            For a torchvision model the first convolution is replaced when this is not 3; a timm
            model is built with ``in_chans``.
        weights: a ``.safetensors`` file, or a ``torch.save``d state dict (raw, or under a
            ``"state_dict"`` or ``"model"`` key); None keeps the random initialisation.
        reset_head: ignore the file's last-layer weights and keep that layer's random
            initialisation, e.g. to fine-tune ImageNet weights on other classes.
        seed: seed of the random initialisation (the global torch RNG is left untouched);
            None draws from the global RNG.

    Raises:
        ValueError: unknown arch, timm missing for a timm model, or weights that do not fit
            (one line saying what).
        FileNotFoundError: missing weights file.
    """
    _check_arch(arch)
    if seed is None:
        model = _construct(arch, num_classes, in_channels)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = _construct(arch, num_classes, in_channels)
    if weights is not None:
        load_weights(model, weights, skip=(_last_linear(model),) if reset_head else ())
    return model.eval()


class LabelledImages(Protocol):
    """A data set as a model sees it: ``(image, label)`` pairs (C x H x W images) and the
    classes' names."""

    @property
    def class_names(self) -> Sequence[str]: ...

    def __getitem__(self, index: int) -> tuple[Tensor, int]: ...


@dataclass(frozen=True)
class DataShape:
    """What a data set fixes of its model (and an index's manifest records).

    Attributes:
        num_classes: the data set's classes: the model's outputs.
        in_channels: its images' channels: the model's input channels.
    """

    num_classes: int
    in_channels: int

    @classmethod
    def of(cls, data: LabelledImages) -> DataShape:
        """The shape of ``data``, read from its class names and its first image."""
        return cls(len(data.class_names), int(data[0][0].shape[0]))


def model_for(
    arch: str,
    shape: DataShape,
    weights: str | Path | None = None,
    *,
    reset_head: bool = False,
    seed: int | None = 0,
) -> nn.Module:
    """The model ``arch`` for a data set of ``shape`` (``DataShape.of(data)``, or as an index
    recorded it), in eval mode: [`build_model`][repinterp.models.zoo.build_model] with its classes
    and channels.

    Raises:
        ValueError, FileNotFoundError: see [`build_model`][repinterp.models.zoo.build_model].
    """
    return build_model(
        arch, shape.num_classes, shape.in_channels, weights, reset_head=reset_head, seed=seed
    )


def _weights_kind(path: Path) -> str | None:
    """``"torch"`` (torch.save's zip, or a pickle of an older torch), ``"safetensors"`` (an
    8-byte header length, then the JSON header), or None, from the file's first bytes."""
    with open(path, "rb") as f:
        start = f.read(9)
    if len(start) == 9 and start[8:] == b"{":  # first: a header length may start with 0x80
        return "safetensors"
    if start.startswith(b"PK\x03\x04") or start.startswith(b"\x80"):
        return "torch"
    return None


def _read_state_dict(path: Path) -> dict[str, Tensor]:
    kind = _weights_kind(path)
    if kind is None and path.suffix != ".safetensors":
        raise ValueError(
            f"cannot read weights from {path}: it is not a weights file (a PyTorch checkpoint "
            "of torch.save, or safetensors)"
        )
    try:
        if kind == "safetensors" or path.suffix == ".safetensors":
            return load_file(path, device="cpu")
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if reason.startswith("Weights only load failed"):  # torch's words for pickled objects
            reason = (
                "it holds Python objects, not only tensors (a whole model saved with "
                "torch.save(model)?): if you trust it, load it with torch.load(path, "
                "weights_only=False) and save model.state_dict()"
            )
        raise ValueError(f"cannot read weights from {path}: {reason}") from error
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise ValueError(f"{path} holds no state dict of tensors")
    if state and all(k.startswith("module.") for k in state):
        state = {k.removeprefix("module."): v for k, v in state.items()}
    return state


def _names(keys: Sequence[str], limit: int = 3) -> str:
    more = f", ... ({len(keys)} in all)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def load_weights(model: nn.Module, path: str | Path, skip: Sequence[str] = ()) -> nn.Module:
    """Load weights from a local file into `model`, in place, strictly.

    Args:
        model: the model to fill.
        path: a ``.safetensors`` file or a ``torch.save``d state dict (see `build_model`);
            keys saved from ``nn.DataParallel`` (``module.`` prefix) are accepted.
        skip: module names (and their parameters) left as they are.

    Returns:
        `model`.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: the file's tensors do not fit `model`; the one-line message lists what is
            missing, unexpected or mis-shaped.
    """
    path = _weights_file(path)

    def skipped(key: str) -> bool:
        return any(key.startswith(f"{name}.") for name in skip)

    state = {k: v for k, v in _read_state_dict(path).items() if not skipped(k)}
    expected = {k: v for k, v in model.state_dict().items() if not skipped(k)}
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    misshaped = [
        f"{k} (file {tuple(state[k].shape)}, model {tuple(expected[k].shape)})"
        for k in expected
        if k in state and state[k].shape != expected[k].shape
    ]
    problems = [
        f"{label} {_names(keys)}"
        for label, keys in (
            ("missing", missing),
            ("unexpected", unexpected),
            ("mis-shaped", misshaped),
        )
        if keys
    ]
    if problems:
        raise ValueError(f"weights in {path} do not fit the model: {'; '.join(problems)}")
    model.load_state_dict(state, strict=not skip)
    return model


def weights_bytes(model: nn.Module, metadata: dict[str, str] | None = None) -> bytes:
    """`model`'s state dict as the bytes of a safetensors file (contiguous CPU tensors), with
    ``metadata`` in its header (what `train` measured: see `recorded_training`)."""
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    return save(state, metadata)


def recorded_training(path: str | Path) -> dict[str, str]:
    """What ``repinterp train`` recorded in a safetensors weights file's header
    (``held_out_accuracy`` in %, ``dataset``, ``image_size`` in pixels), or nothing (another
    file, or none recorded)."""
    path = Path(path)
    try:
        if _weights_kind(path) != "safetensors":
            return {}
        with safe_open(str(path), "pt") as f:
            return dict(f.metadata() or {})
    except (OSError, SafetensorError):
        return {}


def save_weights(model: nn.Module, path: str | Path) -> None:
    """Save `model`'s state dict to `path` as safetensors (see
    [`weights_bytes`][repinterp.models.zoo.weights_bytes])."""
    Path(path).write_bytes(weights_bytes(model))
