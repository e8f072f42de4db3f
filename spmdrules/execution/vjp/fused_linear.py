"""Vector-Jacobian products of linear_v2 and fused_gemm_epilogue
(:mod:`spmdrules.execution.kernels.fused_linear`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.engine.contraction import swap_last2
from spmdrules.execution.kernels.fused_linear import activation_derivative, gemm_pre, rows
from spmdrules.execution.local import (
    Array,
    LocalContext,
    LocalValue,
    array,
    cotangent,
    register_vjp,
)


def _product_grads(x: Array, y: Array, g: Array) -> tuple[Array, Array, Array]:
    """d/dx, d/dy, d/dbias of ``sum(g * (x @ y + bias))`` for an n-D x and a 2-D y."""
    k, n = y.shape
    dx = np.matmul(g, y.T)
    dy = np.matmul(x.reshape(-1, k).T, g.reshape(-1, n))
    return np.asarray(dx), np.asarray(dy), np.asarray(g.reshape(-1, n).sum(axis=0))


@register_vjp("linear_v2")
def linear_v2_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                  cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, w = array(ctx, ins, 0, "input"), array(ctx, ins, 1, "weight")
    flag = bool(ctx.attrs.get("transpose_weight", False))
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    dx, dw, db = _product_grads(x, swap_last2(w, flag), g)
    return (dx, swap_last2(dw, flag), None if ins[2] is None else db)


@register_vjp("fused_gemm_epilogue")
def fused_gemm_epilogue_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                            cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, y, pre = gemm_pre(ctx, ins)
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    g = g * activation_derivative(str(ctx.attrs.get("activation", "none")), pre)
    dx, dy, db = _product_grads(x, y, g)
    return (swap_last2(dx, bool(ctx.attrs.get("trans_x", False))),
            swap_last2(dy, bool(ctx.attrs.get("trans_y", False))), db)


@register_vjp("fused_linear_param_grad_add")
def fused_linear_param_grad_add_vjp(ctx: LocalContext, ins: Sequence[LocalValue],
                                    outs: Sequence[LocalValue], cts: Sequence[LocalValue]
                                    ) -> tuple[LocalValue, ...]:
    x, dout = array(ctx, ins, 0, "x"), array(ctx, ins, 1, "dout")
    gw = cotangent(cts, 0, array(ctx, outs, 0, "dweight_out"))
    has_bias = bool(ctx.attrs.get("has_bias", True))
    gb = cotangent(cts, 1, array(ctx, outs, 1, "dbias_out")) if has_bias else None
    dx = np.matmul(rows(dout), gw.T).reshape(x.shape)
    dd = np.matmul(rows(x), gw)
    if gb is not None:
        dd = dd + gb
    return (dx, dd.reshape(dout.shape), None if ins[2] is None else gw,
            None if ins[3] is None or gb is None else gb)
