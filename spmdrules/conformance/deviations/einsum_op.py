"""The deviations of the einsum_op rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import register_deviation
from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import SpmdInfo


def _paddle_partial_on_shard(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Paddle marked a gradient partial on a mesh dim that also shards it; we resolved first."""
    return (
        isinstance(got, SpmdInfo)
        and case.get("reverse_kind") == "grad"
        and "as Partial which is a Sharding dim" in case["expected"].get("error", "")
    )


register_deviation(
    "einsum-grad-partial-on-shard", {"einsum"},
    "When two letters of different operands want one mesh dim, Paddle's einsum gradient rule "
    "takes an operand's partial mesh dims from the merge before that conflict is resolved and "
    "raises 'Trying to Set dim N as Partial which is a Sharding dim'; we resolve first (the "
    "forward rule's choice) and return the gradients that layout computes.",
    _paddle_partial_on_shard,
)


def _unary_grad_keeps_partial(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """One-operand gradient of a partial out_grad: ours stays partial where Paddle's does not."""
    if not isinstance(got, SpmdInfo) or case.get("reverse_kind") != "grad":
        return False
    exp = case["expected"]
    if "error" in exp or len(case["inputs"][0]) != 1 or not case["outputs"][0].get("partial"):
        return False
    grads = got.outputs[0]
    if not isinstance(grads, tuple) or not isinstance(grads[0], DistAttr):
        return False
    paddle = exp["outputs"][0][0]
    same_map = [() if d < 0 else (d,) for d in paddle["dims_mapping"]] == list(
        grads[0].multi_dims_mapping
    )
    return same_map and not paddle.get("partial") and bool(grads[0].partial_items)


register_deviation(
    "einsum-unary-grad-partial", {"einsum"},
    "The gradient of a one-operand einsum is a transpose/broadcast of out_grad, so a pending sum "
    "on out_grad stays pending on x_grad; Paddle keeps out_grad partial but returns x_grad "
    "without the partial, whose replicas then disagree.",
    _unary_grad_keeps_partial,
)
