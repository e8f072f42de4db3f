"""Shape and dtype inference of fused_dropout_add: out has x's shape; seed_offset is int64 [2]."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _shape(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, y = tensor_arg(args, 0), tensor_arg(args, 1)
    if x.shape != y.shape:
        raise ctx.fail("y", f"has shape {list(y.shape)} but x has {list(x.shape)}",
                       "give x and y one shape")
    p = float(attrs.get("p", 0.5))
    if not 0.0 <= p <= 1.0:
        raise ctx.fail("x", f"dropout probability p={p}", "give p in [0, 1]")
    return (x.shape, (2,))


def _dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    return (shape_rule.promote([tensor_arg(args, 0).dtype, tensor_arg(args, 1).dtype]), "int64")


shape_rule.register(("fused_dropout_add",), _shape, _dtype)
