"""The vector-Jacobian product of cross entropy with softmax
(:mod:`spmdrules.execution.kernels.cross_entropy`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.core.errors import UnsupportedError
from spmdrules.core.shards import shard_index
from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution import local
from spmdrules.execution.kernels.cross_entropy import as_cross_entropy
from spmdrules.execution.kernels.softmax import log_softmax_rows
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_vjp


@register_vjp("cross_entropy_with_softmax", "softmax_with_cross_entropy")
def cross_entropy_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                      cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    label = array(ctx, ins, 1, "label")
    prob, loss = array(ctx, outs, 0, "softmax"), array(ctx, outs, 1, "loss")
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), x.ndim)
    _, x_attr = local.input_spec(ctx, 0, "x")
    if shard_index(x_attr, axis, ctx.coord)[1] > 1:
        raise UnsupportedError(
            f"{ctx.op}: 'x' dim {axis} (the classes) is sharded; its reverse mode needs the "
            "vocab-parallel lowering of spmdrules.execution.adjoint, not the local VJP"
        )
    soft, use_softmax = bool(ctx.attrs["soft_label"]), bool(ctx.attrs["use_softmax"])
    ignore = int(ctx.attrs["ignore_index"])
    g_prob, g_loss = local.cotangent(cts, 0, prob), local.cotangent(cts, 1, loss)
    # a hard label's loss is 0 on the rows it ignores: no local.cotangent flows from them
    g_kept = g_loss if soft else np.where(label == ignore, 0.0, g_loss)
    d_label: Array | None = None
    if use_softmax:
        dx = prob * (g_prob - np.sum(g_prob * prob, axis=axis, keepdims=True))
        if soft:
            dx = dx + (prob * np.sum(label, axis=axis, keepdims=True) - label) * g_loss
            d_label = -log_softmax_rows(x, axis) * g_loss
        else:
            dx = dx + (prob - one_hot(label, axis, x.shape, ignore)) * g_kept
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            if soft:
                dx = g_prob - label * g_loss / x
                d_label = -np.log(x) * g_loss
            else:
                hot = one_hot(label, axis, x.shape, ignore)
                dx = g_prob - hot * g_kept / np.where(hot > 0, x, 1.0)
    return (np.asarray(dx).astype(x.dtype),
            None if d_label is None else np.asarray(d_label).astype(label.dtype))


def one_hot(label: Array, axis: int, shape: tuple[int, ...], ignore_index: int,
            classes: range | None = None) -> Array:
    """1.0 at each row's label along ``axis``, 0.0 elsewhere and on rows whose label is
    ``ignore_index``. ``classes`` is the range of classes a block holds (its rows' labels are
    offset to it; labels outside it get no 1.0); None: all of ``shape[axis]``."""
    lab = np.asarray(label).astype(np.int64)
    lo, hi = (0, shape[axis]) if classes is None else (classes.start, classes.stop)
    mine = (lab != ignore_index) & (lab >= lo) & (lab < hi)
    hot = np.zeros(shape)
    if shape[axis] == 0:  # a block an uneven split left no classes
        return hot
    np.put_along_axis(hot, np.where(mine, lab - lo, 0), np.where(mine, 1.0, 0.0), axis=axis)
    return hot


@register_vjp("c_softmax_with_cross_entropy")
def c_softmax_cross_entropy_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                                cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    return cross_entropy_vjp(as_cross_entropy(ctx), ins, outs, cts)


def multi_label_weights(label: Array, weight: Array, g_loss: Array, ignore_index: int) -> Array:
    """Each label's weight in d(logits): its smooth weight times its loss cotangent (a summed
    loss gives every label of a row the row's), 0 on ignored labels."""
    return np.where(np.asarray(label) == ignore_index, 0.0, weight * g_loss)


def multi_label_logits_grad(prob: Array, label: Array, w_eff: Array, ignore_index: int,
                            classes: range | None = None) -> Array:
    """sum_j w_eff[..., j] * (prob - one_hot(label[..., j])) on the classes a block holds."""
    axis = prob.ndim - 1
    dx = prob * np.sum(w_eff, axis=axis, keepdims=True)
    for j in range(label.shape[axis]):  # a row may repeat a label: one one-hot per label slot
        hot = one_hot(label[..., j : j + 1], axis, prob.shape, ignore_index, classes)
        dx = dx - hot * w_eff[..., j : j + 1]
    out: Array = dx
    return out


@register_vjp("c_softmax_with_multi_label_cross_entropy")
def multi_label_cross_entropy_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                                  cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    label, weight = array(ctx, ins, 1, "label"), array(ctx, ins, 2, "smooth_weight")
    prob, loss = array(ctx, outs, 0, "softmax"), array(ctx, outs, 1, "loss")
    axis = x.ndim - 1
    _, x_attr = local.input_spec(ctx, 0, "x")
    if shard_index(x_attr, axis, ctx.coord)[1] > 1:
        raise UnsupportedError(
            f"{ctx.op}: 'x' dim {axis} (the classes) is sharded; its reverse mode needs the "
            "vocab-parallel lowering of spmdrules.execution.adjoint, not the local VJP"
        )
    ignore = int(ctx.attrs.get("ignore_index", -100))
    g_prob, g_loss = local.cotangent(cts, 0, prob), local.cotangent(cts, 1, loss)
    dx = prob * (g_prob - np.sum(g_prob * prob, axis=axis, keepdims=True))
    dx = dx + multi_label_logits_grad(prob, label, multi_label_weights(label, weight, g_loss,
                                                                         ignore), ignore)
    logp = log_softmax_rows(x, axis)
    kept = np.asarray(label) != ignore
    at = np.where(kept, label, 0).astype(np.intp)
    picked = np.where(kept, np.take_along_axis(logp, at, axis=axis), 0.0)
    d_weight = -picked * g_loss
    return (np.asarray(dx).astype(x.dtype), None, np.asarray(d_weight).astype(weight.dtype))
