"""ONNX ops onto registered ops: one small converter per ONNX op type, registered by decorator.

A converter gets the node's context and returns the node's outputs in order (graph tensors, or
``Static`` constants known at import time). It honours every attribute or refuses the node with
``UnmappedOpError``: LRN's ``alpha`` is divided by ``size`` (the registered ``lrn`` takes
Paddle's, undivided), opset < 13 Softmax's flattening to 2-D is a reshape around the softmax.
The window ops (convolutions and pools) are in :mod:`spmdrules.importers.onnx_windows`, the
indexing and layout ops in :mod:`~spmdrules.importers.onnx_index`, the value ops (Cast, Where,
Pow, reductions, LayerNormalization, Gelu, CumSum) in :mod:`~spmdrules.importers.onnx_math`;
a node whose inputs are all constants is computed at import (:mod:`~spmdrules.importers.onnx_fold`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from spmdrules.graph import ops
from spmdrules.graph.nodes import Op, Tensor
from spmdrules.importers import families
from spmdrules.importers.channel_maps import inference_batch_norm
from spmdrules.importers.errors import DynamicShapeError, InvalidModelError, UnmappedOpError
from spmdrules.importers.onnx_values import Empty, Static, array, graph_dtype, safe_name
from spmdrules.importers.unmapped import Blocked, Untried

#: the walk's state (``onnx_graph.Importer``: graph, env, opset, options), which converters read
Importer = Any

Value = Any  # Tensor | Static | Empty
Converter = Callable[["Ctx"], Sequence[Value]]
OPS: dict[str, Converter] = {}


def onnx_op(*names: str) -> Callable[[Converter], Converter]:
    def reg(fn: Converter) -> Converter:
        for n in names:
            OPS[n] = fn
        return fn
    return reg


def nearest(op_type: str) -> list[str]:
    """The registered ops of the rule family serving ``op_type`` (``importers.families``)."""
    return families.suggest(op_type)[1]


class Ctx:
    """One node's conversion: its attributes, its inputs as tensors or constants, its op names."""

    def __init__(self, imp: Importer, node: Any, where: str) -> None:
        self.imp = imp
        self.node = node
        self.where = where
        self.attrs = {a.name: imp.onnx.helper.get_attribute_value(a) for a in node.attribute}
        self.name = safe_name(node.output[0]) if node.output and node.output[0] else \
            safe_name(where)

    @property
    def opset(self) -> int:
        return int(self.imp.opset)

    def fail(self, why: str) -> UnmappedOpError:
        return UnmappedOpError(self.where, self.node.op_type, None, why, base=self.node.op_type)

    def has(self, i: int) -> bool:
        return i < len(self.node.input) and bool(self.node.input[i])

    def _value(self, i: int) -> Value:
        if not self.has(i):
            raise self.fail(f"input {i} is missing")
        name = self.node.input[i]
        if name not in self.imp.env:  # onnx.checker refuses such a graph first
            raise InvalidModelError(f"node {self.where!r} ({self.node.op_type}): input {name!r} "
                                    "is produced by no earlier node")
        got = self.imp.env[name]
        if isinstance(got, Blocked):
            raise Untried(got.node)
        return got

    def shape_of(self, i: int) -> list[int]:
        """Input ``i``'s static shape, without making a constant a graph source."""
        v = self._value(i)
        return list(v.value.shape if isinstance(v, Static) else v.shape)

    def empty(self, i: int) -> bool:
        """Whether input ``i`` is an empty tensor (``Empty``)."""
        return self.has(i) and isinstance(self._value(i), Empty)

    def tensor(self, i: int) -> Tensor:
        v = self._value(i)
        return v if isinstance(v, Tensor) else v.tensor(self.imp)

    def tensors(self) -> list[Tensor]:
        return [self.tensor(i) for i in range(len(self.node.input)) if self.has(i)]

    def static(self, i: int) -> np.ndarray:
        v = self._value(i)
        if not isinstance(v, Static):
            raise DynamicShapeError(
                f"node {self.where!r} ({self.node.op_type}): input {self.node.input[i]!r} is "
                "computed at run time but must be a constant (an initializer or Constant); "
                "spmdrules plans static shapes")
        return v.value

    def ints(self, i: int, what: str) -> list[int]:
        """The constant input ``i`` read as ``what`` (a shape, axes): ONNX's int64 values."""
        v = self.static(i)
        if not np.issubdtype(v.dtype, np.integer):
            raise InvalidModelError(
                f"node {self.where!r} ({self.node.op_type}): input {self.node.input[i]!r}, the "
                f"{what}, holds {v.dtype} values [{', '.join(v.reshape(-1)[:8].astype(str))}];"
                " ONNX takes it as int64 (a fraction is never truncated here)")
        return [int(e) for e in v.reshape(-1)]

    def attr(self, name: str, default: Any = None) -> Any:
        v = self.attrs.get(name, default)
        return v.decode() if isinstance(v, bytes) else v

    def call_op(self, op_type: str, *args: Any, part: str = "", **attrs: Any) -> Op:
        op: Op = ops.call(op_type, *args, name=f"{self.name}.{part}" if part else self.name,
                          **attrs)
        return op

    def call(self, op_type: str, *args: Any, part: str = "", **attrs: Any) -> Tensor:
        out = self.call_op(op_type, *args, part=part, **attrs).results[0]
        assert isinstance(out, Tensor)
        return out


