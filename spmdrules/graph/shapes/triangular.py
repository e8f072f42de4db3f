"""Shape and dtype inference of triu and tril_triu: x's shape, rank >= 2."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _triangular(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                ) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    if len(x.shape) < 2:
        raise ctx.fail("x", f"has rank {len(x.shape)}", "a triangle needs a tensor of rank >= 2")
    return (x.shape,)


shape_rule.register(("triu", "tril_triu"), _triangular, shape_rule.same_dtype)
