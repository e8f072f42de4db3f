"""Local kernels of joining and cutting: concat, stack, add_n, split, split_with_num, unbind.

The rules never shard the op axis, so a rank joins or cuts its own blocks along a whole axis. The
kernels still read the axis off the context rather than assume it: a split's global sections
become the local sections of this rank's block (what of each piece falls inside the rows it
holds), so a sharding the rule should not have claimed shows up as a wrong block, not as a
silently right one. Joins and cuts are linear: pending sum/avg partials pass through.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.shards import ShardMismatch
from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


# ---- joins -----------------------------------------------------------------------------------------
def _joined(ctx: LocalContext, blocks: Sequence[LocalValue], name: str) -> list[Array]:
    """The tensors a join takes (its list argument ``name``, first): at least one."""
    xs = local.arrays(ctx, blocks, 0, name)
    if not xs:
        raise RuleArgumentError(f"{ctx.op}: {name!r} is an empty list; give at least one tensor")
    return xs


@register_kernel("concat")
def concat(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    xs = _joined(ctx, blocks, "x")
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), xs[0].ndim)
    return (np.concatenate(xs, axis=axis),)


@register_kernel("stack")
def stack(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    xs = _joined(ctx, blocks, "x")
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), xs[0].ndim, allow_end=True)
    return (np.stack(xs, axis=axis),)


@register_kernel("add_n")
def add_n(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    xs = _joined(ctx, blocks, "inputs")
    out = xs[0].copy()
    for x in xs[1:]:  # in order, as Paddle's kernel accumulates
        out = out + x
    return (out,)


# ---- cuts ------------------------------------------------------------------------------------------
def _sections(op: str, sections: Sequence[int], n: int, axis: int) -> list[int]:
    """``sections`` with its one -1 inferred; they must add up to ``n``."""
    secs = [int(s) for s in sections]
    if not secs or any(s < -1 for s in secs) or secs.count(-1) > 1:
        raise RuleArgumentError(
            f"{op}: 'sections' {secs} must be non-empty sizes >= 0 with at most one -1"
        )
    if -1 in secs:
        secs[secs.index(-1)] = n - sum(s for s in secs if s != -1)
    if sum(secs) != n or min(secs) < 0:
        raise RuleArgumentError(
            f"{op}: 'sections' {list(sections)} do not add up to the size {n} of 'x' dim {axis}; "
            "make them sum to the dim size (or use -1 for one of them)"
        )
    return secs


def _cut(ctx: LocalContext, x: Array, axis: int, sizes: Sequence[int]) -> list[Array]:
    """The pieces of ``sizes`` (global) along ``axis``, as this rank's block of x holds them."""
    shape, attr = local.input_spec(ctx, 0, "x")
    rows = local.block_range(ctx, shape, attr, axis)
    here = []
    for lo, hi in zip(accumulate(sizes, initial=0), accumulate(sizes), strict=False):
        here.append(max(0, min(hi, rows.stop) - max(lo, rows.start)))
    bounds = list(accumulate(here))[:-1]
    return [np.array(p) for p in np.split(x, bounds, axis=axis)]


@register_kernel("split")
def split(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    shape, _ = local.input_spec(ctx, 0, "x")
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), len(shape))
    sizes = _sections(ctx.op, ctx.attrs["sections"], shape[axis], axis)
    return (_cut(ctx, x, axis, sizes),)


@register_kernel("split_with_num")
def split_with_num(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    shape, _ = local.input_spec(ctx, 0, "x")
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), len(shape))
    num = int(ctx.attrs["num"])
    if num < 1 or shape[axis] % num:
        raise RuleArgumentError(
            f"{ctx.op}: 'num' {num} must be >= 1 and divide the size {shape[axis]} of 'x' dim "
            f"{axis}"
        )
    return (_cut(ctx, x, axis, [shape[axis] // num] * num),)


@register_kernel("unbind")
def unbind(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    shape, attr = local.input_spec(ctx, 0, "x")
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), len(shape))
    if local.block_range(ctx, shape, attr, axis) != range(shape[axis]):
        # Each output is one whole slice of the axis: a rank holding part of it lacks the rest.
        raise ShardMismatch(
            f"{ctx.op}: 'x' dim {axis} is sharded under {attr.mapping_str()}, so the rank at "
            f"{ctx.coord} lacks some of the slices it must return; replicate x dim {axis}"
        )
    return ([np.take(x, i, axis=axis) for i in range(x.shape[axis])],)
