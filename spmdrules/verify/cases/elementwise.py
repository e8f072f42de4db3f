"""Cases of the elementwise family: unary ops on one tensor, binary ops on a broadcast pair."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from spmdrules.engine.registry import get_rule
from spmdrules.verify.cases.case import Draft, Rng, Shape, draw_rank, draw_shape, register_cases

# ---- elementwise -------------------------------------------------------------------------------
_UNARY_DOMAINS: Final[Mapping[str, str]] = {
    **dict.fromkeys(("log", "log10", "log2", "log1p", "sqrt", "rsqrt", "reciprocal", "lgamma",
                     "digamma", "poisson"), "positive"),
    **dict.fromkeys(("asin", "acos", "atanh", "erfinv"), "unit"),
    **dict.fromkeys(("logit", "bernoulli"), "prob"),
    "acosh": "ge1", "logical_not": "bool", "bitwise_not": "int",
}
_BINARY_DOMAINS: Final[Mapping[str, tuple[str, str]]] = {
    **dict.fromkeys(("bitwise_and", "bitwise_or", "bitwise_xor"), ("int", "int")),
    **dict.fromkeys(("logical_and", "logical_or", "logical_xor"), ("bool", "bool")),
    **dict.fromkeys(("divide", "elementwise_div", "floor_divide", "remainder", "trunc_divide"),
                    ("real", "nonzero")),
    "elementwise_pow": ("positive", "real"),
}


def unary(op: str, rng: Rng) -> Draft:
    attrs = {"approximate": bool(rng.integers(2))} if op == "gelu" else {}
    return Draft(op, (draw_shape(rng, draw_rank(rng, 0, 3)),), (_UNARY_DOMAINS.get(op, "real"),), attrs)


def _broadcast_pair(rng: Rng) -> tuple[Shape, Shape]:
    out = draw_shape(rng, draw_rank(rng, 0, 3))
    x = tuple(1 if rng.random() < 0.2 else n for n in out)
    y = tuple(1 if rng.random() < 0.2 else n for n in out)
    u = rng.random()
    if u < 0.25:
        x = x[int(rng.integers(len(x) + 1)) :]
    elif u < 0.5:
        y = y[int(rng.integers(len(y) + 1)) :]
    return x, y


def binary(op: str, rng: Rng) -> Draft:
    if op == "swiglu":
        shape = draw_shape(rng, draw_rank(rng, 1, 3))
        if rng.random() < 0.5:
            return Draft(op, (shape, shape), ("real", "real"), {})
        halves = (*shape[:-1], 2 * shape[-1])
        return Draft(op, (halves, None), ("real", None), {})
    x, y = _broadcast_pair(rng)
    return Draft(op, (x, y), _BINARY_DOMAINS.get(op, ("real", "real")), {})


@register_cases
def elementwise(op: str, rng: Rng) -> Draft:
    """A unary or a binary case, by the number of tensors the op's rule takes."""
    return (unary if len(get_rule(op).inputs) == 1 else binary)(op, rng)
