"""Shape and dtype inference of scatter, scatter_nd_add, put_along_axis, index_put and the
gradients of the last two: the result has x's shape; the index operands are integers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.gather import along_shape, index_arg
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, list_arg, tensor_arg

REDUCES = ("assign", "add", "mul", "multiply", "mean", "amin", "amax")


def _expect(ctx: ShapeContext, name: str, got: tuple[int, ...], want: tuple[int, ...]) -> None:
    if got != want:
        raise ctx.fail(name, f"has shape {list(got)}", f"give it shape {list(want)}")


def _scatter(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, index = tensor_arg(args, 0).shape, index_arg(ctx, args, 1).shape
    if len(index) != 1 or not x:
        raise ctx.fail("index", f"has rank {len(index)}", "pass 1-D row positions into x's dim 0")
    _expect(ctx, "updates", tensor_arg(args, 2).shape, (index[0], *x[1:]))
    return (x,)


def _scatter_nd_add(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                    ) -> Sequence[OutShape]:
    x, index = tensor_arg(args, 0).shape, index_arg(ctx, args, 1).shape
    if not index or index[-1] > len(x):
        raise ctx.fail("index", f"has shape {list(index)}",
                       f"its last dim counts the indexed dims of x (at most {len(x)})")
    _expect(ctx, "updates", tensor_arg(args, 2).shape, (*index[:-1], *x[index[-1]:]))
    return (x,)


def _put_checked(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                 ) -> tuple[int, ...]:
    x, index = tensor_arg(args, 0).shape, index_arg(ctx, args, 1).shape
    along_shape(ctx, x, index, attrs)
    _expect(ctx, "value", tensor_arg(args, 2).shape, index)
    if str(attrs.get("reduce", "assign")) not in REDUCES:
        raise ctx.fail("reduce", f"is {attrs.get('reduce')!r}", f"use one of {', '.join(REDUCES)}")
    return x


def _put(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    return (_put_checked(ctx, args, attrs),)


def _put_grad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
              ) -> Sequence[OutShape]:
    x = _put_checked(ctx, args, attrs)
    for i, name in ((3, "out"), (4, "out_grad")):
        _expect(ctx, name, tensor_arg(args, i).shape, x)
    return (x, tensor_arg(args, 2).shape)


def _index_put_checked(ctx: ShapeContext, args: Sequence[Arg]) -> tuple[int, ...]:
    x = tensor_arg(args, 0).shape
    indices = list_arg(args, 1)
    if not 0 < len(indices) <= len(x):
        raise ctx.fail("indices", f"has {len(indices)} tensors for x of rank {len(x)}",
                       f"give 1 to {len(x)} index tensors, one per leading dim")
    lengths = {t.shape for t in indices}
    if len(lengths) != 1 or len(next(iter(lengths))) != 1:
        raise ctx.fail("indices", f"have shapes {[list(t.shape) for t in indices]}",
                       "give 1-D index tensors of one length")
    for i, t in enumerate(indices):
        if t.dtype not in ("int32", "int64"):
            raise ctx.fail(f"indices[{i}]", f"has dtype {t.dtype}", "cast it to int64")
    rows = (indices[0].shape[0], *x[len(indices):])
    shape_rule.broadcast_shapes(ctx, [("value", tensor_arg(args, 2).shape), ("the rows", rows)])
    value = tensor_arg(args, 2).shape
    if len(value) > len(rows) or any(n not in (1, m) for n, m in zip(
            value, rows[len(rows) - len(value):], strict=True)):
        raise ctx.fail("value", f"has shape {list(value)}",
                       f"give a shape that broadcasts to the indexed rows {list(rows)}")
    return x


def _index_put(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
               ) -> Sequence[OutShape]:
    return (_index_put_checked(ctx, args),)


def _index_put_grad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                    ) -> Sequence[OutShape]:
    x = _index_put_checked(ctx, args)
    _expect(ctx, "out_grad", tensor_arg(args, 3).shape, x)
    return (x, tensor_arg(args, 2).shape)


def _two(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    return (tensor_arg(args, 0).dtype, tensor_arg(args, 2).dtype)


shape_rule.register(("scatter",), _scatter, shape_rule.same_dtype)
shape_rule.register(("scatter_nd_add",), _scatter_nd_add, shape_rule.same_dtype)
shape_rule.register(("put_along_axis",), _put, shape_rule.same_dtype)
shape_rule.register(("put_along_axis_grad",), _put_grad, _two)
shape_rule.register(("index_put",), _index_put, shape_rule.same_dtype)
shape_rule.register(("index_put_grad",), _index_put_grad, _two)
