"""Local kernels of the reshape family: reshape, flatten, squeeze, unsqueeze.

None of them moves data between ranks: each rank rearranges its own block. The attributes that
name global sizes are rewritten for the block: a reshape's target becomes the shape of this rank's
block of the output (its attribute and the balanced decomposition say which); the axes of
flatten, squeeze and unsqueeze are read off the global shape (squeeze drops the dims whose
*global* size is 1, whatever the block's size). A pending partial passes through unchanged, since
rearranging is linear.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.shards import ShardMismatch
from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution import local
from spmdrules.execution.local import LocalContext, LocalValue, array, register_kernel


# ---- reshape: the global target becomes this rank's local.output block ---------------------------------
@register_kernel("reshape", "reshape2")
def reshape(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    want = local.out_block(ctx)
    if x.size != math.prod(want):
        # The rule's x and out attributes cut the data differently (e.g. an uneven shard of a
        # merged dim): no local reshape can produce the claimed block.
        _, out_attr = local.output(ctx)
        raise ShardMismatch(
            f"{ctx.op}: the block of 'x' at mesh coordinate {ctx.coord} has {x.size} elements "
            f"({list(x.shape)}) but the block of 'out' under {out_attr.mapping_str()} needs "
            f"{math.prod(want)} ({list(want)}); x and out must be cut into the same pieces"
        )
    return (x.reshape(want),)


@register_kernel("flatten")
def flatten(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    if x.ndim == 0:
        return (x.reshape(1),)  # Paddle flattens a 0-d tensor to [1]
    start = normalise_axis(ctx.op, "x", int(ctx.attrs["start_axis"]), x.ndim)
    stop = normalise_axis(ctx.op, "x", int(ctx.attrs["stop_axis"]), x.ndim)
    if start > stop:
        raise RuleArgumentError(
            f"{ctx.op}: start_axis {start} comes after stop_axis {stop}; give start <= stop"
        )
    merged = math.prod(x.shape[start : stop + 1])
    return (x.reshape(*x.shape[:start], merged, *x.shape[stop + 1 :]),)


@register_kernel("squeeze")
def squeeze(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    shape, _ = local.input_spec(ctx, 0, "x")
    axes: tuple[int, ...] = tuple(ctx.attrs.get("axis") or ())
    if not axes:
        gone = {i for i, n in enumerate(shape) if n == 1}
    else:
        # Paddle (unlike numpy) skips a named axis whose size is not 1; a 0-d x accepts 0 and -1
        norm = (normalise_axis(ctx.op, "x", a, max(len(shape), 1)) for a in axes)
        gone = {a for a in norm if a < len(shape) and shape[a] == 1}
    # Global size 1 decides: a block of size 1 along a longer dim cut unevenly stays a dim.
    for d in gone:
        if x.shape[d] != 1:
            raise ShardMismatch(
                f"{ctx.op}: 'x' dim {d} has global size 1 but a block of size {x.shape[d]} at "
                f"mesh coordinate {ctx.coord}; a squeezed dim must be replicated"
            )
    return (x.reshape([n for i, n in enumerate(x.shape) if i not in gone]),)


@register_kernel("unsqueeze", "unsqueeze2")
def unsqueeze(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    axes = ctx.attrs.get("axis")
    if axes is None:
        raise RuleArgumentError(f"{ctx.op}: attribute 'axis' is required, e.g. axis=[0]")
    out = x
    # paddle.unsqueeze inserts one axis after another; a negative axis counts from the rank
    # reached so far (docs/deviations/shape.md, unsqueeze-sequential-axes).
    for a in axes:
        out = np.expand_dims(out, normalise_axis(ctx.op, "x", int(a), out.ndim, allow_end=True))
    return (out,)
