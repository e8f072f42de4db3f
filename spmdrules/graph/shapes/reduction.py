"""Shape and dtype inference of the reduction family: reductions over axes, arg reductions, norms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _accumulate_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    # sum/prod of bool or ints accumulate in int64, as numpy (and paddle.sum) do
    d = tensor_arg(args, 0).dtype
    return ("int64" if d in shape_rule.INTEGRAL_DTYPES else d,)


def _reduced(
    ctx: ShapeContext, x: shape_rule.TensorMeta, axes: Sequence[int] | None, keep: bool
) -> shape_rule.Shape:
    """``axes`` empty or None reduces every dim (Paddle's ``axis=[]``)."""
    nd = len(x.shape)
    if not axes:
        gone = set(range(nd))
    else:
        gone = set()
        for a in axes:
            d = ctx.axis("x", a, max(nd, 1))
            if nd == 0:
                continue
            if d in gone:
                raise ctx.fail("x", f"axis {a} is listed twice in {list(axes)}", "list each axis once")
            gone.add(d)
    return tuple(1 if i in gone else n for i, n in enumerate(x.shape) if keep or i not in gone)


def _reduce(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    return (_reduced(ctx, tensor_arg(args, 0), attrs.get("axis"), bool(attrs.get("keep_dim", False))),)


def _mean(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    return (_reduced(ctx, tensor_arg(args, 0), attrs.get("axis"), bool(attrs.get("keepdim", False))),)


def _mean_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    dtype = tensor_arg(args, 0).dtype
    return ("float32" if dtype in shape_rule.INTEGRAL_DTYPES else dtype,)


def _logsumexp(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    # Paddle 3.3.1's op reads only axis: reduce_all=True does not widen it
    # (paddle._C_ops.logsumexp(x, [0], False, True) keeps every other dim).
    axes = attrs.get("axis")
    return (_reduced(ctx, tensor_arg(args, 0), axes, bool(attrs.get("keepdims", False))),)


def _p_norm(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    keep = bool(attrs.get("keepdims", False))
    if attrs.get("asvector", False):
        return (_reduced(ctx, x, (), keep),)
    return (_reduced(ctx, x, (int(attrs.get("axis", -1)),), keep),)


def _mean_all(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    return ((),)


def _arg_reduce(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    keep = bool(attrs.get("keepdims", False))
    if attrs.get("flatten", False):
        return (_reduced(ctx, x, (), keep),)
    if not x.shape:
        return ((),)
    return (_reduced(ctx, x, (int(attrs.get("axis", -1)),), keep),)


REDUCE_SAME_OPS: Final = (
    "amax", "amin", "frobenius_norm", "max", "min", "reduce_base", "reduce_max",
    "squared_l2_norm",
)
REDUCE_ACCUMULATE_OPS: Final = ("prod", "reduce_sum", "sum")
REDUCE_BOOL_OPS: Final = ("all", "any")


shape_rule.register(REDUCE_SAME_OPS, _reduce, shape_rule.same_dtype)
shape_rule.register(REDUCE_ACCUMULATE_OPS, _reduce, _accumulate_dtype)
shape_rule.register(REDUCE_BOOL_OPS, _reduce, shape_rule.const_dtype("bool"))
shape_rule.register(("logsumexp",), _logsumexp, shape_rule.same_dtype)
shape_rule.register(("p_norm",), _p_norm, shape_rule.same_dtype)
shape_rule.register(("mean_all",), _mean_all, shape_rule.same_dtype)
shape_rule.register(("mean",), _mean, _mean_dtype)
shape_rule.register(("argmax", "argmin"), _arg_reduce, shape_rule.const_dtype("int64"))
