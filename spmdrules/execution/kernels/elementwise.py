"""Local kernels of the elementwise family: every unary op, every broadcasting binary op, multiply,
swiglu, gelu and gelu's gradient.

An elementwise op computes each output entry from the entries at the same (broadcast) index, so a
rank computes its output block from its input blocks alone: the rules give every operand the same
mesh dims per broadcast axis and replicate size-1 dims, so the local blocks broadcast exactly as
the global arrays do. A pending sum (or avg) on one operand of ``multiply`` stays pending in the
product because the product is linear in that operand.

The rules take only ``x`` (and ``y``); the ops' other attributes (the rules' ``op_attrs``) are read
from the context, which a graph op fills; a direct caller that leaves one out gets its default.
The random ops (bernoulli, dropout, poisson) draw one seeded uniform per *global* element and
take their block's share (``shard_slices``), so every decomposition, and the serial op, samples
the same values.
"""

from __future__ import annotations

import importlib
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from spmdrules.core.dtypes import is_float
from spmdrules.core.errors import RuleArgumentError, UnsupportedError
from spmdrules.core.shards import shard_slices
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel

# The rules package is installed as spmdrules.rules from the top-level rules/ (package-dir), which
# mypy cannot follow; the op lists are plain tuples of names.
_RULES = importlib.import_module("spmdrules.rules.elementwise")
UNARY_OPS: Final[tuple[str, ...]] = tuple(_RULES.UNARY_OPS)
BINARY_OPS: Final[tuple[str, ...]] = tuple(_RULES.BINARY_OPS)

#: The unary ops' attributes with their defaults, as the rules declare them (``op_attrs``).
UNARY_DEFAULTS: Final[dict[str, dict[str, Any]]] = {
    op: {a.name: a.default for a in params} for op, params in _RULES.UNARY_OP_ATTRS.items()
}

UnaryFn = Callable[[Array, LocalContext], Array]
BinaryFn = Callable[[Array, Array], Array]


def unary_attr(ctx: LocalContext, name: str) -> Any:
    """The op attribute ``name``: the caller's value if given, else the documented default."""
    if name in ctx.attrs:
        return ctx.attrs[name]
    return UNARY_DEFAULTS[ctx.op][name]


def _scalar(fn: Callable[[float], float]) -> Callable[[Array], Array]:
    """Apply a scalar ``math`` function entrywise (numpy has no erf, lgamma or inverse erf)."""
    ufunc = np.frompyfunc(fn, 1, 1)

    def apply(x: Array) -> Array:
        out = np.asarray(ufunc(x), dtype=np.float64)
        return out.astype(x.dtype) if is_float(x.dtype) else out

    return apply


_erf = _scalar(math.erf)
_lgamma = _scalar(math.lgamma)
# erfinv(y) = Phi^-1((y + 1) / 2) / sqrt(2); the stdlib's normal quantile is accurate to 1 ulp.
_NORMAL: Final = statistics.NormalDist()


def _erfinv_scalar(y: float) -> float:
    if y <= -1.0 or y >= 1.0:
        return -math.inf if y == -1.0 else (math.inf if y == 1.0 else math.nan)
    return _NORMAL.inv_cdf((y + 1.0) / 2.0) / math.sqrt(2.0)


_erfinv = _scalar(_erfinv_scalar)


def digamma(x: Array) -> Array:
    """psi(x): reflection below 1/2, the recurrence psi(x) = psi(x+1) - 1/x up to 10, then the
    asymptotic series (numpy has no digamma and scipy is not a dependency). Poles give nan."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros_like(x)
    reflect = x < 0.5
    z = np.where(reflect, 1.0 - x, x)
    while True:
        small = z < 10.0
        if not small.any():
            break
        out -= np.where(small, 1.0 / z, 0.0)
        z = np.where(small, z + 1.0, z)
    f = 1.0 / (z * z)
    series = f * (1 / 12 - f * (1 / 120 - f * (1 / 252 - f * (1 / 240 - f * (1 / 132 - f * 691 / 32760)))))
    out += np.log(z) - 0.5 / z - series
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(reflect, out - math.pi / np.tan(math.pi * x), out)
    return np.where((x <= 0) & (x == np.floor(x)), np.nan, out)


def sigmoid(x: Array) -> Array:
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * x)))  # overflow-free logistic


def _softplus(x: Array, beta: float, threshold: float) -> Array:
    """Paddle's softplus: x where beta*x > threshold (linear regime), else log1p(exp(beta*x))/beta."""
    bx = beta * x
    with np.errstate(over="ignore"):
        return np.where(bx > threshold, x, np.log1p(np.exp(np.minimum(bx, threshold))) / beta)


