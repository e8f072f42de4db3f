"""Shape and dtype inference of cumsum, cummax, cummin and the latter two's gradients."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, numel, tensor_arg

INDEX_DTYPES = ("int32", "int64")


def _axis(ctx: ShapeContext, x: tuple[int, ...], attrs: Mapping[str, Any]) -> None:
    if x:
        ctx.axis("x", int(attrs.get("axis", -1)), len(x))


def _cumsum(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0).shape
    if attrs.get("flatten", False):
        return ((numel(x),),)
    _axis(ctx, x, attrs)
    return (x,)


def _cumext(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0).shape
    _axis(ctx, x, attrs)
    return (x, x)


def _cumext_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                  ) -> Sequence[str]:
    dtype = str(attrs.get("dtype", "int64"))
    if dtype not in INDEX_DTYPES:
        raise ctx.fail("dtype", f"{dtype!r} cannot hold indices", "use int32 or int64")
    return (tensor_arg(args, 0).dtype, dtype)


def _grad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0).shape
    for i, name in ((1, "indices"), (2, "out_grad")):
        if tensor_arg(args, i).shape != x:
            raise ctx.fail(name, f"has shape {list(tensor_arg(args, i).shape)}",
                           f"give it x's shape {list(x)}")
    _axis(ctx, x, attrs)
    return (x,)


shape_rule.register(("cumsum",), _cumsum, shape_rule.same_dtype)
shape_rule.register(("cummax", "cummin"), _cumext, _cumext_dtype)
shape_rule.register(("cummax_grad", "cummin_grad"), _grad, shape_rule.same_dtype)
