"""The ONNX ops that compute on values onto registered ops: Cast, Where, Pow, the reductions,
LayerNormalization, Gelu, CumSum (converters registered into
:data:`~spmdrules.importers.onnx_ops.OPS`).

Each honours every attribute or refuses the node: a reduction's axes come from its attribute
before the opset that made them an input (13 for ReduceSum, 18 for the others), empty axes
reduce every axis unless ``noop_with_empty_axes``; LayerNormalization's Mean and InvStdDev
outputs are not given by the registered ``layer_norm`` and are refused when a model reads them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spmdrules.graph.nodes import Tensor
from spmdrules.importers.onnx_index import broadcast
from spmdrules.importers.onnx_ops import Ctx, Value, int_list, onnx_op
from spmdrules.importers.onnx_values import Static, graph_dtype


@onnx_op("Cast")
def _cast(c: Ctx) -> list[Value]:
    x = c.tensor(0)
    dtype = graph_dtype(c.imp.onnx, int(c.attr("to")), f"node {c.where!r} (Cast): to")
    return [c.call("cast", x, dtype=dtype) if dtype != x.dtype else c.call("assign", x)]


@onnx_op("Where")
def _where(c: Ctx) -> list[Value]:
    cond, x, y = c.tensor(0), c.tensor(1), c.tensor(2)
    broadcast(c, broadcast(c, cond.shape, x.shape), y.shape)
    return [c.call("where", cond, x, y)]


@onnx_op("Pow")
def _pow(c: Ctx) -> list[Value]:
    """A constant scalar exponent is ``pow``'s attribute (exact for an integer one); any other is
    ``elementwise_pow`` in the base's type (ONNX's result type)."""
    x = c.tensor(0)
    if isinstance(c.imp.env.get(c.node.input[1]), Static) and c.static(1).size == 1:
        e = c.static(1).reshape(-1)[0].item()
        return [c.call("pow", x, y=int(e) if isinstance(e, int) else float(e))]
    y = c.tensor(1)
    if y.dtype != x.dtype:
        y = c.call("cast", y, dtype=x.dtype, part="exponent")
    return [c.call("elementwise_pow", x, y)]


_REDUCE = {"ReduceMean": ("mean", "keepdim"), "ReduceSum": ("sum", "keep_dim"),
           "ReduceMax": ("max", "keep_dim"), "ReduceMin": ("min", "keep_dim"),
           "ReduceProd": ("prod", "keep_dim")}


@onnx_op(*_REDUCE)
def _reduce(c: Ctx) -> list[Value]:
    x = c.tensor(0)
    op, keep = _REDUCE[c.node.op_type]
    as_input = c.opset >= (13 if c.node.op_type == "ReduceSum" else 18)
    axes = (c.ints(1, "axes") if c.has(1) else []) if as_input else int_list(c.attr("axes", []))
    if not axes and int(c.attr("noop_with_empty_axes", 0)):
        return [c.call("assign", x)]
    for a in axes:
        if not -x.ndim <= a < x.ndim:
            raise c.fail(f"axes entry {a} is out of range for an input of rank {x.ndim}")
    dims = sorted({a + x.ndim if a < 0 else a for a in axes}) or list(range(x.ndim))
    attrs: dict[str, Any] = {"axis": dims, keep: bool(int(c.attr("keepdims", 1)))}
    return [c.call(op, x, **attrs)]


@onnx_op("LayerNormalization")
def _layer_norm(c: Ctx) -> list[Value]:
    """``layer_norm`` from ``axis`` on, its scale and bias flattened over the normalised dims
    (Paddle's are 1-D)."""
    if any(c.node.output[1:]):
        raise c.fail("its Mean and InvStdDev outputs are read, which the registered layer_norm "
                     "does not give")
    x = c.tensor(0)
    ax = int(c.attr("axis", -1))
    if not -x.ndim <= ax < x.ndim:
        raise c.fail(f"axis {ax} is out of range for an input of rank {x.ndim}")
    ax = ax + x.ndim if ax < 0 else ax
    size = int(np.prod(x.shape[ax:]))
    params: list[Tensor | None] = []
    for i, what in ((1, "Scale"), (2, "B")):
        if not c.has(i):
            params.append(None)
            continue
        p = c.tensor(i)
        if int(np.prod(p.shape)) != size:
            raise c.fail(f"{what} has shape {list(p.shape)}; only one of the normalised shape "
                         f"{list(x.shape[ax:])} is mapped (not a broadcast one)")
        params.append(p if p.ndim == 1 else c.call("reshape", p, shape=[size], part=what.lower()))
    return [c.call("layer_norm", x, *params, epsilon=float(c.attr("epsilon", 1e-5)),
                   begin_norm_axis=ax)]


@onnx_op("Gelu")
def _gelu(c: Ctx) -> list[Value]:
    approximate = c.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise c.fail(f"approximate {approximate!r} is not an ONNX value ('none' or 'tanh')")
    return [c.call("gelu", c.tensor(0), approximate=approximate == "tanh")]


@onnx_op("CumSum")
def _cumsum(c: Ctx) -> list[Value]:
    x = c.tensor(0)
    ax = int(c.ints(1, "axis")[0])
    if not -x.ndim <= ax < x.ndim:
        raise c.fail(f"axis {ax} is out of range for an input of rank {x.ndim}")
    return [c.call("cumsum", x, axis=ax + x.ndim if ax < 0 else ax,
                   exclusive=bool(c.attr("exclusive", 0)), reverse=bool(c.attr("reverse", 0)))]


__all__: list[str] = []
