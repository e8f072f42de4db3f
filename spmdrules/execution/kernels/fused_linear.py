"""Local kernels of linear_v2 (``input @ weight + bias``) and fused_gemm_epilogue
(``act(x' @ y' + bias)``).

Every rank multiplies its blocks. Where fused_gemm_epilogue's rule leaves k sharded, the product
block and the bias block are both pieces of the pending sum the rule marks on the output (the
bias arrives as a pending sum too), and no activation follows (the rule gathers k for one). The
0-d reserve output is zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.contraction import swap_last2
from spmdrules.execution.kernels.elementwise import gelu_derivative
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


def gelu(x: Array) -> Array:
    """The tanh approximation (cuBLASLt's GELU epilogue)."""
    c = math.sqrt(2.0 / math.pi)
    return np.asarray(0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x**3))))


def activate(name: str, pre: Array) -> Array:
    if name == "none":
        return pre
    if name == "relu":
        return np.maximum(pre, 0.0)
    if name == "gelu":
        return gelu(pre)
    raise RuleArgumentError(f"fused_gemm_epilogue: activation {name!r} is not none, relu or gelu")


def activation_derivative(name: str, pre: Array) -> Array:
    if name == "relu":
        return (pre > 0).astype(pre.dtype)
    if name == "gelu":
        return gelu_derivative(pre, True)
    return np.ones_like(pre)


@register_kernel("linear_v2")
def linear_v2(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, w = array(ctx, blocks, 0, "input"), array(ctx, blocks, 1, "weight")
    w = swap_last2(w, bool(ctx.attrs.get("transpose_weight", False)))
    out = np.matmul(x, w)
    if blocks[2] is not None:
        out = out + array(ctx, blocks, 2, "bias")
    return (np.asarray(out), np.zeros((), dtype=out.dtype))


def gemm_pre(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[Array, Array, Array]:
    """(x', y', x' @ y' + bias) of this rank's blocks."""
    x = swap_last2(array(ctx, blocks, 0, "x"), bool(ctx.attrs.get("trans_x", False)))
    y = swap_last2(array(ctx, blocks, 1, "y"), bool(ctx.attrs.get("trans_y", False)))
    return x, y, np.asarray(np.matmul(x, y) + array(ctx, blocks, 2, "bias"))


@register_kernel("fused_gemm_epilogue")
def fused_gemm_epilogue(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    _, _, pre = gemm_pre(ctx, blocks)
    out = activate(str(ctx.attrs.get("activation", "none")), pre)
    return (out, np.zeros((), dtype=out.dtype))


def rows(a: Array) -> Array:
    """``a`` as a matrix of rows: every leading dim flattened."""
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])


@register_kernel("fused_linear_param_grad_add")
def fused_linear_param_grad_add(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """dweight_out = dweight + x^T @ dout over every row, dbias_out = dbias + the rows' sum of
    dout (a 0-d zero without has_bias). Rows cut across ranks give pieces of the pending sums the
    rule marks, and the accumulators arrive in that layout."""
    x, dout = array(ctx, blocks, 0, "x"), array(ctx, blocks, 1, "dout")
    w = np.matmul(rows(x).T, rows(dout))
    if blocks[2] is not None:
        w = w + array(ctx, blocks, 2, "dweight")
    if not bool(ctx.attrs.get("has_bias", True)):
        return (np.asarray(w), np.zeros((), dtype=w.dtype))
    b = rows(dout).sum(axis=0)
    if blocks[3] is not None:
        b = b + array(ctx, blocks, 3, "dbias")
    return (np.asarray(w), np.asarray(b))
