"""Shape and dtype inference of moe_combine (y: [tokens, hidden]) and its backward op."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _check(ctx: ShapeContext, args: Sequence[Arg]) -> tuple[tuple[int, ...], ...]:
    x, w, idx = (tensor_arg(args, i) for i in range(3))
    for name, t in (("x", x), ("combine_weights", w), ("scatter_index", idx)):
        if len(t.shape) != 2:
            raise ctx.fail(name, f"has rank {len(t.shape)}", "give it 2 dims")
    if w.shape != idx.shape:
        raise ctx.fail("scatter_index", f"has shape {list(idx.shape)} but combine_weights has "
                       f"{list(w.shape)}", "give them one shape [tokens, k]")
    if idx.dtype not in ("int32", "int64"):
        raise ctx.fail("scatter_index", f"has dtype {idx.dtype}", "give it int32 or int64")
    return x.shape, w.shape, idx.shape


def _moe(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, w, _ = _check(ctx, args)
    return ((w[0], x[1]),)


def _moe_grad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
              ) -> Sequence[OutShape]:
    x, w, idx = _check(ctx, args)
    g = tensor_arg(args, 3)
    if g.shape != (w[0], x[1]):
        raise ctx.fail("grad_y", f"has shape {list(g.shape)}", f"give it y's shape {[w[0], x[1]]}")
    return (x, w, idx)


def _grad_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    return (tensor_arg(args, 0).dtype, tensor_arg(args, 1).dtype, tensor_arg(args, 2).dtype)


shape_rule.register(("moe_combine",), _moe, shape_rule.same_dtype)
shape_rule.register(("moe_combine_grad",), _moe_grad, _grad_dtype)
