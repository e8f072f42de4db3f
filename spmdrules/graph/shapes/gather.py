"""Shape and dtype inference of gather, gather_nd, index_select, take_along_axis and the gradient
rules of the last two. Index operands are int32 or int64."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import (
    Arg,
    OutShape,
    ShapeContext,
    TensorMeta,
    tensor_arg,
)

INDEX_DTYPES = ("int32", "int64")


def index_arg(ctx: ShapeContext, args: Sequence[Arg], i: int, name: str = "index") -> TensorMeta:
    t = tensor_arg(args, i)
    if t.dtype not in INDEX_DTYPES:
        raise ctx.fail(name, f"has dtype {t.dtype}, which cannot hold positions",
                       "cast it to int64 (or int32)")
    return t


def gathered_shape(ctx: ShapeContext, x: tuple[int, ...], index: tuple[int, ...],
                   attrs: Mapping[str, Any], zero_d: bool) -> tuple[int, ...]:
    if not x:
        raise ctx.fail("x", "is 0-d", "gather from a tensor of rank >= 1")
    ax = ctx.axis("x", int(attrs.get("axis", 0)), len(x))
    if len(index) > 1 or (not index and not zero_d):
        raise ctx.fail("index", f"has rank {len(index)}",
                       "pass 1-D positions" + (" (or a 0-d one)" if zero_d else ""))
    return (*x[:ax], *index, *x[ax + 1:])


def _gather(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, index = tensor_arg(args, 0).shape, index_arg(ctx, args, 1).shape
    return (gathered_shape(ctx, x, index, attrs, zero_d=ctx.op_type == "gather"),)


def _index_select_grad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                       ) -> Sequence[OutShape]:
    x, index = tensor_arg(args, 0).shape, index_arg(ctx, args, 1).shape
    want = gathered_shape(ctx, x, index, attrs, zero_d=False)
    if tensor_arg(args, 2).shape != want:
        raise ctx.fail("out_grad", f"has shape {list(tensor_arg(args, 2).shape)}",
                       f"give it index_select's result shape {list(want)}")
    return (x,)


def _gather_nd(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
               ) -> Sequence[OutShape]:
    x, index = tensor_arg(args, 0).shape, index_arg(ctx, args, 1).shape
    if not index:
        raise ctx.fail("index", "is 0-d", "its last dim counts the indexed dims of x")
    if index[-1] > len(x):
        raise ctx.fail("index", f"last dim is {index[-1]} but x has rank {len(x)}",
                       f"index at most {len(x)} dims")
    return ((*index[:-1], *x[index[-1]:]),)


def along_shape(ctx: ShapeContext, x: tuple[int, ...], index: tuple[int, ...],
                attrs: Mapping[str, Any]) -> tuple[int, ...]:
    if len(index) != len(x) or not x:
        raise ctx.fail("index", f"has rank {len(index)} but x has {len(x)}",
                       "give the index x's rank (>= 1)")
    ax = ctx.axis("x", int(attrs.get("axis", 0)), len(x))
    for d, (n, m) in enumerate(zip(x, index, strict=True)):
        if d != ax and m > n:
            raise ctx.fail("index", f"dim {d} has size {m} but x's has {n}",
                           f"use at most {n} (the op reads x's leading part of that dim)")
    return index


def _take_along_axis(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                     ) -> Sequence[OutShape]:
    return (along_shape(ctx, tensor_arg(args, 0).shape, index_arg(ctx, args, 1).shape, attrs),)


def _take_along_axis_grad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                          ) -> Sequence[OutShape]:
    x, index = tensor_arg(args, 0).shape, index_arg(ctx, args, 1).shape
    if tensor_arg(args, 2).shape != along_shape(ctx, x, index, attrs):
        raise ctx.fail("out_grad", f"has shape {list(tensor_arg(args, 2).shape)}",
                       f"give it the index's shape {list(index)}")
    return (x,)


shape_rule.register(("gather", "index_select"), _gather, shape_rule.same_dtype)
shape_rule.register(("index_select_grad",), _index_select_grad, shape_rule.same_dtype)
shape_rule.register(("gather_nd",), _gather_nd, shape_rule.same_dtype)
shape_rule.register(("take_along_axis",), _take_along_axis, shape_rule.same_dtype)
shape_rule.register(("take_along_axis_grad",), _take_along_axis_grad, shape_rule.same_dtype)
