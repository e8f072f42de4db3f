"""Shape and dtype inference of cast: x's shape in the asked dtype."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import DTYPES, Arg, OutShape, ShapeContext, tensor_arg


def _cast(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    return (tensor_arg(args, 0).shape,)


def _dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    name = str(attrs.get("dtype", "float32"))
    if name not in DTYPES:
        raise ctx.fail("dtype", f"{name!r} is not a dtype a tensor can have",
                       f"use one of {', '.join(sorted(DTYPES))}")
    return (name,)


shape_rule.register(("cast",), _cast, _dtype)
