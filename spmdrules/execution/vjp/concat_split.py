"""Vector-Jacobian products of the join and split ops (:mod:`spmdrules.execution.kernels.concat_split`)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution.local import (
    LocalContext,
    LocalValue,
    array,
    arrays,
    cotangent,
    register_vjp,
)


@register_vjp("split", "split_with_num", "unbind")
def split_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
              cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    pieces = arrays(ctx, outs, 0, "out")
    got = cts[0] if cts else None
    gs = list(got) if isinstance(got, list | tuple) else [None] * len(pieces)
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs.get("axis", 0)), x.ndim)
    full = [cotangent(gs, i, p) for i, p in enumerate(pieces)]
    if ctx.op == "unbind":
        return (np.stack(full, axis=axis),)
    return (np.concatenate(full, axis=axis),)


@register_vjp("concat")
def concat_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
               cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    xs = arrays(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), g.ndim)
    bounds = list(accumulate(x.shape[axis] for x in xs))[:-1]
    return ([np.array(p) for p in np.split(g, bounds, axis=axis)],)


@register_vjp("stack")
def stack_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
              cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    xs = arrays(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), g.ndim)
    return ([np.take(g, i, axis=axis) for i in range(len(xs))],)


@register_vjp("add_n")
def add_n_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
              cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    xs = arrays(ctx, ins, 0, "inputs")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    return ([np.array(g, dtype=x.dtype) for x in xs],)
