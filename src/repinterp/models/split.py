"""Split a CNN classifier ``F`` at a target layer into ``psi`` (input -> feature map) and ``G``.

``G`` (feature map -> logits) is the model's head. The method needs it to be piecewise linear,
so that the hyperplane of Eq. 2 is exactly a linear boundary of ``G``;
[`split_model`][repinterp.models.split.split_model] refuses heads that contain anything else
([`linearity`][repinterp.models.linearity]) unless told otherwise.
[`locate_split`][repinterp.models.split.locate_split] finds the layer itself, when the user names
none. The split checks that the model is a fixed function of each image
([`fixed_mode`][repinterp.models.fixed_mode]) and records the fingerprint of its traced graphs
([`fingerprint`][repinterp.models.fingerprint]); both modules' public names are importable from
here too.
"""

from __future__ import annotations

import difflib
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol

import torch
from torch import Tensor, fx, nn

from ..runtime.devices import eval_mode, model_device, model_dtype
from ..runtime.precision import exact_float32
from .fingerprint import graph_fingerprint, model_fingerprint
from .fixed_mode import (
    CHECKED_IMAGES,
    UnfixedModelError,
    check_fixed,
    check_fixed_before_each_call,
    check_functional_training,
    check_image_function,
    modules_run,
)
from .linearity import NonlinearHeadError, check_piecewise_linear

__all__ = [
    "CHECKED_IMAGES",
    "LayerSpec",
    "NonlinearHeadError",
    "SplitModel",
    "SplitOptions",
    "UnfixedModelError",
    "check_feature_map",
    "check_fixed",
    "check_image_function",
    "graph_fingerprint",
    "locate_split",
    "model_fingerprint",
    "probe_split",
    "resolve_layer",
    "resolve_module",
    "split_at",
    "split_model",
]


def resolve_module(model: nn.Module, layer: str | nn.Module) -> tuple[str, nn.Module]:
    """The dotted name and the module of ``layer`` (a name from ``named_modules()`` or the
    module itself) in ``model``.

    Raises:
        ValueError: the layer is not part of the model (the message lists similar names).
    """
    modules = dict(model.named_modules())
    if isinstance(layer, nn.Module):
        for name, module in modules.items():
            if module is layer and name:
                return name, module
        raise ValueError("target_layer is a module that is not part of the model")
    if not isinstance(layer, str) or not layer or layer not in modules:
        names = [n for n in modules if n]
        close = difflib.get_close_matches(str(layer), names, n=6, cutoff=0.6)
        top = [n for n in names if "." not in n]
        hint = (
            f"; similar names: {', '.join(close)}"
            if close
            else f"; its top-level modules: {', '.join(top[:12])}"
            if top
            else ""
        )
        raise ValueError(f"target_layer {layer!r} is not a module of the model{hint}")
    return layer, modules[layer]


LayerSpec = str | nn.Module | Sequence[nn.Module]
OutputFn = Callable[[Any], Any]

# Layers whose output is never an N x K x h x w feature map.
_FLAT_MODULES: tuple[type[nn.Module], ...] = (nn.Linear, nn.Bilinear, nn.Flatten, nn.BatchNorm1d)
# Pooling layers: `locate_split` prefers the layers before them.
_POOLS = (
    nn.MaxPool2d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool2d,
    nn.LPPool2d,
    nn.FractionalMaxPool2d,
)


def resolve_layer(model: nn.Module, target_layer: LayerSpec) -> str:
    """Return the dotted name of ``target_layer`` in ``model``.

    Args:
        model: the classifier.
        target_layer: a name from ``model.named_modules()``, the module itself, or a list of
            one module (pytorch-grad-cam's ``target_layers=[model.layer4]``).

    Raises:
        ValueError: the layer is not in the model (the message lists similar names), a list
            of other than one module, or a layer whose output is flat (Linear, Flatten, ...).
    """
    if isinstance(target_layer, Sequence) and not isinstance(target_layer, str):
        if len(target_layer) != 1:
            raise ValueError(
                f"target_layer is a list of {len(target_layer)} layers; the model is split at "
                "one layer: pass one, e.g. [model.layer4]"
            )
        target_layer = target_layer[0]
    name, module = resolve_module(model, target_layer)
    if isinstance(module, _FLAT_MODULES):
        raise ValueError(
            f"target_layer {name!r} ({type(module).__name__}) gives flat N x D outputs, not "
            "N x K x h x w feature maps: choose a convolutional layer (or target_layer=None "
            "for the last spatial one)"
        )
    return name


