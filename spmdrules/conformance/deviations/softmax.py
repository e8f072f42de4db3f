"""The deviations of the softmax rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import register_deviation, rule_module

_rules = rule_module("softmax")


def _one_side_keeps_uneven(case: dict[str, Any], got: Any) -> bool:
    """Paddle's answer differs from ours only in one side keeping an uneven sharding that the
    other side (and ours, on both) drops: the input in forward, the output in reverse."""
    exp = case["expected"]
    if "error" in exp or isinstance(got, BaseException):
        return False
    kept_slot, dropped_slot = (
        ("inputs", "outputs") if case["direction"] == "forward" else ("outputs", "inputs")
    )
    kept = exp[kept_slot][0]["dims_mapping"]
    dropped = exp[dropped_slot][0]["dims_mapping"]
    ours = [list(a.dims_mapping) for a in (got.inputs[0], got.outputs[0])]
    if ours != [dropped, dropped] or kept == dropped:
        return False
    shape = case["inputs"][0]["shape"]
    mesh_shape = case["mesh"]["shape"]
    return all(
        k == d or (d == -1 and shape[i] % mesh_shape[k] != 0)
        for i, (k, d) in enumerate(zip(kept, dropped, strict=True))
    )


register_deviation(
    "softmax-uneven-one-side",
    set(_rules.SOFTMAX_OPS),
    "Paddle replicates an unevenly divisible dim on one side of softmax only (the output in "
    "forward, the input in reverse) and keeps it sharded on the other, so blocks and replicas "
    "disagree; we replicate it on both sides.",
    _one_side_keeps_uneven,
)
