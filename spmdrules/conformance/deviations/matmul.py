"""The deviations of the matmul rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.calls import agrees, build_call
from spmdrules.conformance.deviation import register_deviation, rule_module
from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import SpmdError
from spmdrules.core.spec import SpmdInfo

_rules = rule_module("matmul")


def _paddle_length_error(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Paddle threw std::length_error from inside the rule; we answered."""
    return isinstance(got, SpmdInfo) and "_M_fill_insert" in case["expected"].get("error", "")


register_deviation(
    "matmul-internal-length-error", set(_rules.MATMUL_OPS),
    "Some products of a rank-3 and a rank-4 operand whose lower-rank operand shards a batch dim "
    "make Paddle's rule throw a C++ std::length_error (vector::_M_fill_insert); we return the "
    "ordinary merge, which executes correctly.",
    _paddle_length_error,
)


def _size_one_output_shard(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Paddle's outputs shard a size-1 dim that ours replicate; everything else agrees."""
    exp = case["expected"]
    if not isinstance(got, SpmdInfo) or "error" in exp or len(exp["outputs"]) != len(got.outputs):
        return False
    if [_norm(e) for e in exp["inputs"]] != [_norm_ours(a) for a in got.inputs]:
        return False
    if case["direction"] == "forward":
        shapes = [_product_shape(case)]
    elif case.get("reverse_kind") == "grad":  # bmm's gradient rule: x_grad, y_grad
        shapes = [tuple(t["shape"]) for t in case["inputs"][:2]]
    else:
        return False
    if len(shapes) != len(got.outputs):
        return False
    differs = False
    for e, a, shape in zip(exp["outputs"], got.outputs, shapes, strict=True):
        em, ep = _norm(e)
        om, op = _norm_ours(a)
        if ep != op or len(em) != len(om) or len(shape) != len(om):
            return False
        for ed, od, n in zip(em, om, shape, strict=True):
            if ed != od:
                if od or n != 1:
                    return False
                differs = True
    return differs


def _norm(e: dict[str, Any]) -> tuple[MultiDims, PartialItems]:
    mdm = e.get("multi_dims_mapping")
    m = tuple(tuple(d) for d in mdm) if mdm else tuple(() if d < 0 else (d,) for d in e["dims_mapping"])
    return m, tuple(sorted((int(k), v) for k, v in e.get("partial", {}).items()))


def _norm_ours(a: object) -> tuple[MultiDims, PartialItems]:
    if not isinstance(a, DistAttr):
        return (), ()
    return a.multi_dims_mapping, a.partial_items


def _product_shape(case: dict[str, Any]) -> tuple[int, ...]:
    x, y = (tuple(t["shape"]) for t in case["inputs"][:2])
    tx, ty = case["attrs"].get("trans_x", False), case["attrs"].get("trans_y", False)
    shape: tuple[int, ...] = _rules.product_shape(x, y, tx, ty)
    return shape


register_deviation(
    "matmul-size-one-output-shard", {*_rules.MATMUL_OPS, "bmm"},
    "A size-1 dim of the product (or of bmm's gradients) is replicated in the output, as Paddle "
    "already does for the inputs; Paddle keeps the letter's mesh dim on the output, which the "
    "local products (computed from replicated operands) do not produce.",
    _size_one_output_shard,
)


def _reverse_out(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Reverse: same operands as Paddle, whose out is the given one; ours is what they produce."""
    exp = case["expected"]
    if not isinstance(got, SpmdInfo) or case.get("reverse_kind") != "reverse" or "error" in exp:
        return False
    if [_norm(e) for e in exp["inputs"]] != [_norm_ours(a) for a in got.inputs]:
        return False
    given = _norm(case["outputs"][0])
    return _norm(exp["outputs"][0]) == given and _norm_ours(got.outputs[0]) != given


register_deviation(
    "matmul-reverse-out", set(_rules.MATMUL_OPS),
    "Reverse returns the output its inferred operands produce (a forward of them): no partial, "
    "and not sharded where the operands dropped a sharding (an uneven batch/free dim, a size-1 "
    "dim); Paddle echoes the given out.",
    _reverse_out,
)


def _paddle_drops_uneven(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Paddle's answer is our rule's with Paddle's policy for uneven dims (``even=True``: a batch
    letter or k that its mesh dims do not divide evenly is replicated); ours keeps them."""
    if not isinstance(got, SpmdInfo):
        return False
    name, direction, args, attrs = build_call(case)
    fn = {"bmm": _rules.bmm_forward, "bmm_grad": _rules.bmm_grad}.get(
        name, _rules.matmul_forward if direction == "forward" else _rules.matmul_reverse)
    try:
        paddle: SpmdInfo | BaseException = fn(*args, **attrs, even=True)
    except SpmdError as e:
        paddle = e
    if paddle == got:
        return False
    if agrees(case, paddle) or _size_one_output_shard(case, paddle):
        return True  # (with Paddle's size-1 output shards too: matmul-size-one-output-shard)
    # in reverse Paddle also echoes the given out (matmul-reverse-out)
    return (isinstance(paddle, SpmdInfo) and case.get("reverse_kind") == "reverse"
            and agrees(case, SpmdInfo(paddle.inputs, [args[2].attr])))


register_deviation(
    "matmul-keeps-uneven-shard", {*_rules.MATMUL_OPS, "bmm"},
    "A batch letter or k that its mesh dims do not divide evenly: Paddle replicates it, we keep "
    "the shard (the policy of keeps-uneven-shard). Uneven blocks multiply exactly and the partial "
    "sums of uneven k blocks add up to the product.",
    _paddle_drops_uneven, kind="parallelism",
)
