"""Reverse mode of the vocab-parallel multi-label cross entropy
(c_softmax_with_multi_label_cross_entropy lowered with its classes sharded, see
:func:`spmdrules.execution.lowering._lower_vocab_parallel_multi_label`).

On a class shard, d(logits) = softmax * (g_softmax - <g_softmax, softmax>) + softmax * sum_j w_j
- sum_j w_j one_hot(label_j), with w_j = smooth_weight_j * g_loss_j (0 on ignored labels). The row
dot product takes one all-reduce over the class axis's mesh dims; the loss cotangent, a pending sum
over them (the loss is replicated there), takes another. d(smooth_weight_j) = -log softmax at
label_j times g_loss_j, read off the forward's reduced statistics; every rank of a class group
holds it whole, so one of them (the first along the class dims) contributes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spmdrules.core.attr import DistAttr
from spmdrules.execution.lowering import all_reduce_chain, class_axis
from spmdrules.execution.program import Array, Coord, KernelCall, Layout, LocalStep
from spmdrules.execution.vjp.cross_entropy import multi_label_logits_grad, multi_label_weights


@dataclass(frozen=True, slots=True)
class _RowDot:
    axis: int

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        prob, g = b
        return (np.sum(g * prob, axis=self.axis, keepdims=True),)


@dataclass(frozen=True, slots=True)
class _LogitsGrad:
    """d(logits) on this rank's classes."""

    x: Layout
    ignore_index: int
    with_softmax_ct: bool
    with_loss_ct: bool

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        prob, label, weight, *rest = b
        dx = np.zeros_like(prob)
        if self.with_softmax_ct:
            dx += prob * (rest[0] - rest[1])
            rest = rest[2:]
        if self.with_loss_ct:
            lo, hi = self.x.box(coord)[prob.ndim - 1]
            w_eff = multi_label_weights(label, weight, rest[0], self.ignore_index)
            dx += multi_label_logits_grad(prob, label, w_eff, self.ignore_index, range(lo, hi))
        return (dx,)


@dataclass(frozen=True, slots=True)
class _WeightGrad:
    """d(smooth_weight) = -(target logit - log sum exp) * g_loss, from the first rank of each
    class group (zeros elsewhere: the weight's cotangent is a pending sum over the class dims)."""

    ignore_index: int
    class_dims: tuple[int, ...]

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        label, weight, gsum, pick, g_loss = b
        if any(coord[m] for m in self.class_dims):
            return (np.zeros_like(weight),)
        logp = np.where(np.asarray(label) == self.ignore_index, 0.0, pick - np.log(gsum))
        return (np.asarray(-logp * g_loss).astype(weight.dtype),)


def multi_label_reverse(rev: Any, call: KernelCall, grad: str) -> None:
    """Append the reverse of ``call`` to ``rev`` (the adjoint builder: its ``cot``,
    ``contribute``, ``buffers``, ``code`` and ``live``); ``grad`` prefixes cotangent buffers."""
    x_name, label_name, w_name = call.inputs[0], call.inputs[1], call.inputs[2]
    prob, loss = call.outputs[0], call.outputs[1]
    assert isinstance(x_name, str) and isinstance(label_name, str) and isinstance(w_name, str)
    assert isinstance(prob, str) and isinstance(loss, str)
    g_prob, g_loss = rev.cot(prob), rev.cot(loss)
    if g_prob is None and g_loss is None:
        return
    axis, class_dims = class_axis(call)
    x_lay = rev.buffers[x_name]
    mesh = x_lay.mesh
    label = f"{call.op} (vocab-parallel, reverse)"
    whole = None
    if g_loss is not None:
        whole = f"{grad}{call.op}/loss"
        all_reduce_chain(rev.buffers, rev.code, g_loss, whole, class_dims, "sum", label, label)
    if x_name in rev.live:
        ins: list[str] = [prob, label_name, w_name]
        if g_prob is not None:
            dot_p, dot = f"{grad}{call.op}/dot_p", f"{grad}{call.op}/dot"
            g_attr = rev.buffers[g_prob].attr
            stat_shape = tuple(1 if d == axis else n for d, n in enumerate(x_lay.shape))
            stat_mdm = tuple(() if d == axis else ms
                             for d, ms in enumerate(g_attr.multi_dims_mapping))
            pending = dict(g_attr.partial_items) | {m: "sum" for m in class_dims}
            rev.buffers[dot_p] = Layout(stat_shape, x_lay.dtype, DistAttr._make(
                mesh, stat_mdm, tuple(sorted(pending.items()))))
            rev.code.append(LocalStep(label, mesh, _RowDot(axis), (prob, g_prob), (dot_p,)))
            all_reduce_chain(rev.buffers, rev.code, dot_p, dot, class_dims, "sum", label, label)
            ins += [g_prob, dot]
        if whole is not None:
            ins.append(whole)
        fn = _LogitsGrad(x_lay, int(call.attrs.get("ignore_index", -100)), g_prob is not None,
                         whole is not None)
        rev.code.append(LocalStep(label, mesh, fn, tuple(ins), (rev.contribute(x_name),)))
    if whole is not None and w_name in rev.live:
        stats = (f"{call.op}/sum", f"{call.op}/pick")
        fn_w = _WeightGrad(int(call.attrs.get("ignore_index", -100)), class_dims)
        rev.code.append(LocalStep(label, mesh, fn_w, (label_name, w_name, *stats, whole),
                                  (rev.contribute(w_name),)))
