"""ATen ops onto registered ops: one small converter per ATen op, registered by decorator.

A converter gets the importer's context and the node's arguments bound to the ATen schema's
names (defaults filled), and returns the node's value: a graph Tensor, a tuple of them (for
``getitem``), or a Python constant. Converters only call registered ops; Python scalars become
rank-0 ``full`` constants of the dtype torch's type promotion gives; views and copies (``clone``,
``alias``) are the same tensor. Any attribute a mapping cannot honour (``addmm`` with beta != 1,
a train-mode dropout) raises ``UnmappedOpError`` naming the node.

This module reads torch objects handed to it (``Ctx.torch``) and never imports torch itself, so
the package imports without the extra.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from spmdrules.graph import ops
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Op, Tensor
from spmdrules.graph.shapes.shape_rule import INTEGRAL_DTYPES
from spmdrules.importers import families
from spmdrules.importers.errors import UnmappedOpError, UnsupportedDtypeError

Converter = Callable[["Ctx", dict[str, Any]], Any]
TensorConverter = Callable[["Ctx", dict[str, Any]], Tensor]
#: ATen "name.overload" (``mm.default``, ``add.Tensor``) -> converter
ATEN: dict[str, Converter] = {}

#: torch dtype name -> graph dtype
DTYPES = {"float32": "float32", "float64": "float64", "float16": "float16",
          "bfloat16": "bfloat16", "int64": "int64", "int32": "int32", "int16": "int16",
          "int8": "int8", "uint8": "uint8", "bool": "bool"}


def aten(*names: str) -> Callable[[Converter], Converter]:
    def reg(fn: Converter) -> Converter:
        for n in names:
            ATEN[n] = fn
        return fn
    return reg


def nearest(op: str) -> list[str]:
    """The registered ops of the rule family serving ``op`` (``importers.families``)."""
    return families.suggest(op)[1]


class Ctx:
    """One node's conversion: names its ops after the node, reads torch's metadata."""

    def __init__(self, graph: Graph, torch: Any, node: Any, name: str, *,
                 spatial_sharding: bool = False) -> None:
        self.graph = graph
        self.spatial_sharding = spatial_sharding
        self.torch = torch
        self.node = node
        self.name = name
        self.count = 0

    @property
    def op(self) -> str:
        return f"{getattr(self.node.target, 'namespace', 'aten')}.{self.node.target.__name__}"

    def fail(self, why: str) -> UnmappedOpError:
        return UnmappedOpError(self.node.name, self.op, None, why, categories=tags(self.node))

    def next_name(self, part: str = "") -> str:
        self.count += 1
        return self.name if self.count == 1 and not part else f"{self.name}.{part or self.count}"

    def call(self, op_type: str, *args: Any, part: str = "", **attrs: Any) -> Tensor:
        op: Op = ops.call(op_type, *args, name=self.next_name(part), **attrs)
        out = op.results[0]
        assert isinstance(out, Tensor)
        return out

    def call_op(self, op_type: str, *args: Any, part: str = "", **attrs: Any) -> Op:
        return ops.call(op_type, *args, name=self.next_name(part), **attrs)

    # ---- metadata ---------------------------------------------------------------------------
    @property
    def val(self) -> Any:
        return self.node.meta["val"]

    @property
    def shape(self) -> list[int]:
        return [int(d) for d in self.val.shape]

    @property
    def dtype(self) -> str:
        return dtype_name(self.val.dtype, self.node.name)

    def const(self, value: Any, dtype: str, part: str = "const") -> Tensor:
        """A rank-0 constant source (``full``). An int operand wraps into an integer dtype, as
        torch's type promotion does (an int32 tensor + 2**40 adds 0)."""
        v = scalar(value)
        if isinstance(v, int) and dtype in INTEGRAL_DTYPES - {"bool"}:
            v = int(np.array(v, dtype=np.int64).astype(dtype))
        return self.call("full", shape=[], value=v, dtype=dtype, part=part)

    def cast(self, t: Tensor, dtype: str) -> Tensor:
        return t if t.dtype == dtype else self.call("cast", t, dtype=dtype, part=f"cast{self.count or ''}")

    def common(self, *xs: Any) -> str:
        """torch's promoted dtype of the operands (tensors and Python scalars)."""
        torch = self.torch
        vals = [torch.empty((), dtype=torch_dtype(torch, x.dtype)) if isinstance(x, Tensor)
                else x for x in xs]
        out = vals[0]
        for v in vals[1:]:
            out = torch.empty((), dtype=torch.result_type(out, v))
        return self.dtype if isinstance(out, bool | int | float) else dtype_name(
            out.dtype, self.node.name)

    def operand(self, x: Any, dtype: str) -> Tensor:
        return self.cast(x, dtype) if isinstance(x, Tensor) else self.const(x, dtype)


