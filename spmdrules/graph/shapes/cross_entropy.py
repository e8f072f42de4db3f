"""Shape and dtype inference of softmax cross entropy (softmax and loss)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _same_twice(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    d = tensor_arg(args, 0).dtype
    return (d, d)


def _cross_entropy(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, label = tensor_arg(args, 0), tensor_arg(args, 1)
    if not x.shape:
        raise ctx.fail("x", "is 0-d", "cross entropy needs a class axis")
    ax = ctx.axis("x", int(attrs.get("axis", -1)), len(x.shape))
    loss = (*x.shape[:ax], 1, *x.shape[ax + 1 :])
    if attrs.get("soft_label", False):
        if label.shape != x.shape:
            raise ctx.fail("label", f"has shape {list(label.shape)} but soft labels need x's "
                           f"{list(x.shape)}", "give one probability per class")
    else:
        if label.shape != loss:
            raise ctx.fail("label", f"has shape {list(label.shape)} but hard labels need "
                           f"{list(loss)} (x's shape with size 1 on the class axis {ax})",
                           "unsqueeze the labels on the class axis")
        if label.dtype not in shape_rule.INTEGRAL_DTYPES or label.dtype == "bool":
            raise ctx.fail("label", f"has dtype {label.dtype}", "hard labels are int64 class ids")
    return (x.shape, loss)


shape_rule.register(
    ("cross_entropy_with_softmax", "softmax_with_cross_entropy"), _cross_entropy, _same_twice
)


def _c_softmax_ce(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                  ) -> Sequence[OutShape]:
    x, label = tensor_arg(args, 0), tensor_arg(args, 1)
    if not x.shape:
        raise ctx.fail("x", "is 0-d", "cross entropy needs a class axis (the last)")
    loss = (*x.shape[:-1], 1)
    if label.shape != loss:
        raise ctx.fail("label", f"has shape {list(label.shape)} but hard labels need {list(loss)}",
                       "unsqueeze the labels on the last axis")
    if label.dtype not in shape_rule.INTEGRAL_DTYPES or label.dtype == "bool":
        raise ctx.fail("label", f"has dtype {label.dtype}", "hard labels are int64 class ids")
    return (x.shape, loss)


shape_rule.register(("c_softmax_with_cross_entropy",), _c_softmax_ce, _same_twice)


def _c_softmax_multi_label_ce(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                              ) -> Sequence[OutShape]:
    x, label, weight = tensor_arg(args, 0), tensor_arg(args, 1), tensor_arg(args, 2)
    if not x.shape:
        raise ctx.fail("x", "is 0-d", "cross entropy needs a class axis (the last)")
    if len(label.shape) != len(x.shape) or label.shape[:-1] != x.shape[:-1] or label.shape[-1] < 1:
        raise ctx.fail("label", f"has shape {list(label.shape)} but must be "
                       f"{[*x.shape[:-1], 'C']} with C >= 1",
                       "give each row of x its C class ids on the last axis")
    if label.dtype not in shape_rule.INTEGRAL_DTYPES or label.dtype == "bool":
        raise ctx.fail("label", f"has dtype {label.dtype}", "labels are int64 class ids")
    if weight.shape != label.shape:
        raise ctx.fail("smooth_weight", f"has shape {list(weight.shape)} but label has "
                       f"{list(label.shape)}", "give one weight per label")
    if weight.dtype != x.dtype:
        raise ctx.fail("smooth_weight", f"has dtype {weight.dtype} but x has {x.dtype}",
                       "cast the weights to x's dtype")
    loss = (*x.shape[:-1], 1) if attrs.get("sum_multi_label_loss", True) else label.shape
    return (x.shape, loss)


shape_rule.register(("c_softmax_with_multi_label_cross_entropy",), _c_softmax_multi_label_ce,
                    _same_twice)
