"""Shape and dtype inference of nonzero and unique, whose sizes the graph op declares (``size``).

nonzero gives ``[size, rank(x)]`` int64 positions; unique gives its values (``[size]`` over the
flattened x, or x's shape with the axis of ``size``), then, when asked for, the first index of each
value ``[size]``, the inverse ``[numel]`` (or ``[x.shape[axis]]``) and the counts ``[size]``, in
``dtype``; a result not asked for is 0-d.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, numel, tensor_arg


def declared_size(ctx: ShapeContext, attrs: Mapping[str, Any], what: str) -> int:
    size = int(attrs.get("size", -1))
    if size < 0:
        raise ctx.fail("size", f"is not given, and {what} depends on the data",
                       "pass size=N, the number of result rows the graph reserves (rows past the "
                       "data's count are filled; more data than N is an error at run time)")
    return size


def _nonzero(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0).shape
    return ((declared_size(ctx, attrs, "the count of nonzero elements"), len(x)),)


def _unique(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0).shape
    size = declared_size(ctx, attrs, "the number of unique values")
    axis = list(attrs.get("axis", ()))
    if len(axis) > 1:
        raise ctx.fail("axis", f"lists {len(axis)} axes", "give one axis, or none to flatten x")
    if axis:
        ax = ctx.axis("x", axis[0], len(x))
        out, inverse = (*x[:ax], size, *x[ax + 1:]), (x[ax],)
    else:
        out, inverse = (size,), (numel(x),)
    return (out, (size,) if attrs.get("return_index") else (),
            inverse if attrs.get("return_inverse") else (),
            (size,) if attrs.get("return_counts") else ())


def _unique_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                  ) -> Sequence[str]:
    dtype = str(attrs.get("dtype", "int64"))
    if dtype not in ("int32", "int64"):
        raise ctx.fail("dtype", f"{dtype!r} cannot hold positions", "use int32 or int64")
    return (tensor_arg(args, 0).dtype, dtype, dtype, dtype)


shape_rule.register(("nonzero",), _nonzero, shape_rule.const_dtype("int64"))
shape_rule.register(("unique",), _unique, _unique_dtype)