class _LeafTracer(fx.Tracer):
    """Traces through every module except the target layer and leaf modules; a
    ``SimpleNamespace`` (an output such as ``SimpleNamespace(logits=...)``) is recorded as its
    construction from its fields, as torch.fx records a dataclass."""

    def __init__(self, leaf: str) -> None:
        super().__init__()
        self.leaf = leaf

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return module_qualified_name == self.leaf or super().is_leaf_module(
            m, module_qualified_name
        )

    def create_arg(self, a: Any) -> Any:
        if isinstance(a, SimpleNamespace):
            fields = {name: self.create_arg(value) for name, value in vars(a).items()}
            return self.create_node("call_function", SimpleNamespace, (), fields)
        try:
            return super().create_arg(a)
        except NotImplementedError:
            raise TypeError(
                f"its forward passes or returns an object of class {type(a).__name__}, which "
                "torch.fx cannot record: return the logits as a tensor, or in a dict, a tuple, "
                "a dataclass or a SimpleNamespace (with FitConfig's output= to select them)"
            ) from None


_IN_PLACE_OPERATORS = {
    operator.setitem,
    operator.iadd,
    operator.isub,
    operator.imul,
    operator.imatmul,
    operator.itruediv,
    operator.ifloordiv,
    operator.imod,
    operator.ipow,
    operator.iand,
    operator.ior,
    operator.ixor,
    operator.ilshift,
    operator.irshift,
}


def _writes_in_place(graph_module: fx.GraphModule) -> bool:
    """Whether any operation of ``graph_module`` may write into a tensor in place (so possibly
    into its input): a module with ``inplace=True``, a function or method named ``..._``, an
    in-place operator or item assignment, or a call given ``inplace`` or a literal ``True``
    (conservative: it may be another flag)."""
    modules = dict(graph_module.named_modules())
    for node in graph_module.graph.nodes:
        if node.op == "call_module" and getattr(modules[node.target], "inplace", False):
            return True
        if node.op not in ("call_function", "call_method"):
            continue
        name = node.target if isinstance(node.target, str) else node.target.__name__
        flags = [*node.args, *node.kwargs.values()]
        if (name.endswith("_") and not name.endswith("__")) or node.target in _IN_PLACE_OPERATORS:
            return True
        if any(flag is True for flag in flags):
            return True
    return False


class _Head(nn.Module):
    """``G``: runs the traced head on a feature map; the input is cloned when the head may
    write in place (`_writes_in_place`), so that the caller's feature map is never
    modified."""

    def __init__(self, graph_module: fx.GraphModule) -> None:
        super().__init__()
        self.graph_module = graph_module
        self.copies_input = _writes_in_place(graph_module)

    def forward(self, t: Tensor) -> Tensor:
        logits = self.graph_module(t.clone() if self.copies_input else t)
        if not isinstance(logits, Tensor):
            raise ValueError(
                f"the model's output is a {type(logits).__name__}, not a tensor of logits: pass "
                "config=FitConfig(output=lambda out: ...) (the logits) to RepresentativeInterpreter"
            )
        return logits


@dataclass
class SplitModel:
    """``F = G o psi``, split at ``layer``.

    Both refuse to run (`UnfixedModelError`) while a module they run is in training mode.

    Attributes:
        psi: input (N x C x H x W) -> feature map (N x K x h x w); runs the trunk only.
        head: ``G``, feature map -> logits (N x classes); never runs the trunk.
        layer: dotted name of the target layer.
        fingerprint: SHA-256 of the traced graphs of ``psi`` and ``G``: the operations, the
            types and settings of the modules called (see `graph_fingerprint`); not the
            weights, which `model_fingerprint` covers.
    """

    psi: nn.Module
    head: nn.Module
    layer: str
    fingerprint: str


class _TraceError(ValueError):
    """torch.fx cannot trace the model (at any layer)."""


