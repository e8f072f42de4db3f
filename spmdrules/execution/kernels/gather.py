"""Local kernels of gather, index_select, gather_nd, take_along_axis and their gradients.

A rank reads the positions its index block names from its x block, which must hold the indexed
axes whole but for a masked lookup (gather and index_select by a 1-D index from an x whose axis
is split: the rank reads the rows it holds and zeros for the others), then keeps the part of the
result its output block holds: every other dim of the result is read from the block of x or of
the index that holds it, which must hold it (else ``ShardMismatch``). Positions outside x raise
``KernelInputError``. The gradients add the cotangent back at the positions read; where the index
is sharded, each rank's sum is a piece of a pending sum.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution import local
from spmdrules.execution.local import (
    Array,
    KernelInputError,
    LocalContext,
    LocalValue,
    array,
    put,
    register_kernel,
    take,
)


def in_range(ctx: LocalContext, idx: Array, n: int, name: str = "index") -> None:
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = int(idx.min() if idx.min() < 0 else idx.max())
        raise KernelInputError(f"{ctx.op}: {name!r} holds position {bad}, outside 0..{n - 1}; "
                               "pass positions inside x's indexed dim")


def _spec(ctx: LocalContext, i: int, name: str) -> tuple[tuple[int, ...], Any]:
    return local.input_spec(ctx, i, name)


def gather_positions(ctx: LocalContext, out_i: int | None = None) -> tuple[int, list[Any]]:
    """gather/index_select: the axis, and per dim of ``take(x, index, axis)`` the positions of
    the result block (output 0, or input ``out_i`` for a gradient's cotangent)."""
    shape, xa = _spec(ctx, 0, "x")
    ishape, ia = _spec(ctx, 1, "index")
    oshape, oa = local.output(ctx) if out_i is None else _spec(ctx, out_i, "out_grad")
    ax = normalise_axis(ctx.op, "x", int(ctx.attrs.get("axis", 0)), len(shape))
    if out_i is not None or not ishape:  # a masked lookup reads a split axis (``gather``)
        local.require_full_dims(ctx, 0, "x", [ax], "a position may name any row of the axis")
    pos: list[Any] = []
    o = 0
    for d in range(len(shape)):
        src = ([(ishape, ia, "index", j) for j in range(len(ishape))] if d == ax
               else [(shape, xa, "x", d)])
        for s_shape, s_attr, name, dim in src:
            have = local.block_range(ctx, s_shape, s_attr, dim)
            pos.append(local.held(ctx, have, local.block_range(ctx, oshape, oa, o), name, dim))
            o += 1
    return ax, pos


def scatter_back(x: Array, idx: Array, r: Array, ax: int) -> Array:
    """Zeros like x with r added at ``idx`` along ``ax`` (repeats accumulate)."""
    out = np.zeros_like(x, dtype=np.result_type(x, r))
    at: list[Any] = [slice(None)] * x.ndim
    at[ax] = idx if idx.ndim else int(idx)
    np.add.at(out, tuple(at), r)
    return out


@register_kernel("gather", "index_select")
def gather(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, idx = array(ctx, blocks, 0, "x"), array(ctx, blocks, 1, "index")
    local.require_whole(ctx, 0, "x")
    ax, pos = gather_positions(ctx)
    shape, xa = _spec(ctx, 0, "x")
    in_range(ctx, idx, shape[ax])
    rows = local.block_range(ctx, shape, xa, ax)
    if len(rows) == shape[ax]:
        return (take(np.take(x, idx, axis=ax), pos),)
    # A masked lookup (rules/gather.py): this rank reads the rows it holds and zeros for the
    # others; the result is a pending sum in which one rank holds each looked-up row.
    mine = (idx >= rows.start) & (idx < rows.stop)
    if len(rows):
        got = np.take(x, np.where(mine, idx - rows.start, 0), axis=ax)
    else:
        got = np.zeros((*x.shape[:ax], *idx.shape, *x.shape[ax + 1:]), dtype=x.dtype)
    where = mine.reshape((1,) * ax + idx.shape + (1,) * (x.ndim - ax - 1))
    return (take(np.where(where, got, np.zeros((), dtype=got.dtype)), pos),)


def gather_grad(ctx: LocalContext, x: Array, idx: Array, g: Array, out_i: int | None) -> Array:
    ax, pos = gather_positions(ctx, out_i)
    shape, xa = _spec(ctx, 0, "x")
    in_range(ctx, idx, shape[ax])
    res_shape = tuple(len(np.atleast_1d(p)) for p in pos)
    r = put(np.zeros(res_shape), g, pos)
    rows = local.block_range(ctx, shape, xa, ax)
    if len(rows) == shape[ax]:
        return scatter_back(x, idx, r, ax)
    # a masked lookup's adjoint: this rank's rows take the cotangents of the positions it read
    mine = (idx >= rows.start) & (idx < rows.stop)
    where = mine.reshape((1,) * ax + idx.shape + (1,) * (x.ndim - ax - 1))
    r = np.where(where, r, np.zeros((), dtype=r.dtype))
    return scatter_back(x, np.where(mine, idx - rows.start, 0), r, ax)


@register_kernel("index_select_grad")
def index_select_grad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, idx = array(ctx, blocks, 0, "x"), array(ctx, blocks, 1, "index")
    g = array(ctx, blocks, 2, "out_grad")
    return (gather_grad(ctx, x, idx, g, 2),)


def gather_nd_positions(ctx: LocalContext, out_i: int | None = None) -> tuple[int, list[Any]]:
    shape, xa = _spec(ctx, 0, "x")
    ishape, ia = _spec(ctx, 1, "index")
    oshape, oa = local.output(ctx) if out_i is None else _spec(ctx, out_i, "out_grad")
    k = ishape[-1]
    local.require_full_dims(ctx, 0, "x", range(k), "a position may name any element")
    local.require_full_dims(ctx, 1, "index", [len(ishape) - 1], "a position needs all its parts")
    srcs = [(ishape, ia, "index", j) for j in range(len(ishape) - 1)] + [
        (shape, xa, "x", d) for d in range(k, len(shape))]
    pos = [local.held(ctx, local.block_range(ctx, s, a, dim), local.block_range(ctx, oshape, oa, o),
                      name, dim) for o, (s, a, name, dim) in enumerate(srcs)]
    return k, pos


def nd_key(ctx: LocalContext, x: Array, idx: Array, k: int) -> tuple[Any, ...]:
    for i in range(k):
        in_range(ctx, idx[..., i], x.shape[i])
    return tuple(idx[..., i] for i in range(k))


@register_kernel("gather_nd")
def gather_nd(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, idx = array(ctx, blocks, 0, "x"), array(ctx, blocks, 1, "index")
    local.require_whole(ctx, 0, "x")
    k, pos = gather_nd_positions(ctx)
    return (take(np.asarray(x[nd_key(ctx, x, idx, k)]), pos),)


def along_positions(ctx: LocalContext, out_i: int | None = None) -> tuple[int, list[Any],
                                                                         list[Any]]:
    """take_along_axis: the axis, the positions of x's block to read (all along the axis) and
    those of the index block, per dim of the result block."""
    shape, xa = _spec(ctx, 0, "x")
    ishape, ia = _spec(ctx, 1, "index")
    oshape, oa = local.output(ctx) if out_i is None else _spec(ctx, out_i, "out_grad")
    ax = normalise_axis(ctx.op, "x", int(ctx.attrs.get("axis", 0)), len(shape))
    local.require_full_dims(ctx, 0, "x", [ax], "a position may name any row of the axis")
    xpos: list[Any] = []
    ipos: list[Any] = []
    for d in range(len(shape)):
        want = local.block_range(ctx, oshape, oa, d)
        ipos.append(local.held(ctx, local.block_range(ctx, ishape, ia, d), want, "index", d))
        xpos.append(np.arange(shape[d]) if d == ax else
                    local.held(ctx, local.block_range(ctx, shape, xa, d), want, "x", d))
    return ax, xpos, ipos


@register_kernel("take_along_axis")
def take_along_axis(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, idx = array(ctx, blocks, 0, "x"), array(ctx, blocks, 1, "index")
    local.require_whole(ctx, 0, "x")
    ax, xpos, ipos = along_positions(ctx)
    i = take(idx, ipos)
    in_range(ctx, i, _spec(ctx, 0, "x")[0][ax])
    return (np.take_along_axis(take(x, xpos), i, ax),)


def along_grad(ctx: LocalContext, x: Array, idx: Array, g: Array, out_i: int | None) -> Array:
    ax, xpos, ipos = along_positions(ctx, out_i)
    i = take(idx, ipos)
    in_range(ctx, i, _spec(ctx, 0, "x")[0][ax])
    sub = np.zeros(tuple(len(p) for p in xpos), dtype=np.result_type(x, g))
    grid: list[Any] = list(np.indices(i.shape, sparse=True))
    grid[ax] = i
    np.add.at(sub, tuple(grid), g)
    return put(x, sub, xpos)


@register_kernel("take_along_axis_grad")
def take_along_axis_grad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, idx = array(ctx, blocks, 0, "x"), array(ctx, blocks, 1, "index")
    return (along_grad(ctx, x, idx, array(ctx, blocks, 2, "out_grad"), 2),)


__all__ = ["along_grad", "gather", "gather_grad", "gather_nd", "gather_nd_positions",
           "index_select_grad", "nd_key", "take_along_axis", "take_along_axis_grad"]