def _paddle_round(x: Array, decimals: int) -> Array:
    """std::round: halves away from zero (numpy rounds them to even)."""
    if not is_float(x.dtype):
        return x.copy()
    scale = 10.0 ** decimals
    y = x * scale if decimals else x
    # floor(|y| + 0.5) would round 0.49999999999999994 up; the fraction |y| - floor(|y|) is exact.
    a = np.abs(y)
    whole = np.floor(a)
    r = np.copysign(whole + (a - whole >= 0.5), y)
    return np.asarray(r / scale if decimals else r)


def _global_uniform(ctx: LocalContext, x: Array, seed: int) -> Array:
    """This block's share of one seeded uniform draw per global element of x, so that every
    decomposition samples the same value for the same element."""
    shape = tuple(ctx.input_shapes[0])
    u = np.random.default_rng(seed).random(shape)
    return u[shard_slices(shape, ctx.input_attrs[0], ctx.coord)].reshape(x.shape)


def _dropout(x: Array, ctx: LocalContext) -> Array:
    p = float(unary_attr(ctx, "p"))
    mode = unary_attr(ctx, "mode")
    if mode not in ("upscale_in_train", "downgrade_in_infer"):
        raise RuleArgumentError(
            f"dropout: mode {mode!r} is not a dropout mode; use 'upscale_in_train' or "
            "'downgrade_in_infer'"
        )
    if unary_attr(ctx, "is_test"):
        return x.copy() if mode == "upscale_in_train" else x * (1.0 - p)
    keep = _global_uniform(ctx, x, int(unary_attr(ctx, "seed"))) >= p
    if mode == "upscale_in_train":
        return np.where(keep, x / (1.0 - p), 0.0).astype(x.dtype) if p < 1 else np.zeros_like(x)
    return np.where(keep, x, 0.0).astype(x.dtype)


def _poisson(x: Array, ctx: LocalContext) -> Array:
    """A Poisson(x) sample per element by inverting its CDF at the element's global uniform."""
    u = _global_uniform(ctx, x, int(unary_attr(ctx, "seed")))
    lam = np.asarray(x, dtype=np.float64)
    k = np.zeros_like(lam)
    pmf = np.exp(-lam)
    cdf = pmf.copy()
    todo = u > cdf
    while todo.any():
        k = np.where(todo, k + 1, k)
        pmf = np.where(todo, pmf * lam / np.maximum(k, 1), pmf)
        cdf = np.where(todo, cdf + pmf, cdf)
        # stop where the tail underflows: the CDF can no longer move past u
        todo = todo & (u > cdf) & (pmf > 0)
    return k.astype(x.dtype)


def _logit(x: Array, eps: float) -> Array:
    z = np.clip(x, eps, 1.0 - eps) if eps > 0 else x
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(z / (1.0 - z)))


def _gelu(x: Array, approximate: bool) -> Array:
    if approximate:
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
        return np.asarray(0.5 * x * (1.0 + np.tanh(inner)))
    return np.asarray(0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))))


def gelu_derivative(x: Array, approximate: bool) -> Array:
    """d gelu / dx."""
    if approximate:
        c = math.sqrt(2.0 / math.pi)
        t = np.tanh(c * (x + 0.044715 * x**3))
        return np.asarray(0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x**2))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return np.asarray(0.5 * (1.0 + _erf(x / math.sqrt(2.0))) + x * pdf)


