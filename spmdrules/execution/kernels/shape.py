"""Local kernels of the shape ops: reshape, flatten, squeeze, unsqueeze, transpose.

None of them moves data between ranks: each rank rearranges its own block. The attributes that
name global sizes are rewritten for the block: a reshape's target becomes the shape of this rank's
block of the output (its attribute and the balanced decomposition say which); the axes of
flatten, squeeze and unsqueeze are read off the global shape (squeeze drops the dims whose
*global* size is 1, whatever the block's size). A pending partial passes through unchanged, since
rearranging is linear.

The small helpers at the top (block shapes, reading a variadic output's entries from the context)
are shared by the other kernel modules of this part (join/split, nn).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.core.attr import DistAttr
from spmdrules.core.blocks import ShardMismatch, block_slices
from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution.local import Block, LocalContext, array, register_kernel

Shape = tuple[int, ...]


# ---- helpers shared by this part's kernel modules ------------------------------------------------
def local_shape(shape: Sequence[int], attr: DistAttr, coord: tuple[int, ...]) -> Shape:
    """The shape of the block of a ``shape`` tensor under ``attr`` at mesh coordinate ``coord``."""
    return tuple(s.stop - s.start for s in block_slices(shape, attr, coord))


def block_range(ctx: LocalContext, shape: Sequence[int], attr: DistAttr, dim: int) -> range:
    """The global indices along ``dim`` that this rank's block of the tensor holds."""
    s = block_slices(shape, attr, ctx.coord)[dim]
    return range(s.start, s.stop)


def output(ctx: LocalContext, index: int = 0) -> tuple[Shape, DistAttr]:
    """Global shape and attribute of the op's (non-list) output ``index``."""
    shape, attr = ctx.output_shapes[index], ctx.output_attrs[index]
    if not isinstance(attr, DistAttr):
        raise RuleArgumentError(
            f"{ctx.op}: output {index} has no DistAttr in the context (got {type(attr).__name__})"
        )
    return tuple(shape), attr


def variadic_output(ctx: LocalContext) -> list[tuple[Shape, DistAttr]]:
    """(global shape, attribute) of every tensor of the op's one list output.

    The context holds them either per output (one entry: a tuple of shapes and one of attributes,
    as the graph and ``spmdrules.graph.shapes`` give them) or flat, one entry per tensor (as Paddle's
    rules answer split's outs); both read the same.
    """
    shapes: Sequence[Any] = ctx.output_shapes
    attrs: Sequence[Any] = ctx.output_attrs
    if len(attrs) == 1 and isinstance(attrs[0], list | tuple):
        shapes, attrs = shapes[0], attrs[0]
    if len(shapes) != len(attrs) or not all(isinstance(a, DistAttr) for a in attrs):
        raise RuleArgumentError(
            f"{ctx.op}: the context gives {len(shapes)} output shapes and {len(attrs)} "
            "attributes; give one DistAttr per tensor of the list output"
        )
    return [(tuple(s), a) for s, a in zip(shapes, attrs, strict=True)]


def out_block(ctx: LocalContext, index: int = 0) -> Shape:
    """The shape of this rank's block of the op's (non-list) output ``index``."""
    shape, attr = output(ctx, index)
    return local_shape(shape, attr, ctx.coord)


def input_spec(ctx: LocalContext, i: int, name: str) -> tuple[Shape, DistAttr]:
    """Global shape and attribute of the (single-tensor) input ``i``."""
    shape, attr = ctx.input_shapes[i], ctx.input_attrs[i]
    if shape is None or not isinstance(attr, DistAttr):
        raise RuleArgumentError(f"{ctx.op}: the context has no shape or DistAttr for {name!r}")
    return tuple(shape), attr


# ---- reshape: the global target becomes this rank's output block ---------------------------------
@register_kernel("reshape", "reshape2")
def reshape(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
    x = array(ctx, blocks, 0, "x")
    want = out_block(ctx)
    if x.size != math.prod(want):
        # The rule's x and out attributes cut the data differently (e.g. an uneven shard of a
        # merged dim): no local reshape can produce the claimed block.
        _, out_attr = output(ctx)
        raise ShardMismatch(
            f"{ctx.op}: the block of 'x' at mesh coordinate {ctx.coord} has {x.size} elements "
            f"({list(x.shape)}) but the block of 'out' under {out_attr.mapping_str()} needs "
            f"{math.prod(want)} ({list(want)}); x and out must be cut into the same pieces"
        )
    return (x.reshape(want),)


@register_kernel("flatten")
def flatten(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
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
def squeeze(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
    x = array(ctx, blocks, 0, "x")
    shape, _ = input_spec(ctx, 0, "x")
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
def unsqueeze(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
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


@register_kernel("transpose", "transpose2")
def transpose(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
    x = array(ctx, blocks, 0, "x")
    perm: Any = ctx.attrs.get("perm")
    norm = [normalise_axis(ctx.op, "x", int(p), x.ndim) for p in (perm or ())]
    if sorted(norm) != list(range(x.ndim)):
        raise RuleArgumentError(
            f"{ctx.op}: perm {perm} is not a permutation of the {x.ndim} dims of 'x'; name each "
            "dim exactly once"
        )
    # a copy, not a strided view: blocks are sent as contiguous buffers by the MPI executor
    return (np.transpose(x, norm).copy(),)


__all__ = [
    "block_range",
    "input_spec",
    "local_shape",
    "out_block",
    "output",
    "variadic_output",
]
