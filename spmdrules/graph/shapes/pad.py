"""Shape and dtype inference of pad and its gradient."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.core.errors import RuleArgumentError
from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg

_rules = importlib.import_module("spmdrules.rules.pad")


def _padded(ctx: ShapeContext, x: tuple[int, ...], attrs: Mapping[str, Any]) -> tuple[int, ...]:
    try:
        out: tuple[int, ...] = _rules.padded_shape(x, attrs["paddings"])
    except RuleArgumentError as e:
        why, _, fix = str(e).partition("; ")
        raise ctx.fail("x", why, fix) from None
    return out


def _pad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    return (_padded(ctx, tensor_arg(args, 0).shape, attrs),)


def _grad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, g = tensor_arg(args, 0).shape, tensor_arg(args, 1).shape
    if g != _padded(ctx, x, attrs):
        raise ctx.fail("out_grad", f"has shape {list(g)}", "give it the padded shape of x")
    return (x,)


shape_rule.register(("pad",), _pad, shape_rule.same_dtype)
shape_rule.register(("pad_grad",), _grad, shape_rule.same_dtype)
