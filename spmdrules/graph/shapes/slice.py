"""Shape and dtype inference of slice, strided_slice and strided_slice's gradient."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.core.errors import RuleArgumentError
from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg

# rules/ is installed as spmdrules.rules; mypy cannot follow it, so it is imported by name
_rules = importlib.import_module("spmdrules.rules.slice")


def sliced_shape(ctx: ShapeContext, x: tuple[int, ...], attrs: Mapping[str, Any]) -> OutShape:
    """The result's shape: each sliced axis the length of its range, decreased axes dropped."""
    try:
        kept = _rules.boxes(ctx.op_type, x, attrs["axes"], attrs["starts"], attrs["ends"],
                            attrs.get("strides"))
        decrease = {a % len(x) for a in attrs.get("decrease_axis", ())}
        for d in decrease:
            if d not in kept or len(kept[d]) != 1:
                raise RuleArgumentError(f"decrease_axis {d} must be a sliced axis of size 1 in "
                                        "the result; drop it from decrease_axis")
    except RuleArgumentError as e:
        raise ctx.fail("input", str(e).split("; ")[0], str(e).split("; ")[-1]) from None
    return tuple(len(kept[d]) if d in kept else n for d, n in enumerate(x) if d not in decrease)


def _slice(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    return (sliced_shape(ctx, tensor_arg(args, 0).shape, attrs),)


def _grad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, g = tensor_arg(args, 0).shape, tensor_arg(args, 1).shape
    want = sliced_shape(ctx, x, attrs)
    if g != want:
        raise ctx.fail("out_grad", f"has shape {list(g)} but the slice of 'input' is {list(want)}",
                       "pass the cotangent of the strided slice's result")
    return (x,)


shape_rule.register(("slice", "strided_slice"), _slice, shape_rule.same_dtype)
shape_rule.register(("strided_slice_grad",), _grad, shape_rule.same_dtype)