def tags(node: Any) -> list[str]:
    """The categories torch gives the node's op (``pointwise``, ``reduction``, ...)."""
    return [str(getattr(t, "name", t)) for t in getattr(node.target, "tags", ())]


def scalar(value: Any) -> int | float:
    """A Python scalar of the program as a "number" attribute: an int (a bool is 0 or 1) stays
    an int, so an integer constant is exact (float64 holds 53 bits of an int64)."""
    return int(value) if isinstance(value, bool | int) else float(value)


def dtype_name(dt: Any, node: str) -> str:
    if (name := str(dt).removeprefix("torch.")) not in DTYPES:
        raise UnsupportedDtypeError(f"node {node!r}: torch dtype {name} has no spmdrules dtype; "
                                    f"the supported dtypes are {', '.join(sorted(DTYPES))}")
    return DTYPES[name]


def torch_dtype(torch: Any, name: str) -> Any:
    return getattr(torch, name)


def axis(d: int, nd: int) -> int:
    return d + nd if d < 0 else d


# ---- matmuls ------------------------------------------------------------------------------------
@aten("mm.default", "matmul.default")
def _mm(c: Ctx, a: dict[str, Any]) -> Tensor:
    return c.call("matmul", a["self"], a["mat2" if "mat2" in a else "other"])


@aten("bmm.default")
def _bmm(c: Ctx, a: dict[str, Any]) -> Tensor:
    return c.call("bmm", a["self"], a["mat2"])


@aten("addmm.default")
def _addmm(c: Ctx, a: dict[str, Any]) -> Tensor:
    if a["beta"] != 1 or a["alpha"] != 1:
        raise c.fail(f"beta={a['beta']}, alpha={a['alpha']}: only beta = alpha = 1 is mapped")
    y = c.call("matmul", a["mat1"], a["mat2"], part="mm")
    return c.call("add", y, a["self"], part="bias")


@aten("linear.default")
def _linear(c: Ctx, a: dict[str, Any]) -> Tensor:
    y = c.call("matmul", a["input"], a["weight"], trans_y=True, part="mm")
    return y if a["bias"] is None else c.call("add", y, a["bias"], part="bias")


@aten("embedding.default")
def _embedding(c: Ctx, a: dict[str, Any]) -> Tensor:
    """torch's ``padding_idx`` reads its row in the forward and gives it no gradient: the op's
    ``no_grad_idx``, not Paddle's ``padding_idx`` (whose lookups read zeros)."""
    pad = a["padding_idx"]
    row = -1 if pad is None or pad < 0 else int(pad)
    return c.call("embedding", a["indices"], a["weight"], no_grad_idx=row)


# ---- shapes -------------------------------------------------------------------------------------
@aten("view.default", "_unsafe_view.default", "reshape.default")
def _view(c: Ctx, a: dict[str, Any]) -> Tensor:
    return c.call("reshape", a["self"], shape=c.shape)


@aten("permute.default")
def _permute(c: Ctx, a: dict[str, Any]) -> Tensor:
    x: Tensor = a["self"]
    return c.call("transpose", x, perm=[axis(d, x.ndim) for d in a["dims"]])


@aten("t.default", "transpose.int")
def _transpose(c: Ctx, a: dict[str, Any]) -> Tensor:
    x: Tensor = a["self"]
    perm = list(range(x.ndim))
    d0, d1 = (axis(a["dim0"], x.ndim), axis(a["dim1"], x.ndim)) if "dim0" in a else (0, 1)
    if x.ndim < 2:
        return x
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return c.call("transpose", x, perm=perm)


@aten("unsqueeze.default")
def _unsqueeze(c: Ctx, a: dict[str, Any]) -> Tensor:
    x: Tensor = a["self"]
    return c.call("unsqueeze", x, axis=[axis(a["dim"], x.ndim + 1)])