def int_list(v: Any) -> list[int]:
    return [int(e) for e in v]


@onnx_op("LRN")
def _lrn(c: Ctx) -> list[Value]:
    size = int(c.attr("size"))
    return [c.call("lrn", c.tensor(0), n=size, k=float(c.attr("bias", 1.0)),
                   alpha=float(c.attr("alpha", 1e-4)) / size, beta=float(c.attr("beta", 0.75)))]


@onnx_op("BatchNormalization")
def _batch_norm(c: Ctx) -> list[Value]:
    """Inference BatchNormalization as elementwise ops (``channel_maps.inference_batch_norm``):
    the broadcast binary rules keep the batch and spatial shards of ``x``."""
    if int(c.attr("training_mode", 0)) or any(c.node.output[1:]):
        raise c.fail("training mode (batch statistics, running outputs) is not mapped; export "
                     "the model for inference")
    if c.opset < 7 and not int(c.attr("spatial", 1)):
        raise c.fail("spatial=0 (per-activation statistics) is not mapped")
    x, scale, bias, mean, var = (c.tensor(i) for i in range(5))
    if x.ndim < 2:
        raise c.fail(f"input rank {x.ndim}: BatchNormalization needs [N, C, ...]")
    return [inference_batch_norm(c, x, scale, bias, mean, var, float(c.attr("epsilon", 1e-5)))]


# ---- matmuls ------------------------------------------------------------------------------------
@onnx_op("Gemm")
def _gemm(c: Ctx) -> list[Value]:
    a, b = c.tensor(0), c.tensor(1)
    alpha, beta = float(c.attr("alpha", 1.0)), float(c.attr("beta", 1.0))
    last = not c.has(2) and alpha == 1.0
    y = c.call("matmul", a, b, trans_x=bool(c.attr("transA", 0)),
               trans_y=bool(c.attr("transB", 0)), part="" if last else "mm")
    if alpha != 1.0:
        y = c.call("scale", y, scale=alpha, part="" if not c.has(2) else "alpha")
    if not c.has(2):
        return [y]
    bias = c.tensor(2)
    if beta != 1.0:
        bias = c.call("scale", bias, scale=beta, part="beta")
    return [c.call("add", y, bias)]


@onnx_op("MatMul")
def _matmul(c: Ctx) -> list[Value]:
    return [c.call("matmul", c.tensor(0), c.tensor(1))]


# ---- elementwise --------------------------------------------------------------------------------
def _binary(op_type: str) -> Converter:
    def convert(c: Ctx) -> list[Value]:
        if c.opset < 7 and int(c.attr("broadcast", 0)):
            raise c.fail("opset < 7 broadcast with an axis is not mapped; update the model's "
                         "opset (onnx.version_converter)")
        return [c.call(op_type, c.tensor(0), c.tensor(1))]
    return convert


