"""Elementwise ops: unary (relu, exp, ...), binary with broadcasting (add, ...), multiply's partial
pass-through, swiglu, and gelu with its gradient rule.

One description serves the family: a unary op is ``a...->a...``; a binary op is the right-aligned
broadcasting notation, e.g. ``1bc,abc->abc``.
"""

from __future__ import annotations

from spmdrules import einsum
from spmdrules.attr import DistAttr, MultiDims, PartialItems
from spmdrules.errors import RuleArgumentError
from spmdrules.registry import A, Opt, T, register_rule
from spmdrules.rulekit import attr, divisible_mapping
from spmdrules.spec import SpmdInfo, TensorSpec

UNARY_OPS = (
    "abs", "acos", "acosh", "asin", "asinh", "assign", "atan", "atanh", "bernoulli", "bitwise_not",
    "ceil", "celu", "clip", "conj", "cos", "cosh", "digamma", "dropout", "elementwise_unary", "elu",
    "erf", "erfinv", "exp", "expm1", "fill", "floor", "hardshrink", "hardsigmoid", "hardswish",
    "hardtanh", "leaky_relu", "lgamma", "log", "log10", "log1p", "log2", "logical_not", "logit",
    "logsigmoid", "mish", "poisson", "pow", "reciprocal", "relu", "relu6", "round", "rsqrt", "scale",
    "selu", "sigmoid", "sign", "silu", "sin", "sinh", "softplus", "softshrink", "softsign", "sqrt",
    "square", "stanh", "swish", "tan", "tanh", "tanh_shrink", "thresholded_relu", "trunc",
)

BINARY_OPS = (
    "add", "bitwise_and", "bitwise_or", "bitwise_xor", "divide", "elementwise_add",
    "elementwise_binary", "elementwise_div", "elementwise_mul", "elementwise_pow", "floor_divide",
    "fmax", "fmin", "greater_than", "heaviside", "less_than", "logical_and", "logical_or",
    "logical_xor", "maximum", "minimum", "not_equal", "remainder", "subtract", "trunc_divide",
)


# ---- unary: a...->a..., sharded dims must divide evenly (Paddle replicates them otherwise) -------
def _unary_mapping(t: TensorSpec) -> MultiDims:
    return divisible_mapping(t.shape, t.attr.multi_dims_mapping, t.attr.mesh.shape)


def unary_forward(x: TensorSpec) -> SpmdInfo:
    m = _unary_mapping(x)
    return SpmdInfo([attr(x, m)], [attr(x, m)])


def unary_reverse(x: TensorSpec, out: TensorSpec) -> SpmdInfo:
    _same_shape("x", x, "out", out)
    m = _unary_mapping(out)
    return SpmdInfo([attr(x, m)], [attr(out, m)])


def _same_shape(a_name: str, a: TensorSpec, b_name: str, b: TensorSpec) -> None:
    if a.shape != b.shape:
        raise RuleArgumentError(
            f"{a_name!r} has shape {list(a.shape)} but {b_name!r} has {list(b.shape)}; an "
            "elementwise op keeps the shape"
        )


# ---- binary: broadcasting notation ---------------------------------------------------------------
def _binary_notations(x: TensorSpec, y: TensorSpec) -> tuple[str, str, str]:
    _check_broadcastable(x, y)
    (xn, yn), outn = einsum.broadcast_notations((x.shape, y.shape))
    return xn, yn, outn


def _check_broadcastable(x: TensorSpec, y: TensorSpec) -> None:
    for i in range(1, min(x.ndim, y.ndim) + 1):
        a, b = x.shape[-i], y.shape[-i]
        if a != b and a != 1 and b != 1:
            raise RuleArgumentError(
                f"'x' dim {x.ndim - i} (size {a}) and 'y' dim {y.ndim - i} (size {b}) do not "
                "broadcast; sizes must match or one must be 1"
            )


def _broadcast_shape(x: TensorSpec, y: TensorSpec) -> tuple[int, ...]:
    n = max(x.ndim, y.ndim)
    xs = (1,) * (n - x.ndim) + x.shape
    ys = (1,) * (n - y.ndim) + y.shape
    return tuple(a if b == 1 else b for a, b in zip(xs, ys, strict=True))


def _binary_merge(x: TensorSpec, y: TensorSpec) -> tuple[str, str, str, einsum.LetterMap]:
    xn, yn, outn = _binary_notations(x, y)
    letters = einsum.merge(
        ((xn, x.attr.multi_dims_mapping), (yn, y.attr.multi_dims_mapping)), names=("x", "y")
    )
    return xn, yn, outn, einsum.resolve_mesh_conflicts(letters)


