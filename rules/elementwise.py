"""Elementwise ops: unary (relu, exp, ...), binary with broadcasting (add, ...), multiply's partial
pass-through, swiglu, and gelu with its gradient rule.

One description serves the family: a unary op is ``a...->a...``; a binary op is the right-aligned
broadcasting notation, e.g. ``1bc,abc->abc``. As in Paddle, *every* size-1 input dim gets the shared
broadcast letter ``1`` (so it is never sharded in a result, and two size-1 dims sharded on different
mesh dims conflict), and an output dim is ``1`` where every input is size 1 or absent.
"""

from __future__ import annotations

import math
from typing import Final

from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import RuleArgumentError, ShardingConflictError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.einsum import BROADCAST, LetterMap
from spmdrules.engine.masks import any_masked, carry, plain
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
# A partial operand of a product may stay partial only where the reduction is linear.
_LINEAR_REDUCTIONS: Final = frozenset({"sum", "avg"})


def _attr_for(t: TensorSpec, m: MultiDims) -> DistAttr:
    """``t``'s own attribute when it already says ``m`` (no copy), else a new one."""
    a = t.attr
    return a if m == a.multi_dims_mapping and not a.partial_items else attr(t, m)


# ---- unary: a...->a..., sharded dims must divide evenly (Paddle replicates them otherwise) -------
def _unary_mapping(t: TensorSpec) -> MultiDims:
    return t.attr.multi_dims_mapping


def unary_forward(x: TensorSpec) -> SpmdInfo:
    a = _attr_for(x, _unary_mapping(x))
    return SpmdInfo([a], [a])


def zero_preserving_forward(x: TensorSpec) -> SpmdInfo:
    """A unary op with f(0) = 0: a masked pending sum stays one (``ZERO_PRESERVING``)."""
    if not x.attr._masks:
        return unary_forward(x)
    ls = _LETTERS[:x.ndim]
    return carry(unary_forward(plain(x)), [(x, ls)], [ls])


def unary_reverse(x: TensorSpec, out: TensorSpec) -> SpmdInfo:
    _same_shape("x", x, "out", out)
    a = _attr_for(out, _unary_mapping(out))
    return SpmdInfo([a], [a])


def _same_shape(a_name: str, a: TensorSpec, b_name: str, b: TensorSpec) -> None:
    if a.shape != b.shape:
        raise RuleArgumentError(
            f"{a_name!r} has shape {list(a.shape)} but {b_name!r} has {list(b.shape)}; an "
            "elementwise op keeps the shape"
        )


# ---- binary: broadcasting notation ---------------------------------------------------------------
Notations = tuple[str, str, str, tuple[int, ...]]
_NOTATIONS: dict[tuple[tuple[int, ...], tuple[int, ...]], Notations] = {}


def _notations(x: TensorSpec, y: TensorSpec) -> Notations:
    """(x letters, y letters, out letters, out shape), memoised on the two shapes."""
    key = (x.shape, y.shape)
    got = _NOTATIONS.get(key)
    if got is None:
        got = _suffix_notations(*key) or _build_notations(*key)
        if len(_NOTATIONS) < 4096:
            _NOTATIONS[key] = got
    return got


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
    letters = _LETTERS[:n]
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
        out_letters.append(BROADCAST if a == 1 and b == 1 else letters[i])

    def notation(shape: tuple[int, ...]) -> str:
        off = n - len(shape)
        return "".join(BROADCAST if s == 1 else letters[off + i] for i, s in enumerate(shape))

    return notation(xs), notation(ys), "".join(out_letters), tuple(out_shape)


def _merge(operands: tuple[tuple[str, str, MultiDims], ...]) -> LetterMap:
    """Per letter, the mesh dims the operands shard it on; a contested mesh dim stays with the letter
    that claimed it first (argument order, then dim order), as in Paddle."""
    letters: LetterMap = {}
    where: dict[str, tuple[str, int]] = {}
    for name, notation, mdm in operands:
        for i, ch in enumerate(notation):
            dims = mdm[i]
            if not dims:
                continue
            prev = letters.get(ch)
            if prev is None:
                letters[ch] = dims
                where[ch] = (name, i)
            elif prev != dims:
                raise _conflict(ch, where[ch], prev, (name, i), dims)
    owner: dict[int, str] = {}
    for ch, dims in letters.items():
        kept = tuple(d for d in dims if owner.setdefault(d, ch) == ch)
        if kept != dims:
            letters[ch] = kept
    return letters


