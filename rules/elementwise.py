"""Elementwise ops: unary (relu, exp, ...), binary with broadcasting (add, ...), multiply's partial
pass-through, swiglu, and gelu with its gradient rule.

One description serves the family: a unary op is ``a...->a...``; a binary op is the right-aligned
broadcasting notation, e.g. ``1bc,abc->abc``. As in Paddle, *every* size-1 input dim gets the shared
broadcast letter ``1`` (so it is never sharded in a result, and two size-1 dims sharded on different
mesh dims conflict), and an output dim is ``1`` where every input is size 1 or absent.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Final

from spmdrules.core.attr import MultiDims
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description, infer_forward, infer_reverse, letters
from spmdrules.engine.einsum import BROADCAST
from spmdrules.engine.policy import LINEAR_REDUCTIONS, Policy
from spmdrules.engine.registry import A, AttrParam, Opt, T, register_rule
from spmdrules.engine.rulekit import attr

UNARY_OPS = (
    "abs", "acos", "acosh", "asin", "asinh", "assign", "atan", "atanh", "bernoulli", "bitwise_not",
    "ceil", "celu", "clip", "conj", "cos", "cosh", "digamma", "dropout", "elementwise_unary", "elu",
    "erf", "erfinv", "exp", "expm1", "fill", "floor", "hardshrink", "hardsigmoid", "hardswish",
    "hardtanh", "leaky_relu", "lgamma", "log", "log10", "log1p", "log2", "logical_not", "logit",
    "logsigmoid", "mish", "poisson", "pow", "reciprocal", "relu", "relu6", "round", "rsqrt", "scale",
    "selu", "sigmoid", "sign", "silu", "sin", "sinh", "softplus", "softshrink", "softsign", "sqrt",
    "square", "stanh", "swish", "tan", "tanh", "tanh_shrink", "thresholded_relu", "trunc",
)

# equal, greater_equal and less_equal have no case in Paddle's records; each comparison is its
# own op, since with a NaN x <= y is not the negation of x > y.
BINARY_OPS = (
    "add", "bitwise_and", "bitwise_or", "bitwise_xor", "divide", "elementwise_add",
    "elementwise_binary", "elementwise_div", "elementwise_mul", "elementwise_pow", "equal",
    "floor_divide", "fmax", "fmin", "greater_equal", "greater_than", "heaviside", "less_equal",
    "less_than", "logical_and", "logical_or", "logical_xor", "maximum", "minimum", "not_equal",
    "remainder", "subtract", "trunc_divide",
)

#: unary ops with f(0) = 0 for every value of their attributes: applied to a masked pending sum
#: (``spmdrules.engine.masks``), each process's zeros stay zeros, so the result is the masked sum
#: of f of the value (tests/rules/test_masks.py checks f(0) = 0 on each kernel)
ZERO_PRESERVING: Final = frozenset({
    "abs", "asin", "asinh", "atan", "atanh", "erf", "expm1", "hardshrink", "hardswish",
    "leaky_relu", "mish", "relu", "relu6", "sign", "silu", "sin", "sinh", "softshrink",
    "softsign", "sqrt", "square", "swish", "tan", "tanh", "tanh_shrink", "gelu",
})

# Letters for broadcast dims; the digit '1' is the shared letter of size-1 dims.
_LETTERS: Final = "abcdefghijklmnopqrstuvwxyz"
#: a zero-preserving unary op keeps a masked sum masked; a product keeps one factor's pending
#: sum (or mean) pending, and a masked sum times a factor whole on its mesh dim stays masked
ZERO_PRESERVING_POLICY: Final = Policy(masks="single")
PRODUCT_POLICY: Final = Policy(linear_types=LINEAR_REDUCTIONS, factors=True, masks="product")


# ---- unary: a...->a..., the shards pass through, pending results are resolved first --------------
def unary(x: tuple[int, ...]) -> Description:
    ls = letters(len(x))
    return Description((ls,), (ls,))


def zero_preserving(x: tuple[int, ...]) -> Description:
    """A unary op with f(0) = 0: a masked pending sum stays one (``ZERO_PRESERVING``)."""
    ls = letters(len(x))
    return Description((ls,), (ls,), policy=ZERO_PRESERVING_POLICY)


def _same_shape(a_name: str, a: tuple[int, ...], b_name: str, b: tuple[int, ...]) -> None:
    if a != b:
        raise RuleArgumentError(
            f"{a_name!r} has shape {list(a)} but {b_name!r} has {list(b)}; an elementwise op "
            "keeps the shape"
        )


def _check_unary_out(x: tuple[int, ...], out: tuple[int, ...], *_: object) -> None:
    _same_shape("x", x, "out", out)


# ---- binary: Paddle's broadcasting notation --------------------------------------------------------
Notations = tuple[str, str, str, tuple[int, ...]]


def notations(xs: tuple[int, ...], ys: tuple[int, ...]) -> Notations:
    """(x letters, y letters, out letters, out shape), right-aligned. As in Paddle, *every* size-1
    input dim has the shared letter '1' (never sharded in a result, it still claims its mesh dim:
    two size-1 dims on different mesh dims conflict), and an output dim is '1' where both are."""
    return _suffix_notations(xs, ys) or _build_notations(xs, ys)


def _suffix_notations(xs: tuple[int, ...], ys: tuple[int, ...]) -> Notations | None:
    """The common cases without a per-dim loop: equal shapes, or one shape a suffix of the other
    (a bias), with no size-1 dim."""
    if 1 in xs or 1 in ys:
        return None
    nx, ny = len(xs), len(ys)
    if nx >= ny and xs[nx - ny :] == ys and nx <= len(_LETTERS):
        xn = _LETTERS[:nx]
        return xn, xn[nx - ny :], xn, xs
    if ny > nx and ys[ny - nx :] == xs and ny <= len(_LETTERS):
        yn = _LETTERS[:ny]
        return yn[ny - nx :], yn, yn, ys
    return None


def _build_notations(xs: tuple[int, ...], ys: tuple[int, ...]) -> Notations:
    n = max(len(xs), len(ys))
    if n > len(_LETTERS):
        raise RuleArgumentError(
            f"broadcasting over {n} dims exceeds the {len(_LETTERS)} supported; reshape the "
            "operands to fewer dims"
        )
    ls = _LETTERS[:n]
    out_shape = []
    out_letters = []
    for i in range(n):
        a = xs[i - n + len(xs)] if i >= n - len(xs) else 1
        b = ys[i - n + len(ys)] if i >= n - len(ys) else 1
        if a != b and a != 1 and b != 1:
            raise RuleArgumentError(
                f"'x' dim {i - n + len(xs)} (size {a}) and 'y' dim {i - n + len(ys)} (size {b}) "
                "do not broadcast; sizes must match or one of them must be 1"
            )
        out_shape.append(a if b == 1 else b)
        out_letters.append(BROADCAST if a == 1 and b == 1 else ls[i])

    def notation(shape: tuple[int, ...]) -> str:
        off = n - len(shape)
        return "".join(BROADCAST if s == 1 else ls[off + i] for i, s in enumerate(shape))

    return notation(xs), notation(ys), "".join(out_letters), tuple(out_shape)


def binary(x: tuple[int, ...], y: tuple[int, ...]) -> Description:
    xn, yn, on, _ = notations(x, y)
    return Description((xn, yn), (on,), claim_broadcast=True)


def product(x: tuple[int, ...], y: tuple[int, ...]) -> Description:
    """multiply: one pending factor may stay pending, and the product is then pending too. It is
    resolved first when one of its mesh dims also shards the result, or when its reduction is
    not linear (max(a, b) * y != max(a*y, b*y)); y's only when x has none."""
    xn, yn, on, _ = notations(x, y)
    return Description((xn, yn), (on,), claim_broadcast=True, linear=(0, 1),
                       policy=PRODUCT_POLICY)


