"""Shape and dtype inference of one_hot: x's shape plus num_classes, float32."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import (
    INTEGRAL_DTYPES,
    Arg,
    OutShape,
    ShapeContext,
    tensor_arg,
)


def _one_hot(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    if x.dtype not in INTEGRAL_DTYPES or x.dtype == "bool":
        raise ctx.fail("x", f"has dtype {x.dtype}", "pass integer class ids (cast them to int64)")
    n = int(attrs.get("num_classes", 1))
    if n < 1:
        raise ctx.fail("num_classes", f"is {n}", "give at least 1 class")
    return ((*x.shape, n),)


shape_rule.register(("one_hot",), _one_hot, shape_rule.const_dtype("float32"))
