"""Which operations are piecewise linear, and the check that a traced head ``G`` has no other.

The method needs ``G`` piecewise linear, so that the hyperplane of Eq. 2 is exactly a linear
boundary of ``G`` (docs/method.md, step 3.1).
[`check_piecewise_linear`][repinterp.models.linearity.check_piecewise_linear] goes through a traced
head node by node and names the first node it does not know to be so.
"""

from __future__ import annotations

import operator

import torch
import torch.nn.functional as F
from torch import fx, nn

__all__ = ["NonlinearHeadError", "check_piecewise_linear", "where"]

# Modules that are piecewise linear in eval mode (BatchNorm with running statistics; the split
# refuses the others, `split.check_fixed`).
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
# Multiplication stays linear when one side is a constant, not a tensor of t; division when the
# divisor is (``1 / t`` is not linear), and it does not round.
_SCALAR_FUNCTIONS = {operator.mul, torch.mul}
_DIVISIONS = {operator.truediv, torch.div, torch.true_divide}
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


class NonlinearHeadError(ValueError):
    """The head after the target layer is not known to be piecewise linear."""


def where(node: fx.Node) -> str:
    """`` in 'head.norm' (LayerNorm2d)``: the module whose forward a traced call came from, or
    the node's name when it came from the model's own forward."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return f" ({node.name})"
    name, kind = list(stack.values())[-1]
    return f" in {name!r} ({getattr(kind, '__name__', kind)})"


def _by_a_constant(division: fx.Node, t_nodes: set[fx.Node]) -> bool:
    """Whether a traced division divides by a value that does not depend on ``t``, without
    rounding."""
    divisor = division.args[1] if len(division.args) > 1 else division.kwargs.get("other")
    rounding = division.kwargs.get("rounding_mode")
    return not (isinstance(divisor, fx.Node) and divisor in t_nodes) and rounding is None


def check_piecewise_linear(model: nn.Module, graph: fx.Graph, t_nodes: set[fx.Node]) -> None:
    """Raise unless every node of the head ``graph`` (traced from ``model``) is piecewise
    linear; ``t_nodes`` are the nodes whose values depend on the feature map.

    Raises:
        NonlinearHeadError: a node not known to be piecewise linear, named.
    """
    modules = dict(model.named_modules())
    for node in graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        if node.op == "call_module":
            mod = modules[node.target]
            if isinstance(mod, _PL_MODULES):
                continue
            what = f"layer {node.target!r} ({type(mod).__name__})"
        elif node.op == "call_function":
            if node.target in _PL_FUNCTIONS:
                continue
            if node.target in _SCALAR_FUNCTIONS:
                args = [*node.args, *node.kwargs.values()]
                tensor_args = [a for a in args if isinstance(a, fx.Node) and a in t_nodes]
                if len(tensor_args) <= 1:
                    continue
            if node.target in _DIVISIONS and _by_a_constant(node, t_nodes):
                continue
            what = f"function {getattr(node.target, '__name__', node.target)}{where(node)}"
        else:
            if node.target in _PL_METHODS:
                continue
            what = f"method .{node.target}(){where(node)}"
        raise NonlinearHeadError(
            f"the head G contains {what}, which is not known to be piecewise linear; "
            "pass allow_nonlinear_head=True to proceed (Eq. 2 then gives only local "
            "linearisations, not exact boundaries)"
        )
