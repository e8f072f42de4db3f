"""Shape and dtype inference of the reshape family: reshape, flatten, squeeze and unsqueeze."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _reshape(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    tgt = attrs.get("shape")
    if tgt is None:
        raise ctx.fail("shape", "the attribute is missing", "pass the target shape, e.g. shape=[0, -1]")
    out = list(tgt)
    infer_at = -1
    for i, n in enumerate(tgt):
        if n == 0:
            # Paddle: 0 copies the input dim at the same position
            if i >= len(x.shape):
                raise ctx.fail("shape", f"entry {i} is 0 (copy x's dim {i}) but x has rank "
                               f"{len(x.shape)}", "give the size explicitly")
            out[i] = x.shape[i]
        elif n == -1:
            if infer_at >= 0:
                raise ctx.fail("shape", f"entries {infer_at} and {i} are both -1",
                               "only one size can be inferred")
            infer_at = i
        elif n < 0:
            raise ctx.fail("shape", f"entry {i} is {n}", "sizes are >= 0, or -1 to infer one")
    count = shape_rule.numel(x.shape)
    if infer_at >= 0:
        known = shape_rule.numel(n for i, n in enumerate(out) if i != infer_at)
        if known == 0 or count % known:
            raise ctx.fail("shape", f"{list(tgt)} cannot hold x's {count} elements ({list(x.shape)})",
                           "the known sizes must divide the element count")
        out[infer_at] = count // known
    elif shape_rule.numel(out) != count:
        raise ctx.fail("shape", f"{list(tgt)} holds {shape_rule.numel(out)} elements but x {list(x.shape)} "
                       f"holds {count}", "the sizes must multiply to the same count")
    return (tuple(out),)


def _flatten(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    if not x.shape:
        return ((1,),)  # Paddle flattens a 0-d tensor to [1]
    nd = len(x.shape)
    start = ctx.axis("x", int(attrs.get("start_axis", 0)), nd, "start_axis")
    stop = ctx.axis("x", int(attrs.get("stop_axis", -1)), nd, "stop_axis")
    if start > stop:
        raise ctx.fail("x", f"start_axis {start} comes after stop_axis {stop}",
                       "give start_axis <= stop_axis")
    return ((*x.shape[:start], shape_rule.numel(x.shape[start : stop + 1]), *x.shape[stop + 1 :]),)


def _squeeze(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    axes = attrs.get("axis") or ()
    nd = len(x.shape)
    if not axes:
        gone = {i for i, n in enumerate(x.shape) if n == 1}
    else:
        # Paddle (unlike numpy) skips a listed axis whose size is not 1
        gone = set()
        for a in axes:
            d = ctx.axis("x", a, max(nd, 1))
            if d < nd and x.shape[d] == 1:
                gone.add(d)
    return (tuple(n for i, n in enumerate(x.shape) if i not in gone),)


def _unsqueeze(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    axes = attrs.get("axis")
    if axes is None:
        raise ctx.fail("axis", "the attribute is missing", "pass the new dims, e.g. axis=[0]")
    out = list(x.shape)
    # Paddle inserts one axis after another; a negative axis counts from the rank reached so far
    for a in axes:
        p = ctx.axis("x", a, len(out), end=True)
        out.insert(p, 1)
    return (tuple(out),)


shape_rule.register(("reshape", "reshape2"), _reshape, shape_rule.same_dtype)
shape_rule.register(("flatten",), _flatten, shape_rule.same_dtype)
shape_rule.register(("squeeze",), _squeeze, shape_rule.same_dtype)
shape_rule.register(("unsqueeze", "unsqueeze2"), _unsqueeze, shape_rule.same_dtype)