@aten("squeeze.dim", "squeeze.dims")
def _squeeze(c: Ctx, a: dict[str, Any]) -> Tensor:
    x: Tensor = a["self"]
    dims = a["dim"] if isinstance(a["dim"], list | tuple) else [a["dim"]]
    keep = [axis(d, x.ndim) for d in dims if x.shape[axis(d, x.ndim)] == 1]
    return c.call("squeeze", x, axis=keep) if keep else x


@aten("expand.default")
def _expand(c: Ctx, a: dict[str, Any]) -> Tensor:
    x: Tensor = a["self"]
    return x if list(x.shape) == c.shape else c.call("expand", x, shape=c.shape)


@aten("slice.Tensor")
def _slice(c: Ctx, a: dict[str, Any]) -> Tensor:
    x: Tensor = a["self"]
    d = axis(a["dim"], x.ndim)
    n = x.shape[d]
    start, end, step = a["start"], a["end"], a["step"]
    start = 0 if start is None else (start + n if start < 0 else start)
    end = n if end is None else (end + n if end < 0 else end)
    start, end = max(0, min(start, n)), max(0, min(end, n))
    if (start, end, step) == (0, n, 1):
        return x
    if step == 1:
        return c.call("slice", x, axes=[d], starts=[start], ends=[end])
    return c.call("strided_slice", x, axes=[d], starts=[start], ends=[end], strides=[step])


@aten("cat.default")
def _cat(c: Ctx, a: dict[str, Any]) -> Tensor:
    xs: list[Tensor] = list(a["tensors"])
    dt = c.dtype
    return c.call("concat", [c.cast(x, dt) for x in xs], axis=axis(a["dim"], xs[0].ndim))


@aten("split_with_sizes.default", "split.Tensor")
def _split(c: Ctx, a: dict[str, Any]) -> tuple[Tensor, ...]:
    x: Tensor = a["self"]
    d = axis(a["dim"], x.ndim)
    sizes = [int(s.shape[d]) for s in c.val]
    op = c.call_op("split", x, sections=sizes, axis=d)
    return tuple(op.outputs)


@aten("clone.default", "alias.default", "contiguous.default", "detach.default",
      "lift_fresh_copy.default")
def _same(c: Ctx, a: dict[str, Any]) -> Tensor:
    return cast(Tensor, a["self"])


@aten("_to_copy.default", "to.dtype")
def _to(c: Ctx, a: dict[str, Any]) -> Tensor:
    return c.cast(a["self"], c.dtype)


@aten("dropout.default")
def _dropout(c: Ctx, a: dict[str, Any]) -> Tensor:
    if a["train"] and a["p"] > 0:
        raise c.fail("train-mode dropout is random; export the model in eval mode")
    return cast(Tensor, a["input"])


# ---- creation: constant sources -----------------------------------------------------------------
@aten("full.default", "zeros.default", "ones.default", "new_ones.default", "new_zeros.default",
      "new_full.default", "full_like.default", "zeros_like.default", "ones_like.default",
      "scalar_tensor.default")
def _full(c: Ctx, a: dict[str, Any]) -> Tensor:
    name = c.node.target.__name__.split(".")[0]
    value = a.get("fill_value", a.get("s", 1 if "ones" in name else 0))
    return c.call("full", shape=c.shape, value=scalar(value), dtype=c.dtype)


@aten("arange.start_step", "arange.default", "arange.start")
def _arange(c: Ctx, a: dict[str, Any]) -> Tensor:
    start = a.get("start", 0) if "start" in a else 0
    step = a.get("step", 1) if "step" in a else 1
    return c.call("arange", start=scalar(start), end=scalar(a["end"]), step=scalar(step),
                  dtype=c.dtype)


# ---- elementwise --------------------------------------------------------------------------------
def _binary(op_type: str) -> TensorConverter:
    def convert(c: Ctx, a: dict[str, Any]) -> Tensor:
        x, y = a["self"], a["other"]  # true division of integers is float: the node's dtype
        dt = c.dtype if op_type == "divide" else c.common(x, y)
        alpha = a.get("alpha", 1)
        yt = c.operand(y, dt)
        if alpha != 1:
            yt = c.call("multiply", yt, c.const(alpha, dt), part="alpha")
        return c.call(op_type, c.operand(x, dt), yt)
    return convert


for _op, _names in (("add", ("add.Tensor", "add.Scalar")),
                    ("subtract", ("sub.Tensor", "sub.Scalar")),
                    ("multiply", ("mul.Tensor", "mul.Scalar")),
                    ("divide", ("div.Tensor", "div.Scalar")),
                    ("maximum", ("maximum.default",)), ("minimum", ("minimum.default",))):
    aten(*_names)(_binary(_op))


