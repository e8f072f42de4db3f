"""Shape and dtype inference of nearest_interp and bilinear_interp (the output's spatial lengths
from :mod:`spmdrules.engine.resampling`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.resampling import METHODS, resampling, spatial_of
from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _upsample(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
              ) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    try:
        sp = spatial_of(ctx.op_type, len(x.shape), str(attrs.get("data_format", "NCHW")))
        taps = resampling(ctx.op_type, [x.shape[d] for d in sp], attrs)
    except RuleArgumentError as e:
        raise ctx.fail("x", str(e), "fix the layout, the output size or the scale") from None
    out = list(x.shape)
    for d, t in zip(sp, taps, strict=True):
        out[d] = t.m
    return (tuple(out),)


shape_rule.register(tuple(METHODS), _upsample, shape_rule.same_dtype)
