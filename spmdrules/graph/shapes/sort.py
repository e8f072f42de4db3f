"""Shape and dtype inference of topk, argsort and their gradients: indices are int64."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def topk_shape(ctx: ShapeContext, x: tuple[int, ...], attrs: Mapping[str, Any]
               ) -> tuple[int, ...]:
    k = int(attrs.get("k", 1))
    if not x:
        if k not in (0, 1):
            raise ctx.fail("x", f"k {k} is out of range for a 0-d tensor", "use k = 1")
        return x
    ax = ctx.axis("x", int(attrs.get("axis", -1)), len(x))
    if not 0 <= k <= x[ax]:
        raise ctx.fail("x", f"k {k} is out of range for dim {ax} of size {x[ax]}",
                       f"use 0..{x[ax]}")
    return (*x[:ax], k, *x[ax + 1:])


def _topk(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    out = topk_shape(ctx, tensor_arg(args, 0).shape, attrs)
    return (out, out)


def _argsort(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0).shape
    if x:
        ctx.axis("x", int(attrs.get("axis", -1)), len(x))
    return (x, x)


def _with_indices(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                  ) -> Sequence[str]:
    return (tensor_arg(args, 0).dtype, "int64")


def _topk_grad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
               ) -> Sequence[OutShape]:
    x = tensor_arg(args, 0).shape
    out = topk_shape(ctx, x, attrs)
    for i, name in ((1, "indices"), (2, "out_grad")):
        if tensor_arg(args, i).shape != out:
            raise ctx.fail(name, f"has shape {list(tensor_arg(args, i).shape)}",
                           f"give it topk's result shape {list(out)}")
    return (x,)


def _argsort_grad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                  ) -> Sequence[OutShape]:
    x = tensor_arg(args, 1).shape
    for i, name in ((0, "indices"), (2, "out_grad")):
        if tensor_arg(args, i).shape != x:
            raise ctx.fail(name, f"has shape {list(tensor_arg(args, i).shape)}",
                           f"give it x's shape {list(x)}")
    return (x,)


def _grad_dtype(i: int) -> shape_rule.DtypeFn:
    def fn(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
        return (tensor_arg(args, i).dtype,)

    return fn


shape_rule.register(("topk",), _topk, _with_indices)
shape_rule.register(("argsort",), _argsort, _with_indices)
shape_rule.register(("topk_grad",), _topk_grad, _grad_dtype(0))
shape_rule.register(("argsort_grad",), _argsort_grad, _grad_dtype(1))
