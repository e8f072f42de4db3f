"""Shape and dtype inference of the channel norms: batch_norm, group_norm, instance_norm.

The statistics have the shapes the rules lay out (as layer_norm's, quirk 20): batch_norm's per
channel ``[C]``, group_norm's ``[N, groups]``, instance_norm's ``[N, C]``. batch_norm's
``reserve_space`` (cuDNN's workspace; the CPU kernel leaves it empty) is ``[0]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, TensorMeta, tensor_arg

CHANNEL_LAST = ("NHWC", "NLC", "NDHWC", "NWC")


def _stat_dtype(d: str) -> str:
    # Paddle keeps normalisation statistics of half-precision inputs in float32
    return "float32" if d in ("float16", "bfloat16") else d


def _x(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> tuple[TensorMeta, int]:
    x = tensor_arg(args, 0)
    if not 2 <= len(x.shape) <= 5:
        raise ctx.fail("x", f"has rank {len(x.shape)}", "give x rank 2..5 (N, C, spatial dims)")
    fmt = str(attrs.get("data_format", "NCHW"))
    return x, (len(x.shape) - 1 if fmt in CHANNEL_LAST else 1)


def _vectors(ctx: ShapeContext, args: Sequence[Arg], names: Sequence[tuple[int, str]],
             size: int) -> None:
    for k, name in names:
        p = shape_rule.optional_arg(args, k)
        if p is not None and p.shape != (size,):
            raise ctx.fail(name, f"has shape {list(p.shape)} but x has {size} channels",
                           f"give {name} shape [{size}]")


def _batch_norm(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                ) -> Sequence[OutShape]:
    x, ch = _x(ctx, args, attrs)
    c = x.shape[ch]
    _vectors(ctx, args, ((1, "mean"), (2, "variance"), (3, "scale"), (4, "bias")), c)
    return (x.shape, (c,), (c,), (c,), (c,), (0,))


def _batch_norm_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                      ) -> Sequence[str]:
    d = tensor_arg(args, 0).dtype
    s = _stat_dtype(d)
    return (d, s, s, s, s, d)


def _group_norm(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                ) -> Sequence[OutShape]:
    x, ch = _x(ctx, args, attrs)
    c = x.shape[ch]
    _vectors(ctx, args, ((1, "scale"), (2, "bias")), c)
    groups = int(attrs.get("groups", -1))
    if groups < 1 or c % groups:
        raise ctx.fail("x", f"has {c} channels, which groups={groups} does not divide",
                       "set groups to a divisor of the channel count (>= 1)")
    stat = (x.shape[0], groups)
    return (x.shape, stat, stat)


def _instance_norm(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                   ) -> Sequence[OutShape]:
    x, _ = _x(ctx, args, {})
    _vectors(ctx, args, ((1, "scale"), (2, "bias")), x.shape[1])
    return (x.shape, x.shape[:2], x.shape[:2])


def _stats_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                 ) -> Sequence[str]:
    d = tensor_arg(args, 0).dtype
    return (d, _stat_dtype(d), _stat_dtype(d))


shape_rule.register(("batch_norm",), _batch_norm, _batch_norm_dtype)
shape_rule.register(("group_norm",), _group_norm, _stats_dtype)
shape_rule.register(("instance_norm",), _instance_norm, _stats_dtype)
