"""Shape and dtype inference of label_smooth: the result has label's shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _label_smooth(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                  ) -> Sequence[OutShape]:
    label = tensor_arg(args, 0)
    if not label.shape:
        raise ctx.fail("label", "is 0-d", "give the class distributions on its last dim")
    prior = shape_rule.optional_arg(args, 1)
    if prior is not None and prior.shape:
        got = shape_rule.broadcast_shapes(ctx, [("label", label.shape), ("prior_dist", prior.shape)])
        if got[len(got) - len(label.shape):] != label.shape or any(
                n != 1 for n in got[: len(got) - len(label.shape)]):
            raise ctx.fail("prior_dist", f"has shape {list(prior.shape)}",
                           f"give a shape that broadcasts to label's {list(label.shape)}")
    return (label.shape,)


shape_rule.register(("label_smooth",), _label_smooth, shape_rule.same_dtype)
