"""Vector-Jacobian product of fused_rotary_position_embedding
(:mod:`spmdrules.execution.kernels.rotary`).

The op is linear in each of q, k, v, and ``rotate`` is antisymmetric (its adjoint is
``-rotate``): ``dx = g * cos - rotate(g * sin)``. A given sin and cos take ``sum(g * rotate(x))``
and ``sum(g * x)`` over the batch and heads they broadcast against (summed over q, k and v);
with position ids those are scattered back to the positions read. position_ids take none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution.kernels.rotary import rotate, tables
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_vjp


@register_vjp("fused_rotary_position_embedding")
def fused_rope_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                   cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    q = array(ctx, ins, 0, "q")
    time_major = bool(ctx.attrs.get("time_major", False))
    neox = bool(ctx.attrs.get("use_neox_rotary_style", True))
    sin, cos = tables(ctx, ins)

    def bshd(t: Array) -> Array:
        return t.swapaxes(0, 1) if time_major else t

    grads: list[LocalValue] = []
    g_sin: Array = np.zeros(np.broadcast_shapes(sin.shape, bshd(q).shape))
    g_cos: Array = np.zeros_like(g_sin)
    for i in range(3):
        x = ins[i] if len(ins) > i else None
        g = cts[i] if len(cts) > i else None
        if not isinstance(x, np.ndarray) or x.ndim != 4:
            grads.append(None)
            continue
        if not isinstance(g, np.ndarray) or g.shape != x.shape:
            g = np.zeros_like(x)
        xb, gb = bshd(x), bshd(g)
        grads.append(bshd(gb * cos - rotate(gb * sin, neox)).astype(x.dtype))
        g_sin = g_sin + gb * rotate(xb, neox)
        g_cos = g_cos + gb * xb
    table_grads: list[LocalValue] = [None, None]
    s_in = ins[3] if len(ins) > 3 else None
    ids = ins[5] if len(ins) > 5 else None
    if isinstance(s_in, np.ndarray) and s_in.ndim in (2, 4):
        for j, gt in enumerate((g_sin, g_cos)):
            flat = np.zeros((s_in.shape[-3] if s_in.ndim == 4 else s_in.shape[0], s_in.shape[-1]))
            if isinstance(ids, np.ndarray) and ids.ndim == 2:
                np.add.at(flat, ids, gt.sum(axis=2))
            else:
                flat += gt.sum(axis=(0, 2))
            table_grads[j] = flat.reshape(s_in.shape).astype(s_in.dtype)
    return (*grads, *table_grads, None)
