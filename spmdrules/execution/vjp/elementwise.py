"""Vector-Jacobian products of the elementwise family (:mod:`spmdrules.execution.kernels.elementwise`).

A unary op's cotangent is ``g * f'(x)`` entry by entry. A binary op's operand cotangent is the
output cotangent times the partial derivative, summed back over the axes the operand was broadcast
along (:func:`unbroadcast`): on a rank, an operand replicated while the output is sharded (a bias
added to sharded rows) thus gets the sum over its rows only, one piece of the pending sum that the
dual of its layout names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from spmdrules.execution.kernels.elementwise import gelu_derivative, sigmoid, unary_attr
from spmdrules.execution.local import (
    Array,
    LocalContext,
    LocalValue,
    array,
    cotangent,
    register_vjp,
)

#: dy/dx of a unary op from x, y = f(x) and the op's attributes
Derivative = Callable[[Array, Array, LocalContext], Array]


def _float_attr(ctx: LocalContext, name: str) -> float:
    return float(unary_attr(ctx, name))


def _gelu_derivative(x: Array, y: Array, ctx: LocalContext) -> Array:
    return gelu_derivative(x, bool(ctx.attrs.get("approximate", False)))


def _scale_derivative(x: Array, y: Array, ctx: LocalContext) -> Array:
    return np.full_like(x, _float_attr(ctx, "scale"))


def _silu_derivative(x: Array, y: Array, ctx: LocalContext) -> Array:
    s = sigmoid(x)
    return np.asarray(s * (1.0 + x * (1.0 - s)))


DERIVATIVES: Final[dict[str, Derivative]] = {
    "abs": lambda x, y, ctx: np.sign(x),
    "assign": lambda x, y, ctx: np.ones_like(x),
    "cos": lambda x, y, ctx: -np.sin(x),
    "elu": lambda x, y, ctx: np.where(x > 0, 1.0, y + _float_attr(ctx, "alpha")),
    "exp": lambda x, y, ctx: y,
    "expm1": lambda x, y, ctx: y + 1.0,
    "gelu": _gelu_derivative,
    "leaky_relu": lambda x, y, ctx: np.where(x > 0, 1.0, _float_attr(ctx, "negative_slope")),
    "log": lambda x, y, ctx: 1.0 / x,
    "log1p": lambda x, y, ctx: 1.0 / (1.0 + x),
    "pow": lambda x, y, ctx: _float_attr(ctx, "y") * np.power(x, _float_attr(ctx, "y") - 1.0),
    "reciprocal": lambda x, y, ctx: -y * y,
    "relu": lambda x, y, ctx: (x > 0).astype(x.dtype),
    "rsqrt": lambda x, y, ctx: -0.5 * y * y * y,
    "scale": _scale_derivative,
    "sigmoid": lambda x, y, ctx: y * (1.0 - y),
    "silu": _silu_derivative,
    "sin": lambda x, y, ctx: np.cos(x),
    "softsign": lambda x, y, ctx: 1.0 / np.square(1.0 + np.abs(x)),
    "sqrt": lambda x, y, ctx: 0.5 / y,
    "square": lambda x, y, ctx: 2.0 * x,
    "swish": _silu_derivative,
    "tanh": lambda x, y, ctx: 1.0 - y * y,
}


@register_vjp(*DERIVATIVES)
def unary_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
              cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    y = array(ctx, outs, 0, "out")
    g = cotangent(cts, 0, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.asarray(g * DERIVATIVES[ctx.op](x, y, ctx)).astype(x.dtype),)


def unbroadcast(g: Array, shape: tuple[int, ...]) -> Array:
    """``g`` summed over the axes an operand of ``shape`` was broadcast along."""
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(d for d, n in enumerate(shape) if n == 1 and g.shape[d] != 1)
    return np.asarray(g.sum(axis=axes, keepdims=True) if axes else g).reshape(shape)


#: (dz/dx, dz/dy) of a binary op from x, y (broadcast) and z
Partials = Callable[[Array, Array, Array], tuple[Array | float, Array | float]]

def _pow_partials(x: Array, y: Array, z: Array) -> tuple[Array, Array]:
    """torch's pow(Tensor, Tensor) derivatives: y x^(y-1), 0 where y is 0; z log x, 0 where x
    is 0 and y >= 0 (the limit, where log x alone gives -inf)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        dx = np.where(y == 0, 0.0, y * np.power(x.astype(z.dtype), y - 1.0))
        dy = np.where((x == 0) & (y >= 0), 0.0, z * np.log(x.astype(z.dtype)))
    return dx, dy


BINARY_PARTIALS: Final[dict[str, Partials]] = {
    "add": lambda x, y, z: (1.0, 1.0),
    "elementwise_add": lambda x, y, z: (1.0, 1.0),
    "subtract": lambda x, y, z: (1.0, -1.0),
    "multiply": lambda x, y, z: (y, x),
    "elementwise_mul": lambda x, y, z: (y, x),
    "divide": lambda x, y, z: (1.0 / y, -z / y),
    "elementwise_div": lambda x, y, z: (1.0 / y, -z / y),
    # ties send the cotangent to x, as numpy's and Paddle's kernels do
    "maximum": lambda x, y, z: ((x >= y).astype(z.dtype), (x < y).astype(z.dtype)),
    "minimum": lambda x, y, z: ((x <= y).astype(z.dtype), (x > y).astype(z.dtype)),
    "elementwise_pow": _pow_partials,
}


@register_vjp(*BINARY_PARTIALS)
def binary_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
               cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    y = array(ctx, ins, 1, "y")
    z = array(ctx, outs, 0, "out")
    g = cotangent(cts, 0, z)
    dx, dy = BINARY_PARTIALS[ctx.op](x, y, z)
    return (unbroadcast(np.asarray(g * dx), x.shape).astype(x.dtype),
            unbroadcast(np.asarray(g * dy), y.shape).astype(y.dtype))


@register_vjp("swiglu")
def swiglu_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
               cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """out = silu(gate) * value, with gate = x and value = y, or x's two halves without y."""
    x = array(ctx, ins, 0, "x")
    y = ins[1] if len(ins) > 1 else None
    out = array(ctx, outs, 0, "out")
    g = cotangent(cts, 0, out)
    halves = not isinstance(y, np.ndarray) or (y.ndim == 0 and out.shape != x.shape)
    gate, value = (x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]) if halves else (x, y)
    assert isinstance(value, np.ndarray)
    s = sigmoid(gate)
    d_gate = g * value * s * (1.0 + gate * (1.0 - s))
    d_value = g * gate * s
    if halves:
        dx = np.concatenate([d_gate, d_value], axis=-1).astype(x.dtype)
        return (dx, None if y is None else np.zeros_like(y))
    return (d_gate.astype(x.dtype), d_value.astype(value.dtype))
