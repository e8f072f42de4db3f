"""Shape and dtype inference of the concat_split family: concat, stack, split, unbind and add_n."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _add_n(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    xs = shape_rule.list_arg(args, 0)
    if not xs:
        raise ctx.fail("inputs", "the list is empty", "pass at least one tensor")
    for i, t in enumerate(xs[1:], 1):
        if t.shape != xs[0].shape:
            raise ctx.fail(f"inputs[{i}]", f"shape {list(t.shape)} differs from inputs[0]'s "
                           f"{list(xs[0].shape)}", "add_n sums tensors of one shape")
    return (xs[0].shape,)


def _concat(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    xs = shape_rule.list_arg(args, 0)
    if not xs:
        raise ctx.fail("x", "the list is empty", "pass at least one tensor")
    s0 = xs[0].shape
    ax = ctx.axis("x[0]", int(attrs.get("axis", 0)), len(s0))
    total = 0
    for k, t in enumerate(xs):
        if len(t.shape) != len(s0):
            raise ctx.fail(f"x[{k}]", f"has rank {len(t.shape)} but x[0] has rank {len(s0)}",
                           "concatenate tensors of one rank")
        for i, (a, b) in enumerate(zip(t.shape, s0, strict=True)):
            if i != ax and a != b:
                raise ctx.fail(f"x[{k}]", f"dim {i} has size {a} but x[0]'s has {b}",
                               f"only the concat axis {ax} may differ")
        total += t.shape[ax]
    return ((*s0[:ax], total, *s0[ax + 1 :]),)


def _split(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    ax = ctx.axis("x", int(attrs.get("axis", 0)), len(x.shape))
    n = x.shape[ax]
    sections = list(attrs.get("sections") or ())
    if not sections:
        raise ctx.fail("sections", "is empty", "give the size of every piece, e.g. [2, 2, -1]")
    if sections.count(-1) > 1 or any(s < -1 for s in sections):
        raise ctx.fail("sections", f"{sections} has sizes below -1 or more than one -1",
                       "give sizes >= 0 and at most one -1")
    if -1 in sections:
        rest = n - sum(s for s in sections if s != -1)
        if rest < 0:
            raise ctx.fail("x", f"dim {ax} has size {n}, less than the sections {sections}",
                           "shrink the sections")
        sections[sections.index(-1)] = rest
    if sum(sections) != n:
        raise ctx.fail("x", f"dim {ax} has size {n} but the sections {sections} sum to "
                       f"{sum(sections)}", "make the sections add up to the dim")
    return ([(*x.shape[:ax], s, *x.shape[ax + 1 :]) for s in sections],)


def _split_with_num(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    ax = ctx.axis("x", int(attrs.get("axis", 0)), len(x.shape))
    num = int(attrs.get("num", 1))
    if num <= 0 or x.shape[ax] % num:
        raise ctx.fail("x", f"dim {ax} has size {x.shape[ax]}, not divisible into num={num} "
                       "pieces", "pick a num that divides the dim, or use split with sections")
    piece = (*x.shape[:ax], x.shape[ax] // num, *x.shape[ax + 1 :])
    return ([piece] * num,)


def _unbind(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    ax = ctx.axis("x", int(attrs.get("axis", 0)), len(x.shape))
    piece = (*x.shape[:ax], *x.shape[ax + 1 :])
    return ([piece] * x.shape[ax],)


def _stack(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    xs = shape_rule.list_arg(args, 0)
    if not xs:
        raise ctx.fail("x", "the list is empty", "pass at least one tensor")
    s0 = xs[0].shape
    for k, t in enumerate(xs[1:], 1):
        if t.shape != s0:
            raise ctx.fail(f"x[{k}]", f"shape {list(t.shape)} differs from x[0]'s {list(s0)}",
                           "stack tensors of one shape")
    ax = ctx.axis("x[0]", int(attrs.get("axis", 0)), len(s0), end=True)
    return ((*s0[:ax], len(xs), *s0[ax:]),)


shape_rule.register(("add_n",), _add_n, shape_rule.promoted_dtype)
shape_rule.register(("concat",), _concat, shape_rule.promoted_dtype)
shape_rule.register(("split",), _split, shape_rule.same_dtype)
shape_rule.register(("split_with_num",), _split_with_num, shape_rule.same_dtype)
shape_rule.register(("unbind",), _unbind, shape_rule.same_dtype)
shape_rule.register(("stack",), _stack, shape_rule.promoted_dtype)