def _trace(model: nn.Module, layer: str) -> fx.Graph:
    try:
        return _LeafTracer(layer).trace(model)
    except Exception as exc:  # fx raises many types; re-raise with the cause attached
        raise _TraceError(
            f"cannot trace {type(model).__name__} with torch.fx to split it at {layer!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def _descendants(graph: fx.Graph, root: fx.Node) -> set[fx.Node]:
    seen = {root}
    for node in graph.nodes:  # graph.nodes is topologically ordered
        if any(isinstance(a, fx.Node) and a in seen for a in node.all_input_nodes):
            seen.add(node)
    return seen


def _ancestors(node: fx.Node) -> set[fx.Node]:
    seen, todo = {node}, [node]
    while todo:
        for arg in todo.pop().all_input_nodes:
            if arg not in seen:
                seen.add(arg)
                todo.append(arg)
    return seen


def _field(node: fx.Node, name: str) -> fx.Node | None:
    """The node passed as field ``name`` when ``node`` constructs an object with keyword
    fields (a traced dataclass output, e.g. Hugging Face style ``Output(logits=...)``)."""
    if node.op == "call_function" and isinstance(node.target, type):
        value = node.kwargs.get(name)
        return value if isinstance(value, fx.Node) else None
    return None


def _default_logits(value: Any) -> Any:
    """The logits in a traced model output: a tensor, ``out["logits"]`` or ``out.logits``."""
    if isinstance(value, Mapping):
        if "logits" in value:
            return value["logits"]
        raise ValueError(
            f"the model returns a dict with keys {sorted(map(str, value))} and no 'logits': pass "
            "config=FitConfig(output=lambda out: out[KEY]) to RepresentativeInterpreter"
        )
    if isinstance(value, (tuple, list)):
        raise ValueError(
            f"the model returns a {type(value).__name__} of {len(value)}: pass "
            "config=FitConfig(output=lambda out: out[I]) (the logits) to RepresentativeInterpreter"
        )
    node = value.node if isinstance(value, fx.Proxy) else None
    if node is not None and node.op == "call_function" and isinstance(node.target, type):
        if _field(node, "logits") is None:
            raise ValueError(
                f"the model returns a {node.target.__name__} without a 'logits' field: pass "
                "config=FitConfig(output=lambda out: out.FIELD) to RepresentativeInterpreter"
            )
        return value.logits
    return value


def _logits_node(graph: fx.Graph, output: OutputFn | None) -> fx.Node:
    """Apply ``output`` (default: `_default_logits`) to the traced model's output and
    return the node of the logits it selects."""
    out = next(n for n in graph.nodes if n.op == "output")
    tracer = fx.proxy.GraphAppendingTracer(graph)
    value = fx.node.map_arg(out.args[0], lambda n: fx.Proxy(n, tracer))
    with graph.inserting_before(out):
        result = (output or _default_logits)(value)
        node = result.node if isinstance(result, fx.Proxy) else None
    if node is None:
        raise ValueError(
            f"output= must select the logits tensor from the model's output, got "
            f"{type(result).__name__}"
        )
    if node.op == "call_function" and node.target is getattr and isinstance(node.args[0], fx.Node):
        node = _field(node.args[0], node.args[1]) or node
    return node


def split_model(
    model: nn.Module,
    target_layer: LayerSpec,
    allow_nonlinear_head: bool = False,
    output: OutputFn | None = None,
) -> SplitModel:
    """Split ``model`` at ``target_layer`` into ``psi`` and ``G`` with ``G(psi(x))`` the logits.

    The model is traced with ``torch.fx`` (the target layer kept as one call); ``psi`` is the
    graph up to the target layer's output and ``G`` the part of the graph between it and the
    logits.

    Args:
        model: a classifier mapping N x C x H x W images to N x classes logits, or to a dict
            with ``"logits"``, or to a dataclass (Hugging Face style) or ``SimpleNamespace``
            with a ``.logits`` field.
        target_layer: dotted module name (as in ``named_modules()``), the module itself, or a
            list of one module.
        allow_nonlinear_head: accept heads that are not piecewise linear.
        output: takes the model's output and returns the logits (e.g. ``lambda out: out[0]``);
            it is traced, so it must only select (index, attribute), not compute. None: the
            output itself, its ``"logits"`` entry or its ``.logits``.

    Returns:
        The [`SplitModel`][repinterp.models.split.SplitModel].

    Raises:
        ValueError: unknown or flat layer; a layer called more than once; a head that needs
            values other than the layer's output (e.g. a skip connection across it); an output
            without logits.
        NonlinearHeadError: a head that is not piecewise linear (naming the layer) unless
            ``allow_nonlinear_head``.
        UnfixedModelError: a module that ``psi`` or ``G`` runs is in training mode, or is a
            batch norm without running statistics (naming the module).
    """
    layer = resolve_layer(model, target_layer)
    graph = _trace(model, layer)
    logits = _logits_node(graph, output)
    calls = [n for n in graph.nodes if n.op == "call_module" and n.target == layer]
    if not calls:
        raise ValueError(f"target_layer {layer!r} is never called in the model's forward")
    if len(calls) > 1:
        raise ValueError(
            f"target_layer {layer!r} is called {len(calls)} times in forward; choose a layer "
            "that is called once"
        )
    target = calls[0]
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    if len(inputs) != 1:
        raise ValueError("the model's forward must take exactly one input tensor")

    # psi: everything up to the target, which becomes the output.
    psi_graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in graph.nodes:
        if node.op == "output":
            break
        env[node] = psi_graph.node_copy(node, lambda n: env[n])
        if node is target:
            break
    psi_graph.output(env[target])

    # G: the target's output becomes the input; only nodes that depend on it and lead to the
    # logits are kept.
    if target not in _ancestors(logits):
        raise ValueError(f"the model's logits do not depend on target_layer {layer!r}'s output")
    t_nodes = _descendants(graph, target) & _ancestors(logits)
    head_graph = fx.Graph()
    env = {target: head_graph.placeholder("t")}
    for node in graph.nodes:
        if node is target or node.op in ("placeholder", "output"):
            continue
        if node not in t_nodes and node.op != "get_attr":
            continue
        for arg in node.all_input_nodes:
            if arg not in env and arg.op == "get_attr":
                env[arg] = head_graph.node_copy(arg, lambda n: env[n])
            elif arg not in env:
                raise ValueError(
                    f"the head after {layer!r} also uses {arg.name!r}, computed before it "
                    "(e.g. a skip connection across the layer): choose the output of a "
                    "whole block instead"
                )
        env[node] = head_graph.node_copy(node, lambda n: env[n])
    head_graph.output(env[logits])
    psi_nodes = list(psi_graph.nodes)
    psi_modules = modules_run(model, psi_nodes, root=True)
    head_modules = modules_run(model, list(head_graph.nodes), root=False)
    # A module that left no node in the trace (the user's own, the identity in eval mode) may
    # run in psi or G in training mode: both check it.
    traced = {name for name, _ in psi_modules + head_modules}
    untraced = [(name, m) for name, m in model.named_modules() if name not in traced]
    psi_modules += untraced
    head_modules += untraced
    check_fixed(psi_modules + head_modules)
    check_functional_training([*psi_nodes, *head_graph.nodes])
    if not allow_nonlinear_head:
        check_piecewise_linear(
            model, head_graph, {n for n in head_graph.nodes if n.op != "get_attr"}
        )

    psi = _module(model, psi_graph, "Psi")
    head = _Head(_module(model, head_graph, "Head"))
    check_fixed_before_each_call(psi, psi_modules)
    check_fixed_before_each_call(head, head_modules)
    fingerprint = graph_fingerprint(model, [psi_graph, head_graph])
    return SplitModel(psi=psi, head=head, layer=layer, fingerprint=fingerprint)


def check_feature_map(t: Any, layer: str) -> None:
    """Raise ``ValueError`` unless ``t`` (the output of ``layer``) is an N x K x h x w tensor."""
    if not isinstance(t, Tensor) or t.ndim != 4:
        shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
        raise ValueError(
            f"target_layer {layer!r} gives outputs of shape {shape}, not N x K x h x w feature "
            "maps: choose a convolutional layer (or target_layer=None for the last spatial one)"
        )


def _output_shapes(model: nn.Module, input_shape: Sequence[int]) -> list[tuple[str, Any, bool]]:
    """Each module's name, output shape (None: not a tensor) and whether that output is a
    pooling layer's (also a container's that returns it), in the order the modules finish in
    one forward pass of a zero image of ``input_shape``."""
    seen: list[tuple[str, Any, bool]] = []
    pooled: list[Tensor] = []  # kept alive so that their ids are not reused

    def hook(name: str) -> Callable[..., None]:
        def record(module: nn.Module, inputs: Any, out: Any) -> None:
            is_pool = isinstance(out, Tensor) and (
                isinstance(module, _POOLS) or any(out is p for p in pooled)
            )
            if is_pool:
                pooled.append(out)
            seen.append((name, tuple(out.shape) if isinstance(out, Tensor) else None, is_pool))

        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if n]
    probe = torch.zeros(1, *input_shape, device=model_device(model), dtype=model_dtype(model))
    try:  # in eval mode, which leaves the model as it is (the split then refuses other modes)
        with torch.inference_mode(), eval_mode(model):
            model(probe)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def locate_split(
    model: nn.Module,
    input_shape: Sequence[int],
    allow_nonlinear_head: bool = False,
    output: OutputFn | None = None,
    min_side: int | None = None,
) -> SplitModel:
    """Split ``model`` at its last spatial layer: the last module to finish in a forward pass
    whose output is N x K x h x w with h x w > 1, that is called once and from whose output
    alone the logits follow (like torchcam's ``locate_candidate_layer``, with the split's
    checks). Pooling layers (and containers whose output is a pool's) are taken only where no
    other layer qualifies: VGG gives its last conv ReLU (the paper's "last convolutional
    layer", and the CLI's default), not the ``maxpool``/``avgpool`` after it, whose maps are
    coarser (at small inputs VGG's adaptive ``avgpool`` even repeats pixels up to 7 x 7); a
    1 x 1 output (a global pool) never counts.

    Args:
        model: the classifier, in eval mode.
        input_shape: C x H x W of its images (one zero image is run through it).
        allow_nonlinear_head: as in [`split_model`][repinterp.models.split.split_model].
        output: as in [`split_model`][repinterp.models.split.split_model].
        min_side: None: as above. A side in pixels: the last layer whose maps are at least
            ``min_side x min_side`` instead, or, where none is, the one with the most pixels
            (the later of equals).

    Raises:
        NonlinearHeadError: the head after the last spatial layer is not piecewise linear
            (naming the layer), unless ``allow_nonlinear_head``.
        UnfixedModelError: as in [`split_model`][repinterp.models.split.split_model].
        ValueError: no layer qualifies.
    """
    shapes = _output_shapes(model, input_shape)
    calls: dict[str, int] = {}
    for name, _, _ in shapes:
        calls[name] = calls.get(name, 0) + 1
    spatial = [
        (name, is_pool, shape[2:])
        for name, shape, is_pool in reversed(shapes)
        if calls[name] == 1 and shape is not None and len(shape) == 4 and shape[2] * shape[3] > 1
    ]
    if min_side is not None:
        fine = [layer for layer in spatial if min(layer[2]) >= min_side]
        spatial = fine or sorted(spatial, key=lambda layer: -layer[2][0] * layer[2][1])
    pools = [name for name, is_pool, _ in spatial if is_pool]
    tried = []
    for name in [name for name, is_pool, _ in spatial if not is_pool] + pools:
        try:
            return split_model(model, name, allow_nonlinear_head, output)
        except NonlinearHeadError as error:
            raise NonlinearHeadError(f"the last spatial layer is {name!r}, but {error}") from error
        except (_TraceError, UnfixedModelError):
            raise
        except ValueError:
            tried.append(name)
    named = f": {', '.join(tried[:3])}{', ...' if len(tried) > 3 else ''}" if tried else ""
    raise ValueError(
        "target_layer=None: no layer gives N x K x h x w feature maps (h x w > 1) from whose "
        f"output alone the logits follow (tried {len(tried)}{named}); pass target_layer=NAME "
        "of a convolutional layer that does (a model without one, such as a vision "
        "transformer, is not a CNN this method explains)"
    )


