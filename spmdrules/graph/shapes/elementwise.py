"""Shape and dtype inference of the elementwise family: unary, binary (broadcast), predicates, swiglu."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _unary(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    return (tensor_arg(args, 0).shape,)


def _binary(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, y = tensor_arg(args, 0), tensor_arg(args, 1)
    return (shape_rule.broadcast_shapes(ctx, [("x", x.shape), ("y", y.shape)]),)


def _swiglu(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, y = tensor_arg(args, 0), shape_rule.optional_arg(args, 1)
    if y is not None:
        if y.shape != x.shape:
            raise ctx.fail("y", f"shape {list(y.shape)} differs from x's {list(x.shape)}",
                           "give y the shape of x (swiglu(x, y) = silu(x) * y)")
        return (x.shape,)
    if not x.shape or x.shape[-1] % 2:
        raise ctx.fail("x", f"the last dim of shape {list(x.shape)} is not even",
                       "without y, swiglu splits x's last dim in two halves; make it even")
    return ((*x.shape[:-1], x.shape[-1] // 2),)


UNARY_OPS: Final = (
    "abs", "acos", "acosh", "asin", "asinh", "assign", "atan", "atanh", "bernoulli", "bitwise_not",
    "ceil", "celu", "clip", "conj", "cos", "cosh", "digamma", "dropout", "elementwise_unary", "elu",
    "erf", "erfinv", "exp", "expm1", "fill", "floor", "gelu", "hardshrink", "hardsigmoid",
    "hardswish", "hardtanh", "leaky_relu", "lgamma", "log", "log10", "log1p", "log2", "logit",
    "logsigmoid", "mish", "poisson", "pow", "reciprocal", "relu", "relu6", "round", "rsqrt",
    "scale", "selu", "sigmoid", "sign", "silu", "sin", "sinh", "softplus", "softshrink",
    "softsign", "sqrt", "square", "stanh", "swish", "tan", "tanh", "tanh_shrink",
    "thresholded_relu", "trunc",
)
BINARY_OPS: Final = (
    "add", "bitwise_and", "bitwise_or", "bitwise_xor", "divide", "elementwise_add",
    "elementwise_binary", "elementwise_div", "elementwise_mul", "elementwise_pow", "floor_divide",
    "fmax", "fmin", "heaviside", "maximum", "minimum", "multiply", "remainder", "subtract",
    "trunc_divide",
)
PREDICATE_OPS: Final = (
    "equal", "greater_equal", "greater_than", "less_equal", "less_than", "logical_and",
    "logical_or", "logical_xor", "not_equal",
)


shape_rule.register(UNARY_OPS, _unary, shape_rule.same_dtype)
shape_rule.register(("logical_not",), _unary, shape_rule.const_dtype("bool"))
shape_rule.register(BINARY_OPS, _binary, shape_rule.promoted_dtype)
shape_rule.register(PREDICATE_OPS, _binary, shape_rule.const_dtype("bool"))
shape_rule.register(("swiglu",), _swiglu, shape_rule.promoted_dtype)