@aten("rsub.Scalar", "rsub.Tensor")
def _rsub(c: Ctx, a: dict[str, Any]) -> Tensor:
    if a.get("alpha", 1) != 1:
        raise c.fail(f"alpha={a['alpha']}: only alpha = 1 is mapped")
    return _binary("subtract")(c, {"self": a["other"], "other": a["self"]})


@aten("div.Tensor_mode")
def _div_mode(c: Ctx, a: dict[str, Any]) -> Tensor:
    if a["rounding_mode"] is None:
        return _binary("divide")(c, a)
    if a["rounding_mode"] == "floor":
        return _binary("floor_divide")(c, a)
    return _binary("trunc_divide")(c, a)


def _compare(op_type: str) -> TensorConverter:
    def convert(c: Ctx, a: dict[str, Any]) -> Tensor:
        x, y = a["self"], a["other"]
        dt = c.common(x, y)
        return c.call(op_type, c.operand(x, dt), c.operand(y, dt))
    return convert


# Each comparison is its own op: with a NaN every one but ne is False, so none is another's negation.
for _aten_name2, _op2 in (("ne", "not_equal"), ("eq", "equal"), ("lt", "less_than"),
                          ("gt", "greater_than"), ("le", "less_equal"), ("ge", "greater_equal")):
    aten(f"{_aten_name2}.Tensor", f"{_aten_name2}.Scalar")(_compare(_op2))


@aten("bitwise_and.Tensor", "logical_and.default", "__and__.Tensor")
def _and(c: Ctx, a: dict[str, Any]) -> Tensor:
    x, y = a["self"], a["other"]
    if x.dtype == "bool" and y.dtype == "bool":
        return c.call("logical_and", x, y)
    return c.call("bitwise_and", x, y)


@aten("bitwise_or.Tensor", "logical_or.default", "__or__.Tensor")
def _or(c: Ctx, a: dict[str, Any]) -> Tensor:
    x, y = a["self"], a["other"]
    if x.dtype == "bool" and y.dtype == "bool":
        return c.call("logical_or", x, y)
    return c.call("bitwise_or", x, y)


@aten("bitwise_not.default", "logical_not.default")
def _not(c: Ctx, a: dict[str, Any]) -> Tensor:
    """``logical_not`` of a number is bool, ``x == 0``; ``bitwise_not`` of one flips its bits."""
    x: Tensor = a["self"]
    if x.dtype != "bool" and c.node.target.__name__.startswith("logical_not"):
        return c.call("equal", x, c.const(0, x.dtype, "zero"))
    return c.call("logical_not" if x.dtype == "bool" else "bitwise_not", x)


@aten("neg.default")
def _neg(c: Ctx, a: dict[str, Any]) -> Tensor:
    return c.call("multiply", a["self"], c.const(-1, a["self"].dtype, "minus_one"))


_UNARY = {"rsqrt": "rsqrt", "sqrt": "sqrt", "exp": "exp", "log": "log", "cos": "cos", "sin": "sin",
          "tanh": "tanh", "sigmoid": "sigmoid", "silu": "silu", "relu": "relu", "abs": "abs",
          "erf": "erf", "reciprocal": "reciprocal", "sign": "sign", "floor": "floor",
          "ceil": "ceil", "log1p": "log1p", "expm1": "expm1"}


def _unary(op_type: str) -> TensorConverter:
    def convert(c: Ctx, a: dict[str, Any]) -> Tensor:
        return c.call(op_type, c.cast(a["self"], c.dtype))
    return convert


for _aten_name, _op3 in _UNARY.items():
    aten(f"{_aten_name}.default")(_unary(_op3))


@aten("gelu.default")
def _gelu(c: Ctx, a: dict[str, Any]) -> Tensor:
    return c.call("gelu", a["self"], approximate=a["approximate"] == "tanh")


@aten("pow.Tensor_Scalar")
def _pow(c: Ctx, a: dict[str, Any]) -> Tensor:
    return c.call("pow", c.cast(a["self"], c.dtype), y=scalar(a["exponent"]))


@aten("where.self")
def _where(c: Ctx, a: dict[str, Any]) -> Tensor:
    dt = c.dtype
    return c.call("where", c.cast(a["condition"], "bool"), c.operand(a["self"], dt),
                  c.operand(a["other"], dt))