def _module(model: nn.Module, graph: fx.Graph, name: str) -> fx.GraphModule:
    gm = fx.GraphModule(model, graph, class_name=name)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


@exact_float32()
@torch.inference_mode()
def probe_split(
    split: SplitModel, input_shape: tuple[int, ...], device: torch.device, dtype: torch.dtype
) -> None:
    """Run one zero image of ``input_shape`` through ``psi`` to check the target layer's output."""
    probe = torch.zeros(1, *input_shape, device=device, dtype=dtype)
    check_feature_map(split.psi(probe), split.layer)


class SplitOptions(Protocol):
    """How a model is split (a [`FitConfig`][repinterp.core.config.FitConfig] is one): see
    [`split_model`][repinterp.models.split.split_model]; ``input_shape``: C x H x W of the
    images, or None."""

    @property
    def output(self) -> OutputFn | None: ...
    @property
    def allow_nonlinear_head(self) -> bool: ...
    @property
    def input_shape(self) -> tuple[int, int, int] | None: ...


def split_at(
    model: nn.Module,
    target_layer: LayerSpec | None,
    options: SplitOptions,
    dtype: torch.dtype,
    input_shape: tuple[int, ...] | None = None,
) -> SplitModel | None:
    """The split an interpreter is made with: at ``target_layer`` (checked with one zero image
    when the input shape is known: ``input_shape``, else ``options.input_shape``), found with
    the input shape when the layer is None
    ([`locate_split`][repinterp.models.split.locate_split]), else None (found at ``fit``)."""
    allow_nonlinear_head, output = options.allow_nonlinear_head, options.output
    input_shape = options.input_shape if input_shape is None else input_shape
    if target_layer is not None:
        split = split_model(model, target_layer, allow_nonlinear_head, output)
        if input_shape is not None:
            probe_split(split, input_shape, model_device(model), dtype)
        return split
    if input_shape is not None:
        return locate_split(model, input_shape, allow_nonlinear_head, output)
    return None
