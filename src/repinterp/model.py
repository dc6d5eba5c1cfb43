"""Split a CNN classifier ``F`` at a target layer into ``psi`` (input -> feature map) and ``G``.

``G`` (feature map -> logits) is the model's head. The method needs it to be piecewise linear,
so that the hyperplane of Eq. 2 is exactly a linear boundary of ``G``; :func:`split_model`
refuses heads that contain anything else unless told otherwise.
"""

from __future__ import annotations

import hashlib
import operator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, fx, nn

from .utils import resolve_module, tensor_bytes

__all__ = ["SplitModel", "model_fingerprint", "resolve_layer", "split_model"]

# Modules that are piecewise linear in eval mode. BatchNorm and Dropout only in eval mode.
_PL_MODULES: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.PReLU,
    nn.Hardtanh,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
    nn.Flatten,
    nn.Unflatten,
    nn.Identity,
    nn.ZeroPad2d,
    nn.ConstantPad2d,
)
_EVAL_ONLY_MODULES: tuple[type[nn.Module], ...] = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
)
_PL_FUNCTIONS = {
    torch.flatten,
    torch.relu,
    torch.cat,
    torch.stack,
    torch.zeros_like,
    torch.add,
    torch.sub,
    torch.max_pool2d,
    torch.clamp,
    torch.reshape,
    F.relu,
    F.relu6,
    F.leaky_relu,
    F.hardtanh,
    F.linear,
    F.conv2d,
    F.max_pool2d,
    F.avg_pool2d,
    F.adaptive_avg_pool2d,
    F.adaptive_max_pool2d,
    F.pad,
    operator.add,
    operator.sub,
    operator.neg,
    operator.getitem,
    getattr,
}
# Multiplication and division stay linear when one side is a constant, not a tensor of t.
_SCALAR_FUNCTIONS = {operator.mul, operator.truediv, torch.mul}
_PL_METHODS = {
    "view",
    "reshape",
    "flatten",
    "size",
    "relu",
    "relu_",
    "mean",
    "sum",
    "permute",
    "transpose",
    "contiguous",
    "squeeze",
    "unsqueeze",
    "clamp",
    "add",
    "add_",
    "sub",
    "dim",
}


def resolve_layer(model: nn.Module, target_layer: str | nn.Module) -> str:
    """Return the dotted name of ``target_layer`` in ``model``.

    Args:
        model: the classifier.
        target_layer: a name from ``model.named_modules()`` or the module itself.

    Raises:
        ValueError: the layer is not in the model (the message lists similar names).
    """
    return resolve_module(model, target_layer)[0]


class _LeafTracer(fx.Tracer):
    """Traces through every module except the target layer and leaf modules."""

    def __init__(self, leaf: str) -> None:
        super().__init__()
        self.leaf = leaf

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return module_qualified_name == self.leaf or super().is_leaf_module(
            m, module_qualified_name
        )


class _Head(nn.Module):
    """``G``: runs the traced head on a feature map; the input is cloned so that in-place
    operations of the head never modify the caller's feature map."""

    def __init__(self, graph_module: fx.GraphModule) -> None:
        super().__init__()
        self.graph_module = graph_module

    def forward(self, t: Tensor) -> Tensor:
        return self.graph_module(t.clone())


@dataclass
class SplitModel:
    """``F = G o psi``, split at ``layer``.

    Attributes:
        psi: input (N x C x H x W) -> feature map (N x K x h x w); runs the trunk only.
        head: ``G``, feature map -> logits (N x classes); never runs the trunk.
        layer: dotted name of the target layer.
    """

    psi: nn.Module
    head: nn.Module
    layer: str


def _trace(model: nn.Module, layer: str) -> fx.Graph:
    try:
        return _LeafTracer(layer).trace(model)
    except Exception as exc:  # fx raises many types; re-raise with the cause attached
        raise ValueError(
            f"cannot trace {type(model).__name__} with torch.fx to split it at {layer!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def _descendants(graph: fx.Graph, root: fx.Node) -> set[fx.Node]:
    seen = {root}
    for node in graph.nodes:  # graph.nodes is topologically ordered
        if any(isinstance(a, fx.Node) and a in seen for a in node.all_input_nodes):
            seen.add(node)
    return seen


def _check_piecewise_linear(model: nn.Module, graph: fx.Graph, t_nodes: set[fx.Node]) -> None:
    modules = dict(model.named_modules())
    for node in graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        if node.op == "call_module":
            mod = modules[node.target]
            if isinstance(mod, _EVAL_ONLY_MODULES):
                if mod.training:
                    raise ValueError(
                        f"head layer {node.target!r} ({type(mod).__name__}) is in training "
                        "mode, so G is not a fixed function: call model.eval() first"
                    )
                continue
            if isinstance(mod, _PL_MODULES):
                continue
            what = f"layer {node.target!r} ({type(mod).__name__})"
        elif node.op == "call_function":
            if node.target in _PL_FUNCTIONS:
                continue
            if node.target in _SCALAR_FUNCTIONS:
                tensor_args = [a for a in node.args if isinstance(a, fx.Node) and a in t_nodes]
                if len(tensor_args) <= 1:
                    continue
            what = f"function {getattr(node.target, '__name__', node.target)} ({node.name})"
        else:
            if node.target in _PL_METHODS:
                continue
            what = f"method .{node.target}() ({node.name})"
        raise ValueError(
            f"the head G contains {what}, which is not known to be piecewise linear; "
            "pass allow_nonlinear_head=True to proceed (Eq. 2 then gives only local "
            "linearisations, not exact boundaries)"
        )


def split_model(
    model: nn.Module, target_layer: str | nn.Module, allow_nonlinear_head: bool = False
) -> SplitModel:
    """Split ``model`` at ``target_layer`` into ``psi`` and ``G`` with ``G(psi(x)) == model(x)``.

    The model is traced with ``torch.fx`` (the target layer kept as one call); ``psi`` is the
    graph up to the target layer's output and ``G`` the part that depends on it.

    Args:
        model: a classifier mapping N x C x H x W images to N x classes logits.
        target_layer: dotted module name (as in ``named_modules()``) or the module itself.
        allow_nonlinear_head: accept heads that are not piecewise linear.

    Returns:
        The :class:`SplitModel`.

    Raises:
        ValueError: unknown layer; a layer called more than once; a head that needs values
            other than the layer's output (e.g. a skip connection across it); a head that is
            not piecewise linear (naming the layer) unless ``allow_nonlinear_head``.
    """
    layer = resolve_layer(model, target_layer)
    graph = _trace(model, layer)
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
    output = next(n for n in graph.nodes if n.op == "output")

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

    # G: the target's output becomes the input; only nodes that depend on it are kept.
    t_nodes = _descendants(graph, target)
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
    out_arg = output.args[0]
    if not isinstance(out_arg, fx.Node) or out_arg not in env:
        raise ValueError("the model's output does not depend on target_layer's output alone")
    head_graph.output(env[out_arg])
    if not allow_nonlinear_head:
        _check_piecewise_linear(
            model, head_graph, {n for n in head_graph.nodes if n.op != "get_attr"}
        )

    return SplitModel(
        psi=_module(model, psi_graph, "Psi"),
        head=_Head(_module(model, head_graph, "Head")),
        layer=layer,
    )


def _module(model: nn.Module, graph: fx.Graph, name: str) -> fx.GraphModule:
    gm = fx.GraphModule(model, graph, class_name=name)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def model_fingerprint(model: nn.Module) -> str:
    """SHA-256 of the names, shapes, dtypes and values of all parameters and buffers."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor_bytes(tensor))
    return digest.hexdigest()