# ---- reductions, softmax, norms -----------------------------------------------------------------
def _dims(x: Tensor, dim: Any) -> list[int]:
    if dim is None or (isinstance(dim, list | tuple) and not dim):
        return list(range(x.ndim))
    return [axis(d, x.ndim) for d in (dim if isinstance(dim, list | tuple) else [dim])]


@aten("mean.dim")
def _mean(c: Ctx, a: dict[str, Any]) -> Tensor:
    x = c.cast(a["self"], c.dtype)
    return c.call("mean", x, axis=_dims(x, a["dim"]), keepdim=bool(a["keepdim"]))


@aten("sum.dim_IntList", "sum.default")
def _sum(c: Ctx, a: dict[str, Any]) -> Tensor:
    x = c.cast(a["self"], c.dtype)
    return c.call("sum", x, axis=_dims(x, a.get("dim")), keep_dim=bool(a.get("keepdim")))


@aten("cumsum.default")
def _cumsum(c: Ctx, a: dict[str, Any]) -> Tensor:
    x = c.cast(a["self"], c.dtype)
    return c.call("cumsum", x, axis=axis(a["dim"], x.ndim))


@aten("_softmax.default", "softmax.int")
def _softmax(c: Ctx, a: dict[str, Any]) -> Tensor:
    x = c.cast(a["self"], c.dtype)
    return c.call("softmax", x, axis=axis(a["dim"], x.ndim))


@aten("_log_softmax.default", "log_softmax.int")
def _log_softmax(c: Ctx, a: dict[str, Any]) -> Tensor:
    x = c.cast(a["self"], c.dtype)
    return c.call("log_softmax", x, axis=axis(a["dim"], x.ndim))


@aten("native_layer_norm.default")
def _native_layer_norm(c: Ctx, a: dict[str, Any]) -> tuple[Any, ...]:
    out = _layer_norm(c, a)
    return (out, _Unmapped(c, "mean"), _Unmapped(c, "rstd"))


@aten("layer_norm.default")
def _layer_norm(c: Ctx, a: dict[str, Any]) -> Tensor:
    x: Tensor = a["input"]
    begin = x.ndim - len(a["normalized_shape"])
    op = c.call_op("layer_norm", x, a["weight"], a["bias"], epsilon=float(a["eps"]),
                   begin_norm_axis=begin)
    out = op.results[0]
    assert isinstance(out, Tensor)
    return out


class _Unmapped:
    """A result the mapping does not give (native_layer_norm's mean and rstd): an error when
    something reads it."""

    def __init__(self, c: Ctx, what: str) -> None:
        self.node = c.node.name
        self.op = c.op
        self.what = what

    def use(self, by: str) -> UnmappedOpError:
        return UnmappedOpError(by, f"{self.op} result {self.what!r} of node {self.node!r}", None,
                               "the registered op does not give it", base=self.op)


# ---- indexing -----------------------------------------------------------------------------------
@aten("index.Tensor")
def _index(c: Ctx, a: dict[str, Any]) -> Tensor:
    x: Tensor = a["self"]
    idx: Sequence[Tensor | None] = a["indices"]
    if any(i is None for i in idx) or any(i.dtype == "bool" for i in idx if i is not None):
        if len(idx) == 2 and idx[0] is None and idx[1] is not None and idx[1].ndim == 1 and (
                idx[1].dtype != "bool"):
            return c.call("index_select", x, idx[1], axis=1)
        raise c.fail("only integer index tensors on the leading dims (x[i, j, ...]) are mapped")
    tensors = [i for i in idx if i is not None]
    if len(tensors) == 1 and tensors[0].ndim == 1:
        return c.call("index_select", x, tensors[0], axis=0)
    shape = c.shape[: len(c.shape) - (x.ndim - len(tensors))]
    cols = []
    for k, t in enumerate(tensors):
        t = c.cast(t, "int64")
        if list(t.shape) != shape:
            t = c.call("expand", t, shape=shape, part=f"index{k}")
        cols.append(c.call("unsqueeze", t, axis=[len(shape)], part=f"index{k}.col"))
    where = c.call("concat", cols, axis=len(shape), part="index") if len(cols) > 1 else cols[0]
    return c.call("gather_nd", x, where)


__all__ = ["ATEN", "Converter", "Ctx", "UnmappedOpError", "aten", "dtype_name", "nearest", "tags"]
