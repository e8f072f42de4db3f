"""Shape and dtype inference of the constants: full, full_like and arange."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import DTYPES, Arg, OutShape, ShapeContext, tensor_arg


def _dtype(ctx: ShapeContext, name: str) -> str:
    if name not in DTYPES:
        raise ctx.fail("dtype", f"{name!r} is not a dtype a tensor can have",
                       f"use one of {', '.join(sorted(DTYPES))}")
    return name


def _full(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    shape = attrs.get("shape")
    if shape is None:
        raise ctx.fail("shape", "is required", "pass shape=[...], the result's sizes")
    for i, n in enumerate(shape):
        if n < 0:
            raise ctx.fail("shape", f"dim {i} is {n}; a constant's sizes are known",
                           "give every size as an int >= 0")
    return (tuple(shape),)


#: the values each integer dtype holds
_INT_RANGES: Final = {name: (-(2 ** (8 * n - 1)), 2 ** (8 * n - 1) - 1)
                      for name, n in (("int8", 1), ("int16", 2), ("int32", 4), ("int64", 8))}
_INT_RANGES["uint8"] = (0, 255)


def _filled(ctx: ShapeContext, attrs: Mapping[str, Any], name: str) -> str:
    """The dtype ``name``, once ``value`` is known to fit it: numpy would wrap or refuse it."""
    value, bounds = attrs.get("value", 0.0), _INT_RANGES.get(name)
    if bounds is not None and not (math.isfinite(value) and bounds[0] <= value <= bounds[1]):
        raise ctx.fail("value", f"{value!r} does not fit {name}",
                       f"give a value in [{bounds[0]}, {bounds[1]}], or a wider dtype")
    return name


def _full_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    return (_filled(ctx, attrs, _dtype(ctx, str(attrs.get("dtype", "float32")))),)


def _full_like(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    return (tensor_arg(args, 0).shape,)


def _full_like_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                     ) -> Sequence[str]:
    name = str(attrs.get("dtype", ""))
    return (_filled(ctx, attrs, _dtype(ctx, name) if name else tensor_arg(args, 0).dtype),)


def arange_length(start: float, end: float, step: float) -> int:
    """numpy's count: ceil((end - start) / step), and none for a range that runs backwards;
    exact for int bounds (a float64 quotient is not, past 2**53)."""
    if isinstance(start, int) and isinstance(end, int) and isinstance(step, int):
        return max(0, -((start - end) // step))
    return max(0, math.ceil((end - start) / step))


def arange_dtype(attrs: Mapping[str, Any]) -> str:
    """The dtype asked for; else int64 when start, end and step are integral (Paddle's Python
    API), else float32."""
    name = str(attrs.get("dtype", ""))
    if name:
        return name
    values = (attrs.get("start", 0.0), attrs.get("end"), attrs.get("step", 1.0))
    return "int64" if all(float(v).is_integer() for v in values if v is not None) else "float32"


def _arange(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    start, end, step = attrs.get("start", 0.0), attrs.get("end"), attrs.get("step", 1.0)
    if end is None:
        raise ctx.fail("end", "is required", "pass end=, the bound the range stops before")
    if step == 0 or not all(math.isfinite(v) for v in (start, end, step)):
        raise ctx.fail("step", f"start {start}, end {end}, step {step} give no finite range",
                       "use finite bounds and a non-zero step")
    return ((arange_length(start, end, step),),)


def _arange_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                  ) -> Sequence[str]:
    return (_dtype(ctx, arange_dtype(attrs)),)


shape_rule.register(("full",), _full, _full_dtype)
shape_rule.register(("full_like",), _full_like, _full_like_dtype)
shape_rule.register(("arange",), _arange, _arange_dtype)
