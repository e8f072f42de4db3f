"""The local kernel of cross entropy with softmax (cross_entropy_with_softmax, softmax_with_cross_entropy).

With a sharded class axis (the vocab-parallel kernel its rule allows: softmax on, hard labels,
classes last) the op needs the row max and the row sum over the class shards, i.e. communication
inside the op. :func:`cross_entropy` takes that communication as an ``allreduce`` callback, so an
executor with collectives can run it; the registered local kernel has none and refuses a sharded
class axis (``UnsupportedError``). Classes cut where that kernel cannot run (soft labels,
use_softmax=False) are a ``ShardMismatch``, with or without an allreduce.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from spmdrules.core.errors import RuleArgumentError, UnsupportedError
from spmdrules.core.shards import ShardMismatch, shard_index
from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution import local
from spmdrules.execution.kernels.softmax import _local_max, _shift
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel

#: ``allreduce(local, "max" | "sum")``: ``local`` reduced elementwise over the ranks that share
#: this rank's rows but hold other classes (the class axis's mesh dims)
AllReduce = Callable[[Array, str], Array]


# ---- cross entropy with softmax -----------------------------------------------------------------------
def _no_allreduce(ctx: LocalContext, axis: int) -> AllReduce:
    def refuse(part: Array, how: str) -> Array:
        raise UnsupportedError(
            f"{ctx.op}: 'x' dim {axis} (the classes) is sharded, so the softmax needs the row "
            f"{how} over the class shards: communication a local kernel cannot do. Run "
            "spmdrules.execution.kernels.cross_entropy.cross_entropy with the executor's "
            f"allreduce, or replicate x dim {axis}"
        )

    return refuse


def cross_entropy(
    ctx: LocalContext, blocks: Sequence[LocalValue], allreduce: AllReduce | None = None
) -> tuple[LocalValue, ...]:
    """(softmax, loss) of this rank's blocks; ``allreduce`` combines the class shards' row
    statistics when the class axis is sharded (it is never called otherwise)."""
    x = array(ctx, blocks, 0, "x")
    label = array(ctx, blocks, 1, "label")
    local.require_whole(ctx, 0, "x")
    local.require_whole(ctx, 1, "label")
    soft, use_softmax = bool(ctx.attrs["soft_label"]), bool(ctx.attrs["use_softmax"])
    ignore = int(ctx.attrs["ignore_index"])
    if x.ndim == 0:
        raise RuleArgumentError(f"{ctx.op}: 'x' is 0-d; cross entropy needs a class axis")
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), x.ndim)
    shape, x_attr = local.input_spec(ctx, 0, "x")
    classes = local.block_range(ctx, shape, x_attr, axis)
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

    def over_classes(part: Array, how: str) -> Array:
        return part if reduce_ is None else reduce_(part, how)

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
        raise local.KernelInputError(f"{ctx.op}: hard 'label' holds {label.dtype}; give class ids")
    kept = label != ignore
    bad = kept & ((label < 0) | (label >= n))
    if bad.any():
        raise local.KernelInputError(
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
def cross_entropy_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    return cross_entropy(ctx, blocks)


# ---- c_softmax_with_cross_entropy: the vocab-parallel kernel as an op of its own ----------------
def as_cross_entropy(ctx: LocalContext) -> LocalContext:
    """c_softmax_with_cross_entropy's context read as cross entropy's: softmax on, hard labels,
    classes last (``rank`` and ``nranks`` name the shard, which the layout already says)."""
    attrs = {"soft_label": False, "use_softmax": True, "numeric_stable_mode": True, "axis": -1,
             "ignore_index": int(ctx.attrs.get("ignore_index", -100))}
    return dataclasses.replace(ctx, attrs=attrs)


def c_softmax_cross_entropy(ctx: LocalContext, blocks: Sequence[LocalValue],
                            allreduce: AllReduce | None = None) -> tuple[LocalValue, ...]:
    return cross_entropy(as_cross_entropy(ctx), blocks, allreduce)


@register_kernel("c_softmax_with_cross_entropy")
def c_softmax_cross_entropy_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    return c_softmax_cross_entropy(ctx, blocks)


# ---- c_softmax_with_multi_label_cross_entropy: C weighted labels per row ----------------------
def multi_label_cross_entropy(ctx: LocalContext, blocks: Sequence[LocalValue],
                              allreduce: AllReduce | None = None) -> tuple[LocalValue, ...]:
    """(softmax, loss): ``loss[..., j] = smooth_weight[..., j] * (logsumexp(x) - x[label[..., j]])``
    (0 where the label is ``ignore_index``), summed over j when ``sum_multi_label_loss``. With the
    classes (x's last dim) sharded, ``allreduce`` combines the row max, the row sum and the target
    logits over the class shards, as the vocab-parallel kernel does."""
    x = array(ctx, blocks, 0, "x")
    label = array(ctx, blocks, 1, "label")
    weight = array(ctx, blocks, 2, "smooth_weight")
    for i, name in enumerate(("x", "label", "smooth_weight")):
        local.require_whole(ctx, i, name)
    if x.ndim == 0:
        raise RuleArgumentError(f"{ctx.op}: 'x' is 0-d; cross entropy needs a class axis")
    axis = x.ndim - 1
    shape, x_attr = local.input_spec(ctx, 0, "x")
    classes = local.block_range(ctx, shape, x_attr, axis)
    sharded = shard_index(x_attr, axis, ctx.coord)[1] > 1
    reduce_ = (allreduce or _no_allreduce(ctx, axis)) if sharded else None

    def over_classes(part: Array, how: str) -> Array:
        return part if reduce_ is None else reduce_(part, how)

    m = _shift(over_classes(_local_max(x, axis), "max"))
    z = x - m
    e = np.exp(z)
    total = over_classes(np.sum(e, axis=axis, keepdims=True), "sum")
    logp = z - np.log(total)
    ignore = int(ctx.attrs.get("ignore_index", -100))
    picked = over_classes(_picked(ctx, logp, label, axis, classes, ignore, shape[axis]), "sum")
    loss = -weight * picked  # _picked gives 0 on the ignored labels
    if bool(ctx.attrs.get("sum_multi_label_loss", True)):
        loss = np.sum(loss, axis=axis, keepdims=True)
    return (e / total, np.asarray(loss).astype(x.dtype))


@register_kernel("c_softmax_with_multi_label_cross_entropy")
def multi_label_cross_entropy_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]
                                     ) -> tuple[LocalValue, ...]:
    return multi_label_cross_entropy(ctx, blocks)