def _f(fn: Callable[[Array], Any]) -> UnaryFn:
    """A unary op without attributes."""
    return lambda x, ctx: np.asarray(fn(x))


def _clip(x: Array, ctx: LocalContext) -> Array:
    return np.asarray(np.clip(x, unary_attr(ctx, "min"), unary_attr(ctx, "max")).astype(x.dtype))


def _scale(x: Array, ctx: LocalContext) -> Array:
    s, b = unary_attr(ctx, "scale"), unary_attr(ctx, "bias")
    if x.dtype.kind in "iu" and float(s).is_integer() and float(b).is_integer():
        # integral factors scale an integer tensor in its own dtype (Paddle's kernel computes in
        # T): through float64, an int64 above 2**53 would lose its low bits
        s, b = (np.asarray(int(v)).astype(x.dtype) for v in (s, b))
    out = s * x + b if unary_attr(ctx, "bias_after_scale") else s * (x + b)
    return np.asarray(out).astype(x.dtype)


def _pow(x: Array, ctx: LocalContext) -> Array:
    """x ** y, exact for an integer x and an int y (y is a "number": an int stays an int)."""
    y = unary_attr(ctx, "y")
    if x.dtype.kind in "iub" and isinstance(y, int) and y < 0:
        raise UnsupportedError(f"pow: {x.dtype} x to the negative power y={y} is no integer; "
                               "cast x to a float dtype first")
    return np.asarray(np.power(x, y)).astype(x.dtype)


