"""Shape and dtype inference of the fused linear layers: linear_v2 and fused_gemm_epilogue.

Each has a second, 0-d output: Paddle's reserve (workspace) slot, which its rules answer as a
rank-0 attribute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _swap(s: tuple[int, ...], flag: bool) -> tuple[int, ...]:
    return (*s[:-2], s[-1], s[-2]) if flag and len(s) >= 2 else s


def _product(ctx: ShapeContext, names: tuple[str, str], x: tuple[int, ...],
             y: tuple[int, ...], bias: tuple[int, ...] | None) -> tuple[int, ...]:
    if not x:
        raise ctx.fail(names[0], "is 0-d", "give it rank >= 1")
    if len(y) != 2:
        raise ctx.fail(names[1], f"has rank {len(y)}", "give a 2-D [in, out] matrix")
    if x[-1] != y[0]:
        raise ctx.fail(names[1], f"has {y[0]} rows but {names[0]} has {x[-1]} columns",
                       "make the contracted sizes equal (check the transposes)")
    if bias is not None and bias != (y[1],):
        raise ctx.fail("bias", f"has shape {list(bias)}", f"give bias shape [{y[1]}]")
    return (*x[:-1], y[1])


def _linear_v2(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
               ) -> Sequence[OutShape]:
    x, w = tensor_arg(args, 0), tensor_arg(args, 1)
    b = shape_rule.optional_arg(args, 2)
    w_shape = _swap(w.shape, bool(attrs.get("transpose_weight", False)))
    return (_product(ctx, ("input", "weight"), x.shape, w_shape, None if b is None else b.shape),
            ())


def _gemm(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, y, b = tensor_arg(args, 0), tensor_arg(args, 1), tensor_arg(args, 2)
    if len(x.shape) < 2:
        raise ctx.fail("x", f"has rank {len(x.shape)}", "give x rank >= 2")
    xs = _swap(x.shape, bool(attrs.get("trans_x", False)))
    ys = _swap(y.shape, bool(attrs.get("trans_y", False)))
    return (_product(ctx, ("x", "y"), xs, ys, b.shape), ())


def _dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    d = tensor_arg(args, 0).dtype
    return (d, d)


shape_rule.register(("linear_v2",), _linear_v2, _dtype)
shape_rule.register(("fused_gemm_epilogue",), _gemm, _dtype)
