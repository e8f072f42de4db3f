"""Shape and dtype inference of roi_align (out: [num_rois, C, pooled_height, pooled_width]) and
its backward op (x_grad: x's shape)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _check(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
           ) -> tuple[int, ...]:
    x, boxes, num = (tensor_arg(args, i) for i in range(3))
    if len(x.shape) != 4:
        raise ctx.fail("x", f"has rank {len(x.shape)}", "give it 4 dims [N, C, H, W]")
    if len(boxes.shape) != 2 or boxes.shape[1] != 4:
        raise ctx.fail("boxes", f"has shape {list(boxes.shape)}",
                       "give it [num_rois, 4] (x1, y1, x2, y2)")
    if num.shape != (x.shape[0],) or num.dtype not in ("int32", "int64"):
        raise ctx.fail("boxes_num", f"has shape {list(num.shape)} and dtype {num.dtype}",
                       f"give it [{x.shape[0]}] integers (the boxes of each image)")
    ph, pw = int(attrs.get("pooled_height", 1)), int(attrs.get("pooled_width", 1))
    if ph <= 0 or pw <= 0:
        raise ctx.fail("x", f"pooled_height {ph} and pooled_width {pw}", "use sizes >= 1")
    return (boxes.shape[0], x.shape[1], ph, pw)


def _roi(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    return (_check(ctx, args, attrs),)


def _roi_grad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
              ) -> Sequence[OutShape]:
    out = _check(ctx, args, attrs)
    g = tensor_arg(args, 3)
    if g.shape != out:
        raise ctx.fail("out_grad", f"has shape {list(g.shape)}", f"give it out's shape {list(out)}")
    return (tensor_arg(args, 0).shape,)


shape_rule.register(("roi_align",), _roi, shape_rule.same_dtype)
shape_rule.register(("roi_align_grad",), _roi_grad, shape_rule.same_dtype)
