"""Losses from `ServiceClient.create_custom_loss`: the SDK's traced graph, rebuilt from an allow-list.

The SDK traces a per-datum loss `fn(logprobs, *inputs) -> (loss, metrics)` with torch.fx and sends
it as a `CustomLossGraph`: nodes as plain data, each naming a function by its qualified name
(`torch.exp`, `operator.mul`), a tensor method (`sum`) or a parameter. Nothing in it runs as sent:
`compile_graph` maps every name through the tables below, and refuses the graph if a name is not
there. The tables are pure tensor math (elementwise functions, reductions, indexing, comparisons);
the SDK's own check allows any function of `torch`, `math` and `operator`, which would include
file and process access (`torch.save`, `torch.load`), so the server is deliberately narrower.

`CompiledLoss.batch_loss(data, logprobs_list)` sums the per-datum losses and reduces metrics by
their suffix (`:sum` adds, `:mean` averages), as the SDK's client-side runner does.
"""

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from tinker import types
from torch.fx.node import _get_qualified_name

from local_tinker.errors import ConfigurationError, DataFormatError

_FUNCTIONS: list[Callable[..., Any]] = [
    torch.exp, torch.log, torch.log1p, torch.expm1, torch.sigmoid, torch.tanh, torch.abs, torch.neg,
    torch.sqrt, torch.rsqrt, torch.square, torch.pow, torch.clamp, torch.clip, torch.minimum, torch.maximum,
    torch.where, torch.sum, torch.mean, torch.min, torch.max, torch.stack, torch.cat, torch.logsumexp,
    torch.softmax, torch.log_softmax, torch.zeros_like, torch.ones_like, torch.full_like, torch.sign,
    torch.lt, torch.le, torch.gt, torch.ge, torch.eq, torch.ne, torch.logical_and, torch.logical_or,
    torch.logical_not, torch.gather, torch.relu, torch.exp2, torch.std, torch.var, torch.prod, torch.cumsum,
    torch.nan_to_num, torch.isfinite,
    F.logsigmoid, F.softplus, F.relu, F.sigmoid, F.log_softmax, F.softmax,
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod, operator.pow,
    operator.neg, operator.pos, operator.abs, operator.getitem, operator.lt, operator.le, operator.gt,
    operator.ge, operator.eq, operator.ne, operator.and_, operator.or_, operator.invert,
    math.exp, math.log, math.sqrt, math.log1p, math.expm1, math.tanh,
]


def _wire_name(fn: Callable[..., Any]) -> str:
    """The name the SDK's `encode_graph` gives `fn` (`_operator.x` is sent as `operator.x`)."""
    name = _get_qualified_name(fn)
    return "operator." + name.removeprefix("_operator.") if name.startswith("_operator.") else name


ALLOWED_FUNCTIONS: dict[str, Callable[..., Any]] = {_wire_name(fn): fn for fn in _FUNCTIONS}
ALLOWED_METHODS = frozenset({
    "sum", "mean", "exp", "log", "log1p", "expm1", "clamp", "clip", "abs", "neg", "pow", "sqrt", "square",
    "detach", "float", "size", "dim", "numel", "min", "max", "minimum", "maximum", "sigmoid", "tanh",
    "softmax", "log_softmax", "logsumexp", "gather", "unsqueeze", "squeeze", "reshape", "view", "flatten",
    "transpose", "t", "sign", "masked_fill", "where", "lt", "gt", "le", "ge", "eq", "ne", "add", "sub",
    "mul", "div", "relu", "exp2", "std", "var", "prod", "cumsum", "nan_to_num", "isfinite", "__getitem__",
})
ALLOWED_ATTRIBUTES = frozenset({"shape", "ndim", "dtype", "T"})  # through builtins.getattr
_CONSTANTS = {"dtype": torch.dtype, "device": torch.device, "layout": torch.layout,
              "memory_format": torch.memory_format}


def _refuse(name: str, what: str) -> ConfigurationError:
    return ConfigurationError(
        f"custom loss {name!r} uses {what}, which this server does not run. Allowed: tensor math from "
        "torch, torch.nn.functional, math and operator (see local_tinker/custom_loss.py)."
    )


