"""Shape and dtype inference of the matmul family: matmul (numpy's broadcasting batch dims) and bmm."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _matmul(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, y = tensor_arg(args, 0), tensor_arg(args, 1)
    for name, t in (("x", x), ("y", y)):
        if not t.shape:
            raise ctx.fail(name, "is 0-d", "matmul needs operands of rank >= 1; use multiply")
    xs, ys = list(x.shape), list(y.shape)
    # A 1-D operand is a row (x) or column (y) vector whose added dim leaves the result; Paddle
    # ignores the transpose flag of a 1-D operand, as numpy has none.
    if len(xs) == 1:
        xs = [1, xs[0]]
    elif attrs.get("trans_x", False):
        xs[-2], xs[-1] = xs[-1], xs[-2]
    if len(ys) == 1:
        ys = [ys[0], 1]
    elif attrs.get("trans_y", False):
        ys[-2], ys[-1] = ys[-1], ys[-2]
    if xs[-1] != ys[-2]:
        raise ctx.fail(
            "y",
            f"contracted dim has size {ys[-2]} but x's has size {xs[-1]} (x {list(x.shape)}, "
            f"y {list(y.shape)}, trans_x={attrs.get('trans_x', False)}, "
            f"trans_y={attrs.get('trans_y', False)})",
            "make x's last dim equal y's second-to-last, or set trans_x / trans_y",
        )
    batch = shape_rule.broadcast_shapes(ctx, [("x", tuple(xs[:-2])), ("y", tuple(ys[:-2]))])
    out = list(batch)
    if len(x.shape) > 1:
        out.append(xs[-2])
    if len(y.shape) > 1:
        out.append(ys[-1])
    return (tuple(out),)


def _bmm(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, y = tensor_arg(args, 0), tensor_arg(args, 1)
    for name, t in (("x", x), ("y", y)):
        if len(t.shape) != 3:
            raise ctx.fail(name, f"has rank {len(t.shape)}", "bmm takes 3-D [batch, m, k] @ [batch, k, n]")
    if x.shape[0] != y.shape[0]:
        raise ctx.fail("y", f"dim 0 (batch) has size {y.shape[0]} but x's has {x.shape[0]}",
                       "give both operands the same batch size")
    if x.shape[2] != y.shape[1]:
        raise ctx.fail("y", f"dim 1 has size {y.shape[1]} but x's dim 2 has {x.shape[2]}",
                       "the contracted dims must match")
    return ((x.shape[0], x.shape[1], y.shape[2]),)


shape_rule.register(("matmul", "matmul_v2"), _matmul, shape_rule.promoted_dtype)
shape_rule.register(("bmm",), _bmm, shape_rule.promoted_dtype)
