"""Shape and dtype inference of the norm family: layer_norm and fused_rms_norm, with their statistics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _stat_dtype(d: str) -> str:
    # Paddle keeps normalisation statistics of half-precision inputs in float32
    return "float32" if d in ("float16", "bfloat16") else d


def _layer_norm_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    d = tensor_arg(args, 0).dtype
    return (d, _stat_dtype(d), _stat_dtype(d))


def _rms_norm_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    d = tensor_arg(args, 0).dtype
    return (d, _stat_dtype(d))


def _layer_norm(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    nd = len(x.shape)
    bna = int(attrs.get("begin_norm_axis", 1))
    if not 0 <= bna < nd:
        raise ctx.fail("x", f"begin_norm_axis {bna} is out of range for rank {nd}",
                       f"use 0..{nd - 1} (the first normalised dim)")
    size = shape_rule.numel(x.shape[bna:])
    for k, name in ((1, "scale"), (2, "bias")):
        p = shape_rule.optional_arg(args, k)
        if p is not None and p.shape != (size,):
            raise ctx.fail(name, f"has shape {list(p.shape)} but x's normalised dims "
                           f"{list(x.shape[bna:])} need [{size}]", f"give {name} shape [{size}]")
    stat = x.shape[:bna]
    return (x.shape, stat, stat)


def _rms_norm(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, scale = tensor_arg(args, 0), tensor_arg(args, 1)
    if not x.shape:
        raise ctx.fail("x", "is 0-d", "rms norm normalises the last dim; pass rank >= 1")
    if scale.shape != x.shape[-1:]:
        raise ctx.fail("scale", f"has shape {list(scale.shape)} but x's last dim needs "
                       f"[{x.shape[-1]}]", f"give scale shape [{x.shape[-1]}]")
    return (x.shape, x.shape[:-1])


shape_rule.register(("layer_norm",), _layer_norm, _layer_norm_dtype)
shape_rule.register(("fused_rms_norm",), _rms_norm, _rms_norm_dtype)
