"""Shape and dtype inference of roll and its gradient: x's shape."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.core.errors import RuleArgumentError
from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg

_rules = importlib.import_module("spmdrules.rules.roll")


def _roll(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0).shape
    for i in range(1, len(args)):
        if tensor_arg(args, i).shape != x:
            raise ctx.fail("out_grad", f"has shape {list(tensor_arg(args, i).shape)}",
                           f"give it x's shape {list(x)}")
    try:
        _rules.rolled_axes(x, attrs["shifts"], attrs.get("axis", ()))
    except RuleArgumentError as e:
        why, _, fix = str(e).partition("; ")
        raise ctx.fail("x", why, fix) from None
    return (x,)


shape_rule.register(("roll", "roll_grad"), _roll, shape_rule.same_dtype)
