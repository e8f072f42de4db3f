"""Shape and dtype inference of lrn: the input's shape, rank >= 3, a window of n >= 1 channels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _lrn(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    if len(x.shape) < 3:
        raise ctx.fail("x", f"has rank {len(x.shape)}", "lrn takes [N, C, D1, ...] (rank >= 3)")
    if int(attrs.get("n", 5)) < 1:
        raise ctx.fail("x", f"window n={attrs.get('n')}", "give a window of n >= 1 channels")
    if str(attrs.get("data_format", "NCHW")).upper() not in ("NCHW", "NHWC", "NCL", "NLC",
                                                               "NCDHW", "NDHWC"):
        raise ctx.fail("x", f"data_format {attrs.get('data_format')!r}",
                       "use channels first (NCHW) or last (NHWC)")
    if not x.dtype.startswith(("float", "bfloat")):
        raise ctx.fail("x", f"has dtype {x.dtype}", "lrn takes a floating tensor")
    return (x.shape,)


shape_rule.register(("lrn",), _lrn, shape_rule.same_dtype)