for _onnx_name, _op in (("Add", "add"), ("Sub", "subtract"), ("Mul", "multiply"),
                        ("Div", "divide"), ("Max", "maximum"), ("Min", "minimum"),
                        ("Equal", "equal"), ("Less", "less_than"), ("LessOrEqual", "less_equal"),
                        ("Greater", "greater_than"), ("GreaterOrEqual", "greater_equal"),
                        ("And", "logical_and"), ("Or", "logical_or"), ("Xor", "logical_xor")):
    onnx_op(_onnx_name)(_binary(_op))


@onnx_op("Sum")
def _sum(c: Ctx) -> list[Value]:
    xs = c.tensors()
    if len(xs) == 1:
        return [c.call("assign", xs[0])]
    y = xs[0]
    for i, x in enumerate(xs[1:], start=1):
        y = c.call("add", y, x, part="" if i == len(xs) - 1 else f"sum{i}")
    return [y]


_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
          "Sqrt": "sqrt", "Abs": "abs", "Neg": None, "Reciprocal": "reciprocal", "Erf": "erf",
          "Floor": "floor", "Ceil": "ceil", "Softplus": "softplus", "Softsign": "softsign",
          "Cos": "cos", "Sin": "sin", "Not": "logical_not"}


def _unary(op_type: str) -> Converter:
    def convert(c: Ctx) -> list[Value]:
        return [c.call(op_type, c.tensor(0))]
    return convert


for _onnx_name, _op2 in _UNARY.items():
    if _op2 is not None:
        onnx_op(_onnx_name)(_unary(_op2))


@onnx_op("Neg")
def _neg(c: Ctx) -> list[Value]:
    return [c.call("scale", c.tensor(0), scale=-1.0)]


@onnx_op("IsNaN")
def _isnan(c: Ctx) -> list[Value]:
    """``x != x``: true exactly where x is NaN (IEEE 754 compares a NaN unequal to itself, and
    every other value, the infinities included, equal). ``torch.onnx.export`` writes it around
    ``scaled_dot_product_attention``, zeroing the probabilities of a fully masked row."""
    x = c.tensor(0)
    return [c.call("not_equal", x, x)]


@onnx_op("LeakyRelu")
def _leaky(c: Ctx) -> list[Value]:
    return [c.call("leaky_relu", c.tensor(0), negative_slope=float(c.attr("alpha", 0.01)))]


@onnx_op("Dropout")
def _dropout(c: Ctx) -> list[Value]:
    if c.has(2) and bool(np.asarray(c.static(2)).item()):
        raise c.fail("training_mode=True dropout is random; export the model for inference")
    x = c.tensor(0)
    outs: list[Value] = [c.call("assign", x)]
    if len(c.node.output) > 1 and c.node.output[1]:
        # inference keeps every element: the mask is all true
        outs.append(c.call("full", shape=list(x.shape), value=1.0, dtype="bool", part="mask"))
    return outs


@onnx_op("Identity")
def _identity(c: Ctx) -> list[Value]:
    return [c.call("assign", c.tensor(0))]


@onnx_op("Softmax", "LogSoftmax")
def _softmax(c: Ctx) -> list[Value]:
    x = c.tensor(0)
    op = "softmax" if c.node.op_type == "Softmax" else "log_softmax"
    if c.opset >= 13:
        return [c.call(op, x, axis=int(c.attr("axis", -1)))]
    axis = int(c.attr("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    if axis == x.ndim - 1:
        return [c.call(op, x, axis=axis)]
    # opset < 13: the input is flattened to 2-D at ``axis`` and normalised over the second dim
    lead, rest = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))
    flat = c.call("reshape", x, shape=[lead, rest], part="flat")
    y = c.call(op, flat, axis=1, part=op)
    return [c.call("reshape", y, shape=list(x.shape))]


# ---- shapes -------------------------------------------------------------------------------------
@onnx_op("Reshape")
def _reshape(c: Ctx) -> list[Value]:
    x = c.tensor(0)
    target = c.ints(1, "target shape")
    allow_zero = bool(c.attr("allowzero", 0))
    if allow_zero and 0 in target:
        raise InvalidModelError(
            f"node {c.where!r} (Reshape): allowzero=1 makes the 0s of target {target} sizes of 0"
            + (", and ONNX forbids a -1 beside them" if -1 in target else
               ": an empty tensor, which spmdrules does not plan"))
    shape = [x.shape[i] if v == 0 and not allow_zero and i < x.ndim else v
             for i, v in enumerate(target)]
    b = c.imp.batch
    if (c.imp.follow_batch and b is not None and b[0] != b[1] and x.ndim and target
            and x.shape[0] == b[1] and target[0] == b[0]):
        shape[0] = b[1]
        c.imp.followed = True
    return [c.call("reshape", x, shape=shape)]


