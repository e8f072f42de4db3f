"""The local kernels of the elementwise ops (unary, binary, random, gelu, swiglu)
(spmdrules/execution/kernels/elementwise.py), proven by execution with the harness in
tests/support/kernel_harness.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import numpy as np
import pytest
from kernel_harness import (
    REDUCTIONS,
    RNG,
    Array,
    _normal,
    _open_unit,
    _positive,
    _prob,
    close,
    execute,
    layout,
    mesh,
    rep,
    serial,
)

import spmdrules as sr
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import UnsupportedError
from spmdrules.core.spec import TensorSpec
from spmdrules.execution.kernels.elementwise import BINARY_OPS, UNARY_OPS, digamma
from spmdrules.execution.local import list_kernels


def _sig(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


def _half_up(v: float) -> float:
    return float(Decimal(v).quantize(Decimal(1), rounding=ROUND_HALF_UP))


SELU_SCALE, SELU_ALPHA = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717
UNARY_REF: dict[str, tuple[Callable[..., Array], Callable[[Any], Any]]] = {
    "abs": (_normal, abs),
    "acos": (_open_unit, math.acos),
    "acosh": (lambda *s: 1 + _positive(*s), math.acosh),
    "asin": (_open_unit, math.asin),
    "asinh": (_normal, math.asinh),
    "assign": (_normal, lambda v: v),
    "atan": (_normal, math.atan),
    "atanh": (_open_unit, math.atanh),
    "bitwise_not": (lambda *s: RNG.integers(-50, 50, s), lambda v: ~int(v)),
    "ceil": (_normal, math.ceil),
    "celu": (_normal, lambda v: max(0.0, v) + min(0.0, math.exp(v) - 1.0)),
    "clip": (_normal, lambda v: v),
    "conj": (_normal, lambda v: v),
    "cos": (_normal, math.cos),
    "cosh": (_normal, math.cosh),
    "elementwise_unary": (_normal, lambda v: v),
    "elu": (_normal, lambda v: v if v > 0 else math.exp(v) - 1.0),
    "erf": (_normal, math.erf),
    "exp": (_normal, math.exp),
    "expm1": (_normal, math.expm1),
    "fill": (_normal, lambda v: 0.0),
    "floor": (_normal, math.floor),
    "hardshrink": (_normal, lambda v: v if abs(v) > 0.5 else 0.0),
    "hardsigmoid": (_normal, lambda v: min(max(0.2 * v + 0.5, 0.0), 1.0)),
    "hardswish": (_normal, lambda v: v * min(max(v + 3.0, 0.0), 6.0) / 6.0),
    "hardtanh": (lambda *s: _normal(*s) * 10, lambda v: min(max(v, 0.0), 24.0)),
    "leaky_relu": (_normal, lambda v: v if v > 0 else 0.02 * v),
    "lgamma": (_positive, math.lgamma),
    "log": (_positive, math.log),
    "log10": (_positive, math.log10),
    "log1p": (_positive, math.log1p),
    "log2": (_positive, math.log2),
    "logical_not": (lambda *s: RNG.integers(0, 2, s) > 0, lambda v: not v),
    "logit": (
        lambda *s: np.concatenate([_prob(*s).ravel()[:-2], [0.0, 1.0]]).reshape(s),
        lambda v: math.log(min(max(v, 1e-6), 1 - 1e-6) / (1 - min(max(v, 1e-6), 1 - 1e-6))),
    ),
    "logsigmoid": (_normal, lambda v: math.log(_sig(v))),
    "mish": (_normal, lambda v: v * math.tanh(math.log1p(math.exp(v)))),
    "pow": (_normal, lambda v: v),
    "reciprocal": (_normal, lambda v: 1.0 / v),
    "relu": (_normal, lambda v: max(v, 0.0)),
    "relu6": (lambda *s: _normal(*s) * 4, lambda v: min(max(v, 0.0), 6.0)),
    "round": (_normal, _half_up),
    "rsqrt": (_positive, lambda v: 1.0 / math.sqrt(v)),
    "scale": (_normal, lambda v: v),
    "selu": (_normal, lambda v: SELU_SCALE * (v if v > 0 else SELU_ALPHA * (math.exp(v) - 1.0))),
    "sigmoid": (_normal, _sig),
    "sign": (_normal, lambda v: float((v > 0) - (v < 0))),
    "silu": (_normal, lambda v: v * _sig(v)),
    "sin": (_normal, math.sin),
    "sinh": (_normal, math.sinh),
    "softplus": (lambda *s: _normal(*s) * 8, lambda v: v if v > 20 else math.log1p(math.exp(v))),
    "softshrink": (_normal, lambda v: v - 0.5 if v > 0.5 else (v + 0.5 if v < -0.5 else 0.0)),
    "softsign": (_normal, lambda v: v / (1 + abs(v))),
    "sqrt": (_positive, math.sqrt),
    "square": (_normal, lambda v: v * v),
    "stanh": (_normal, lambda v: 1.7159 * math.tanh(0.67 * v)),
    "swish": (_normal, lambda v: v * _sig(v)),
    "tan": (_normal, math.tan),
    "tanh": (_normal, math.tanh),
    "tanh_shrink": (_normal, lambda v: v - math.tanh(v)),
    "thresholded_relu": (_normal, lambda v: v if v > 1.0 else 0.0),
    "trunc": (_normal, math.trunc),
}
# Checked by their own properties below: inverse functions, special values, sampling.
SPECIAL_UNARY = {"bernoulli", "digamma", "dropout", "erfinv", "poisson"}


def _apply(fn: Callable[[Any], Any], x: Array) -> Array:
    out = np.array([fn(v.item()) for v in x.ravel()]).reshape(x.shape)
    return out.astype(x.dtype) if x.dtype.kind in "biu" else out.astype(np.float64)


def test_every_compute_op_has_a_kernel() -> None:
    names = set(list_kernels())
    want = {
        *UNARY_OPS,
        *BINARY_OPS,
        "multiply",
        "swiglu",
        "gelu",
        "gelu_grad",
        "matmul",
        "matmul_v2",
        "bmm",
        "bmm_grad",
        "einsum",
        "einsum_grad",
        *REDUCTIONS,
        "reduce_base",
        "p_norm",
        "mean_all",
        "mean_all_grad",
        "argmax",
        "argmin",
    }
    assert want <= names, want - names
    assert set(UNARY_REF) | SPECIAL_UNARY == set(UNARY_OPS)


@pytest.mark.parametrize("op", sorted(UNARY_REF))
def test_unary_serial(op: str) -> None:
    gen, ref = UNARY_REF[op]
    x = gen(3, 5)
    (got,) = serial(op, [x], {}, [x.shape])
    close(got, _apply(ref, x))


UNARY_ATTRS: list[tuple[str, dict[str, Any], Callable[[float], float]]] = [
    ("clip", {"min": -0.5, "max": 0.25}, lambda v: min(max(v, -0.5), 0.25)),
    ("pow", {"y": 3.0}, lambda v: v**3),
    ("scale", {"scale": 2.0, "bias": 1.5}, lambda v: 2 * v + 1.5),
    ("scale", {"scale": 2.0, "bias": 1.5, "bias_after_scale": False}, lambda v: 2 * (v + 1.5)),
    ("leaky_relu", {"negative_slope": 0.3}, lambda v: v if v > 0 else 0.3 * v),
    ("hardtanh", {"t_min": -1.0, "t_max": 1.0}, lambda v: min(max(v, -1.0), 1.0)),
    ("elu", {"alpha": 0.5}, lambda v: v if v > 0 else 0.5 * (math.exp(v) - 1)),
    (
        "softplus",
        {"beta": 2.0, "threshold": 3.0},
        lambda v: v if 2 * v > 3 else math.log1p(math.exp(2 * v)) / 2,
    ),
    ("fill", {"value": 7.0}, lambda v: 7.0),
    (
        "round",
        {"decimals": 2},
        lambda v: float(Decimal(v).quantize(Decimal("0.01"), ROUND_HALF_UP)),
    ),
]


@pytest.mark.parametrize(
    ("op", "attrs", "ref"), UNARY_ATTRS, ids=[f"{o}-{a}" for o, a, _ in UNARY_ATTRS]
)
def test_unary_attributes_from_context(
    op: str, attrs: dict[str, Any], ref: Callable[[float], float]
) -> None:
    x = _normal(4, 3)
    (got,) = serial(op, [x], attrs, [x.shape])
    close(got, _apply(ref, x))


def test_round_is_half_away_from_zero() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999999999999994, 3.0])
    (got,) = serial("round", [x], {}, [x.shape])
    assert got.tolist() == [1.0, 2.0, 3.0, -1.0, -3.0, 0.0, 3.0]


def test_digamma_values_recurrence_and_reflection() -> None:
    euler = 0.5772156649015329
    got = digamma(np.array([1.0, 0.5, 2.0, 0.0, -3.0]))
    close(got[:3], [-euler, -euler - 2 * math.log(2), 1 - euler], 1e-14)
    assert np.isnan(got[3:]).all()  # poles
    x = np.concatenate([RNG.uniform(0.05, 30, 40), RNG.uniform(-6.9, -0.1, 20)])
    x = x[np.abs(x - np.round(x)) > 1e-3]
    close(digamma(x + 1), digamma(x) + 1 / x, 1e-11)
    (got_k,) = serial("digamma", [x], {}, [x.shape])
    close(got_k, digamma(x))


def test_erfinv_inverts_erf() -> None:
    y = _open_unit(50)
    (got,) = serial("erfinv", [y], {}, [y.shape])
    close(np.array([math.erf(v) for v in got]), y, 1e-14)
    (edge,) = serial("erfinv", [np.array([0.0, 1.0, -1.0])], {}, [(3,)])
    assert edge.tolist() == [0.0, math.inf, -math.inf]


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_and_its_gradient(approximate: bool) -> None:
    x = _normal(4, 6)
    c = math.sqrt(2 / math.pi)
    if approximate:

        def ref(v: float) -> float:
            return 0.5 * v * (1 + math.tanh(c * (v + 0.044715 * v**3)))
    else:

        def ref(v: float) -> float:
            return 0.5 * v * (1 + math.erf(v / math.sqrt(2)))

    (got,) = serial("gelu", [x], {"approximate": approximate}, [x.shape])
    close(got, _apply(ref, x))
    g = _normal(4, 6)
    (dx,) = serial("gelu_grad", [x, g], {"approximate": approximate}, [x.shape])
    h = 1e-6
    numeric = (_apply(ref, x + h) - _apply(ref, x - h)) / (2 * h)
    close(dx, numeric * g, 1e-7)
    m = mesh(2, 2)
    (sharded,) = execute(
        "gelu_grad",
        [x, g],
        [rep(m, 2), DistAttr(m, [1, 0])],
        {"approximate": approximate},
        [x.shape],
    )
    close(sharded, dx)


@pytest.mark.parametrize("op", ["bernoulli", "dropout", "poisson"])
def test_random_ops_draw_per_global_element(op: str) -> None:
    x = _prob(40, 50) * (4.0 if op == "poisson" else 1.0)
    (whole,) = serial(op, [x], {}, [x.shape])
    for m, dm in ((mesh(2, 2), [0, 1]), (mesh(4), [0, -1]), (mesh(2, 3), [-1, [1, 0]])):
        attr = layout(m, dm)
        (got,) = execute(op, [x], [attr], {}, [x.shape])
        np.testing.assert_array_equal(got, whole)
    if op == "bernoulli":
        assert set(np.unique(whole)) <= {0.0, 1.0}
        assert abs(whole.mean() - x.mean()) < 0.03
    elif op == "dropout":
        kept = whole != 0
        assert abs(kept.mean() - 0.5) < 0.03
        close(whole[kept], 2 * x[kept])
        (test_mode,) = serial(op, [x], {"is_test": True}, [x.shape])
        close(test_mode, x)
    else:
        assert (whole == np.round(whole)).all() and (whole >= 0).all()
        assert abs(whole.mean() - x.mean()) < 0.1
    (other_seed,) = serial(op, [x], {"seed": 1}, [x.shape])
    assert not np.array_equal(other_seed, whole)


UNARY_LAYOUTS: list[tuple[tuple[int, ...], list[Any]]] = [
    ((2,), [0, -1]),
    ((2, 2), [1, 0]),
    ((2, 3), [[0, 1], -1]),
    ((3,), [-1, 0]),
]


@pytest.mark.parametrize("op", sorted(UNARY_REF))
def test_unary_sharded(op: str) -> None:
    gen, ref = UNARY_REF[op]
    x = gen(6, 6)
    want = _apply(ref, x)
    for shape, dm in UNARY_LAYOUTS:
        m = mesh(*shape)
        attr = layout(m, dm)
        (got,) = execute(op, [x], [attr], {}, [x.shape])
        close(got, want)


# ---- binary ---------------------------------------------------------------------------------------
def _heaviside(a: float, b: float) -> float:
    return 0.0 if a < 0 else (b if a == 0 else 1.0)


BINARY_REF: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {
    "add": ("f", lambda a, b: a + b),
    "elementwise_add": ("f", lambda a, b: a + b),
    "elementwise_binary": ("f", lambda a, b: a + b),
    "subtract": ("f", lambda a, b: a - b),
    "multiply": ("f", lambda a, b: a * b),
    "elementwise_mul": ("f", lambda a, b: a * b),
    "divide": ("f", lambda a, b: a / b),
    "elementwise_div": ("f", lambda a, b: a / b),
    "elementwise_pow": ("pos", lambda a, b: a**b),
    "floor_divide": ("f", lambda a, b: float(math.floor(a / b))),
    "trunc_divide": ("f", lambda a, b: float(math.trunc(a / b))),
    "remainder": ("f", lambda a, b: a % b),
    "fmax": ("nan", lambda a, b: b if math.isnan(a) else a if math.isnan(b) else max(a, b)),
    "fmin": ("nan", lambda a, b: b if math.isnan(a) else a if math.isnan(b) else min(a, b)),
    "maximum": ("f", max),
    "minimum": ("f", min),
    "greater_than": ("cmp", lambda a, b: a > b),
    "greater_equal": ("cmp", lambda a, b: a >= b),
    "less_than": ("cmp", lambda a, b: a < b),
    "less_equal": ("cmp", lambda a, b: a <= b),
    "not_equal": ("cmp", lambda a, b: a != b),
    "equal": ("cmp", lambda a, b: a == b),
    "heaviside": ("zero", _heaviside),
    "logical_and": ("bool", lambda a, b: a and b),
    "logical_or": ("bool", lambda a, b: a or b),
    "logical_xor": ("bool", lambda a, b: a != b),
    "bitwise_and": ("int", lambda a, b: a & b),
    "bitwise_or": ("int", lambda a, b: a | b),
    "bitwise_xor": ("int", lambda a, b: a ^ b),
}


def _operands(kind: str, xs: tuple[int, ...], ys: tuple[int, ...]) -> tuple[Array, Array]:
    if kind == "bool":
        return RNG.integers(0, 2, xs) > 0, RNG.integers(0, 2, ys) > 0
    if kind == "int":
        return RNG.integers(-20, 20, xs), RNG.integers(-20, 20, ys)
    if kind == "pos":
        return _positive(*xs), RNG.standard_normal(ys)
    if kind == "cmp":  # ties, infinities and NaNs, where the comparisons differ
        values = np.array([-np.inf, -1.0, 0.0, 1.0, np.inf, np.nan])
        return RNG.choice(values, xs), RNG.choice(values, ys)
    x, y = _normal(*xs), _normal(*ys)
    if kind == "nan":
        x.ravel()[::3] = np.nan
        y.ravel()[::4] = np.nan
    if kind == "zero":
        x.ravel()[::3] = 0.0
    return x, y


def _apply2(fn: Callable[[Any, Any], Any], x: Array, y: Array) -> Array:
    bx, by = np.broadcast_arrays(x, y)
    out = np.array([fn(a.item(), b.item()) for a, b in zip(bx.ravel(), by.ravel(), strict=True)])
    return out.reshape(bx.shape)


def _close_nan(got: Array, want: Array) -> None:
    assert got.shape == want.shape
    assert (np.isnan(got) == np.isnan(want.astype(float))).all()
    ok = ~np.isnan(got)
    close(got[ok], want[ok])


@pytest.mark.parametrize("op", sorted(BINARY_REF))
def test_binary_serial_and_sharded(op: str) -> None:
    kind, ref = BINARY_REF[op]
    for xs, ys in (((4, 6), (4, 6)), ((5, 6), (6,)), ((3, 1, 6), (4, 1))):
        x, y = _operands(kind, xs, ys)
        want = _apply2(ref, x, y)
        (got,) = serial(op, [x, y], {}, [want.shape])
        _check2(kind, got, want)
        m = mesh(2, 2)
        for xm in ([0, 1], [1, -1], [-1, 0]):
            xa = DistAttr(m, xm[-len(xs) :] if len(xs) < 3 else [-1, *xm])
            (sh,) = execute(op, [x, y], [xa, rep(m, len(ys))], {}, [want.shape])
            _check2(kind, sh, want)


def _check2(kind: str, got: Array, want: Array) -> None:
    if kind == "cmp":
        assert got.dtype == np.bool_ and np.array_equal(got, want)
    elif kind == "nan":
        _close_nan(got, want)
    else:
        close(got, want.astype(got.dtype))


def test_integer_powers_are_exact_and_a_negative_one_is_refused() -> None:
    x = np.array([5, -3, 1], dtype=np.int64)  # 5**27 needs 63 bits; a float64 holds 53
    assert serial("pow", [x], {"y": 27}, [(3,)])[0].tolist() == [5**27, (-3) ** 27, 1]
    with pytest.raises(UnsupportedError, match="negative power y=-1 is no integer"):
        serial("pow", [x], {"y": -1}, [(3,)])


def test_integer_division_semantics() -> None:
    x, y = np.array([-7, 7, -7, 7, 6]), np.array([2, -2, -2, 2, 3])
    assert serial("divide", [x, y], {}, [(5,)])[0].tolist() == [-3, -3, 3, 3, 2]
    assert serial("trunc_divide", [x, y], {}, [(5,)])[0].tolist() == [-3, -3, 3, 3, 2]
    assert serial("floor_divide", [x, y], {}, [(5,)])[0].tolist() == [-4, -4, 3, 3, 2]
    assert serial("remainder", [x, y], {}, [(5,)])[0].tolist() == [1, -1, -1, 1, 0]


def test_scale_keeps_integers_exact() -> None:
    """Integral factors scale an integer tensor in its own dtype (as Paddle's kernel, in T):
    through float64, an int64 above 2**53 lost its low bits (ONNX Neg is scale -1)."""
    x = np.array([2**53 + 1, -(2**62) - 3, 2**63 - 1], np.int64)
    (neg,) = serial("scale", [x], {"scale": -1.0}, [x.shape])
    assert neg.dtype == np.int64 and neg.tolist() == [-(2**53) - 1, 2**62 + 3, -(2**63) + 1]
    (lin,) = serial("scale", [x[:2]], {"scale": 3.0, "bias": 1.0}, [(2,)])
    assert lin.tolist() == [3 * (2**53 + 1) + 1, 3 * (-(2**62) - 3) + 1 + 2**64]  # int64 wraps
    (half,) = serial("scale", [np.array([3, -3], np.int32)], {"scale": 0.5}, [(2,)])
    assert half.dtype == np.int32 and half.tolist() == [1, -1]  # a fraction still goes by float


def test_multiply_keeps_a_sum_partial_operand() -> None:
    m = mesh(2, 2)
    x, y = _normal(4, 6), _normal(4, 6)
    for part in ("sum", "avg"):
        xa = DistAttr(m, [0, -1], {1: part})
        info = sr.get_rule("multiply").infer_forward(
            TensorSpec(x.shape, xa), TensorSpec(y.shape, rep(m, 2))
        )
        out = info.outputs[0]
        assert isinstance(out, DistAttr)
        assert out.partial == {1: part}  # the rule keeps it: the kernel must too
        (got,) = execute("multiply", [x, y], [xa, rep(m, 2)], {}, [x.shape])
        close(got, x * y)
        # y's pending sum stays when x has none; the product broadcasts y's bias-like shape
        b = _normal(6)
        ya = DistAttr(m, [1], {0: part})
        (got,) = execute("multiply", [x, b], [rep(m, 2), ya], {}, [x.shape])
        close(got, x * b)


def _silu(v: Array) -> Array:
    return np.asarray(v / (1 + np.exp(-v)))


def test_swiglu_with_and_without_y() -> None:
    x, y = _normal(4, 8), _normal(4, 8)
    m = mesh(2, 2)
    (got,) = serial("swiglu", [x, y], {}, [x.shape])
    close(got, _silu(x) * y)
    (got,) = execute("swiglu", [x, y], [DistAttr(m, [0, 1]), DistAttr(m, [0, 1])], {}, [x.shape])
    close(got, _silu(x) * y)
    want = _silu(x[:, :4]) * x[:, 4:]
    (got,) = serial("swiglu", [x, None], {}, [want.shape])
    close(got, want)
    # the rule keeps the [gate | value] dim whole though it is asked to shard it
    (got,) = execute("swiglu", [x, None], [DistAttr(m, [0, 1]), None], {}, [want.shape])
    close(got, want)