def broadcast_key(shapes: tuple[tuple[int, ...], ...]) -> tuple[tuple[bool, ...], ...]:
    """What a binary op's notation depends on once ``_check_broadcast`` has passed: each
    operand's rank and which of its dims have size 1."""
    return tuple(tuple(n == 1 for n in s) for s in shapes)


def _check_broadcast(x: tuple[int, ...], y: tuple[int, ...], *_: object) -> None:
    if x != y:
        notations(x, y)  # raises where the sizes do not broadcast


def _check_binary_out(x: tuple[int, ...], y: tuple[int, ...], out: tuple[int, ...],
                      *_: object) -> None:
    """The answer is a consistent pair: out as these inputs produce it, so its size-1 dims are
    replicated like theirs (Paddle echoes them sharded; binary-reverse-size1-out-replicated)."""
    want = notations(x, y)[3]
    if out != want:
        raise RuleArgumentError(
            f"'out' has shape {list(out)} but broadcasting 'x' {list(x)} and 'y' {list(y)} gives "
            f"{list(want)}; pass the op's real output"
        )


# ---- swiglu(x, y?) = silu(x) * y; without y, x's last dim holds both halves [gate | value] -------
# Hand-written: with a rank-0 y, which of two descriptions holds depends on the shape of the
# given output (Paddle's flash-attention convention reads a rank-0 y as "no y").
def halves_mapping(m: MultiDims) -> MultiDims:
    """Without y, x's last dim must stay whole: a block of it is not a [gate | value] pair (Paddle
    keeps it sharded; see docs/deviations/elementwise.md, swiglu-halves-replicated)."""
    return (*m[:-1], ()) if m and m[-1] else m