@onnx_op("Flatten")
def _flatten(c: Ctx) -> list[Value]:
    x = c.tensor(0)
    axis = int(c.attr("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    shape = [int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))]
    return [c.call("reshape", x, shape=shape)]


@onnx_op("Transpose")
def _transpose(c: Ctx) -> list[Value]:
    x = c.tensor(0)
    perm = int_list(c.attr("perm", list(range(x.ndim))[::-1]))
    return [c.call("transpose", x, perm=perm)]


def _axes(c: Ctx) -> list[int]:
    if c.opset >= 13 and c.node.op_type in ("Unsqueeze", "Squeeze"):
        return c.ints(1, "axes") if c.has(1) else []
    return int_list(c.attr("axes", []))


@onnx_op("Unsqueeze")
def _unsqueeze(c: Ctx) -> list[Value]:
    x = c.tensor(0)
    rank = x.ndim + len(_axes(c))
    axes = sorted(a + rank if a < 0 else a for a in _axes(c))
    return [c.call("unsqueeze", x, axis=axes)]


@onnx_op("Squeeze")
def _squeeze(c: Ctx) -> list[Value]:
    x = c.tensor(0)
    axes = [a + x.ndim if a < 0 else a for a in _axes(c)] or [
        i for i, d in enumerate(x.shape) if d == 1]
    return [c.call("squeeze", x, axis=axes)]


@onnx_op("Concat")
def _concat(c: Ctx) -> list[Value]:
    """Concat of the inputs that are not empty (an empty one adds nothing)."""
    full = [i for i in range(len(c.node.input)) if c.has(i) and not c.empty(i)]
    if not full:
        raise c.fail("every input is empty: an empty tensor, which spmdrules does not plan")
    xs = [c.tensor(i) for i in full]
    axis = int(c.attr("axis"))
    if len(xs) == 1:
        return [c.call("assign", xs[0])]
    return [c.call("concat", xs, axis=axis + xs[0].ndim if axis < 0 else axis)]


# ---- constants ----------------------------------------------------------------------------------
@onnx_op("ConstantOfShape")
def _constant_of_shape(c: Ctx) -> list[Value]:
    shape = c.ints(0, "shape")
    value: int | float = 0.0
    dtype = "float32"
    if "value" in c.attrs:
        t, what = c.attrs["value"], f"node {c.where!r} (ConstantOfShape): value"
        dtype = graph_dtype(c.imp.onnx, t.data_type, what)
        arr = array(c.imp.onnx, t, what)
        if arr.size != 1:
            raise InvalidModelError(f"{what} has {arr.size} elements; ONNX takes one")
        # .item() keeps an integer a Python int: full carries it exactly (not through a float)
        item = arr.reshape(-1)[0].item()
        value = int(item) if isinstance(item, bool | int) else float(item)
    return [c.call("full", shape=shape, value=value, dtype=dtype)]


@onnx_op("Constant")
def _constant(c: Ctx) -> list[Value]:
    if "value" in c.attrs:
        arr = array(c.imp.onnx, c.attrs["value"], f"node {c.where!r} (Constant): value")
    elif "value_float" in c.attrs or "value_int" in c.attrs:
        arr = np.asarray(c.attrs.get("value_float", c.attrs.get("value_int")),
                         dtype=np.float32 if "value_float" in c.attrs else np.int64)
    elif "value_floats" in c.attrs or "value_ints" in c.attrs:
        arr = np.asarray(c.attrs.get("value_floats", c.attrs.get("value_ints")),
                         dtype=np.float32 if "value_floats" in c.attrs else np.int64)
    else:
        raise c.fail(f"attributes {sorted(c.attrs)}: only value, value_float(s) and "
                     "value_int(s) constants are mapped")
    return [Static(c.node.output[0], np.asarray(arr))]


__all__ = ["OPS", "Ctx", "nearest", "onnx_op"]