def binary_forward(x: TensorSpec, y: TensorSpec) -> SpmdInfo:
    xn, yn, outn, letters = _binary_merge(x, y)
    return SpmdInfo(
        [attr(x, einsum.mapping_for(xn, letters, x.shape)),
         attr(y, einsum.mapping_for(yn, letters, y.shape))],
        [attr(x, einsum.mapping_for(outn, letters, _broadcast_shape(x, y)))],
    )


def binary_reverse(x: TensorSpec, y: TensorSpec, out: TensorSpec) -> SpmdInfo:
    xn, yn, outn = _binary_notations(x, y)
    if len(outn) != out.ndim:
        raise RuleArgumentError(
            f"'out' has rank {out.ndim} but broadcasting 'x' and 'y' gives rank {len(outn)}"
        )
    letters = einsum.merge(((outn, out.attr.multi_dims_mapping),), names=("out",))
    return SpmdInfo(
        [attr(x, einsum.mapping_for(xn, letters)), attr(y, einsum.mapping_for(yn, letters))],
        [attr(out, einsum.mapping_for(outn, letters))],
    )


# ---- multiply: one partial operand may stay partial, and the product is then partial too ---------
def multiply_forward(x: TensorSpec, y: TensorSpec) -> SpmdInfo:
    xn, yn, outn, letters = _binary_merge(x, y)
    x_part: PartialItems = ()
    y_part: PartialItems = ()
    if x.attr.partial_items:
        x_part = x.attr.partial_items
    elif y.attr.partial_items:
        y_part = y.attr.partial_items
    kept = x_part or y_part
    if kept:
        busy = {d for d, _ in kept}
        letters = {ch: tuple(d for d in ds if d not in busy) for ch, ds in letters.items()}
    return SpmdInfo(
        [
            attr(x, einsum.mapping_for(xn, letters, x.shape), x_part),
            attr(y, einsum.mapping_for(yn, letters, y.shape), y_part),
        ],
        [attr(x, einsum.mapping_for(outn, letters, _broadcast_shape(x, y)), kept)],
    )


# ---- swiglu(x, y?) = silu(x) * y; without y, x holds both halves on its last dim ----------------
def swiglu_forward(x: TensorSpec, y: TensorSpec | None) -> SpmdInfo:
    if y is None:
        m = x.attr.multi_dims_mapping
        if m and m[-1]:
            m = (*m[:-1], ())
        return SpmdInfo([attr(x, m), None], [attr(x, m)])
    _same_shape("x", x, "y", y)
    info = binary_forward(x, y)
    return info


def swiglu_reverse(x: TensorSpec, y: TensorSpec | None, out: TensorSpec) -> SpmdInfo:
    m = out.attr.multi_dims_mapping
    if y is None:
        xm = (*m[:-1], ()) if m else m
        return SpmdInfo([attr(x, xm), None], [attr(out, m)])
    return SpmdInfo([attr(x, m), attr(y, m)], [attr(out, m)])


# ---- gelu's gradient rule: x and out_grad follow out_grad ----------------------------------------
def gelu_grad(x: TensorSpec, out_grad: TensorSpec, approximate: bool) -> SpmdInfo:
    _same_shape("x", x, "out_grad", out_grad)
    m = _unary_mapping(out_grad)
    return SpmdInfo([attr(x, m), attr(out_grad, m)], [attr(x, m)])


def _gelu_forward(x: TensorSpec, approximate: bool) -> SpmdInfo:
    return unary_forward(x)


def _gelu_reverse(x: TensorSpec, out: TensorSpec, approximate: bool) -> SpmdInfo:
    return unary_reverse(x, out)


for _name in UNARY_OPS:
    register_rule(_name, forward=unary_forward, reverse=unary_reverse, inputs=[T("x")],
                  outputs=[T("out")], family="elementwise_unary")

register_rule("gelu", forward=_gelu_forward, reverse=_gelu_reverse, inputs=[T("x")],
              outputs=[T("out")], attrs=[A("approximate", "bool", False)],
              family="elementwise_unary")
register_rule("gelu_grad", forward=gelu_grad, inputs=[T("x"), T("out_grad")],
              outputs=[T("x_grad")], attrs=[A("approximate", "bool", False)],
              family="elementwise_unary", doc="GeluGradInferSpmd: x and out_grad follow out_grad.")

for _name in BINARY_OPS:
    register_rule(_name, forward=binary_forward, reverse=binary_reverse, inputs=[T("x"), T("y")],
                  outputs=[T("out")], family="elementwise_binary")

register_rule("multiply", forward=multiply_forward, reverse=binary_reverse,
              inputs=[T("x"), T("y")], outputs=[T("out")], family="elementwise_binary")
register_rule("swiglu", forward=swiglu_forward, reverse=swiglu_reverse,
              inputs=[T("x"), Opt("y")], outputs=[T("out")], family="elementwise_binary")

__all__ = ["BINARY_OPS", "UNARY_OPS", "DistAttr"]
