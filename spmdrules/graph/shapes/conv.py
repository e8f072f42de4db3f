"""Shape and dtype inference of the convolutions (geometry: :mod:`spmdrules.engine.windows`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.windows import Geometry, channels_last, geometry, transpose_lengths
from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg

Shape = tuple[int, ...]


def spatial_of(shape: Sequence[int], last: bool) -> Shape:
    return tuple(shape[1:-1]) if last else tuple(shape[2:])


def with_spatial(n: int, c: int, sp: Sequence[int], last: bool) -> Shape:
    return (n, *sp, c) if last else (n, c, *sp)


def conv_shapes(op: str, x: Shape, f: Shape, attrs: Mapping[str, Any]) -> tuple[Shape, Geometry]:
    """The output shape and the geometry of the convolution ``x * f`` (for a transpose: of the
    convolution the transpose is the adjoint of)."""
    last = channels_last(attrs)
    groups = int(attrs.get("groups", 1))
    c = x[-1] if last else x[1]
    sp = spatial_of(x, last)
    kernel = f[2:]
    if groups < 1:
        raise RuleArgumentError(f"{op}: groups must be >= 1, got {groups}")
    if op == "conv2d_transpose":
        if f[0] != c:
            raise RuleArgumentError(
                f"{op}: 'filter' dim 0 is {f[0]} but the input has {c} channels; the filter is "
                "[in_channels, out_channels / groups, kh, kw]"
            )
        if c % groups:
            raise RuleArgumentError(f"{op}: {c} input channels do not split into {groups} groups")
        g = transpose_lengths(op, sp, kernel, attrs)
        return with_spatial(x[0], f[1] * groups, g.in_lengths, last), g
    if f[1] * groups != c:
        raise RuleArgumentError(
            f"{op}: 'filter' dim 1 is {f[1]} but the input has {c} channels in {groups} groups; "
            f"the filter is [out_channels, in_channels / groups (= {c // max(groups, 1)}), ...]"
        )
    if f[0] % groups:
        raise RuleArgumentError(f"{op}: {f[0]} output channels do not split into {groups} groups")
    g = geometry(op, sp, kernel, attrs)
    return with_spatial(x[0], f[0], g.out_lengths, last), g


def _conv(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, f = tensor_arg(args, 0), tensor_arg(args, 1)
    nsp = 3 if ctx.op_type == "conv3d" else 2
    for name, t in (("input", x), ("filter", f)):
        if len(t.shape) != nsp + 2:
            raise ctx.fail(name, f"has rank {len(t.shape)}", f"{ctx.op_type} takes rank {nsp + 2}")
    try:
        out, _ = conv_shapes(ctx.op_type, x.shape, f.shape, attrs)
    except RuleArgumentError as e:
        raise ctx.fail("input", str(e), "fix the shapes or the attributes") from None
    return (out,)


def _conv_grad(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
               ) -> Sequence[OutShape]:
    x, f = tensor_arg(args, 0), tensor_arg(args, 1)
    return (x.shape, f.shape)


shape_rule.register(("conv2d", "conv3d", "depthwise_conv2d", "conv2d_transpose"), _conv,
                    shape_rule.promoted_dtype)
def _grad_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                ) -> Sequence[str]:
    d = shape_rule.promoted_dtype(ctx, args, attrs)[0]
    return (d, d)


shape_rule.register(("conv3d_grad", "depthwise_conv2d_grad", "conv2d_transpose_grad"),
                    _conv_grad, _grad_dtype)
