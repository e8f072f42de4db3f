"""Local kernels of the nn ops: softmax, log_softmax, layer_norm, fused_rms_norm, embedding and
cross entropy with softmax.

Softmax and the norms work on whole rows: their rules replicate the normalised dims, so a rank
normalises the rows it holds and nothing else; a block that holds part of a row is refused
(``ShardMismatch``) rather than normalised wrongly. They are not linear, so a partial input is
refused too (their rules replicate partials first).

A vocab-sharded embedding (weight rows cut over some mesh dims) looks up only the ids inside its
rows and writes zeros for the rest: the output is the pending sum its rule claims. ``padding_idx``
-1 means no padding row; another negative value counts from the end of the table (the reading of
paddle.nn.functional.embedding, whose range the rule accepts).

Cross entropy with a sharded class axis (the vocab-parallel kernel its rule allows: softmax on,
hard labels, classes last) needs the row max and the row sum over the class shards, i.e.
communication inside the op. :func:`cross_entropy` takes that communication as an ``allreduce``
callback, so an executor with collectives can run it; the registered local kernel has none and
refuses a sharded class axis (``UnsupportedError``). Classes cut where that kernel cannot run
(soft labels, use_softmax=False) are a ``ShardMismatch``, with or without an allreduce.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from spmdrules.core.blocks import ShardMismatch, shard_index
from spmdrules.core.errors import RuleArgumentError, SpmdError, UnsupportedError
from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution.kernels.shape import block_range, input_spec
from spmdrules.execution.local import Array, Block, LocalContext, array, register_kernel

#: ``allreduce(local, "max" | "sum")``: ``local`` reduced elementwise over the ranks that share
#: this rank's rows but hold other classes (the class axis's mesh dims)
AllReduce = Callable[[Array, str], Array]


class KernelInputError(SpmdError, ValueError):
    """A kernel's data lies outside the op's domain (an id past the vocabulary, a bad label)."""


# ---- shared checks --------------------------------------------------------------------------------
def _whole(ctx: LocalContext, i: int, name: str) -> None:
    """Refuse a partial input: these ops do not distribute over a pending reduction."""
    a = ctx.input_attrs[i] if i < len(ctx.input_attrs) else None
    if a is not None and a.partial_items:
        raise UnsupportedError(
            f"{ctx.op}: {name!r} is partial on mesh dims {[d for d, _ in a.partial_items]}; the op "
            f"is not linear in it, so reshard {name!r} to replicated (or sharded) first"
        )


def _full_dims(ctx: LocalContext, i: int, name: str, dims: Sequence[int], why: str) -> None:
    """Refuse a block that holds only part of the ``dims`` of input ``i`` (a cut row)."""
    shape, attr = input_spec(ctx, i, name)
    for d in dims:
        if block_range(ctx, shape, attr, d) != range(shape[d]):
            raise ShardMismatch(
                f"{ctx.op}: {name!r} dim {d} is sharded under {attr.mapping_str()}, but {why}; "
                f"replicate {name!r} dim {d}"
            )


def _local_max(x: Array, axis: int) -> Array:
    # initial=-inf: a block with no classes (an uneven shard) takes no part in the max
    out: Array = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    return out


def _shift(m: Array) -> Array:
    """The row max as the softmax's shift; a row without a finite max (empty, all -inf) shifts by
    0, so it yields nan like the unshifted formula rather than inf - inf."""
    return np.where(np.isfinite(m), m, 0.0)


def _row_max(x: Array, axis: int) -> Array:
    return _shift(_local_max(x, axis))


def log_softmax_rows(x: Array, axis: int) -> Array:
    # numpy has no softmax (scipy is not a dependency): the max-shifted form, as Paddle computes it
    z = x - _row_max(x, axis)
    out: Array = z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))
    return out


def _softmax(x: Array, axis: int) -> Array:
    e = np.exp(x - _row_max(x, axis))
    out: Array = e / np.sum(e, axis=axis, keepdims=True)
    return out


# ---- softmax / log_softmax --------------------------------------------------------------------------
@register_kernel("softmax", "log_softmax")
def softmax(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
    x = array(ctx, blocks, 0, "x")
    _whole(ctx, 0, "x")
    # A 0-d tensor is its own single row (axis 0 or -1, as for a vector).
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), max(x.ndim, 1))
    if x.ndim:
        _full_dims(ctx, 0, "x", [axis], "every output element needs its whole row")
    row = x.reshape(1) if x.ndim == 0 else x
    fn = log_softmax_rows if ctx.op == "log_softmax" else _softmax
    return (fn(row, axis).reshape(x.shape),)


# ---- layer_norm / fused_rms_norm ---------------------------------------------------------------------
def _param(ctx: LocalContext, blocks: Sequence[Block], i: int, name: str, size: int) -> Array | None:
    b = blocks[i] if i < len(blocks) else None
    if b is None:
        return None
    p = array(ctx, blocks, i, name)
    _whole(ctx, i, name)
    if p.shape != (size,):
        raise ShardMismatch(
            f"{ctx.op}: the block of {name!r} has shape {list(p.shape)} but the rows need all "
            f"{size} entries; replicate {name!r}"
        )
    return p


def _normalise(
    ctx: LocalContext, blocks: Sequence[Block], bna: int, params: Sequence[str]
) -> tuple[Array, Array, list[Array | None]]:
    """x's block as rows x (normalised entries), and its params, after the checks."""
    x = array(ctx, blocks, 0, "x")
    _whole(ctx, 0, "x")
    if not 0 <= bna < x.ndim:
        raise RuleArgumentError(
            f"{ctx.op}: begin_norm_axis {bna} is out of range for 'x' of rank {x.ndim}"
        )
    _full_dims(ctx, 0, "x", range(bna, x.ndim), "a norm needs its whole normalised row")
    size = math.prod(x.shape[bna:])
    ps = [_param(ctx, blocks, i + 1, name, size) for i, name in enumerate(params)]
    return x, x.reshape(*x.shape[:bna], size), ps