def _conflict(
    ch: str, first: tuple[str, int], a: tuple[int, ...], second: tuple[str, int], b: tuple[int, ...]
) -> ShardingConflictError:
    (t1, d1), (t2, d2) = first, second
    if ch == BROADCAST:
        return ShardingConflictError(
            f"size-1 dims {t1!r} dim {d1} and {t2!r} dim {d2} are sharded by different mesh dims "
            f"{list(a)} and {list(b)}; a size-1 dim holds nothing to split: replicate it (-1)"
        )
    return ShardingConflictError(
        f"{t1!r} dim {d1} is sharded by mesh dims {list(a)} but {t2!r} dim {d2}, the same "
        f"broadcast axis, by {list(b)}; shard them the same way or replicate one of them"
    )


def _mapping(notation: str, letters: LetterMap) -> MultiDims:
    if not letters:
        return ((),) * len(notation)
    get = letters.get
    if BROADCAST in letters:
        return tuple([() if ch == BROADCAST else get(ch, ()) for ch in notation])
    return tuple([get(ch, ()) for ch in notation])


def binary_forward(x: TensorSpec, y: TensorSpec) -> SpmdInfo:
    xn, yn, outn, _ = _notations(x, y)
    letters = _merge((("x", xn, x.attr.multi_dims_mapping), ("y", yn, y.attr.multi_dims_mapping)))
    xa = _attr_for(x, _mapping(xn, letters))
    out_m = _mapping(outn, letters)
    return SpmdInfo(
        [xa, _attr_for(y, _mapping(yn, letters))],
        [xa if out_m == xa.multi_dims_mapping else attr(x, out_m)],
    )


def binary_reverse(x: TensorSpec, y: TensorSpec, out: TensorSpec) -> SpmdInfo:
    xn, yn, outn, out_shape = _notations(x, y)
    if out.shape != out_shape:
        raise RuleArgumentError(
            f"'out' has shape {list(out.shape)} but broadcasting 'x' {list(x.shape)} and 'y' "
            f"{list(y.shape)} gives {list(out_shape)}; pass the op's real output"
        )
    letters = _merge((("out", outn, out.attr.multi_dims_mapping),))
    # The answer is a consistent pair: out as these inputs produce it, so its size-1 dims are
    # replicated like theirs (Paddle echoes them sharded; binary-reverse-size1-out-replicated).
    return SpmdInfo(
        [attr(x, _mapping(xn, letters)), attr(y, _mapping(yn, letters))],
        [_attr_for(out, _mapping(outn, letters))],
    )


# ---- multiply: one partial operand may stay partial, and the product is then partial too ---------
def multiply_forward(x: TensorSpec, y: TensorSpec) -> SpmdInfo:
    """x's pending sum stays pending through the product (y's is resolved first); x without one
    lets y's stay. It is dropped (resolved before the op) when one of its mesh dims also shards the
    result, or when its reduction is not linear (max, min, ...: max(a, b) * y != max(a*y, b*y)).
    A masked sum times a factor whole on its mesh dim, or times a sum masked by the same letter,
    is a masked sum (``spmdrules.engine.masks``)."""
    if any_masked(x, y):
        xn, yn, on, _ = _notations(x, y)
        info = _plain_product(plain(x), plain(y))
        return carry(info, [(x, xn), (y, yn)], [on], product=True)
    return _plain_product(x, y)


def _plain_product(x: TensorSpec, y: TensorSpec) -> SpmdInfo:
    info = binary_forward(x, y)
    kept = x.attr.partial_items or y.attr.partial_items
    if not kept:
        return info
    (xa, ya), (oa,) = info.inputs, info.outputs
    assert isinstance(xa, DistAttr) and isinstance(ya, DistAttr) and isinstance(oa, DistAttr)
    used = xa.sharded_mesh_dims | ya.sharded_mesh_dims
    if any(d in used or rt not in _LINEAR_REDUCTIONS for d, rt in kept):
        return info
    x_part: PartialItems = kept if x.attr.partial_items else ()
    y_part: PartialItems = () if x_part else kept
    return SpmdInfo(
        [attr(x, xa.multi_dims_mapping, x_part), attr(y, ya.multi_dims_mapping, y_part)],
        [attr(x, oa.multi_dims_mapping, kept)],
    )


# ---- swiglu(x, y?) = silu(x) * y; without y, x's last dim holds both halves [gate | value] -------
def _halves_mapping(m: MultiDims) -> MultiDims:
    """Without y, x's last dim must stay whole: a block of it is not a [gate | value] pair (Paddle
    keeps it sharded; see docs/deviations/elementwise.md, swiglu-halves-replicated)."""
    return (*m[:-1], ()) if m and m[-1] else m


