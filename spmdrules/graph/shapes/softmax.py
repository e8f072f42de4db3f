"""Shape and dtype inference of softmax and log_softmax."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _softmax(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    if x.shape:
        ctx.axis("x", int(attrs.get("axis", -1)), len(x.shape))
    return (x.shape,)


shape_rule.register(("softmax", "log_softmax"), _softmax, shape_rule.same_dtype)