@register_kernel("layer_norm")
def layer_norm(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
    bna, eps = int(ctx.attrs["begin_norm_axis"]), float(ctx.attrs["epsilon"])
    x, rows, (scale, bias) = _normalise(ctx, blocks, bna, ("scale", "bias"))
    mean = rows.mean(axis=-1)
    var = rows.var(axis=-1)  # the biased (population) variance, as Paddle's kernel
    out = (rows - mean[..., None]) / np.sqrt(var[..., None] + eps)
    if scale is not None:
        out = out * scale
    if bias is not None:
        out = out + bias
    return (out.reshape(x.shape), mean, var)


@register_kernel("fused_rms_norm")
def fused_rms_norm(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
    eps = float(ctx.attrs["epsilon"])
    bna = array(ctx, blocks, 0, "x").ndim - 1
    x, rows, (scale,) = _normalise(ctx, blocks, bna, ("scale",))
    invvar = 1.0 / np.sqrt(np.mean(rows * rows, axis=-1) + eps)
    out = rows * invvar[..., None]
    if scale is not None:
        out = out * scale
    return (out.reshape(x.shape), invvar)


# ---- embedding ---------------------------------------------------------------------------------------
def padding_row(padding_idx: int, vocab: int) -> int | None:
    """The table row whose lookups read zeros: None for -1 (no padding); another negative counts
    from the end of the table, as paddle.nn.functional.embedding reads it."""
    if padding_idx == -1:
        return None
    return padding_idx + vocab if padding_idx < 0 else padding_idx


@register_kernel("embedding", "lookup_table_v2")
def embedding(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
    ids = array(ctx, blocks, 0, "x")
    weight = array(ctx, blocks, 1, "weight")
    _whole(ctx, 0, "x")  # a partial weight is fine: the lookup is linear in the table
    if ids.dtype.kind not in "iu":
        raise KernelInputError(f"{ctx.op}: 'x' holds {ids.dtype} values; ids are integers")
    (vocab, _), w_attr = input_spec(ctx, 1, "weight")
    bad = (ids < 0) | (ids >= vocab)
    if bad.any():
        raise KernelInputError(
            f"{ctx.op}: 'x' holds id {int(ids[bad].flat[0])} outside the vocabulary 0..{vocab - 1}"
            f" of 'weight'; clip or remap the ids"
        )
    rows = block_range(ctx, (vocab, weight.shape[1]), w_attr, 0)
    if len(rows) != weight.shape[0]:
        raise ShardMismatch(
            f"{ctx.op}: the block of 'weight' has {weight.shape[0]} rows but its attribute "
            f"{w_attr.mapping_str()} gives rows {rows.start}..{rows.stop - 1}"
        )
    # Rows outside this rank's range read zeros: the vocab-parallel output is a pending sum.
    mine = (ids >= rows.start) & (ids < rows.stop)
    pad = padding_row(int(ctx.attrs["padding_idx"]), vocab)
    if pad is not None:
        mine &= ids != pad
    out = np.zeros((*ids.shape, weight.shape[1]), dtype=weight.dtype)
    out[mine] = weight[ids[mine] - rows.start]
    return (out,)


# ---- cross entropy with softmax -----------------------------------------------------------------------
def _no_allreduce(ctx: LocalContext, axis: int) -> AllReduce:
    def refuse(local: Array, how: str) -> Array:
        raise UnsupportedError(
            f"{ctx.op}: 'x' dim {axis} (the classes) is sharded, so the softmax needs the row "
            f"{how} over the class shards: communication a local kernel cannot do. Run "
            "spmdrules.execution.kernels.nn.cross_entropy with the executor's allreduce, or replicate "
            f"x dim {axis}"
        )

    return refuse


def cross_entropy(
    ctx: LocalContext, blocks: Sequence[Block], allreduce: AllReduce | None = None
) -> tuple[Block, ...]:
    """(softmax, loss) of this rank's blocks; ``allreduce`` combines the class shards' row
    statistics when the class axis is sharded (it is never called otherwise)."""
    x = array(ctx, blocks, 0, "x")
    label = array(ctx, blocks, 1, "label")
    _whole(ctx, 0, "x")
    _whole(ctx, 1, "label")
    soft, use_softmax = bool(ctx.attrs["soft_label"]), bool(ctx.attrs["use_softmax"])
    ignore = int(ctx.attrs["ignore_index"])
    if x.ndim == 0:
        raise RuleArgumentError(f"{ctx.op}: 'x' is 0-d; cross entropy needs a class axis")
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), x.ndim)
    shape, x_attr = input_spec(ctx, 0, "x")
    classes = block_range(ctx, shape, x_attr, axis)
    # Decided by the attribute, not the block: every rank of a class group must join the
    # allreduce, even one whose uneven block happens to hold all classes or none.
    sharded = shard_index(x_attr, axis, ctx.coord)[1] > 1
    if sharded and (soft or not use_softmax):
        # Only the vocab-parallel kernel (softmax on, hard labels) may cut the classes; refused
        # on every rank alike, so no rank waits in an allreduce for a peer that gave up.
        raise ShardMismatch(
            f"{ctx.op}: 'x' dim {axis} (the classes) is sharded under {x_attr.mapping_str()}, but "
            f"soft labels or use_softmax=False need every class; replicate 'x' dim {axis}"
        )
    reduce_ = (allreduce or _no_allreduce(ctx, axis)) if sharded else None

    def over_classes(local: Array, how: str) -> Array:
        return local if reduce_ is None else reduce_(local, how)

    if use_softmax:
        m = _shift(over_classes(_local_max(x, axis), "max"))
        z = x - m
        e = np.exp(z)
        total = over_classes(np.sum(e, axis=axis, keepdims=True), "sum")
        prob: Array = e / total
        logp = z - np.log(total)
    else:
        prob = x.copy()  # x already holds probabilities; the kernel passes it through
        with np.errstate(divide="ignore"):
            logp = np.log(x)
    if soft:
        loss = -np.sum(label * logp, axis=axis, keepdims=True)
    else:
        loss = -over_classes(_picked(ctx, logp, label, axis, classes, ignore, shape[axis]), "sum")
    return (prob, loss)


def _picked(
    ctx: LocalContext, logp: Array, label: Array, axis: int, classes: range, ignore: int, n: int
) -> Array:
    """logp at each row's label where this rank holds that class, else 0 (ignored rows: 0)."""
    if label.dtype.kind not in "iu":
        raise KernelInputError(f"{ctx.op}: hard 'label' holds {label.dtype}; give class ids")
    kept = label != ignore
    bad = kept & ((label < 0) | (label >= n))
    if bad.any():
        raise KernelInputError(
            f"{ctx.op}: 'label' holds class {int(label[bad].flat[0])} outside 0..{n - 1} (and not "
            f"ignore_index {ignore}); fix the labels or set ignore_index"
        )
    mine = kept & (label >= classes.start) & (label < classes.stop)
    at = np.where(mine, label - classes.start, 0).astype(np.intp)
    if logp.shape[axis] == 0:
        return np.zeros(label.shape, dtype=logp.dtype)
    picked: Array = np.where(mine, np.take_along_axis(logp, at, axis=axis), 0.0)
    return picked


@register_kernel("cross_entropy_with_softmax", "softmax_with_cross_entropy")
def cross_entropy_kernel(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
    return cross_entropy(ctx, blocks)


__all__ = [
    "AllReduce",
    "KernelInputError",
    "cross_entropy",
    "log_softmax_rows",
    "padding_row",
]
