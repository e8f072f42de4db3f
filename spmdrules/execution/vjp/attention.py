"""Vector-Jacobian product of flash_attention (:mod:`spmdrules.execution.kernels.attention`).

With ``S`` the masked, scaled scores, ``P = softmax(S)`` and ``out = P v``: the cotangents of
out, softmax (P) and softmax_lse flow into ``dS = P * (dP - rowsum(dP * P)) + P * g_lse`` with
``dP = g_out v^T + g_softmax``; then ``dq = dS k / sqrt(d)``, ``dk = dS^T q / sqrt(d)`` and
``dv = P^T g_out``, summed over the q heads of each group; the mask's is ``dS`` summed over the
dims it broadcasts. fixed_seed_offset takes none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from spmdrules.execution.kernels.attention import scores, softmax_rows
from spmdrules.execution.local import (
    Array,
    LocalContext,
    LocalValue,
    array,
    cotangent,
    register_vjp,
)


def _ungroup(g: Array, heads: int) -> Array:
    """A grouped tensor's cotangent ([b, s, h, d]) summed back onto its ``heads`` heads."""
    b, s, h, d = g.shape
    return g if heads == h else g.reshape(b, s, heads, h // max(heads, 1), d).sum(axis=3)


@register_vjp("flash_attention")
def flash_attention_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                        cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    q, kg, vg, s = scores(ctx, ins)
    k, v = array(ctx, ins, 1, "k"), array(ctx, ins, 2, "v")
    p, _ = softmax_rows(s)
    out = array(ctx, outs, 0, "out")
    g = cotangent(cts, 0, out)
    gp = cotangent(cts, 1, array(ctx, outs, 1, "softmax"))
    gl = cotangent(cts, 2, array(ctx, outs, 2, "softmax_lse"))
    dp = np.einsum("bqhd,bkhd->bhqk", g, vg) + gp
    ds = p * (dp - np.sum(dp * p, axis=-1, keepdims=True)) + p * gl[..., None]
    scale = 1.0 / math.sqrt(q.shape[3])
    dq = np.einsum("bhqk,bkhd->bqhd", ds, kg) * scale
    dk = _ungroup(np.einsum("bhqk,bqhd->bkhd", ds, q) * scale, k.shape[2])
    dv = _ungroup(np.einsum("bhqk,bqhd->bkhd", p, g), v.shape[2])
    mask = ins[4] if len(ins) > 4 else None
    dmask: LocalValue = None
    if isinstance(mask, np.ndarray) and mask.ndim == 4:
        axes = tuple(i for i in (0, 1) if mask.shape[i] == 1 and ds.shape[i] != 1)
        dmask = np.sum(ds, axis=axes, keepdims=True).astype(mask.dtype)
    return (dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, dmask)