@dataclass(frozen=True)
class _Node:
    op: str
    name: str
    target: Any  # a callable (call_function), a method or attribute name, or None
    args: list[Any]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class CompiledLoss:
    """A checked custom loss: its name, its inputs (`logprobs` first) and its nodes in order."""

    name: str
    inputs: tuple[types.CustomLossInput, ...]
    nodes: tuple[_Node, ...]

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.inputs[1:])

    def __call__(self, logprobs: torch.Tensor, *inputs: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        env: dict[str, Any] = dict(zip([i.name for i in self.inputs], (logprobs, *inputs)))
        for node in self.nodes:
            args = [_resolve(a, env) for a in node.args]
            kwargs = {k: _resolve(v, env) for k, v in node.kwargs.items()}
            if node.op == "call_function":
                env[node.name] = node.target(*args, **kwargs)
            elif node.op == "call_method":
                env[node.name] = getattr(args[0], node.target)(*args[1:], **kwargs)
            elif node.op == "output":
                loss, metrics = args[0]
                return loss, metrics
        raise AssertionError("checked graphs end in an output node")

    def check_data(self, data: Sequence[types.Datum]) -> None:
        """Every datum has each input the loss reads, at its declared rank (`logprobs`: of `target_tokens`)."""
        for i, datum in enumerate(data):
            for loss_input, key in [(self.inputs[0], "target_tokens"), *((x, x.name) for x in self.inputs[1:])]:
                if key not in datum.loss_fn_inputs:
                    raise DataFormatError(f"datum {i} has no loss_fn_inputs[{key!r}], which loss {self.name!r} reads.")
                shape = datum.loss_fn_inputs[key].shape
                rank = 1 if shape is None else len(shape)
                if rank != loss_input.rank:
                    raise DataFormatError(f"datum {i} loss_fn_inputs[{key!r}] has rank {rank}; loss {self.name!r} "
                                          f"declared {loss_input.name} with rank {loss_input.rank}.")

    def batch_loss(self, data: list[types.Datum], logprobs_list: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """The summed loss over datums and the reduced metrics: the `forward_backward_custom` callable."""
        total: torch.Tensor | None = None
        sums: dict[str, float] = {}
        for datum, logprobs in zip(data, logprobs_list, strict=True):
            loss, metrics = self(logprobs, *[datum.loss_fn_inputs[n].to_torch() for n in self.input_names])
            if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
                raise DataFormatError(f"custom loss {self.name!r} must return a scalar tensor loss.")
            total = loss if total is None else total + loss
            for key, value in metrics.items():
                sums[key] = sums.get(key, 0.0) + float(value.detach() if isinstance(value, torch.Tensor) else value)
        assert total is not None, "forward_backward_custom checks that data is not empty"
        return total, {k: v / len(data) if k.endswith(":mean") else v for k, v in sums.items()}


def _resolve(arg: Any, env: dict[str, Any]) -> Any:
    if isinstance(arg, list):
        return [_resolve(a, env) for a in arg]
    if isinstance(arg, dict):
        (kind, value), = arg.items()
        if kind == "ref":
            return env[value]
        if kind == "tuple":
            return tuple(_resolve(a, env) for a in value)
        if kind == "dict":
            return {k: _resolve(v, env) for k, v in value.items()}
        if kind == "slice":
            return slice(*(_resolve(a, env) for a in value))
        if kind == "ellipsis":
            return Ellipsis
        if kind == "float":
            return float(value)
        if kind == "device":
            return torch.device(value)
        return getattr(torch, value)  # dtype, layout, memory_format: checked by _check_arg
    return arg


def compile_graph(name: str, inputs: Sequence[types.CustomLossInput], graph: types.CustomLossGraph) -> CompiledLoss:
    """Check `graph` against the allow-list and return it as a runnable loss.

    Raises:
        ConfigurationError: a node outside the allow-list, a malformed graph or inputs the local
            engine cannot give (logprobs of rank 2).
    """
    inputs = tuple(inputs)
    if not inputs or inputs[0].name != "logprobs":
        raise ConfigurationError(f"custom loss {name!r}: the first input must be logprobs.")
    if inputs[0].rank != 1:
        raise ConfigurationError(f"custom loss {name!r}: the local engine gives logprobs of rank 1 ([T]) only.")
    placeholders = [n.name for n in graph.nodes if n.op == "placeholder"]
    if placeholders != [i.name for i in inputs]:
        raise ConfigurationError(f"custom loss {name!r}: graph parameters {placeholders} do not match inputs "
                                 f"{[i.name for i in inputs]}.")
    defined = set(placeholders)
    nodes = []
    for node in graph.nodes:
        if node.op == "placeholder":
            continue
        target = _target(name, node)
        for arg in [*node.args, *node.kwargs.values()]:
            _check_arg(name, arg, defined)
        nodes.append(_Node(node.op, node.name, target, list(node.args), dict(node.kwargs)))
        defined.add(node.name)
    if not nodes or nodes[-1].op != "output" or sum(n.op == "output" for n in nodes) != 1:
        raise ConfigurationError(f"custom loss {name!r}: the graph must end in exactly one output node.")
    return CompiledLoss(name, inputs, tuple(nodes))


def _target(name: str, node: types.CustomLossNode) -> Any:
    if node.op == "call_function":
        if node.target == "builtins.getattr":
            attribute = node.args[1] if len(node.args) == 2 else None
            if attribute not in ALLOWED_ATTRIBUTES:
                raise _refuse(name, f"getattr(..., {attribute!r})")
            return getattr
        if node.target not in ALLOWED_FUNCTIONS:
            raise _refuse(name, f"the function {node.target!r}")
        return ALLOWED_FUNCTIONS[node.target]
    if node.op == "call_method":
        if node.target not in ALLOWED_METHODS:
            raise _refuse(name, f"the tensor method {node.target!r}")
        return node.target
    if node.op == "output":
        return None
    raise _refuse(name, f"a {node.op!r} node")


def _check_arg(name: str, arg: Any, defined: set[str]) -> None:
    if arg is None or isinstance(arg, bool | int | float | str):
        return
    if isinstance(arg, list):
        for a in arg:
            _check_arg(name, a, defined)
        return
    if not (isinstance(arg, dict) and len(arg) == 1):
        raise ConfigurationError(f"custom loss {name!r}: malformed argument {arg!r}.")
    (kind, value), = arg.items()
    if kind == "ref" and value in defined:
        return
    if kind in ("tuple", "slice") and isinstance(value, list):
        return _check_arg(name, value, defined)
    if kind == "dict" and isinstance(value, dict):
        return _check_arg(name, list(value.values()), defined)
    if kind == "ellipsis" or (kind == "float" and value in ("inf", "-inf", "nan")):
        return
    if kind == "device" and value in ("cpu", "cuda"):
        return
    if kind in _CONSTANTS and isinstance(value, str) and isinstance(getattr(torch, value, None), _CONSTANTS[kind]):
        return
    raise ConfigurationError(f"custom loss {name!r}: argument {arg!r} is not allowed (an undefined reference or "
                             "an unknown constant).")
