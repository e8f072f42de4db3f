"""Shape and dtype inference of tile, expand, expand_as and expand_as's gradient."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spmdrules.core.errors import RuleArgumentError
from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import (
    Arg,
    OutShape,
    ShapeContext,
    optional_arg,
    tensor_arg,
)

_rules = importlib.import_module("spmdrules.rules.tile")


def _checked(ctx: ShapeContext, tensor: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except RuleArgumentError as e:
        why, _, fix = str(e).partition("; ")
        raise ctx.fail(tensor, why, fix or "fix the attribute") from None


def _tile(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0).shape
    return (_checked(ctx, "x", lambda: _rules.tiled_shape(x, attrs["repeat_times"])[1]),)


def _expand(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0).shape
    return (_checked(ctx, "x", lambda: _rules.expanded_shape(x, attrs["shape"])),)


def _expand_as(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
               ) -> Sequence[OutShape]:
    x, y = tensor_arg(args, 0).shape, optional_arg(args, 1)
    target = y.shape if y is not None else tuple(attrs.get("target_shape", ()))
    return (_checked(ctx, "x", lambda: _rules.expanded_shape(x, target, "the target shape")),)


def _expand_as_grad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                    ) -> Sequence[OutShape]:
    x, g = tensor_arg(args, 0).shape, tensor_arg(args, 1).shape
    _checked(ctx, "out_grad", lambda: _rules.expanded_shape(x, g, "'out_grad' shape"))
    return (x,)


shape_rule.register(("tile",), _tile, shape_rule.same_dtype)
shape_rule.register(("expand",), _expand, shape_rule.same_dtype)
shape_rule.register(("expand_as", "expand_as_v2"), _expand_as, shape_rule.same_dtype)
shape_rule.register(("expand_as_grad", "expand_as_v2_grad"), _expand_as_grad, shape_rule.same_dtype)