_UNARY: Final[dict[str, UnaryFn]] = {
    "abs": _f(np.abs),
    "acos": _f(np.arccos),
    "acosh": _f(np.arccosh),
    "asin": _f(np.arcsin),
    "asinh": _f(np.arcsinh),
    "assign": _f(np.copy),
    "atan": _f(np.arctan),
    "atanh": _f(np.arctanh),
    "bernoulli": lambda x, ctx: (
        _global_uniform(ctx, x, int(unary_attr(ctx, "seed"))) < x
    ).astype(x.dtype),
    "bitwise_not": _f(np.invert),
    "ceil": _f(np.ceil),
    "celu": lambda x, ctx: np.asarray(
        np.maximum(x, 0) + np.minimum(0, unary_attr(ctx, "alpha") * np.expm1(x / unary_attr(ctx, "alpha")))
    ),
    "clip": _clip,
    "conj": _f(np.conj),
    "cos": _f(np.cos),
    "cosh": _f(np.cosh),
    "digamma": _f(digamma),
    "dropout": _dropout,
    "elementwise_unary": _f(np.copy),  # stands for any unary op: computed as the identity
    "elu": lambda x, ctx: np.where(x > 0, x, unary_attr(ctx, "alpha") * np.expm1(x)),
    "erf": _f(_erf),
    "erfinv": _f(_erfinv),
    "exp": _f(np.exp),
    "expm1": _f(np.expm1),
    "fill": lambda x, ctx: np.full_like(x, unary_attr(ctx, "value")),
    "floor": _f(np.floor),
    "hardshrink": lambda x, ctx: np.where(np.abs(x) > unary_attr(ctx, "threshold"), x, 0).astype(
        x.dtype
    ),
    "hardsigmoid": lambda x, ctx: np.clip(
        unary_attr(ctx, "slope") * x + unary_attr(ctx, "offset"), 0.0, 1.0
    ).astype(x.dtype),
    "hardswish": lambda x, ctx: np.asarray(x * np.clip(x + 3.0, 0.0, 6.0) / 6.0),
    "hardtanh": lambda x, ctx: np.clip(x, unary_attr(ctx, "t_min"), unary_attr(ctx, "t_max")).astype(
        x.dtype
    ),
    "leaky_relu": lambda x, ctx: np.where(x > 0, x, unary_attr(ctx, "negative_slope") * x),
    "lgamma": _f(_lgamma),
    "log": _f(np.log),
    "log10": _f(np.log10),
    "log1p": _f(np.log1p),
    "log2": _f(np.log2),
    "logical_not": _f(np.logical_not),
    "logit": lambda x, ctx: _logit(x, float(unary_attr(ctx, "eps"))),
    "logsigmoid": _f(lambda x: -np.logaddexp(0.0, -x)),
    "mish": lambda x, ctx: np.asarray(x * np.tanh(_softplus(x, 1.0, unary_attr(ctx, "lambda")))),
    "poisson": _poisson,
    "pow": _pow,
    "reciprocal": _f(np.reciprocal),
    "relu": _f(lambda x: np.maximum(x, 0).astype(x.dtype)),
    "relu6": _f(lambda x: np.clip(x, 0, 6).astype(x.dtype)),
    "round": lambda x, ctx: _paddle_round(x, int(unary_attr(ctx, "decimals"))),
    "rsqrt": _f(lambda x: 1.0 / np.sqrt(x)),
    "scale": _scale,
    "selu": lambda x, ctx: np.asarray(
        unary_attr(ctx, "scale") * np.where(x > 0, x, unary_attr(ctx, "alpha") * np.expm1(x))
    ),
    "sigmoid": _f(sigmoid),
    "sign": _f(np.sign),
    "silu": _f(lambda x: x * sigmoid(x)),
    "sin": _f(np.sin),
    "sinh": _f(np.sinh),
    "softplus": lambda x, ctx: _softplus(x, unary_attr(ctx, "beta"), unary_attr(ctx, "threshold")),
    "softshrink": lambda x, ctx: np.where(
        x > unary_attr(ctx, "threshold"),
        x - unary_attr(ctx, "threshold"),
        np.where(x < -unary_attr(ctx, "threshold"), x + unary_attr(ctx, "threshold"), 0.0),
    ).astype(x.dtype),
    "softsign": _f(lambda x: x / (1.0 + np.abs(x))),
    "sqrt": _f(np.sqrt),
    "square": _f(np.square),
    "stanh": lambda x, ctx: np.asarray(
        unary_attr(ctx, "scale_b") * np.tanh(unary_attr(ctx, "scale_a") * x)
    ),
    "swish": _f(lambda x: x * sigmoid(x)),
    "tan": _f(np.tan),
    "tanh": _f(np.tanh),
    "tanh_shrink": _f(lambda x: x - np.tanh(x)),
    "thresholded_relu": lambda x, ctx: np.where(
        x > unary_attr(ctx, "threshold"), x, unary_attr(ctx, "value")
    ).astype(x.dtype),
    "trunc": _f(np.trunc),
}


# ---- binary ops ----------------------------------------------------------------------------------
def _int_trunc_divide(x: Array, y: Array) -> Array:
    """C++ integer division: the quotient truncated toward zero (numpy's // floors)."""
    q = np.floor_divide(x, y)
    return np.asarray(q + ((q < 0) & (q * y != x)))


def _divide(x: Array, y: Array) -> Array:
    if np.result_type(x, y).kind in "iub":
        return _int_trunc_divide(x, y)
    return np.asarray(np.true_divide(x, y))


def _trunc_divide(x: Array, y: Array) -> Array:
    if np.result_type(x, y).kind in "iub":
        return _int_trunc_divide(x, y)
    return np.asarray(np.trunc(x / y))


def _floor_divide(x: Array, y: Array) -> Array:
    if np.result_type(x, y).kind in "iub":
        return np.asarray(np.floor_divide(x, y))
    return np.asarray(np.floor(x / y))


def _remainder(x: Array, y: Array) -> Array:
    """Paddle's remainder takes the divisor's sign: fmod, moved by y where the signs differ."""
    if np.result_type(x, y).kind in "iub":
        return np.asarray(np.remainder(x, y))
    r = np.fmod(x, y)
    return np.asarray(np.where((r != 0) & ((r < 0) != (y < 0)), r + y, r))