def _check_halves(x: TensorSpec) -> None:
    if x.ndim == 0 or x.shape[-1] % 2:
        raise RuleArgumentError(
            f"'x' has shape {list(x.shape)}; without 'y', swiglu splits x's last dim into two "
            "equal halves, so it needs rank >= 1 and an even last dim (or pass 'y')"
        )


def swiglu_forward(x: TensorSpec, y: TensorSpec | None) -> SpmdInfo:
    if y is not None:
        if y.ndim == 0 and x.ndim:
            # A rank-0 y stands for "no y" (a present y has x's shape): the halves dim is whole
            # in both directions. No divisibility check, as in the reverse rule.
            m = _halves_mapping(_unary_mapping(x))
            return SpmdInfo([attr(x, m), attr(y, ())], [attr(x, m)])
        return binary_forward(x, y)
    _check_halves(x)
    m = _halves_mapping(_unary_mapping(x))
    return SpmdInfo([attr(x, m), None], [attr(x, m)])


def _halved(x: TensorSpec) -> tuple[int, ...]:
    return (*x.shape[:-1], x.shape[-1] // 2)


def swiglu_reverse(x: TensorSpec, y: TensorSpec | None, out: TensorSpec) -> SpmdInfo:
    if y is not None:
        if y.ndim == 0 and x.ndim and out.shape != x.shape and out.shape == _halved(x):
            # A rank-0 y standing for "no y" (Paddle's flash-attention convention): Paddle runs
            # the broadcasting rule on it, so no divisibility check here, unlike a None y.
            m = _halves_mapping(out.attr.multi_dims_mapping)
            return SpmdInfo([attr(x, m), attr(y, ())], [attr(out, m)])
        return binary_reverse(x, y, out)
    _check_halves(x)
    if out.shape != _halved(x):
        raise RuleArgumentError(
            f"'out' has shape {list(out.shape)} but swiglu of 'x' {list(x.shape)} without 'y' "
            f"gives {list(_halved(x))}; pass the op's real output"
        )
    m = _halves_mapping(_unary_mapping(out))
    return SpmdInfo([attr(x, m), None], [attr(out, m)])


# ---- gelu's gradient rule: x and out_grad follow out_grad (no divisibility check, as Paddle) -----
def gelu_grad(x: TensorSpec, out_grad: TensorSpec, approximate: bool) -> SpmdInfo:
    _same_shape("x", x, "out_grad", out_grad)
    a = attr(out_grad, out_grad.attr.multi_dims_mapping)
    return SpmdInfo([a, a], [a])


def _gelu_forward(x: TensorSpec, approximate: bool) -> SpmdInfo:
    return zero_preserving_forward(x)


def _gelu_reverse(x: TensorSpec, out: TensorSpec, approximate: bool) -> SpmdInfo:
    return unary_reverse(x, out)


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

for _name in UNARY_OPS:
    _zero = _name in ZERO_PRESERVING
    register_rule(_name, forward=zero_preserving_forward if _zero else unary_forward,
                  reverse=unary_reverse, inputs=[T("x")], outputs=[T("out")],
                  op_attrs=UNARY_OP_ATTRS.get(_name, ()), masks=_zero)

register_rule("gelu", forward=_gelu_forward, reverse=_gelu_reverse, inputs=[T("x")],
              outputs=[T("out")], attrs=[A("approximate", "bool", False)], masks=True)
register_rule("gelu_grad", forward=gelu_grad, inputs=[T("x"), T("out_grad")],
              outputs=[T("x_grad")], attrs=[A("approximate", "bool", False)],
              doc="GeluGradInferSpmd: x and out_grad follow out_grad.")

for _name in BINARY_OPS:
    register_rule(_name, forward=binary_forward, reverse=binary_reverse, inputs=[T("x"), T("y")],
                  outputs=[T("out")])

register_rule("multiply", forward=multiply_forward, reverse=binary_reverse,
              inputs=[T("x"), T("y")], outputs=[T("out")], masks=True)
register_rule("swiglu", forward=swiglu_forward, reverse=swiglu_reverse,
              inputs=[T("x"), Opt("y")], outputs=[T("out")])

__all__ = [
    "BINARY_OPS", "UNARY_OPS", "UNARY_OP_ATTRS", "ZERO_PRESERVING", "binary_forward",
    "binary_reverse", "multiply_forward",
]
