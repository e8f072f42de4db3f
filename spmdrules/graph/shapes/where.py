"""Shape and dtype inference of where: numpy's broadcast; the dtype of x and y promoted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _where(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    c, x, y = (tensor_arg(args, i) for i in range(3))
    if c.dtype != "bool":
        raise ctx.fail("condition", f"has dtype {c.dtype}", "pass a bool condition (cast it)")
    return (shape_rule.broadcast_shapes(ctx, [("condition", c.shape), ("x", x.shape),
                                              ("y", y.shape)]),)


def _dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    return (shape_rule.promote([tensor_arg(args, 1).dtype, tensor_arg(args, 2).dtype]),)


shape_rule.register(("where",), _where, _dtype)