_BINARY: Final[dict[str, BinaryFn]] = {
    "add": np.add,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "divide": _divide,
    "elementwise_add": np.add,
    "elementwise_binary": np.add,  # stands for any broadcasting binary op: computed as add
    "elementwise_div": _divide,
    "elementwise_mul": np.multiply,
    "elementwise_pow": np.power,
    "equal": np.equal,
    "floor_divide": _floor_divide,
    "fmax": np.fmax,
    "fmin": np.fmin,
    "greater_equal": np.greater_equal,
    "greater_than": np.greater,
    "heaviside": np.heaviside,
    "less_equal": np.less_equal,
    "less_than": np.less,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "multiply": np.multiply,
    "not_equal": np.not_equal,
    "remainder": _remainder,
    "subtract": np.subtract,
    "trunc_divide": _trunc_divide,
}

assert set(_UNARY) == set(UNARY_OPS), set(_UNARY) ^ set(UNARY_OPS)
assert set(_BINARY) == {*BINARY_OPS, "multiply"}, set(_BINARY) ^ {*BINARY_OPS, "multiply"}


# ---- the kernels ---------------------------------------------------------------------------------
@register_kernel(*UNARY_OPS)
def unary_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    fn = _UNARY.get(ctx.op)
    if fn is None:
        raise UnsupportedError(f"{ctx.op}: not an elementwise unary op of this kernel")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return (np.asarray(fn(x, ctx)),)


@register_kernel(*BINARY_OPS, "multiply")
def binary_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """Local blocks broadcast like the global operands (same mesh dims per axis, size-1 dims
    replicated). For multiply, a pending sum on one operand stays pending: x_i * y sums to x * y."""
    x = array(ctx, blocks, 0, "x")
    y = array(ctx, blocks, 1, "y")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return (np.asarray(_BINARY[ctx.op](x, y)),)


@register_kernel("swiglu")
def swiglu_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """silu(x) * y; without y (or with a 0-d y standing for none, as Paddle's fused attention
    passes it, recognised by the halved output shape) x's last dim holds [gate | value], which
    the rule keeps whole on every rank."""
    x = array(ctx, blocks, 0, "x")
    y = blocks[1] if len(blocks) > 1 else None
    if y is not None and not isinstance(y, np.ndarray):
        raise RuleArgumentError(f"swiglu: 'y' must be one local block or None, got {type(y).__name__}")
    x_shape = tuple(ctx.input_shapes[0])
    halved = (*x_shape[:-1], x_shape[-1] // 2) if x_shape else ()
    no_y = y is None or (
        y.ndim == 0 and tuple(ctx.output_shapes[0]) == halved and halved != x_shape
    )
    with np.errstate(over="ignore"):
        if not no_y:
            assert y is not None
            return (np.asarray(x * sigmoid(x) * y),)
        if x.ndim == 0 or x.shape[-1] % 2:
            raise RuleArgumentError(
                f"swiglu: without 'y' the local block of 'x' must hold x's whole last dim (an even "
                f"size), got a block of shape {list(x.shape)}; replicate x's last dim"
            )
        h = x.shape[-1] // 2
        gate, value = x[..., :h], x[..., h:]
        return (np.asarray(gate * sigmoid(gate) * value),)


@register_kernel("gelu")
def gelu_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """0.5 x (1 + erf(x / sqrt 2)); approximate: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    x = array(ctx, blocks, 0, "x")
    return (_gelu(x, bool(ctx.attrs.get("approximate", False))),)


@register_kernel("gelu_grad")
def gelu_grad_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """x_grad = gelu'(x) * out_grad, entrywise (the rule gives x and out_grad one layout)."""
    x = array(ctx, blocks, 0, "x")
    g = array(ctx, blocks, 1, "out_grad")
    return (np.asarray(gelu_derivative(x, bool(ctx.attrs.get("approximate", False))) * g),)


__all__ = [
    "UNARY_DEFAULTS",
    "binary_kernel",
    "digamma",
    "gelu_derivative",
    "sigmoid",
    "unary_attr",
    "unary_kernel",
]