def _check_halves(x: TensorSpec) -> None:
    if x.ndim == 0 or x.shape[-1] % 2:
        raise RuleArgumentError(
            f"'x' has shape {list(x.shape)}; without 'y', swiglu splits x's last dim into two "
            "equal halves, so it needs rank >= 1 and an even last dim (or pass 'y')"
        )


def _binary_of(x: TensorSpec, y: TensorSpec) -> Description:
    return dataclasses.replace(binary(x.shape, y.shape), names=("x", "y", "out"))


def swiglu_forward(x: TensorSpec, y: TensorSpec | None) -> SpmdInfo:
    if y is not None:
        if y.ndim == 0 and x.ndim:
            # A rank-0 y stands for "no y" (a present y has x's shape): the halves dim is whole
            # in both directions. No divisibility check, as in the reverse rule.
            m = halves_mapping(x.attr.multi_dims_mapping)
            return SpmdInfo([attr(x, m), attr(y, ())], [attr(x, m)])
        return infer_forward(_binary_of(x, y), (x, y))
    _check_halves(x)
    m = halves_mapping(x.attr.multi_dims_mapping)
    return SpmdInfo([attr(x, m), None], [attr(x, m)])


def _halved(x: TensorSpec) -> tuple[int, ...]:
    return (*x.shape[:-1], x.shape[-1] // 2)


def swiglu_reverse(x: TensorSpec, y: TensorSpec | None, out: TensorSpec) -> SpmdInfo:
    if y is not None:
        if y.ndim == 0 and x.ndim and out.shape != x.shape and out.shape == _halved(x):
            # A rank-0 y standing for "no y" (Paddle's flash-attention convention): Paddle runs
            # the broadcasting rule on it, so no divisibility check here, unlike a None y.
            m = halves_mapping(out.attr.multi_dims_mapping)
            return SpmdInfo([attr(x, m), attr(y, ())], [attr(out, m)])
        _check_binary_out(x.shape, y.shape, out.shape)
        return infer_reverse(_binary_of(x, y), (x, y), (out,))
    _check_halves(x)
    if out.shape != _halved(x):
        raise RuleArgumentError(
            f"'out' has shape {list(out.shape)} but swiglu of 'x' {list(x.shape)} without 'y' "
            f"gives {list(_halved(x))}; pass the op's real output"
        )
    m = halves_mapping(out.attr.multi_dims_mapping)
    return SpmdInfo([attr(x, m), None], [attr(out, m)])


# ---- gelu's gradient rule: x and out_grad follow out_grad (no divisibility check, as Paddle) -----
def gelu_grad(x: tuple[int, ...], out_grad: tuple[int, ...]) -> Description:
    ls = letters(len(out_grad))
    return Description((ls, ls), (ls,), merge=(1,))


def _check_gelu_grad(x: tuple[int, ...], out_grad: tuple[int, ...], *_: object) -> None:
    _same_shape("x", x, "out_grad", out_grad)


# ---- registration --------------------------------------------------------------------------------
#: The unary ops' attributes, which Paddle's rule does not take (quirk 28) but the op has: Paddle's
#: C++ op definitions, except clip and mish, whose C++ ops have no default and take the Python
#: API's (unbounded; a softplus threshold of 20). The graph op carries them for the kernel.
UNARY_OP_ATTRS: dict[str, tuple[AttrParam, ...]] = {
    "celu": (A("alpha", "float", 1.0),),
    "clip": (A("min", "float", -math.inf), A("max", "float", math.inf)),
    "dropout": (A("p", "float", 0.5), A("is_test", "bool", False),
                A("mode", "str", "upscale_in_train"), A("seed", "int", 0)),
    "elu": (A("alpha", "float", 1.0),),
    "fill": (A("value", "float", 0.0),),
    "hardshrink": (A("threshold", "float", 0.5),),
    "hardsigmoid": (A("slope", "float", 0.2), A("offset", "float", 0.5)),
    "hardtanh": (A("t_min", "float", 0.0), A("t_max", "float", 24.0)),
    "leaky_relu": (A("negative_slope", "float", 0.02),),
    "logit": (A("eps", "float", 1e-6),),
    "mish": (A("lambda", "float", 20.0),),
    "pow": (A("y", "number", 1.0),),  # an int exponent keeps an integer power exact
    "round": (A("decimals", "int", 0),),
    "scale": (A("scale", "float", 1.0), A("bias", "float", 0.0),
              A("bias_after_scale", "bool", True)),
    "selu": (A("scale", "float", 1.0507009873554804934193349852946),
             A("alpha", "float", 1.6732632423543772848170429916717)),
    "softplus": (A("beta", "float", 1.0), A("threshold", "float", 20.0)),
    "softshrink": (A("threshold", "float", 0.5),),
    "stanh": (A("scale_a", "float", 0.67), A("scale_b", "float", 1.7159)),
    "thresholded_relu": (A("threshold", "float", 1.0), A("value", "float", 0.0)),
    "bernoulli": (A("seed", "int", 0),),
    "poisson": (A("seed", "int", 0),),
}

_X, _OUT = [T("x")], [T("out")]
for _name in UNARY_OPS:
    _zero = _name in ZERO_PRESERVING
    register_described(_name, zero_preserving if _zero else unary, inputs=_X, outputs=_OUT,
                       op_attrs=UNARY_OP_ATTRS.get(_name, ()), masks=_zero, key=ranks,
                       check_reverse=_check_unary_out)

register_described("gelu", zero_preserving, inputs=_X, outputs=_OUT,
                   attrs=[A("approximate", "bool", False)], masks=True, key=ranks,
                   check_reverse=_check_unary_out)
register_described("gelu_grad", gelu_grad, inputs=[T("x"), T("out_grad")], outputs=[T("x_grad")],
                   attrs=[A("approximate", "bool", False)], reverse=False, key=ranks,
                   check=_check_gelu_grad, doc="GeluGradInferSpmd: x and out_grad follow out_grad.")

for _name in BINARY_OPS:
    register_described(_name, binary, inputs=[T("x"), T("y")], outputs=_OUT,
                       key=broadcast_key, check=_check_broadcast,  # type: ignore[arg-type]
                       check_reverse=_check_binary_out)

register_described("multiply", product, inputs=[T("x"), T("y")], outputs=_OUT, masks=True,
                   key=broadcast_key, check=_check_broadcast,  # type: ignore[arg-type]
                   check_reverse=_check_binary_out)
register_rule("swiglu", forward=swiglu_forward, reverse=swiglu_reverse,
              inputs=[T("x"), Opt("y")], outputs=_OUT)

__all__ = ["BINARY_OPS", "UNARY_OPS", "UNARY_OP_ATTRS", "ZERO_PRESERVING", "halves_mapping",
           "notations"]
