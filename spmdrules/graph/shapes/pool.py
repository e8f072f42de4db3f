"""Shape and dtype inference of pool2d and pool3d (geometry: :mod:`spmdrules.engine.windows`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.windows import channels_last, geometry
from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg

Shape = tuple[int, ...]


def kernel_of(op: str, attrs: Mapping[str, Any], nsp: int) -> Shape:
    k = tuple(int(v) for v in attrs.get("kernel_size", ()) or ())
    if len(k) == 1:
        k = k * nsp
    if len(k) != nsp:
        raise RuleArgumentError(f"{op}: kernel_size {list(k)} needs {nsp} entries")
    return k


def pool_out_spatial(op: str, spatial: Sequence[int], attrs: Mapping[str, Any]) -> Shape:
    """The output's spatial lengths: 1s (global), the bins (adaptive) or the windows'."""
    nsp = len(spatial)
    if attrs.get("global_pooling", False):
        return (1,) * nsp
    k = kernel_of(op, attrs, nsp)
    if attrs.get("adaptive", False):
        if min(k) < 1:
            raise RuleArgumentError(f"{op}: adaptive output size {list(k)} must be >= 1")
        return k
    return geometry(op, spatial, k, attrs, ceil_mode=bool(attrs.get("ceil_mode", False))
                    ).out_lengths


def _pool(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    nsp = 3 if ctx.op_type == "pool3d" else 2
    if len(x.shape) != nsp + 2:
        raise ctx.fail("x", f"has rank {len(x.shape)}", f"{ctx.op_type} takes rank {nsp + 2}")
    last = channels_last(attrs)
    sp = x.shape[1:-1] if last else x.shape[2:]
    if attrs.get("pooling_type", "max") not in ("max", "avg"):
        raise ctx.fail("x", f"pooling_type {attrs.get('pooling_type')!r}", "use 'max' or 'avg'")
    try:
        out = pool_out_spatial(ctx.op_type, sp, attrs)
    except RuleArgumentError as e:
        raise ctx.fail("x", str(e), "fix kernel_size, strides or paddings") from None
    return ((x.shape[0], *out, x.shape[-1]) if last else (*x.shape[:2], *out),)


shape_rule.register(("pool2d", "pool3d"), _pool, shape_rule.same_dtype)
